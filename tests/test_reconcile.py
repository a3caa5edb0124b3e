"""The operator's decision (pure, no API types): plans, budgets, counting, conditions, quiet status."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from atlasrun.cluster.operator.observe import pod_cost
from atlasrun.cluster.operator.outcomes import Outcome, outcome_of
from atlasrun.cluster.operator.reconcile import (
    Decision,
    JobObs,
    PlannedTask,
    Snapshot,
    TasksObs,
    budgets,
    decide,
    format_ranges,
    parse_ranges,
    plan_chunks,
)
from atlasrun.cluster.wire.contract import TasksRef
from atlasrun.cluster.wire.records import TaskSummary
from atlasrun.cluster.wire.usage import PodCost
from atlasrun.runspec.run import RunSpecBody

SHA = "ab" * 32
PIN = TasksRef(sha256=SHA, uri=f"s3://results/e2e/tasks/{SHA}", name="tasks.yaml")


def body(parallelism: int = 4, per_job: int = 2, repeats: int = 1, **extra: Any) -> RunSpecBody:
    cluster = {
        "itemsPerJob": per_job,
        "itemsPerPod": 1,
        **extra.pop("cluster", {}),
    }  # a pod per item unless said
    return RunSpecBody.model_validate(
        {
            "tasks": {"configMap": "tasks"},
            "parallelism": parallelism,
            "repeats": repeats,
            "models": [{"name": "a", "maxConcurrency": 3}, {"name": "b", "maxConcurrency": 1}],
            "cluster": cluster,
            **extra,
        }
    )


def tasks(n: int, servers: tuple[str, ...] = ("calculator",)) -> TasksObs:
    return TasksObs(pin=PIN, runnable=tuple(PlannedTask(f"t{i}", servers) for i in range(n)))


def snap(b: RunSpecBody, t: TasksObs, status: dict[str, Any] | None = None, **kw: Any) -> Snapshot:
    return Snapshot(
        name="r",
        uid="u",
        generation=1,
        body=b,
        status=status or {},
        now=kw.pop("now", "2026-01-01T00:00:00Z"),
        tasks=t,
        results_uri="s3://results/e2e/r/",
        **kw,
    )


def applied(status: dict[str, Any], d: Decision) -> dict[str, Any]:
    """The status after act's merge patch."""
    return {**status, **d.status_patch}


def scored(passed: bool = True, coverage: float = 1.0) -> dict[str, Any]:
    return {"status": "scored", "passed": passed, "coverage": coverage, "wall_s": 1.5}


def outcome_from(summary: dict[str, Any], model: str, failed: bool) -> Outcome:
    """The record of an attempt whose termination message is ``summary``."""
    return outcome_of(TaskSummary.model_validate(summary), model, failed)


def job(model: str, chunk: int, size: int = 2, **kw: Any) -> JobObs:
    return JobObs(
        name=f"{model}-c{chunk}",
        model=model,
        chunk=chunk,
        completions=size,
        parallelism=kw.pop("parallelism", 1),
        **kw,
    )


def finished(model: str, chunk: int, outcomes: dict[int, dict[str, Any]], size: int = 2) -> JobObs:
    return job(
        model,
        chunk,
        size,
        finished=True,
        completed=frozenset(i for i, o in outcomes.items() if o.status != "error"),
        failed_indexes=frozenset(i for i, o in outcomes.items() if o.status == "error"),
        outcomes=outcomes,
    )


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


# ---------------------------------------------------------------- plan and budgets


def test_plan_chunks_items_by_repeat_then_task_grouping_tasks_by_servers() -> None:
    t = TasksObs(
        pin=PIN,
        runnable=(PlannedTask("x", ("git",)), PlannedTask("y", ("calculator",)), PlannedTask("z", ("git",))),
    )
    plan = plan_chunks(body(per_job=2, repeats=2), t.runnable)
    a = plan["a"]
    assert [c.items for c in a] == [(("y", 0), ("x", 0)), (("z", 0), ("y", 1)), (("x", 1), ("z", 1))]
    assert [c.servers for c in a] == [("calculator", "git"), ("calculator", "git"), ("git",)]
    assert plan["b"][0].items == a[0].items and plan == plan_chunks(body(per_job=2, repeats=2), t.runnable)


