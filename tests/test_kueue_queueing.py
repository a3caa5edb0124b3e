"""Kueue Workloads -> the run's Blocked/QuotaPending condition (atlasrun.cluster.operator.queueing).

The Workload documents have the shape Kueue v0.15 writes (the real thing is exercised in
tests/cluster/test_kueue_admission.py)."""

from __future__ import annotations

from typing import Any

import pytest

from atlasrun.cluster.operator.queueing import (
    DEFAULT_QUEUE_ENV,
    QUOTA_PENDING,
    default_queue,
    pending,
    with_default_queue,
)
from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody


def workload(job: str, *conditions: dict[str, Any], queue: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{job}-1a2b3",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "controller": True}],
        },
        "spec": {"queueName": queue},
        "status": {"conditions": list(conditions)},
    }


def cond(kind: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


QUOTA = "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, 1 more needed"


def test_an_unadmitted_workload_gives_quota_pending_with_kueues_message() -> None:
    waiting = workload("r-m-c1", cond("QuotaReserved", "False", "Pending", QUOTA))
    admitted = workload("r-m-c0", cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True"))
    reason, message = pending([admitted, waiting], ["r-m-c0", "r-m-c1"]) or ("", "")
    assert reason == QUOTA_PENDING and QUOTA in message and "r-m-c1" in message and "team-a" in message
    assert pending([admitted], ["r-m-c0"]) is None


def test_missing_local_queue_and_other_runs_workloads() -> None:
    missing = workload(
        "r-m-c0", cond("QuotaReserved", "False", "Inadmissible", "LocalQueue nope doesn't exist")
    )
    assert "LocalQueue nope doesn't exist" in (pending([missing], ["r-m-c0"]) or ("", ""))[1]
    assert pending([missing], ["other-job"]) is None  # not this run's Job
    assert pending([], ["r-m-c0"]) is None  # Kueue has not created the Workload yet


def test_several_waiting_jobs_are_counted() -> None:
    a = workload("r-m-c0", cond("QuotaReserved", "False", "Pending", QUOTA))
    b = workload("r-m-c1")
    _, message = pending([b, a], ["r-m-c0", "r-m-c1"]) or ("", "")
    assert message.startswith("Kueue has not admitted Job r-m-c0") and "and 1 more Job(s)" in message


def test_deactivated_workloads_of_the_runs_jobs_are_named_for_reactivation() -> None:
    from atlasrun.cluster.operator.queueing import inactive, owned

    off = workload("r-m-c0")
    off["spec"]["active"] = False
    on = workload("r-m-c1")
    on["spec"]["active"] = True
    default = workload("r-m-c2")  # no spec.active: active
    others = workload("x-m-c0")
    others["spec"]["active"] = False
    jobs = ["r-m-c0", "r-m-c1", "r-m-c2"]
    assert inactive([off, on, default, others], jobs) == ["job-r-m-c0-1a2b3"]
    assert [w["metadata"]["name"] for w in owned([off, others], jobs)] == ["job-r-m-c0-1a2b3"]


def test_the_charts_default_queue_applies_only_to_runs_without_one() -> None:
    plain = RunSpecBody.model_validate({"tasks": {"configMap": "t"}, "models": [{"name": "m"}]})
    named = RunSpecBody.model_validate(
        {**plain.model_dump(by_alias=True), "cluster": {"queueName": "team-a"}}
    )
    assert with_default_queue(plain, "evals").cluster.queue_name == "evals"
    assert plain.cluster.queue_name is None  # the parsed spec itself is not changed
    assert with_default_queue(named, "evals").cluster.queue_name == "team-a"
    assert with_default_queue(plain, None) is plain
    assert default_queue({DEFAULT_QUEUE_ENV: " evals "}) == "evals" and default_queue({}) is None
    with pytest.raises(InputError, match="'Team_A' is not a LocalQueue name") as exc:
        default_queue({DEFAULT_QUEUE_ENV: "Team_A"})
    assert exc.value.where == DEFAULT_QUEUE_ENV
