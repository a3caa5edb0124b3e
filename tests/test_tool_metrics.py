"""MCP-Bench rule-based tool metrics on constructed transcripts, checked against hand counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from atlasrun.agent.transcript import CallRecord, ModelCallRecord, Transcript
from atlasrun.reports.data import build_data
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.store import ResultsDir
from atlasrun.scoring.tool_metrics import aggregate_tool_metrics, task_tool_metrics

READ = {
    "type": "function",
    "function": {
        "name": "filesystem_read_text_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
CALC = {
    "type": "function",
    "function": {
        "name": "calculator_calculate",
        "description": "Evaluate",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    },
}


def call(name: str, arguments: Any, error_kind: str | None = None, i: int = 0) -> CallRecord:
    return CallRecord(
        id=f"c{i}",
        name=name,
        arguments=arguments,
        is_error=error_kind is not None,
        error_kind=error_kind,
        result="Error" if error_kind else "ok",
        elapsed_s=0.1,
    )  # type: ignore[arg-type]


def transcript(calls: list[CallRecord], **extra: Any) -> Transcript:
    return Transcript(agent="litellm", model="m", tools=[READ, CALC], calls=calls, **extra)


MIXED = [
    call("filesystem_read_text_file", {"path": "/data/a.txt"}),  # valid, compliant, ok
    call("filesystem_write_file", {"path": "/x"}, "not_available"),  # hallucinated name
    call("filesystem_read_text_file", {"path": 5}, "tool_error"),  # schema violation, fails
    call("calculator_calculate", {"expression": "1/0"}, "tool_error"),  # compliant, fails
    call("calculator_calculate", {"expression": "1+1", "extra": True}),  # additionalProperties
    call("calculator_calculate", "not json", "invalid_arguments"),  # not an object
    call("filesystem_read_text_file", {"path": "/b"}, "budget"),  # refused: not counted
]


def test_task_metrics_count_names_schemas_and_failures() -> None:
    t = transcript(
        MIXED,
        turns=4,
        wall_s=12.5,
        model_calls=[
            ModelCallRecord(prompt_tokens=100, completion_tokens=20, cost_usd=0.01),
            ModelCallRecord(prompt_tokens=150, completion_tokens=30, cost_usd=0.02),
        ],
    )
    m = task_tool_metrics(t, "task-1", repeat=2)
    # 7 calls, 1 budget refusal -> 6 attempted; 1 not_available -> 5 valid.
    assert (m.calls, m.budget_refused, m.valid_calls) == (6, 1, 5)
    assert m.valid_name_rate == pytest.approx(5 / 6)
    # Of the 5 valid calls, compliant: read{"path": str}, calc{"expression": "1/0"} = 2;
    # violations: path=5 (type), extra property, non-object arguments. 2/5 = 0.4.
    assert (m.schema_checked, m.schema_compliant) == (5, 2) and m.schema_compliance == pytest.approx(0.4)
    # Without error among the 5 valid: the first read and the 1+1 calc = 2/5.
    assert m.succeeded == 2 and m.execution_success == pytest.approx(0.4)
    # Efficiency: tokens 100+20+150+30 = 300, cost 0.03.
    assert (m.model, m.repeat, m.turns, m.wall_s, m.tokens) == ("m", 2, 4, 12.5, 300)
    assert m.cost_usd == pytest.approx(0.03)


def test_task_without_calls_has_no_rates() -> None:
    m = task_tool_metrics(transcript([]), "quiet")
    assert (m.calls, m.valid_name_rate, m.schema_compliance, m.execution_success) == (0, None, None, None)
    # Only hallucinated names: valid-name rate 0, the other two undefined (no valid calls).
    only_bad = task_tool_metrics(transcript([call("nope_tool", {}, "not_available")]), "bad")
    assert (only_bad.valid_name_rate, only_bad.schema_compliance, only_bad.execution_success) == (
        0.0,
        None,
        None,
    )


def test_tool_without_a_usable_schema_is_not_judged() -> None:
    broken = {"type": "function", "function": {"name": "memory_store", "parameters": {"type": 12}}}
    t = Transcript(agent="a", model="m", tools=[broken], calls=[call("memory_store", {"k": 1})])
    m = task_tool_metrics(t, "x")
    assert (m.valid_calls, m.schema_checked, m.schema_compliance, m.execution_success) == (1, 0, None, 1.0)


def test_aggregate_means_and_pooled_rates() -> None:
    first = task_tool_metrics(transcript(MIXED[:4]), "t1")  # rates 3/4, 2/3, 1/3
    second = task_tool_metrics(
        transcript([call("calculator_calculate", {"expression": "2"})]), "t2"
    )  # 1, 1, 1
    empty = task_tool_metrics(transcript([]), "t3")
    agg = aggregate_tool_metrics([first, second, empty])
    assert (agg.tasks, agg.tasks_without_calls, agg.calls) == (3, 1, 5)
    # Valid names: mean (3/4 + 1)/2 = 0.875; pooled (3 + 1)/(4 + 1) = 0.8.
    assert agg.mean_valid_name_rate == pytest.approx(0.875) and agg.valid_name_rate == pytest.approx(0.8)
    # Schema: mean (2/3 + 1)/2 = 5/6; pooled (2 + 1)/(3 + 1) = 0.75.
    assert agg.mean_schema_compliance == pytest.approx(5 / 6) and agg.schema_compliance == pytest.approx(0.75)
    # Execution: mean (1/3 + 1)/2 = 2/3; pooled (1 + 1)/(3 + 1) = 0.5.
    assert agg.mean_execution_success == pytest.approx(2 / 3) and agg.execution_success == pytest.approx(0.5)
    # Mean calls (4 + 1 + 0)/3 = 5/3.
    assert agg.mean_calls == pytest.approx(5 / 3)
    none = aggregate_tool_metrics([empty])
    assert (none.tasks_without_calls, none.valid_name_rate, none.mean_valid_name_rate) == (1, None, None)


def test_a_models_tool_metrics_in_the_report_of_a_results_dir(tmp_path: Path) -> None:
    """The per-model aggregate as ``atlas report`` computes it from a results directory."""
    results = ResultsDir(tmp_path)
    base = {"model": "m", "status": "scored", "coverage": 1.0, "passed": True}
    results.append(TaskResult(task_id="t1", transcript=transcript(MIXED[:4]), **base))  # type: ignore[arg-type]
    results.append(TaskResult(task_id="t2", transcript=transcript([]), **base))  # type: ignore[arg-type]
    results.append(
        TaskResult(
            task_id="t3",
            model="m",
            status="error",
            error_kind="server_transport",
            reason="infra",
            transcript=transcript([call("calculator_calculate", {}, "transport")]),
        )
    )
    lost = TaskResult(task_id="t4", transcript=transcript([]), **base)  # type: ignore[arg-type]
    results.append(lost)
    results.task_path(lost).unlink()
    [row] = build_data(tmp_path).models
    agg = row.tools
    # Scored only, like the pass rates: t1, t2 measured, t4's task JSON is gone; t3 (error) left out.
    assert (agg.tasks, agg.missing_transcripts, agg.tasks_without_calls, agg.calls) == (2, 1, 1, 4)
    assert agg.valid_name_rate == pytest.approx(3 / 4)