def test_budgets_share_parallelism_round_robin_within_each_cap() -> None:
    assert budgets(body(parallelism=4), {"a": 10, "b": 10}) == {"a": 3, "b": 1}
    assert budgets(body(parallelism=2), {"a": 10, "b": 10}) == {"a": 1, "b": 1}
    assert budgets(body(parallelism=8), {"a": 2, "b": 0}) == {"a": 2, "b": 0}


def test_ranges_round_trip() -> None:
    assert parse_ranges("0-3,5,7-8") == {0, 1, 2, 3, 5, 7, 8} and parse_ranges("") == set()
    assert format_ranges({8, 0, 1, 2, 3, 5, 7}) == "0-3,5,7-8" and format_ranges([]) == ""


# ---------------------------------------------------------------- the first pass and restarts


def test_first_pass_pins_tasks_and_creates_chunks_within_budgets() -> None:
    d = decide(snap(body(), tasks(6)))
    widths = {(c.model, c.index): w for c, w in d.create}
    assert widths == {("a", 0): 2, ("a", 1): 1, ("b", 0): 1}  # a: 3 pods, b: 1 pod
    assert d.phase == "Running" and d.status["progress"] == "0/12"
    assert d.status["tasks"]["sha256"] == SHA and d.status["tasks"]["count"] == 6
    assert {e[1] for e in d.events} == {"Started", "TasksPinned"}
    assert condition(d.status, "Progressing")["status"] == "True"
    assert condition(d.status, "Ready")["status"] == "True"
    again = decide(snap(body(), tasks(6)))  # a restarted operator: the same decision
    assert [(c.model, c.index, w) for c, w in again.create] == [(c.model, c.index, w) for c, w in d.create]


def test_live_jobs_are_not_created_again_and_spare_room_starts_the_next_chunk() -> None:
    status = applied({}, decide(snap(body(), tasks(6))))
    live = (job("a", 0, parallelism=2, active=2), job("a", 1, parallelism=1, active=1), job("b", 0, active=1))
    d = decide(snap(body(), tasks(6), status, jobs=live))
    assert d.create == [] and d.parallelism == {} and d.delete == []
    # a's chunk 0 finished two items (not yet counted: the Job still runs its last...)
    progressed = dataclasses.replace(live[0], completed=frozenset({0, 1}), active=0)
    d = decide(snap(body(), tasks(6), status, jobs=(progressed, *live[1:])))
    assert [(c.model, c.index, w) for c, w in d.create] == [("a", 2, 2)]
    assert d.status["progress"] == "2/12"


def test_finished_job_is_counted_once_then_deleted() -> None:
    status = applied({}, decide(snap(body(), tasks(2), jobs=())))
    done = finished(
        "a", 0, {0: outcome_from(scored(), "a", False), 1: outcome_from(scored(False, 0.5), "a", False)}
    )
    d = decide(snap(body(), tasks(2), status, jobs=(done, job("b", 0, active=1))))
    a = d.status["models"]["a"]
    assert (a["scored"], a["passed"], a["failed"], a["passRate"], a["meanCoverage"]) == (2, 1, 1, 0.5, 0.75)
    assert a["chunksDone"] == "0" and d.delete == ["a-c0"] and len(d.accounted) == 2
    status = applied(status, d)
    # The delete has not happened yet (or the operator restarted before it): never counted twice.
    again = decide(snap(body(), tasks(2), status, jobs=(done, job("b", 0, active=1))))
    assert again.status["models"]["a"]["scored"] == 2 and again.delete == ["a-c0"] and not again.accounted
    assert "models" not in again.status_patch


def test_an_index_without_outcome_is_an_error_never_a_score() -> None:
    status = applied({}, decide(snap(body(), tasks(2))))
    whole_job_failed = dataclasses.replace(
        job("a", 0),
        finished=True,
        outcomes={0: outcome_from(scored(), "a", False)},
        failure="DeadlineExceeded: too slow",
    )
    d = decide(snap(body(), tasks(2), status, jobs=(whole_job_failed,)))
    a = d.status["models"]["a"]
    assert (a["scored"], a["errored"]) == (1, 1)
    assert any(r.error_kind == "job_failed" and "DeadlineExceeded" in (r.reason or "") for r in d.accounted)


