"""Every field of the AtlasRun spec is documented (`kubectl explain atlasrun.spec...`).

The descriptions come from the pydantic models (attribute docstrings / Field descriptions in
runspec/run.py and servers/catalog.py); this walks the generated CRD schema.
"""

from __future__ import annotations

from typing import Any

from atlasrun.cluster.operator.crd import build_crd


def undocumented(node: dict[str, Any], path: str) -> list[str]:
    missing: list[str] = []
    for name, prop in (node.get("properties") or {}).items():
        here = f"{path}.{name}"
        if not str(prop.get("description", "")).strip():
            missing.append(here)
        missing += undocumented(prop, here)
        if isinstance(prop.get("items"), dict):
            missing += undocumented(prop["items"], here + "[]")
    return missing


def test_every_spec_field_has_a_description() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert spec["description"]
    walked = undocumented(spec, "spec")
    assert walked == [], f"fields without description: {walked}"
    # The walk reaches nested list items (the inline servers' package fields).
    inline = spec["properties"]["servers"]["properties"]["inline"]["items"]
    assert inline["properties"]["package"]["properties"]["version"]["description"]
