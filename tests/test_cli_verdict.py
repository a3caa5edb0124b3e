"""One verdict per command (issue 23, part 3): ``--fail-under``, ``--junit`` and the printed table
cover the same items, the ones this command selected; when the results directory holds more
(earlier runs into it with other filters), its table is printed too, named as such.

Before: ``--fail-under`` judged the whole directory (7 tasks) while the JUnit file of the same
command held 5 testcases and the table said "tasks 7" for a 5-task run.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from atlasrun.errors import EXIT_FAIL_UNDER, EXIT_OK
from conftest import SUM_TASK, write_run, write_tasks

pytestmark = pytest.mark.servers


def atlas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def replay_row(table: str) -> list[str]:
    (row,) = [line.split() for line in table.splitlines() if line.startswith("replay ")]
    return row


def test_gate_junit_and_table_cover_this_commands_items(tmp_path: Path, data_dir: Path) -> None:
    # replay passes sum-numbers and b; its reference answer for c misses the claim
    wrong = {**SUM_TASK, "id": "c", "reference_answer": "It is 7."}
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK, {**SUM_TASK, "id": "b"}, wrong])
    spec = str(write_run(tmp_path / "run.yaml", tasks, [{"name": "replay"}]))
    common = ["--data-dir", str(data_dir), "--out", str(tmp_path / "out"), "--quiet"]
    first = atlas("run", spec, *common)
    assert first.returncode == EXIT_OK, first.stderr
    assert "this run:" not in first.stdout  # the command's items are the directory's: one table
    assert replay_row(first.stdout)[1:4] == ["3", "3", "2"]  # tasks, scored, passed

    junit = tmp_path / "junit.xml"
    two = ["--task", "sum-numbers", "--task", "b", "--fail-under", "1.0", "--junit", str(junit)]
    done = atlas("run", spec, *common, *two)
    assert done.returncode == EXIT_OK, done.stderr  # 2 of 2 passed; the directory's rate is 2/3
    this_run, directory = done.stdout.split("\nthe results directory: ")
    assert this_run.startswith("this run: 2 item(s) (the table, --fail-under and --junit cover them)")
    assert replay_row(this_run)[1:4] == ["2", "2", "2"]
    assert directory.startswith("3 item(s), earlier runs into it included (summary.json, report)")
    assert replay_row(directory)[1:4] == ["3", "3", "2"]
    cases = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert sorted(cases) == ["b", "sum-numbers"] and f"junit: {junit} (2 testcase(s))" in done.stdout

    done = atlas("run", spec, *common, "--task", "c", "--fail-under", "1.0", "--junit", str(junit))
    assert done.returncode == EXIT_FAIL_UNDER, done.stderr
    assert "exit 1: replay: pass rate 0.0% < --fail-under 100%" in done.stderr
    assert [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")] == ["c"]


def test_run_json_puts_the_verdict_alone_on_stdout(tmp_path: Path, data_dir: Path) -> None:
    """``atlas run --json``: stdout is one JSON object (the verdict of this command's items, as the
    exit code judged them); the table and every note go to stderr."""
    import json

    wrong = {**SUM_TASK, "id": "c", "reference_answer": "It is 7."}
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK, wrong])
    spec = str(write_run(tmp_path / "run.yaml", tasks, [{"name": "replay"}]))
    out = tmp_path / "out"
    done = atlas(
        "run",
        spec,
        "--data-dir",
        str(data_dir),
        "--out",
        str(out),
        "--quiet",
        "--json",
        "--fail-under",
        "0.9",
    )
    assert done.returncode == EXIT_FAIL_UNDER, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["exit_code"] == EXIT_FAIL_UNDER and verdict["items"] == 2
    assert verdict["reasons"] == ["replay: pass rate 50.0% < --fail-under 90%"]
    row = verdict["models"]["replay"]
    assert (row["scored"], row["passed"], row["pass_rate"]) == (2, 1, 0.5)
    assert row["pass_rate_ci"]["method"] == "wilson"
    assert verdict["results_dir"] == {"path": str(out), "items": 2, "summary": str(out / "summary.json")}
    assert "replay " in done.stderr and "results:" in done.stderr  # the human table, on stderr
