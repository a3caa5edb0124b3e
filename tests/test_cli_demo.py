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


def test_demo_compares_two_agents_offline_and_diagnose_explains_failures(tmp_path: Path) -> None:
    ws, out = tmp_path / "runs" / "demo" / "workspace", tmp_path / "runs" / "demo"
    assert atlas("init-workspace", str(ws), cwd=REPO).returncode == 0
    run = atlas("run", "examples/demo.yaml", "--data-dir", str(ws), "--out", str(out), cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert "x 2 model(s) (replay, partial-agent)" in run.stderr
    models = json.loads((out / "summary.json").read_text())["models"]
    assert models["replay"]["pass_rate"] == 1.0
    partial = models["partial-agent"]
    assert 0.2 < partial["pass_rate"] < 0.9 and partial["errored"] == 0, partial
    assert partial["tokens"] == 0 and partial["cost_known"]

    assert atlas("report", str(out), cwd=REPO).returncode == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert '<section id="paired">' in page and '<section id="matrix">' in page
    assert "follows the reference trajectory only partly" in page  # labelled as a scripted agent

    diagnosed = atlas("diagnose", str(out), cwd=REPO)
    assert diagnosed.returncode == 0, diagnosed.stderr
    rows = [json.loads(x) for x in (out / "diagnoses.jsonl").read_text().splitlines()]
    assert rows and {r["model"] for r in rows} == {"partial-agent"}
    modes = {r["primary_mode"] for r in rows}
    assert {"wrong_tool", "no_tool_use"} <= modes, modes
