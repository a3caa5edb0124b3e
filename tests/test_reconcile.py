"""The operator's reconcile decision (pure): windows, restarts, suspend, status."""

from __future__ import annotations

import json

from atlasrun.cluster.reconcile import JobState, decide, parse_summary, work_items
from atlasrun.runspec.run import RunSpecBody
from atlasrun.tasks.model import RefCall, RefTurn, Task


def body(**cluster: object) -> RunSpecBody:
    return RunSpecBody.model_validate(
        {
            "tasks": {"configMap": "tasks"},
            "parallelism": 4,
            "models": [{"name": "a", "maxConcurrency": 3}, {"name": "b", "maxConcurrency": 1}],
            "cluster": cluster,
        }
    )


def tasks(n: int) -> list[Task]:
    return [
        Task(
            id=f"t{i}",
            prompt="p",
            enabled_tools=["calculator_calculate"],
            claims=["c"],
            reference_trajectory=[RefTurn(calls=[RefCall(name="calculator_calculate")])],
        )
        for i in range(n)
    ]


def summary(status: str = "scored", passed: bool = True, coverage: float = 1.0) -> dict[str, object]:
    return {"status": status, "passed": passed, "coverage": coverage, "wall_s": 1.5, "reason": None}


def test_first_window_respects_parallelism_and_per_model_limits() -> None:
    decision = decide("r", body(), tasks(6), {}, [], {})
    models = [i.model for i in decision.create]
    assert len(models) == 4 and models.count("b") == 1 and models.count("a") == 3
    assert decision.phase == "Running" and decision.status["progress"] == "0/12"
    assert len({i.name for i in work_items("r", body(), tasks(6))}) == 12  # unique, deterministic names


def test_restart_never_duplicates_and_records_finished_jobs() -> None:
    first = decide("r", body(), tasks(6), {}, [], {})
    jobs = [JobState(i.name, active=True, succeeded=False, failed=False) for i in first.create]
    done = first.create[0]
    jobs[0] = JobState(done.name, active=False, succeeded=True, failed=False, summary=summary())
    # a "restarted operator": same observations, nothing remembered but status.results (empty here)
    again = decide("r", body(), tasks(6), {}, jobs, {})
    created_again = {i.name for i in again.create}
    assert not created_again & {j.name for j in jobs}  # no Job is created twice
    assert (
        again.newly_recorded[done.name]["s"] == "scored"
        and again.newly_recorded[done.name]["m"] == done.model
    )
    assert len(again.create) == 1  # exactly one slot freed
    # the record survives the Job's TTL deletion: same decision without the Job
    later = decide("r", body(), tasks(6), {}, jobs[1:], again.results)
    assert done.name not in {i.name for i in later.create} and not later.newly_recorded


def test_failed_job_without_message_is_an_error_never_a_score() -> None:
    item = work_items("r", body(), tasks(1))[0]
    failed = JobState(
        item.name, active=False, succeeded=False, failed=True, failure_reason="BackoffLimitExceeded"
    )
    decision = decide("r", body(), tasks(1), {}, [failed], {})
    record = decision.newly_recorded[item.name]
    assert record["s"] == "error" and "BackoffLimitExceeded" in record["r"]
    assert (
        decision.status["models"]["a"]["errored"] == 1 and decision.status["models"]["a"]["passRate"] is None
    )


def test_status_counts_pass_rate_and_completion() -> None:
    items = work_items("r", body(), tasks(2))
    outcomes = [
        summary(passed=True),
        summary(passed=False, coverage=0.5),
        summary(status="excluded"),
        summary(status="error"),
    ]
    jobs = [JobState(i.name, False, True, False, summary=o) for i, o in zip(items, outcomes, strict=False)]
    decision = decide("r", body(), tasks(2), {"t9": "needs server(s) not enabled: git"}, jobs, {})
    a, b = decision.status["models"]["a"], decision.status["models"]["b"]
    assert (a["scored"], a["passed"], a["passRate"], a["meanCoverage"]) == (1, 1, 1.0, 1.0)
    assert (b["scored"], b["passed"], b["passRate"], b["meanCoverage"]) == (1, 0, 0.0, 0.5)
    assert a["excluded"] == 2 and b["errored"] == 1  # t9 excluded for every model; one excluded item for a
    assert decision.phase == "Succeeded" and decision.status["progress"] == "4/4"
    assert decision.status["passRates"] == "a=1.00 b=0.00"


def test_suspend_cancels_live_jobs_and_creates_nothing() -> None:
    first = decide("r", body(), tasks(3), {}, [], {})
    jobs = [JobState(i.name, True, False, False) for i in first.create]
    decision = decide("r", body(suspend=True), tasks(3), {}, jobs, {})
    assert decision.create == [] and sorted(decision.delete) == sorted(j.name for j in jobs)
    assert decision.phase == "Suspended"


def test_termination_message_parsing() -> None:
    assert parse_summary(json.dumps(summary())) == summary()
    assert parse_summary("panic: boom") is None and parse_summary(None) is None
