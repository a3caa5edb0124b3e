"""A run killed with SIGKILL and resumed: nothing finished is lost or redone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK, write_run, write_tasks
from test_runner import solver

pytestmark = pytest.mark.servers


def atlas(*args: str) -> list[str]:
    return [sys.executable, "-m", "atlasrun.cli", *args]


def scored_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass  # a torn line from the kill
    return [r for r in lines if r["status"] == "scored"]


def test_sigkill_then_resume(tmp_path: Path, data_dir: Path) -> None:
    tasks = [dict(SUM_TASK, id=f"t{i}", prompt=f"[t{i}] {SUM_TASK['prompt']}") for i in range(6)]

    def slow_solver(body: dict[str, Any]) -> Reply:
        time.sleep(0.15)
        return solver(body)

    out = tmp_path / "out"
    with ScriptedProvider(slow_solver) as provider:
        run_file = write_run(
            tmp_path / "run.yaml",
            write_tasks(tmp_path / "tasks.yaml", tasks),
            [{"name": "slow", "model": "openai/slow", "apiBase": provider.api_base, "maxConcurrency": 2}],
            parallelism=2,
        )
        cmd = atlas("run", str(run_file), "--data-dir", str(data_dir), "--out", str(out), "--quiet")
        first = subprocess.Popen(
            cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 120
        while (
            len(scored_lines(out / "results.jsonl")) < 2
            and first.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)  # the runner and its server processes, mid-run
        first.wait()
        assert first.returncode == -signal.SIGKILL
        done_before = {r["task_id"] for r in scored_lines(out / "results.jsonl")}
        assert 2 <= len(done_before) < 6
        requests_before = len(provider.requests)

        second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stderr
        assert f"resumed: {len(done_before)} finished task(s) kept" in second.stderr

    rerun_prompts = [r["messages"][0]["content"] for r in provider.requests[requests_before:]]
    for task_id in done_before:  # finished tasks were not asked again
        assert not any(p.startswith(f"[{task_id}]") for p in rerun_prompts)
    final = scored_lines(out / "results.jsonl")
    assert sorted(r["task_id"] for r in final) == [f"t{i}" for i in range(6)]  # nothing lost, none twice
    summary = json.loads((out / "summary.json").read_text())["models"]["slow"]
    assert (summary["scored"], summary["passed"], summary["errored"]) == (6, 6, 0)
