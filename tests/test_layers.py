"""The package's layering, enforced: a module may import only from its own layer or lower ones.

Low to high, following the data flow (tasks -> servers -> agent -> judge -> scores -> reports;
run spec -> operator -> Jobs -> results). Written down in atlasrun/__init__.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "operator" / "atlasrun"
LAYERS = [
    {"errors", "naming", "redact"},
    {"tasks", "provider"},
    {"servers"},
    {"runspec"},
    {"agent"},
    {"judge"},
    {"scoring"},
    {"diagnostics"},
    {"runner", "interop", "reports", "starter"},
    {"cluster"},
    {"commands", "cli", "testing"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def imported_subpackages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = (
                [node.module] if node.module != "atlasrun" else [f"atlasrun.{a.name}" for a in node.names]
            )
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        found |= {m.split(".")[1] for m in modules if m.startswith("atlasrun.")}
    return found


def test_every_subpackage_has_a_layer() -> None:
    names = {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert names <= set(LEVEL), f"place these in LAYERS: {sorted(names - set(LEVEL))}"


def test_no_module_imports_from_a_higher_layer() -> None:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        own = rel.parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        for target in imported_subpackages(path):
            if target in LEVEL and LEVEL[target] > LEVEL[own]:
                violations.append(f"{rel} ({own}) imports atlasrun.{target}")
    assert not violations, "\n".join(violations)
