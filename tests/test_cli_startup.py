"""``atlas --help`` stays fast: building the parser imports neither the MCP SDK nor litellm.

(The time itself is measured in bench/cli_startup.py; tests assert no timings.)
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

import atlasrun.commands
from atlasrun.cli import build_parser
from atlasrun.commands import COMMANDS

HEAVY = ("litellm", "mcp", "pydantic", "atlasrun.runner", "atlasrun.servers")

PROBE = """
import json, sys
from atlasrun.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {"litellm", "mcp", "pydantic"}
                        or m.startswith(("atlasrun.runner", "atlasrun.servers")))))
"""


@pytest.mark.parametrize("argv", [["--help"], ["servers", "--help"], ["run", "--help"]])
def test_help_imports_nothing_heavy(argv: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True, timeout=120
    )
    assert "usage: atlas" in proc.stdout
    imported = json.loads(proc.stdout.splitlines()[-1])
    assert imported == [], f"`atlas {' '.join(argv)}` imported {imported[:8]}"


def test_a_command_module_is_imported_only_when_its_command_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "compare", "--help"], capture_output=True, text=True, check=True
    )
    assert "--model-a" in proc.stdout  # the module's own parser answered


def _registered(module: str) -> dict[str, str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    importlib.import_module(f"atlasrun.commands.{module}").register(sub)
    return {action.dest: action.help or "" for action in sub._choices_actions}


def test_the_command_table_matches_what_each_module_registers() -> None:
    modules = {info.name for info in pkgutil.iter_modules(atlasrun.commands.__path__)}
    assert {module for module, _ in COMMANDS.values()} == modules, "list each command module in COMMANDS"
    registered = {name: (m, help_text) for m in modules for name, help_text in _registered(m).items()}
    assert registered == COMMANDS


def test_every_command_parses_its_own_arguments_when_named() -> None:
    for name in COMMANDS:
        parser = build_parser(name)
        with pytest.raises(SystemExit) as exited:
            parser.parse_args([name, "--help"])
        assert exited.value.code == 0