def test_a_chunk_whose_job_vanished_before_counting_is_created_again() -> None:
    status = applied({}, decide(snap(body(parallelism=1), tasks(2))))
    d = decide(snap(body(parallelism=1), tasks(2), status, jobs=()))  # TTL removed it: no record lost
    assert [(c.model, c.index) for c, _ in d.create] == [("a", 0)]


def test_unreadable_outcomes_wait_and_block_on_the_object_store() -> None:
    status = applied({}, decide(snap(body(), tasks(2))))
    stuck = dataclasses.replace(job("a", 0), finished=True, outcomes=None, outcomes_error="s3 down")
    d = decide(snap(body(), tasks(2), status, jobs=(stuck,)))
    assert d.status["models"]["a"]["scored"] == 0 and d.delete == [] and d.phase == "Blocked"
    assert condition(d.status, "Blocked")["reason"] == "ObjectStoreUnavailable" and d.requeue_after == 30


# ---------------------------------------------------------------- outcomes of the run


def _all_done(b: RunSpecBody, outcome: dict[str, Any], n: int = 2) -> Decision:
    status = applied({}, decide(snap(b, tasks(n))))
    jobs = tuple(
        finished(m, 0, {i: outcome_from(outcome, m, outcome["status"] == "error") for i in range(n)}, size=n)
        for m in ("a", "b")
    )
    return decide(snap(b, tasks(n), status, jobs=jobs, now="2026-01-01T00:05:00Z"))


def test_run_succeeds_when_every_item_is_counted() -> None:
    d = _all_done(body(), scored())
    assert d.phase == "Succeeded" and d.status["completionTime"] == "2026-01-01T00:05:00Z"
    assert condition(d.status, "Complete")["status"] == "True"
    assert condition(d.status, "Progressing")["status"] == "False"
    assert ("Normal", "Completed") in [(e[0], e[1]) for e in d.events]
    assert d.status["passRates"] == "a=1.00 b=1.00"


