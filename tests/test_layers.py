"""The package's layering, enforced: a module may import only from its own layer or lower ones.

The layers are written once, as the import-linter contract in pyproject.toml (the order
follows the data flow described in atlasrun/__init__.py); ``lint-imports`` checks it, here and
in ``make check``. The contract is exhaustive: a new subpackage without a layer breaks it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_layers_contract_is_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint_imports), "--no-logo", "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in proc.stdout


def _layers_contract() -> dict[str, object]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers" and c.get("containers") == ["atlasrun"]]
    return dict(contract)


def test_the_package_docstring_names_every_layer_of_the_contract() -> None:
    layers = _layers_contract()["layers"]
    assert isinstance(layers, list)
    names = {name.strip() for layer in layers for name in layer.split(":")}
    doc = (ROOT / "operator" / "atlasrun" / "__init__.py").read_text()
    assert not [n for n in names if f"``{n}``" not in doc], "describe each layer in atlasrun/__init__.py"


def _doc_section(heading: str) -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return text.split(heading, 1)[1].split("\n#", 1)[0]


def test_the_architecture_layer_table_is_the_contract() -> None:
    """docs/architecture.md's layer table lists the contract's layers, low to high."""
    layers = _layers_contract()["layers"]
    assert isinstance(layers, list)
    expected = [sorted(n.strip() for n in layer.split(":")) for layer in reversed(layers)]
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", _doc_section("## Layers, and where they are enforced"), re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))
    assert [sorted(re.findall(r"`(\w+)`", names)) for _, names in rows] == expected


def test_the_cluster_module_map_is_the_cluster_contracts_and_the_tree() -> None:
    """The cluster table names every module of wire, operator and pod, and those three are the
    layers of the cluster contract (operator and pod independent, over wire)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (cluster,) = [c for c in contracts if c.get("containers") == ["atlasrun.cluster"]]
    assert cluster["layers"] == ["operator | pod", "wire"]
    section = _doc_section("### Inside `cluster`: three programs")
    package = ROOT / "operator" / "atlasrun" / "cluster"
    for name in ("wire", "operator", "pod"):
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{name}` |")]
        documented = set(re.findall(r"`(\w+)`", row.split("|")[2]))
        modules = {p.stem for p in (package / name).glob("*.py") if p.stem != "__init__"}
        assert documented == modules, name
