"""The atlas command line, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SUM_TASK, write_run, write_tasks
from test_tasks import atlas_row, write_csv


def atlas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_validate_names_the_bad_row_and_field_and_counts_the_rest(tmp_path: Path) -> None:
    csv_path = write_csv(
        tmp_path / "atlas.csv", [atlas_row("a"), atlas_row("b", GTFA_CLAIMS="['broken"), atlas_row("c")]
    )
    proc = atlas("validate", str(csv_path))
    assert proc.returncode == 1
    assert "error: atlas.csv line 3, task b, field GTFA_CLAIMS:" in proc.stdout
    assert "2 task(s) loadable, 1 rejected" in proc.stdout


def test_validate_a_good_task_file_and_run_file(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK])
    assert atlas("validate", str(tasks)).returncode == 0
    run_file = write_run(
        tmp_path / "run.yaml", tasks, [{"name": "replay"}], servers={"enabled": ["filesystem"]}
    )
    proc = atlas("validate", str(run_file))
    assert proc.returncode == 1  # its only task is excluded: nothing would run
    assert "excluded: task sum-numbers: needs server(s) not enabled: calculator" in proc.stdout


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"parallelism": 0}, "spec.parallelism: Input should be greater than or equal to 1"),
        ({"limits": {"maxToolCals": 3}}, "spec.limits.maxToolCals: Extra inputs are not permitted"),
        ({"servers": {"enabled": ["nope"]}}, "spec.servers.enabled: unknown server(s) nope"),
    ],
)
def test_bad_run_files_name_the_field(tmp_path: Path, spec: dict[str, object], message: str) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK])
    run_file = write_run(tmp_path / "run.yaml", tasks, [{"name": "replay"}], **spec)
    proc = atlas("validate", str(run_file))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert str(run_file) in proc.stderr or "spec.servers" in proc.stderr


@pytest.mark.servers
def test_servers_check_makes_one_real_call_per_server() -> None:
    proc = atlas("servers", "check", "--json")
    rows = json.loads(proc.stdout)
    assert proc.returncode == 0, rows
    assert {r["server"] for r in rows} >= {
        "filesystem",
        "memory",
        "git",
        "calculator",
        "cli-mcp-server",
        "code-runner",
        "calculator-http",
    }
    assert all(r["ok"] and r["tools"] > 0 and "call_ms" in r for r in rows), rows


@pytest.mark.servers
def test_run_prints_a_table_and_writes_results(tmp_path: Path, data_dir: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK])
    run_file = write_run(tmp_path / "run.yaml", tasks, [{"name": "replay"}])
    proc = atlas("run", str(run_file), "--data-dir", str(data_dir), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "replay" in proc.stdout and "100.0%" in proc.stdout
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    assert (row["task_id"], row["status"], row["passed"], row["coverage"]) == (
        "sum-numbers",
        "scored",
        True,
        1.0,
    )
    assert "transcript" not in row


def test_example_run_files_are_valid() -> None:
    from atlasrun.runspec.run import load_run_spec

    repo = Path(__file__).resolve().parents[1]
    for name in ("demo.yaml", "run.yaml"):
        spec = load_run_spec(repo / "examples" / name)
        assert spec.kind == "AtlasRun" and spec.spec.models