def test_run_where_every_item_errored_fails() -> None:
    d = _all_done(body(), {"status": "error", "error_kind": "provider", "reason": "429"})
    assert d.phase == "Failed"
    failed = condition(d.status, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "AllItemsErrored"
    assert (
        condition(d.status, "Complete")["status"] == "False"
        and condition(d.status, "Ready")["status"] == "False"
    )
    assert ("Warning", "AllItemsErrored") in [(e[0], e[1]) for e in d.events]


@pytest.mark.parametrize(("limit", "phase"), [(0.2, "Failed"), (0.5, "Succeeded"), (None, "Succeeded")])
def test_error_rate_above_max_error_rate_fails(limit: float | None, phase: str) -> None:
    b = body(maxErrorRate=limit) if limit is not None else body()
    status = applied({}, decide(snap(b, tasks(3))))
    outcomes = [scored(), scored(), {"status": "error", "error_kind": "infra"}]
    jobs = []
    for m in ("a", "b"):
        for c in range(2):
            items = {i: outcome_from(outcomes[(c * 2 + i) % 3], m, False) for i in range(2 if c == 0 else 1)}
            jobs.append(finished(m, c, items, size=len(items)))
    d = decide(snap(b, tasks(3), status, jobs=tuple(jobs)))
    assert d.phase == phase, d.status["conditions"]
    if phase == "Failed":
        assert condition(d.status, "Failed")["reason"] == "ErrorRateExceeded"


# ---------------------------------------------------------------- edits: suspend, parallelism


def test_suspend_suspends_live_jobs_and_resume_resumes_them() -> None:
    status = applied({}, decide(snap(body(), tasks(6))))
    live = (job("a", 0, parallelism=2, active=2), job("b", 0, active=1))
    d = decide(snap(body(cluster={"suspend": True}), tasks(6), status, jobs=live))
    assert sorted(d.suspend) == ["a-c0", "b-c0"] and d.create == [] and d.phase == "Suspended"
    paused = tuple(dataclasses.replace(j, suspended=True, active=0) for j in live)
    d = decide(snap(body(), tasks(6), applied(status, d), jobs=paused))
    assert sorted(d.resume) == ["a-c0", "b-c0"] and d.phase == "Running"


def test_lower_parallelism_shrinks_live_jobs() -> None:
    status = applied({}, decide(snap(body(), tasks(6))))
    live = (job("a", 0, parallelism=2, active=2), job("a", 1, parallelism=1, active=1), job("b", 0, active=1))
    d = decide(snap(body(parallelism=2), tasks(6), status, jobs=live))
    assert d.parallelism == {"a-c1": 0, "a-c0": 1} and d.create == []


# ---------------------------------------------------------------- blocked, conditions, quiet status


def test_preconditions_block_with_a_condition_and_one_event() -> None:
    problem = ("UnpinnedImage", "images must be pinned by digest: runner:latest")
    d = decide(snap(body(), tasks(2), problems=(problem,)))
    assert d.phase == "Blocked" and d.create == []
    blocked = condition(d.status, "Blocked")
    assert (blocked["status"], blocked["reason"]) == ("True", "UnpinnedImage")
    assert condition(d.status, "Ready")["status"] == "False"
    assert d.events == [("Warning", "UnpinnedImage", problem[1])]
    again = decide(snap(body(), tasks(2), applied({}, d), problems=(problem,), now="2026-01-01T01:00:00Z"))
    assert again.events == [] and again.status_patch == {}


@pytest.mark.parametrize("reason", ["InvalidTasks", "ObjectStoreUnavailable"])
def test_task_problems_block(reason: str) -> None:
    d = decide(snap(body(), TasksObs(error=(reason, "details"))))
    assert d.phase == "Blocked" and condition(d.status, "Blocked")["reason"] == reason and d.create == []


def test_waiting_pods_block_then_clear_moving_transition_times_only_on_change() -> None:
    status = applied({}, decide(snap(body(), tasks(6))))
    live = (job("a", 0, parallelism=2, active=2), job("a", 1, active=1), job("b", 0, active=1))
    held = ("Unschedulable", "pod a-c0-0 cannot be scheduled: 0/1 nodes are available")
    d = decide(snap(body(), tasks(6), status, jobs=live, health=(held,), now="2026-01-01T00:01:00Z"))
    assert d.phase == "Blocked" and d.requeue_after == 20
    assert condition(d.status, "Blocked")["lastTransitionTime"] == "2026-01-01T00:01:00Z"
    assert ("Warning", "Unschedulable") in [(e[0], e[1]) for e in d.events]
    ready_since = condition(status, "Ready")["lastTransitionTime"]
    status = applied(status, d)
    d = decide(snap(body(), tasks(6), status, jobs=live, now="2026-01-01T00:02:00Z"))
    assert d.phase == "Running" and condition(d.status, "Blocked")["status"] == "False"
    assert condition(d.status, "Blocked")["lastTransitionTime"] == "2026-01-01T00:02:00Z"
    assert condition(d.status, "Progressing")["lastTransitionTime"] == "2026-01-01T00:02:00Z"
    assert condition(status, "Ready")["lastTransitionTime"] != ready_since  # Blocked made it False


def test_idle_run_needs_no_write() -> None:
    status = applied({}, decide(snap(body(), tasks(6))))
    live = (
        job("a", 0, parallelism=2, active=2, ready=2),
        job("a", 1, active=1, ready=1),
        job("b", 0, active=1, ready=1),
    )
    d = decide(snap(body(), tasks(6), status, jobs=live, now="2026-01-01T00:01:00Z"))
    status = applied(status, d)
    later = decide(snap(body(), tasks(6), status, jobs=live, now="2026-01-01T05:00:00Z"))
    assert later.status_patch == {} and later.events == [] and later.create == [] and later.parallelism == {}
    assert later.requeue_after is None  # the operator's resync (ATLASRUN_RESYNC_SECONDS)


def test_status_stays_small_at_a_real_sweep() -> None:
    """20 models x 500 tasks x 3 repeats, every chunk counted: O(models), not O(items)."""
    b = RunSpecBody.model_validate(
        {
            "tasks": {"configMap": "tasks"},
            "repeats": 3,
            "models": [{"name": f"provider/model-{i:02d}-with-a-long-name"} for i in range(20)],
        }
    )
    t = tasks(500)
    status: dict[str, Any] = {}
    for model in b.models:
        chunks = plan_chunks(b, t.runnable)[model.name]
        status.setdefault("models", {})[model.name] = {
            "scored": 1500,
            "passed": 700,
            "errored": 0,
            "excludedItems": 0,
            "coverageSum": 1049.5,
            "chunksDone": format_ranges(range(len(chunks))),
        }
    d = decide(snap(b, t, status))
    assert d.phase == "Succeeded" and d.status["progress"] == "30000/30000"
    assert len(json.dumps(d.status)) < 64 * 1024


# ---------------------------------------------------------------- what observe reads from pods (pure helpers)


def test_waiting_pods_name_their_reason() -> None:
    from atlasrun.cluster.operator.health import pod_problem as _pod_problem

    def pod(**status: Any) -> dict[str, Any]:
        return {"metadata": {"name": "r-c0-0-abcde"}, "status": status}

    unschedulable = pod(
        conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
        ]
    )
    assert _pod_problem(unschedulable) == ("Unschedulable", "pod r-c0-0-abcde cannot be scheduled: 0/3 nodes")
    pulling = pod(
        initContainerStatuses=[
            {
                "name": "mcp-git",
                "image": "registry.example/mcp-git@sha256:00",
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
            }
        ]
    )
    reason, message = _pod_problem(pulling) or ("", "")
    assert reason == "ImagePullBackOff" and "mcp-git" in message and "registry.example/mcp-git" in message
    assert (
        _pod_problem(
            pod(containerStatuses=[{"name": "runner", "state": {"waiting": {"reason": "ContainerCreating"}}}])
        )
        is None
    )


