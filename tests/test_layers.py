"""The package's layering, enforced: a module may import only from its own layer or lower ones.

The layers are written once, as the import-linter contract in pyproject.toml (the order
follows the data flow described in atlasrun/__init__.py); ``lint-imports`` checks it, here and
in ``make check``. The contract is exhaustive: a new subpackage without a layer breaks it.
"""

from __future__ import annotations

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
    assert "1 kept, 0 broken" in proc.stdout


def test_the_package_docstring_names_every_layer_of_the_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    names = {name.strip() for layer in contract["layers"] for name in layer.split(":")}
    doc = (ROOT / "operator" / "atlasrun" / "__init__.py").read_text()
    assert not [n for n in names if f"``{n}``" not in doc], "describe each layer in atlasrun/__init__.py"
