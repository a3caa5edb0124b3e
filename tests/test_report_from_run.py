"""The whole scoring chain on a real run: scripted models of different skill -> diagnose -> report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atlasrun.cli import main
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK
from test_runner import run, solver

pytestmark = pytest.mark.servers


def test_report_on_scripted_models_of_different_skill(tmp_path: Path, data_dir: Path) -> None:
    tasks = [dict(SUM_TASK, id=f"sum-{i}", prompt=f"[{i}] {SUM_TASK['prompt']}") for i in range(6)]

    def script(body: dict[str, Any]) -> Reply:
        model, index = body["model"], int(body["messages"][0]["content"][1])
        if model.endswith("strong") or (model.endswith("middling") and index % 2 == 0):
            return solver(body)
        return Reply(content="The sum is probably 17.")  # answers without using any tool

    with ScriptedProvider(script) as provider:
        outcome = run(tmp_path, data_dir, provider, tasks, ["strong", "middling", "weak"])
    rates = {m: row["pass_rate"] for m, row in outcome.summary["models"].items()}
    assert rates == {"strong": 1.0, "middling": 0.5, "weak": 0.0}

    out = tmp_path / "out"
    assert main(["diagnose", str(out)]) == 0
    diagnoses = [json.loads(line) for line in (out / "diagnoses.jsonl").read_text().splitlines()]
    assert len(diagnoses) == 9 and {d["primary_mode"] for d in diagnoses} == {"no_tool_use"}

    assert main(["report", str(out), "--open-path-only"]) == 0
    page = (out / "report.html").read_text()
    for model in ("strong", "middling", "weak"):
        assert model in page
    assert "No Tool Use" in page and "<svg" in page
    assert page.count("sum-") >= 18  # a drill-down entry per (model, task)
    # per-model CIs: the summary's numbers are on the page
    weak_ci = outcome.summary["models"]["middling"]["pass_rate_ci"]
    assert weak_ci and weak_ci["low"] < 0.5 < weak_ci["high"]
