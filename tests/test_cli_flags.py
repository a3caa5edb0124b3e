"""Command-line values are checked like the run-file fields they override, before work starts.

Issue 23, part 1: ``--limit 0`` ran every task, ``--parallelism -2`` crashed with a traceback,
``--out`` naming a file crashed, a missing ``--data-dir`` started a run whose every item failed.
Each is now one line naming the flag, exit 2, and nothing started (no results directory).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo.yaml"


def atlas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--limit", "0", "--limit 0: input should be greater than or equal to 1"),
        ("--limit", "-1", "--limit -1: input should be greater than or equal to 1"),
        ("--repeats", "0", "--repeats 0: input should be greater than or equal to 1"),
        ("--repeats", "101", "--repeats 101: input should be less than or equal to 100"),
        ("--parallelism", "0", "--parallelism 0: input should be greater than or equal to 1"),
        ("--parallelism", "-2", "--parallelism -2: input should be greater than or equal to 1"),
        ("--max-concurrency", "0", "--max-concurrency 0: input should be greater than or equal to 1"),
    ],
)
def test_a_numeric_flag_out_of_range_stops_the_run_in_one_line(
    tmp_path: Path, flag: str, value: str, says: str
) -> None:
    out = tmp_path / "out"
    done = atlas("run", str(DEMO), flag, value, "--out", str(out), "--no-preflight", "--quiet")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: command line: {says}"]
    assert "Traceback" not in done.stderr and not out.exists()


def test_out_naming_a_file_is_bad_input(tmp_path: Path) -> None:
    target = tmp_path / "r1.xml"
    target.write_text("<x/>")
    done = atlas("run", str(DEMO), "--out", str(target), "--no-preflight", "--quiet")
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: command line: --out {target}: exists and is not a directory"
    assert target.read_text() == "<x/>"


def test_a_missing_data_dir_is_bad_input_before_any_server_starts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = atlas("run", str(DEMO), "--data-dir", str(tmp_path / "nodata_here"), "--out", str(out), "--quiet")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: command line: --data-dir {tmp_path / 'nodata_here'}: no such directory "
        "(create one with `atlas init-workspace DIR`)"
    )
    assert not out.exists()


def test_audit_checks_its_flags_too(tmp_path: Path) -> None:
    tasks = REPO / "examples" / "starter" / "tasks.yaml"
    done = atlas("audit", str(tasks), "--parallelism", "0")
    assert (
        done.returncode == 2 and "--parallelism 0: input should be greater than or equal to 1" in done.stderr
    )
    done = atlas("audit", str(tasks), "--data-dir", str(tmp_path / "missing"))
    assert done.returncode == 2 and "--data-dir" in done.stderr and "no such directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_audit_of_a_run_file_says_it_takes_a_task_file() -> None:
    done = atlas("audit", str(DEMO))
    assert done.returncode == 2
    assert done.stderr.strip().endswith(
        f"error: {DEMO}: this is a run file, not a task file: give its task file (spec.tasks.path)"
    )
