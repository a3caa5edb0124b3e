"""Results files are validated on read (issue 24 §3): every ``results.jsonl`` line goes through the
typed record; a damaged or tampered line, or one outside the run's record, is reported by line
number and skipped, never counted, and no command dies on it. ``rescore`` with a deleted transcript
leaves that item unjudged (never its old verdict); ``export-atlas`` writes no scored row without an
answer; ``import-atlas`` says who produced the scores it imports."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from atlasrun.errors import EXIT_ITEM_ERRORS, InputError
from atlasrun.scoring.records import RecordVersionError
from atlasrun.scoring.store import MAX_LINE, SHOWN_SKIPPED, ResultsDir, RunScope
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK, write_run, write_tasks

TASKS = [dict(SUM_TASK, id=f"sum-{i}") for i in range(4)]


def atlas(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def summary_row(out: Path, model: str = "replay") -> dict[str, Any]:
    models = json.loads((out / "summary.json").read_text())["models"]
    return dict(models[model], models=sorted(models))


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(run file, data dir, results dir) of a real 4-task replay run, all passed."""
    root = tmp_path_factory.mktemp("validated")
    data = root / "data"
    data.mkdir()
    (data / "numbers.txt").write_text("12\n30\n")
    run_file = write_run(
        root / "run.yaml",
        write_tasks(root / "tasks.yaml", TASKS),
        [{"name": "replay"}],
        servers={"enabled": ["filesystem", "calculator"]},
        limits={"judgeRetries": 0, "retryBackoffSeconds": 0},  # rescore's judges inherit them
    )
    out = root / "out"
    done = atlas("run", str(run_file), "--data-dir", str(data), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    row = summary_row(out)
    assert (row["scored"], row["passed"], row["mean_coverage"]) == (4, 4, 1.0)
    return run_file, data, out


def tampered_copy(out: Path, target: Path) -> dict[int, str]:
    """A copy of ``out`` with hostile lines appended; returns {line number: what it is}."""
    shutil.copytree(out, target)
    jsonl = target / "results.jsonl"
    good = lines_of(jsonl)
    first = good[0]
    bad: list[tuple[str, bytes]] = [
        ("invalid UTF-8", b'{"task_id": "sum-0", "model": "replay\xff\xfe", "status": "scored"}'),
        ("garbage", b"this is not json at all"),
        ("scored without coverage", json.dumps({**first, "coverage": None, "passed": False}).encode()),
        ("coverage high", json.dumps({**first, "coverage": "high"}).encode()),
        ("passed yes", json.dumps({**good[1], "coverage": 0.0, "passed": "yes"}).encode()),
        ("repeat -1", json.dumps({**good[2], "repeat": -1, "passed": False, "coverage": 0.0}).encode()),
        ("ghost model", json.dumps({**first, "model": "ghost"}).encode()),
        ("repeat outside", json.dumps({**first, "repeat": 3, "passed": False, "coverage": 0.0}).encode()),
        ("lone surrogate", json.dumps({**first, "task_id": "bad\ud800id"}).encode()),
        ("huge integer", b'{"task_id": "sum-0", "model": "replay", "repeat": ' + b"9" * 5000 + b"}"),
        ("deep nesting", b"[" * 100_000),
        ("not an object", b"[1, 2, 3]"),
    ]
    with jsonl.open("ab") as fh:
        for _, data in bad:
            fh.write(data + b"\n")
    return {len(good) + i + 1: name for i, (name, _) in enumerate(bad)}


def assert_reports_each_line(stderr: str, bad: dict[int, str], jsonl: Path) -> None:
    for number, name in list(bad.items())[:SHOWN_SKIPPED]:
        assert f"{jsonl} line {number}:" in stderr, f"line {number} ({name}) not reported:\n{stderr}"
    assert f"... and {len(bad) - SHOWN_SKIPPED} more skipped line(s)" in stderr
    assert f"{len(bad)} line(s) of {jsonl} skipped" in stderr


@pytest.mark.servers
def test_tampered_lines_are_reported_by_line_and_never_counted(
    finished: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    run_file, data, out = finished
    copy = tmp_path / "tampered"
    bad = tampered_copy(out, copy)
    jsonl = copy / "results.jsonl"

    store = ResultsDir(copy)
    latest = store.load()
    assert sorted(latest) == [("replay", f"sum-{i}", 0) for i in range(4)]  # the valid lines, unchanged
    assert all(r.status == "scored" and r.passed and r.coverage == 1.0 for r in latest.values())
    assert [s.number for s in store.skipped] == sorted(bad)
    reasons = {s.number: s.reason for s in store.skipped}
    by_name = {name: reasons[n] for n, name in bad.items()}
    assert by_name["invalid UTF-8"].startswith("not valid UTF-8")
    assert (
        by_name["scored without coverage"]
        == "not a task result: a scored result needs its coverage and passed"
    )
    assert by_name["huge integer"] == "a number of more than 4,300 digits"
    assert by_name["coverage high"].startswith("not a task result: coverage:")
    assert by_name["passed yes"].startswith("not a task result: passed:")
    assert by_name["repeat -1"].startswith("not a task result: repeat:")
    assert by_name["ghost model"] == "model 'ghost' is not one of the run's models (run.json)"
    assert by_name["repeat outside"] == "repeat 3 is outside the run's 1 repeat(s) (run.json)"
    assert "lone surrogate" in by_name["lone surrogate"]
    assert by_name["deep nesting"] == "JSON nested too deeply"

    # report, diagnose and compare name every line and count only the valid ones
    report = atlas("report", str(copy))
    assert report.returncode == 0, report.stderr
    assert_reports_each_line(report.stderr, bad, jsonl)
    assert "1 model(s), 4 task result(s)" in report.stdout
    diagnose = atlas("diagnose", str(copy))
    assert diagnose.returncode == 0, diagnose.stderr
    assert_reports_each_line(diagnose.stderr, bad, jsonl)
    assert "0 failing task(s)" in diagnose.stderr
    compare = atlas("compare", str(out), str(copy), "--json")
    assert compare.returncode == 0, compare.stderr
    pair = json.loads(compare.stdout)
    assert (pair["pairs"], pair["pass_rate_a"], pair["pass_rate_b"], pair["dropped"]) == (4, 1.0, 1.0, [])

    # resume: nothing to redo, and the summary counts 4 scored, 4 passed, no ghost model
    resumed = atlas("run", str(run_file), "--data-dir", str(data), "--out", str(copy), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed: 4 finished task(s) kept" in resumed.stderr
    row = summary_row(copy)
    assert (row["scored"], row["passed"], row["items"], row["mean_coverage"], row["models"]) == (
        4,
        4,
        4,
        1.0,
        ["replay"],
    )


@pytest.mark.servers
def test_rescore_with_a_deleted_transcript_leaves_that_item_unjudged(
    finished: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, _, out = finished
    source = tmp_path / "source"
    shutil.copytree(out, source)
    store = ResultsDir(source)
    gone = store.load()[("replay", "sum-2", 0)]
    store.task_path(gone).unlink()

    target = tmp_path / "rescored"
    rescored = atlas("rescore", str(source), "--judge", "deterministic", "--out", str(target))
    assert rescored.returncode == EXIT_ITEM_ERRORS, rescored.stderr
    assert "errors: unjudged 1: rescore: no transcript (tasks/" in rescored.stderr
    assert f"exit {EXIT_ITEM_ERRORS}: item(s) this rescore could not judge: unjudged 1" in rescored.stderr
    latest = ResultsDir(target).load()
    item = latest[("replay", "sum-2", 0)]
    assert (item.status, item.error_kind, item.coverage, item.passed, item.judge, item.claims) == (
        "error",
        "unjudged",
        None,
        None,
        None,
        [],
    )
    others = [r for k, r in latest.items() if k[1] != "sum-2"]
    assert len(others) == 3 and all(r.status == "scored" and r.judge for r in others)
    row = summary_row(target)
    assert (row["scored"], row["errored"], row["errors_by_kind"]) == (3, 1, {"unjudged": 1})
    # the rescored directory records its tasks: a line for another task is outside the run
    scope = ResultsDir(target).scope()
    assert scope.task_ids == {f"sum-{i}" for i in range(4)} and scope.models == {"replay"}
    with (target / "results.jsonl").open("a") as fh:
        fh.write(json.dumps({**lines_of(target / "results.jsonl")[0], "task_id": "made-up"}) + "\n")
    again = ResultsDir(target)
    assert len(again.load()) == 4
    assert again.skipped[-1].reason == "task 'made-up' is not one of the run's tasks (run.json)"

    # export-atlas leaves the answerless item out, by name; no row has an empty answer and a pass
    exported = tmp_path / "export.csv"
    done = atlas("export-atlas", str(source), "--out", str(exported))
    assert done.returncode == 0, done.stderr
    assert "left out task sum-2 repeat 0: no transcript" in done.stderr
    rows = list(csv.DictReader(exported.open()))
    assert sorted(r["task_id"] for r in rows) == ["sum-0", "sum-1", "sum-3"]
    assert all(r["response"] and r["pass"] == "True" and r["judge"] == "deterministic" for r in rows)


@pytest.mark.servers
def test_rescore_with_a_judge_that_gives_no_label_prints_kinds_and_exit_line(
    finished: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, _, out = finished
    with ScriptedProvider(lambda body: Reply(content="Looks fine to me!")) as judge:
        done = atlas(
            "rescore",
            str(out),
            "--judge",
            "openai/j",
            "--judge-api-base",
            judge.api_base,
            "--judge-api-key-env",
            "PATH",
            "--no-preflight",
            "--out",
            str(tmp_path / "garbage"),
        )
    assert done.returncode == EXIT_ITEM_ERRORS, done.stderr
    assert "errors: judge 4: judge failed on 1/1 claims" in done.stderr
    assert done.stderr.rstrip().endswith(
        f"exit {EXIT_ITEM_ERRORS}: item(s) this rescore could not judge: judge 4 (see the errors above)"
    )


@pytest.mark.servers
def test_import_atlas_says_who_produced_the_scores(finished: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, _, out = finished
    exported = tmp_path / "export.csv"
    assert atlas("export-atlas", str(out), "--out", str(exported)).returncode == 0
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    imported = atlas(
        "import-atlas",
        str(exported),
        "--tasks",
        str(tasks),
        "--model",
        "replay",
        "--out",
        str(tmp_path / "in"),
    )
    assert imported.returncode == 0, imported.stderr
    assert "not yet judged" not in imported.stdout and "unscored" not in imported.stdout
    assert "4 with imported scores (by deterministic, from the file's judge column: 4)" in imported.stdout
    for result in ResultsDir(tmp_path / "in").load().values():
        assert (result.status, result.reason, result.passed) == ("scored", None, True)
        assert result.judge is not None and (result.judge.name, result.judge.kind) == (
            "deterministic",
            "deterministic",
        )


# --- the reader alone (no servers) -----------------------------------------------------------------


def test_blank_lines_are_ignored_and_an_over_long_line_is_skipped_not_held(tmp_path: Path) -> None:
    jsonl = tmp_path / "results.jsonl"
    line = {"task_id": "t", "model": "m", "status": "scored", "coverage": 0.5, "passed": False}
    with jsonl.open("wb") as fh:
        fh.write(b"\n  \n")
        fh.write(b'{"task_id": "' + b"x" * (MAX_LINE + 10) + b'"}\n')
        fh.write(json.dumps(line).encode() + b"\n")
    store = ResultsDir(tmp_path)
    assert list(store.load()) == [("m", "t", 0)]
    assert [(s.number, s.reason) for s in store.skipped] == [(3, "longer than 16 MiB")]


def test_an_unknown_schema_version_still_stops_with_file_and_line(tmp_path: Path) -> None:
    line = {"schema_version": 9, "task_id": "t", "model": "m", "status": "scored"}
    (tmp_path / "results.jsonl").write_text("\n" + json.dumps(line) + "\n")
    with pytest.raises(RecordVersionError, match=r"results.jsonl line 2: task result has schema_version 9"):
        ResultsDir(tmp_path).load()


def test_a_damaged_run_record_stops_the_read(tmp_path: Path) -> None:
    line = {"task_id": "t", "model": "ghost", "status": "error", "error_kind": "provider"}
    (tmp_path / "results.jsonl").write_text(json.dumps(line) + "\n")
    assert list(ResultsDir(tmp_path).load()) == [("ghost", "t", 0)]  # no run.json: nothing to check against
    damaged = {
        b"\xff not json": "not UTF-8 JSON",
        b"{not json": "not UTF-8 JSON",
        b"[1]": "not a JSON object",
        b"[" * 100_000: "maximum recursion depth",
        b'{"spec": 5, "scope": {"models": 3}}': "no atlasrun_version",
        b'{"atlasrun_version": "1", "scope": {"models": ["m"], "task_ids": "t"}}': "a malformed scope",
        b'{"atlasrun_version": "1", "scope": {"repeats": -1}}': "a malformed scope",
    }
    for data, why in damaged.items():
        (tmp_path / "run.json").write_bytes(data)
        with pytest.raises(InputError, match=rf"run.json: the run record is damaged \({why}"):
            ResultsDir(tmp_path).load()
    (tmp_path / "run.json").unlink()
    os.mkfifo(tmp_path / "run.json")  # never opened for reading: it would block
    with pytest.raises(InputError, match="FIFO"):
        ResultsDir(tmp_path).load()
    (tmp_path / "run.json").unlink()
    # a record whose spec is malformed still names nothing to check (the commands refuse the spec)
    (tmp_path / "run.json").write_text(
        json.dumps({"atlasrun_version": "1", "spec": {"spec": {"models": "x"}}})
    )
    assert ResultsDir(tmp_path).scope() == RunScope()


@pytest.mark.servers
def test_summary_table_and_report_state_the_skipped_lines_and_a_run_records_its_tasks(
    finished: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    run_file, data, out = finished
    copy = tmp_path / "tampered"
    bad = tampered_copy(out, copy)
    jsonl = copy / "results.jsonl"
    resumed = atlas("run", str(run_file), "--data-dir", str(data), "--out", str(copy), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert_reports_each_line(resumed.stderr, bad, jsonl)
    assert json.loads((copy / "summary.json").read_text())["skipped_lines"] == len(bad)
    assert atlas("report", str(copy)).returncode == 0
    assert f"{len(bad)} line(s) of results.jsonl" in (copy / "report.html").read_text()
    compare = atlas("compare", str(out), str(copy), "--json")
    assert compare.returncode == 0 and f"{len(bad)} line(s) of {jsonl} skipped" in compare.stderr

    # a local run records its tasks: a line for another task is outside the run
    assert ResultsDir(copy).scope().task_ids == {t["id"] for t in TASKS}
    with jsonl.open("a") as fh:
        fh.write(json.dumps({**lines_of(out / "results.jsonl")[0], "task_id": "made-up"}) + "\n")
    store = ResultsDir(copy)
    assert len(store.load()) == 4
    assert store.skipped[-1].reason == "task 'made-up' is not one of the run's tasks (run.json)"


def test_a_result_made_an_error_is_a_valid_record() -> None:
    """``TaskResult.as_error`` (the one way a finished result becomes an error: the engine's and the
    pod's unstorable results, rescore's unjudged and claim-less items) gives a record that reads
    back: ``model_copy`` does not validate, and a storage error once had no error kind."""
    from atlasrun.errors import ErrorKind
    from atlasrun.scoring.result import TaskResult

    scored = TaskResult(
        task_id="t",
        model="m",
        status="scored",
        coverage=1.0,
        passed=True,
        passed_at={"0.75": True},
        tool_calls=3,
    )
    lost = scored.as_error(ErrorKind.STORAGE, "storage: disk full")
    again = TaskResult.model_validate_json(lost.model_dump_json())
    assert (again.status, again.error_kind, again.coverage, again.passed, again.passed_at) == (
        "error",
        ErrorKind.STORAGE,
        None,
        None,
        {},
    )
    assert again.tool_calls == 3 and again.reason == "storage: disk full"  # what it spent is kept
