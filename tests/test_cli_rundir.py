"""A results directory is one run: fingerprint refusal, --force-new, the exclusive lock (two real
concurrent runs), and Ctrl-C (one line, exit 130)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from atlasrun.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK, write_run, write_tasks
from test_runner import solver

pytestmark = pytest.mark.servers


def atlas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args], capture_output=True, text=True, timeout=300
    )


def start_atlas(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "atlasrun.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_different_run_is_refused_safe_fields_resume_force_new_moves_aside(
    tmp_path: Path, data_dir: Path
) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK])
    out = tmp_path / "out"
    common = ["--data-dir", str(data_dir), "--out", str(out)]
    first = write_run(tmp_path / "run.yaml", tasks, [{"name": "replay"}], parallelism=2)
    assert atlas("run", str(first), *common).returncode == EXIT_OK
    record = json.loads((out / "run.json").read_text())
    assert set(record["fingerprint"]) == {"fields", "models"} and "replay" in record["fingerprint"]["models"]

    # parallelism and repeats may change on resume (nothing rerun: the item is scored)
    proc = atlas("run", str(first), *common, "--parallelism", "1", "--repeats", "1")
    assert proc.returncode == EXIT_OK and "resumed: 1 finished task(s)" in proc.stderr, proc.stderr

    # the same task file named by another path (--tasks) is the same run
    copy = tmp_path / "copy" / "tasks.yaml"
    copy.parent.mkdir()
    copy.write_bytes(tasks.read_bytes())
    proc = atlas("run", str(first), *common, "--tasks", str(copy))
    assert proc.returncode == EXIT_OK and "resumed: 1" in proc.stderr, proc.stderr

    # another pass threshold would relabel old verdicts: refused, with the field named
    other = write_run(tmp_path / "other.yaml", tasks, [{"name": "replay"}], passThreshold=0.5)
    proc = atlas("run", str(other), *common)
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert "spec.passThreshold changed" in proc.stderr and "--force-new" in proc.stderr
    # the task file's content is part of the run
    write_tasks(tasks, [{**SUM_TASK, "claims": ["The sum is 42"]}])
    proc = atlas("run", str(first), *common)
    assert proc.returncode == EXIT_BAD_INPUT and "task file content" in proc.stderr, proc.stderr

    proc = atlas("run", str(other), *common, "--force-new")
    assert proc.returncode == EXIT_OK, proc.stderr
    (aside,) = tmp_path.glob("out.replaced-*")
    assert (aside / "results.jsonl").exists() and "moved to" in proc.stderr
    assert json.loads((out / "summary.json").read_text())["pass_threshold"] == 0.5


def test_two_concurrent_runs_into_one_directory(tmp_path: Path, data_dir: Path) -> None:
    """The second run stops at once (it would run every task again); the first finishes."""
    release, asked = threading.Event(), threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        asked.set()
        release.wait(60)
        return solver(body)

    with ScriptedProvider(held) as provider:
        models = [{"name": "slow", "model": "openai/slow", "apiBase": provider.api_base}]
        run_file = write_run(tmp_path / "run.yaml", write_tasks(tmp_path / "tasks.yaml", [SUM_TASK]), models)
        common = ["--data-dir", str(data_dir), "--out", str(tmp_path / "out"), "--no-preflight"]
        first = start_atlas("run", str(run_file), *common)
        try:
            assert asked.wait(60), "the first run never called the model"
            second = atlas("run", str(run_file), *common)
            assert second.returncode == EXIT_BAD_INPUT, second.stderr
            assert f"another atlas run (pid {first.pid}) is writing to this directory" in second.stderr
            release.set()
            _, err = first.communicate(timeout=120)
        finally:
            release.set()
            if first.poll() is None:
                first.kill()
                first.wait()
    assert first.returncode == EXIT_OK, err
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 1


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path: Path, data_dir: Path) -> None:
    asked = threading.Event()

    def hang(body: dict[str, Any]) -> Reply:
        asked.set()
        return Reply(hang=True)

    with ScriptedProvider(hang) as provider:
        models = [{"name": "hung", "model": "openai/hung", "apiBase": provider.api_base}]
        tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK, {**SUM_TASK, "id": "two"}])
        run_file = write_run(tmp_path / "run.yaml", tasks, models)
        proc = start_atlas(
            "run",
            str(run_file),
            "--data-dir",
            str(data_dir),
            "--out",
            str(tmp_path / "out"),
            "--no-preflight",
        )
        try:
            assert asked.wait(60)
            os.kill(proc.pid, signal.SIGINT)
            # Stopping the servers takes a few seconds (the MCP SDK gives a stdio server 2 s to exit
            # after its stdin closes). A clean-up that hangs ends after runner/interrupt.py's grace
            # period (30 s) with the tasks it waited on. Not a timing test: the bound is generous.
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "Future exception was never retrieved" not in err, err
    if "exiting anyway" in err:  # seen once in ~40 full runs, not reproduced: keep what it waited on
        warnings.warn(f"the clean-up after Ctrl-C hung and was cut short:\n{err}", stacklevel=1)
    else:  # the run's header line, then one line for the interruption
        assert err.splitlines()[1:] == [
            "interrupted: finished results are kept; run the same command again to resume"
        ], err
    assert err.count("interrupted:") == 1