def test_watched_pods_keep_what_counting_reads_and_say_when_every_attempt_is_there() -> None:
    """The finished-pod informer keeps a trimmed pod; counting a Job from trimmed pods gives the
    same outcomes as from the full pods, and the cache is complete only once it holds as many
    Succeeded and Failed attempts as the Job's status counts."""
    from atlasrun.cluster.operator.informer import complete, trim_pod
    from atlasrun.cluster.operator.observe import Observer

    def pod(name: str, index: int, phase: str, created: str, message: dict[str, Any]) -> dict[str, Any]:
        terminated = {
            "exitCode": 0 if phase == "Succeeded" else 1,
            "message": json.dumps(message),
            "startedAt": created.replace(":00Z", ":05Z"),
            "finishedAt": created.replace(":00Z", ":30Z"),
        }
        return {
            "metadata": {
                "name": name,
                "resourceVersion": "7",
                "creationTimestamp": created,
                "labels": {"batch.kubernetes.io/job-name": "j", "atlasrun.dev/run": "r"},
                "annotations": {"batch.kubernetes.io/job-completion-index": str(index), "other": "x" * 500},
                "managedFields": [{"manager": "kubelet"}],
            },
            "spec": {"containers": [{"name": "runner", "image": "reg/runner@sha256:00"}]},
            "status": {
                "phase": phase,
                "startTime": created,
                "reason": "Evicted" if phase == "Failed" else None,
                "containerStatuses": [
                    {"name": "mcp-git", "state": {"terminated": {"message": "sidecar"}}},
                    {"name": "runner", "state": {"terminated": terminated}},
                ],
            },
        }

    pods = [
        pod("j-0-a", 0, "Failed", "2026-01-01T00:00:00Z", {"status": "error", "error_kind": "infra"}),
        pod(
            "j-0-b",
            0,
            "Succeeded",
            "2026-01-01T00:01:00Z",
            {"status": "scored", "passed": True, "cpu_s": 2.5},
        ),
        pod(
            "j-1-a", 1, "Succeeded", "2026-01-01T00:00:00Z", {"status": "scored", "passed": False, "cpu_s": 1}
        ),
    ]
    job = {"spec": {"template": {"spec": {"containers": []}}}, "status": {"succeeded": 2, "failed": 1}}
    obs = JobObs(
        name="j", model="m", chunk=0, completions=2, parallelism=2, completed=frozenset({0, 1}), finished=True
    )
    observer = Observer(api=object(), settings=None)  # type: ignore[arg-type]
    trimmed = [trim_pod(json.loads(json.dumps(p))) for p in pods]
    assert observer._outcomes(job, obs, trimmed) == observer._outcomes(job, obs, pods)
    outcomes, _ = observer._outcomes(job, obs, trimmed)
    assert outcomes is not None and [outcomes[i].passed for i in (0, 1)] == [True, False]  # the retry counts
    assert len(json.dumps(trimmed[0])) < len(json.dumps(pods[0])) / 2
    assert complete(trimmed, job) and not complete(trimmed[1:], job) and not complete(trimmed[:2], job)
    # Their cost, the evicted attempt included (it reported no CPU): 3 pods of 30 s each.
    assert pod_cost(trimmed) == pod_cost(pods) == PodCost(3, 90.0, 3.5, 1)


