"""The built-in catalog validates and install dirs are stable and keyed by the pin (no installs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from atlasrun.errors import AtlasError
from atlasrun.servers import install as inst
from atlasrun.servers.catalog import ServerSpec, load_catalog


@pytest.fixture(autouse=True)
def _root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ATLAS_SERVERS_HOME", str(tmp_path))
    return tmp_path


def uses(spec: ServerSpec, placeholder: str) -> bool:
    """Whether the launcher's filling in of ``placeholder`` (``ServerSpec.render``) changes the entry."""
    return spec.render({placeholder: "\x00filled"}) != spec


def test_default_catalog_entries_are_complete() -> None:
    catalog = load_catalog()
    names = [s.name for s in catalog.servers]
    assert len(names) == len(set(names))
    for spec in catalog.servers:
        assert spec.package is not None, spec.name
        assert spec.package.version[0].isdigit(), spec.name
        assert uses(spec, "install_dir"), spec.name
        assert spec.bucket in {"Productivity", "Coding", "Basic", "Analytics", "Financial"}
        assert spec.check and set(spec.check) == {"tool", "arguments"}, spec.name
        if spec.isolate_data:
            assert uses(spec, "data_dir"), spec.name
        if spec.transport == "http":
            assert uses(spec, "port") and spec.url and "{port}" in spec.url, spec.name


def test_install_dir_is_stable_and_keyed_by_pin(_root: Path) -> None:
    for spec in load_catalog().servers:
        assert spec.package is not None
        first = inst.install_dir(spec)
        assert first == inst.install_dir(spec)
        assert first.parent == _root
        assert first.name.startswith(f"{spec.name}-{spec.package.version}-")
        bumped = spec.model_copy(
            update={"package": spec.package.model_copy(update={"version": spec.package.version + ".1"})}
        )
        extra = spec.model_copy(
            update={"package": spec.package.model_copy(update={"extra": [*spec.package.extra, "x<2"]})}
        )
        assert len({first, inst.install_dir(bumped), inst.install_dir(extra)}) == 3
        assert not inst.is_installed(spec)


def test_install_skips_when_stamped_and_cleans_up_on_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = load_catalog().get("calculator")
    fail = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    monkeypatch.setattr(inst, "_commands", lambda pkg, target: [fail])
    with pytest.raises(AtlasError, match=r"(?s)'calculator'.*exited 3.*boom"):
        inst.install(spec, log=lambda _: None)
    target = inst.install_dir(spec)
    assert not target.exists()

    target.mkdir(parents=True)
    (target / inst.STAMP).write_text("{}")
    assert inst.install(spec, log=lambda _: None) == target  # stamped: no command runs
    assert inst.is_installed(spec)
