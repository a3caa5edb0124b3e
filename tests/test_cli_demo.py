"""The offline demo compares two agents: `replay` and the scripted `partial-agent`, run exactly as
`make demo` runs them; the report compares them and `atlas diagnose` explains the failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.servers

REPO = Path(__file__).resolve().parents[1]


def atlas(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run(  # no API keys in the environment: the demo needs none
        [sys.executable, "-m", "atlasrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=env,
    )


def demo_commands() -> list[list[str]]:
    """The `atlas` commands of the Makefile's demo target, as written."""
    recipe = (REPO / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    return [line.split()[1:] for line in recipe.splitlines() if line.startswith("\t$(BIN)/atlas ")]


def test_demo_compares_two_agents_offline_and_diagnose_explains_failures(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "demo"
    commands = demo_commands()
    assert [c[0] for c in commands] == ["init-workspace", "run", "diagnose", "report"]
    done = {}
    for command in commands:  # `make demo`'s commands, with runs/demo under tmp_path
        args = [a.replace("runs/demo", str(out)) if a.startswith("runs/demo") else a for a in command]
        done[command[0]] = atlas(*args, cwd=REPO)
        assert done[command[0]].returncode == 0, done[command[0]].stderr
    run = done["run"]
    assert "x 2 model(s) (replay, partial-agent)" in run.stderr
    models = json.loads((out / "summary.json").read_text())["models"]
    assert models["replay"]["pass_rate"] == 1.0
    partial = models["partial-agent"]
    assert 0.2 < partial["pass_rate"] < 0.9 and partial["errored"] == 0, partial
    assert partial["tokens"] == 0 and partial["cost_known"]

    page = (out / "report.html").read_text(encoding="utf-8")
    assert '<section id="paired">' in page and '<section id="matrix">' in page
    assert "follows the reference trajectory only partly" in page  # labelled as a scripted agent

    assert "Failure modes" in page and "wrong_tool" in done["diagnose"].stdout + page.lower().replace(
        " ", "_"
    )
    rows = [json.loads(x) for x in (out / "diagnoses.jsonl").read_text().splitlines()]
    assert rows and {r["model"] for r in rows} == {"partial-agent"}
    modes = {r["primary_mode"] for r in rows}
    assert {"wrong_tool", "no_tool_use"} <= modes, modes