def test_a_counted_jobs_pod_cost_is_added_once_to_its_models_usage() -> None:
    status = applied({}, decide(snap(body(), tasks(2), jobs=())))
    done = dataclasses.replace(
        finished("a", 0, {0: outcome_from(scored(), "a", False), 1: outcome_from(scored(), "a", False)}),
        cost=PodCost(pods=3, pod_seconds=41.5, cpu_seconds=7.25, pods_without_cpu=1),
    )
    d = decide(snap(body(), tasks(2), status, jobs=(done,)))
    spent = d.status["models"]["a"]["usage"]
    assert {k: spent.get(k) for k in ("pods", "podSeconds", "cpuSeconds", "podsWithoutCpu")} == {
        "pods": 3,
        "podSeconds": 41.5,
        "cpuSeconds": 7.25,
        "podsWithoutCpu": 1,
    }
    again = decide(snap(body(), tasks(2), applied(status, d), jobs=(done,)))  # not deleted yet
    assert again.status["models"]["a"]["usage"]["cpuSeconds"] == 7.25 and "models" not in again.status_patch


def test_the_condition_names_the_problem_that_will_not_resolve_by_waiting() -> None:
    from atlasrun.cluster.operator.health import holding as _holding

    full = ("Unschedulable", "pod r-c0-1 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu")
    pull = ("ImagePullBackOff", "pod r-c0-0 container runner cannot pull reg/runner@sha256:00")
    quota = ("QuotaExceeded", "the Job controller cannot create pods: exceeded quota")
    # The pods that cannot pull fill the node; their siblings' Unschedulable is the consequence.
    assert _holding([full, pull, full], progressing=False) == (pull, full)
    assert _holding([full, quota], progressing=False) == (quota, full)
    # Waiting for capacity while other pods of the run are ready is queueing, not a held run.
    assert _holding([full], progressing=True) == ()
    assert _holding([full, pull], progressing=True) == (pull,)
    assert _holding([], progressing=False) == ()


def test_a_run_is_started_while_one_of_its_pods_runs_or_starts() -> None:
    from atlasrun.cluster.operator.health import started

    def pending(scheduled: bool) -> dict[str, Any]:
        condition = {
            "type": "PodScheduled",
            "status": str(scheduled),
            "reason": "" if scheduled else "Unschedulable",
        }
        return {"metadata": {"name": "p"}, "status": {"phase": "Pending", "conditions": [condition]}}

    assert started(3, [pending(False), pending(False)])  # one active pod is Running
    assert started(2, [pending(True), pending(False)])  # one is scheduled, its sidecars starting
    assert not started(2, [pending(False), pending(False)])  # nothing of the run got a node
    assert not started(0, [])


