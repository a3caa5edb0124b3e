"""MCP-Atlas harness results in and out: import, export, round trips, and rescoring imports."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from atlasrun.cli import main
from atlasrun.interop.mcp_atlas import NO_OUTPUT, NOT_JUDGED
from atlasrun.runner.local import run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.store import ResultsDir
from conftest import SUM_TASK, write_run, write_tasks
from test_tasks import atlas_row, write_csv


def import_atlas(results: Path | str, tasks: Path | str, model: str, out: Path | str, *more: str) -> int:
    """``atlas import-atlas RESULTS --tasks TASKS --model MODEL --out OUT [MORE...]``."""
    return main(
        ["import-atlas", str(results), "--tasks", str(tasks), "--model", model, "--out", str(out), *more]
    )


def conversation(task: str, answer: str) -> list[dict[str, Any]]:
    """An MCP-Atlas raw_conversation_history: string and part-list tool results, one failed call."""
    return [
        {"role": "system", "content": "Role: You are a factual, tool-aware assistant."},
        {"role": "user", "content": f"prompt {task}"},
        {
            "role": "assistant",
            "content": "Reading the file.",
            "tool_calls": [
                {
                    "id": f"{task}-1",
                    "type": "function",
                    "function": {
                        "name": "filesystem_read_text_file",
                        "arguments": json.dumps({"path": "/data/a.txt"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"{task}-1", "content": [{"type": "text", "text": "hello"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"{task}-2",
                    "type": "function",
                    "function": {"name": "calculator_calculate", "arguments": '{"expression": "1+1"}'},
                },
                {
                    "id": f"{task}-3",
                    "type": "function",
                    "function": {"name": "calculator_calculate", "arguments": "{bad"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": f"{task}-2", "content": "2"},
        {
            "role": "tool",
            "tool_call_id": f"{task}-3",
            "content": [{"type": "text", "text": "invalid expression", "isError": True}],
        },
        {"role": "assistant", "content": answer},
    ]


def results_row(task: str, answer: str, **extra: str) -> dict[str, str]:
    return {
        "task_id": task,
        "raw_conversation_history": json.dumps(conversation(task, answer)),
        "response": answer,
        **extra,
    }


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def calls(result: TaskResult) -> list[tuple[str, str, Any, str, bool]]:
    assert result.transcript is not None
    return [(c.id, c.name, c.arguments, c.result, c.is_error) for c in result.transcript.calls]


def full_results(out: Path) -> dict[str, TaskResult]:
    store = ResultsDir(out)
    loaded = {line.task_id: store.load_full(line) for line in store.load().values()}
    assert all(loaded.values())
    return loaded  # type: ignore[return-value]


@pytest.fixture
def tasks_csv(tmp_path: Path) -> Path:
    return write_csv(tmp_path / "tasks.csv", [atlas_row(t) for t in ("t1", "t2", "t3", "t4")])


def test_import_export_import_round_trip(
    tmp_path: Path, tasks_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = {
        "t1": "The file says hello and the sum is 2.",
        "t2": 'Line one\nline two, with "quotes"',
        "t3": "The sum is 2.",
    }
    results = write_csv(tmp_path / "results.csv", [results_row(t, a) for t, a in answers.items()])
    assert import_atlas(results, tasks_csv, "gpt-x", tmp_path / "a") == 0
    first = full_results(tmp_path / "a")
    assert sorted(first) == ["t1", "t2", "t3"]
    t1 = first["t1"]
    assert (t1.status, t1.reason, t1.model) == ("error", NOT_JUDGED, "gpt-x")
    assert t1.task is not None and t1.task.claims == ["The file says hello", "The sum is 2"]
    assert (t1.tool_calls, t1.tool_errors, t1.turns) == (3, 1, 3)
    assert calls(t1) == [
        ("t1-1", "filesystem_read_text_file", {"path": "/data/a.txt"}, "hello", False),
        ("t1-2", "calculator_calculate", {"expression": "1+1"}, "2", False),
        ("t1-3", "calculator_calculate", "{bad", "invalid expression", True),
    ]
    printed = capsys.readouterr().out
    assert f"imported 3 row(s), rejected 0; 3 unscored (judge them: atlas rescore {tmp_path / 'a'}" in printed
    assert "with imported scores" not in printed
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["models"]["gpt-x"]["errored"] == 3

    exported = tmp_path / "exported.csv"
    assert main(["export-atlas", str(tmp_path / "a"), "--out", str(exported)]) == 0
    rows = read_csv(exported)
    assert list(rows[0]) == ["task_id", "raw_conversation_history", "response"]  # nothing scored yet
    assert [r["task_id"] for r in rows] == ["t1", "t2", "t3"]

    assert import_atlas(exported, tasks_csv, "gpt-x", tmp_path / "b") == 0
    second = full_results(tmp_path / "b")
    assert sorted(second) == sorted(first)
    for task_id, result in second.items():
        again, before = result.transcript, first[task_id].transcript
        assert again is not None and before is not None
        assert again.final_answer == answers[task_id] == before.final_answer
        assert calls(result) == calls(first[task_id]) and again.messages == before.messages


def test_bad_conversation_json_names_row_and_column_and_the_rest_import(
    tmp_path: Path, tasks_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        results_row("t1", "a"),
        dict(results_row("t2", "b"), raw_conversation_history='[{"role": '),
        results_row("t3", "c"),
        results_row("missing", "d"),
        {"task_id": "t4", "raw_conversation_history": "", "response": ""},
    ]
    results = write_csv(tmp_path / "results.csv", rows)
    code = import_atlas(results, tasks_csv, "m", tmp_path / "o")
    err = capsys.readouterr().err
    assert code == 1
    assert "rejected: results.csv line 3, task t2, field raw_conversation_history: not valid JSON" in err
    assert (
        "rejected: results.csv line 5, task missing, field task_id: task 'missing' is not in the tasks file"
        in err
    )
    imported = {r.task_id: r for r in ResultsDir(tmp_path / "o").load().values()}
    assert sorted(imported) == ["t1", "t3", "t4"]
    assert (imported["t4"].status, imported["t4"].reason) == ("error", NO_OUTPUT)  # the harness got nothing
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert len(summary["rejected_rows"]) == 2


def test_scores_are_imported_exported_and_unjudged_rows_rescored(tmp_path: Path, tasks_csv: Path) -> None:
    per_claim = {
        "per_claim": [
            {"claim": "", "score": 1.0, "covered": True, "reason": "says hello"},
            {"claim": "", "score": 0.5, "covered": "partial", "reason": "sum unclear"},
        ]
    }
    failed = {
        "per_claim": [
            {
                "claim": "The file says hello",
                "score": 0.0,
                "covered": False,
                "reason": "Evaluation failed: 503 from the judge",
            },
            {"claim": "The sum is 2", "score": 1.0, "reason": "ok"},
        ]
    }
    # the MCP-Atlas scorer's own file: upper-case TASK, coverage_score and coverage_details_json
    scores = write_csv(
        tmp_path / "scored_gpt.csv",
        [
            {"TASK": "t1", "coverage_score": "0.75", "coverage_details_json": json.dumps(per_claim)},
            {"TASK": "t2", "coverage_score": "0.5", "coverage_details_json": json.dumps(failed)},
            {"TASK": "t3", "coverage_score": "", "coverage_details_json": ""},
        ],
    )
    results = write_csv(
        tmp_path / "results.csv",
        [
            results_row("t1", "The file says hello.", coverage_score=""),
            results_row("t2", "The sum is 2.", coverage_score=""),
            results_row("t3", "The file says hello and the sum is 2.", coverage_score=""),
            results_row("t4", "Nothing found.", coverage_score="0.25"),
        ],
    )
    out = tmp_path / "imported"
    more = ["--scores", str(scores), "--judge-model", "gemini/gemini-2.5-pro"]
    assert import_atlas(results, tasks_csv, "gpt", out, *more) == 0
    got = full_results(out)
    t1 = got["t1"]
    assert (t1.status, t1.coverage, t1.passed) == ("scored", 0.75, True)
    assert [(c.claim, c.label) for c in t1.claims] == [
        ("The file says hello", "fulfilled"),
        ("The sum is 2", "partially_fulfilled"),
    ]
    assert t1.judge and t1.judge.model == "gemini/gemini-2.5-pro"
    assert (got["t2"].status, got["t2"].reason) == ("error", "judge failed on 1/2 claims (MCP-Atlas scorer)")
    assert (got["t3"].status, got["t3"].reason) == ("error", NOT_JUDGED)
    assert (got["t4"].status, got["t4"].coverage, got["t4"].passed) == ("scored", 0.25, False)

    exported = tmp_path / "exported.csv"
    assert main(["export-atlas", str(out), "--out", str(exported)]) == 0
    rows = {r["task_id"]: r for r in read_csv(exported)}
    assert list(rows["t1"]) == [
        "task_id",
        "raw_conversation_history",
        "response",
        "coverage_score",
        "pass",
        "judge",
    ]
    assert rows["t1"]["judge"] == "mcp-atlas" and rows["t3"]["judge"] == ""
    assert (rows["t1"]["coverage_score"], rows["t1"]["pass"]) == ("0.75", "True")
    assert (rows["t4"]["coverage_score"], rows["t4"]["pass"]) == ("0.25", "False")
    assert (rows["t3"]["coverage_score"], rows["t3"]["pass"]) == ("", "")

    # rescoring judges every saved answer, including the ones not yet judged (deterministic: no servers)
    assert main(["rescore", str(out), "--judge", "deterministic", "--out", str(tmp_path / "rescored")]) == 0
    rescored = full_results(tmp_path / "rescored")
    assert all(
        r.status == "scored" and r.judge and r.judge.name == "deterministic" for r in rescored.values()
    )
    assert rescored["t3"].coverage == 1.0 and rescored["t4"].coverage == 0.0


def test_tasks_default_to_the_task_columns_of_the_completion_file(tmp_path: Path) -> None:
    """mcp_completion_script.py writes TASK, PROMPT, ENABLED_TOOLS, GTFA_CLAIMS, TRAJECTORY into each row."""
    rows = [
        dict(
            atlas_row(t),
            script_model_response=f"answer {t}",
            raw_conversation_history=json.dumps(conversation(t, f"answer {t}")),
        )
        for t in ("a", "b")
    ]
    results = write_csv(tmp_path / "sample_results.csv", rows)
    assert main(["import-atlas", str(results), "--model", "m", "--out", str(tmp_path / "o")]) == 0
    got = full_results(tmp_path / "o")
    assert sorted(got) == ["a", "b"]
    assert got["a"].transcript and got["a"].transcript.final_answer == "answer a"
    assert got["a"].task and got["a"].task.claims == ["The file says hello", "The sum is 2"]


@pytest.mark.servers
def test_a_real_run_exports_and_reimports_with_its_tool_calls(tmp_path: Path, data_dir: Path) -> None:
    failing = dict(
        SUM_TASK,
        id="missing-file",
        reference_trajectory=[
            {"calls": [{"name": "filesystem_read_text_file", "arguments": {"path": "/data/nope.txt"}}]}
        ],
    )
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK, failing])
    run_file = write_run(tmp_path / "run.yaml", tasks, [{"name": "replay"}])
    outcome = run_local(load_run_spec(run_file), tmp_path / "run", data_dir, progress=False)
    original = full_results(outcome.out)
    assert main(["export-atlas", str(outcome.out), "--out", str(tmp_path / "run.csv")]) == 0
    assert import_atlas(tmp_path / "run.csv", tasks, "replay", tmp_path / "back") == 0
    back = full_results(tmp_path / "back")
    assert sorted(back) == sorted(original) == ["missing-file", "sum-numbers"]
    for task_id, result in back.items():
        before = original[task_id]
        assert result.transcript and before.transcript
        assert result.transcript.final_answer == before.transcript.final_answer
        assert [(c.id, c.name, c.arguments, c.result, c.is_error) for c in result.transcript.calls] == [
            (c.id, c.name, c.arguments, c.result, c.is_error) for c in before.transcript.calls
        ]
        assert (result.status, result.coverage, result.passed) == (
            before.status,
            before.coverage,
            before.passed,
        )
    assert back["missing-file"].tool_errors == 1


def test_harness_errors_error_text_results_and_crashed_scoring(tmp_path: Path, tasks_csv: Path) -> None:
    error_text = conversation("t2", "The sum is 2.")
    error_text[3]["content"] = [{"type": "text", "text": "Error: ENOENT: no such file /data/a.txt"}]
    scores = write_csv(
        tmp_path / "scored.csv",
        [
            # the scorer gives ERROR rows 0 ("Skipped - empty or error response"): not a model's 0
            {"TASK": "t1", "coverage_score": "0.0", "coverage_details_json": json.dumps({"per_claim": []})},
            {"TASK": "t2", "coverage_score": "1.0", "coverage_details_json": ""},
            # the scorer crashed on this row: imported unscored, not rejected
            {
                "TASK": "t3",
                "coverage_score": "",
                "coverage_details_json": json.dumps({"coverage_score": None, "explanation": "Failed: boom"}),
            },
        ],
    )
    results = write_csv(
        tmp_path / "results.csv",
        [
            {"task_id": "t1", "raw_conversation_history": "", "response": "ERROR: HTTP 502: bad gateway"},
            {
                "task_id": "t2",
                "raw_conversation_history": json.dumps(error_text),
                "response": "The sum is 2.",
            },
            results_row("t3", "The file says hello."),
        ],
    )
    out = tmp_path / "imported"
    assert import_atlas(results, tasks_csv, "gpt", out, "--scores", str(scores)) == 0
    got = full_results(out)
    t1 = got["t1"]
    assert (t1.status, t1.coverage, t1.stop_reason) == ("error", None, "infra_error")
    assert t1.reason == "infra: MCP-Atlas harness error: ERROR: HTTP 502: bad gateway"
    t2 = got["t2"]
    assert (t2.status, t2.coverage, t2.tool_errors) == ("scored", 1.0, 2)  # "Error:" text + isError part
    assert calls(t2)[0][4] is True and calls(t2)[0][3].startswith("Error: ENOENT")
    assert (got["t3"].status, got["t3"].reason) == ("error", NOT_JUDGED)


def test_an_unreadable_results_line_is_rejected_by_line_and_the_rest_import(
    tmp_path: Path, tasks_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results.jsonl"
    lines = [
        json.dumps(results_row("t1", "a")),
        "[1, 2]",
        '{"task_id": "t2", ',
        json.dumps(results_row("t3", "c")),
    ]
    results.write_text("\n".join(lines) + "\n")
    code = import_atlas(results, tasks_csv, "m", tmp_path / "o")
    err = capsys.readouterr().err
    assert code == 1
    assert "rejected: results.jsonl line 2, field (row): line is not a JSON object (got list)" in err
    assert "rejected: results.jsonl line 3, field (row): line is " in err
    assert sorted(r.task_id for r in ResultsDir(tmp_path / "o").load().values()) == ["t1", "t3"]