def test_a_run_whose_tasks_are_all_excluded_fails_with_a_reason() -> None:
    excluded = TasksObs(pin=PIN, excluded=(("t0", "needs server(s) not enabled: git"), ("t1", "rejected: x")))
    d = decide(snap(body(), excluded))
    assert d.phase == "Failed" and d.status["progress"] == "0/0"
    failed = condition(d.status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "NoRunnableTasks")
    assert "all 2 task(s) are excluded" in failed["message"] and "t0" in failed["message"]
    assert condition(d.status, "Complete")["status"] == "False"
    assert ("Warning", "NoRunnableTasks") in {(k, r) for k, r, _ in d.events}


# ---------------------------------------------------------------- several items per pod


def test_items_per_pod_counts_pods_for_jobs_and_budgets_items_for_progress() -> None:
    b = body(parallelism=4, per_job=5, cluster={"itemsPerPod": 2})
    d = decide(snap(b, tasks(10)))
    pods = {(c.model, c.index): (w, c.pods(2), len(c.items)) for c, w in d.create}
    # 10 items per model in chunks of 5 -> Jobs of 3 indexes (2+2+1 items); a: 3 pods, b: 1 pod
    assert pods == {("a", 0): (3, 3, 5), ("b", 0): (1, 3, 5)}
    status = applied({}, d)
    # a's chunk 0 ran indexes 0 and 2 (items 0,1 and 4); index 1 is running (2 items)
    live = dataclasses.replace(job("a", 0, size=3, parallelism=3), completed=frozenset({0, 2}), active=1)
    d = decide(snap(b, tasks(10), status, jobs=(live, job("b", 0, size=3, active=1))))
    a = d.status["models"]["a"]
    assert (a["total"], a["running"], a["pending"]) == (10, 2, 5)  # 3 items done, 2 running
    assert [(c.model, c.index, w) for c, w in d.create] == [("a", 1, 2)]  # the 2 free pods of a's budget
    # The finished Job: outcomes by item position (index 1 -> positions 2 and 3).
    outcomes = {p: outcome_from(scored(p != 3), "a", False) for p in range(5)}
    done = dataclasses.replace(
        live, completed=frozenset({0, 1, 2}), active=0, finished=True, outcomes=outcomes
    )
    d = decide(snap(b, tasks(10), status, jobs=(done, job("b", 0, size=3, active=1))))
    a = d.status["models"]["a"]
    assert (a["scored"], a["passed"], a["chunksDone"]) == (5, 4, "0") and len(d.accounted) == 5


# ---------------------------------------------------------------- scoredTasks: the n of the interval


def test_scored_tasks_counts_distinct_tasks_across_chunks_and_passes() -> None:
    """Three tasks x two repeats, one item per chunk: a task's repeats land in different chunks,
    counted in different passes; ``scoredTasks`` is the distinct tasks with a scored item, exact
    whatever the order, and the metrics read it as the interval's n."""
    b, t = body(per_job=1, repeats=2), tasks(3)
    chunks = plan_chunks(b, t.runnable)["a"]
    status = applied({}, decide(snap(b, t)))
    results = {("t0", 0): scored(), ("t0", 1): scored(False), ("t1", 0): scored()}
    results |= {("t1", 1): {"status": "error", "error_kind": "provider"}}
    results |= {("t2", 0): {"status": "error", "error_kind": "provider"}}
    results |= {("t2", 1): {"status": "excluded", "error_kind": "server_not_enabled"}}
    seen: list[int] = []
    for chunk in reversed(chunks):  # one finished Job per pass, last chunk first
        (item,) = chunk.items
        job_obs = finished("a", chunk.index, {0: outcome_from(results[item], "a", False)}, size=1)
        d = decide(snap(b, t, status=status, jobs=(job_obs,)))
        status = applied(status, d)
        seen.append(status["models"]["a"]["scoredTasks"])
        again = decide(snap(b, t, status=status, jobs=(dataclasses.replace(job_obs, deleting=True),)))
        assert again.status_patch == {} and not again.accounted  # counted once, no rewrite
    model = status["models"]["a"]
    assert (model["scored"], model["scoredTasks"], model["scoredTaskIndexes"]) == (3, 2, "0-1")
    assert seen == sorted(seen)  # monotone
