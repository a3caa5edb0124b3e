"""Exactly-once counting, as a property: whatever order the operator sees the cluster in, every
work item is counted once, the counts never go back, and nothing is written when nothing changed.

The event model (hypothesis draws a sequence of these steps, then the run is driven to its end):

- ``progress``: in the cluster, a completion index of a live Job finishes: its result is stored in
  object storage and its pod's termination message holds the item's ``TaskSummary``.
- ``sync``: the operator's Job cache (the informer) catches up with some Jobs only: watch events
  can be late, lost or reordered, so the cache may show a Job as it was several steps ago, miss a
  new one, or still show a deleted one.
- ``pass``: one observe -> decide -> act pass on the cached Jobs and the status last seen (maybe
  stale). The real ``decide``; act's write protocol: the status patch carries the resourceVersion
  the pass read (a stale one is refused with 409 and nothing else is written), then counted Jobs
  are deleted and new chunks created (an existing name is a 409, ignored).
- ``duplicate``: the same pass again on the same observation (a duplicated event).
- ``restart``: the operator restarts: its cache and status are gone, and LISTed afresh.
- ``gc_pods``: the finished pods of a Job are gone: its items' outcomes are only in object storage.
- ``delete_job``: someone deletes a Job, before or after the operator counted it.

The outcomes of a finished Job's items are read as ``observe`` reads them: the pod's termination
message when the pod is there, else the stored result; both are ``TaskSummary`` parsed with the
operator's own reader. The cluster itself (Job controller, pods, S3) is simulated in memory: the
property is about the operator's counting, which must hold for every interleaving, far more than a
real control plane can enumerate (tests/cluster/test_operator_scenarios.py runs the real one).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atlasrun.cluster.operator.outcomes import Outcome, outcome_of
from atlasrun.cluster.operator.reconcile import (
    Chunk,
    JobObs,
    PlannedTask,
    Snapshot,
    TasksObs,
    decide,
    parse_ranges,
)
from atlasrun.cluster.wire.contract import TasksRef
from atlasrun.cluster.wire.records import read_summary
from atlasrun.runspec.run import RunSpecBody

SHA = "cd" * 32
PIN = TasksRef(sha256=SHA, uri=f"s3://results/p/tasks/{SHA}", name="tasks.yaml")
COUNTERS = ("scored", "passed", "errored", "excludedItems", "coverageSum")
STEPS = ("progress", "sync", "pass", "duplicate", "restart", "gc_pods", "delete_job")


@dataclass
class ClusterJob:
    chunk: Chunk
    done: set[int] = field(default_factory=set)  # completion indexes finished (one item per index)
    pods: bool = True  # the finished pods (their termination messages) still exist

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.chunk.items)


@dataclass
class Cluster:
    """The API server, Job controller, pods and object storage, in memory."""

    truth: dict[tuple[str, str, int], dict[str, Any]]  # (model, task, repeat) -> its summary
    jobs: dict[str, ClusterJob] = field(default_factory=dict)
    stored: dict[tuple[str, str, int], str] = field(default_factory=dict)  # S3: the result JSON
    status: dict[str, Any] = field(default_factory=dict)
    rv: int = 1


@dataclass
class Operator:
    cache: dict[str, ClusterJob] = field(default_factory=dict)  # the Job informer: maybe stale
    seen_rv: int = 0
    seen_status: dict[str, Any] = field(default_factory=dict)
    counted: list[Outcome] = field(default_factory=list)  # what act reported to the metrics
    writes: int = 0


def copy_job(job: ClusterJob) -> ClusterJob:
    return ClusterJob(job.chunk, set(job.done), job.pods)


def job_name(chunk: Chunk) -> str:
    return f"{chunk.model}-c{chunk.index}"


def observe(cluster: Cluster, op: Operator, body: RunSpecBody, tasks: TasksObs, now: str) -> Snapshot:
    jobs = []
    for name, cached in sorted(op.cache.items()):
        obs = JobObs(
            name=name,
            model=cached.chunk.model,
            chunk=cached.chunk.index,
            completions=len(cached.chunk.items),
            parallelism=len(cached.chunk.items),
            active=len(cached.chunk.items) - len(cached.done),
            ready=len(cached.chunk.items) - len(cached.done),
            completed=frozenset(cached.done),
            finished=cached.finished,
        )
        if cached.finished:  # its outcomes, read now: the pods if still there, else the stored results
            live = cluster.jobs.get(name)
            outcomes: dict[int, Outcome] = {}
            for position, (task, repeat) in enumerate(cached.chunk.items):
                key = (cached.chunk.model, task, repeat)
                message = (
                    json.dumps(cluster.truth[key])
                    if live is not None and live.pods
                    else cluster.stored.get(key)
                )
                summary = read_summary(message, "pod") if message is not None else None
                outcomes[position] = outcome_of(summary, cached.chunk.model, failed=False)
            obs = JobObs(**{**obs.__dict__, "outcomes": outcomes})
        jobs.append(obs)
    return Snapshot(
        name="r", uid="u", generation=1, body=body, status=op.seen_status, now=now, tasks=tasks,
        jobs=tuple(jobs), results_uri="s3://results/p/r/",
    )  # fmt: skip


def run_pass(cluster: Cluster, op: Operator, body: RunSpecBody, tasks: TasksObs, now: str) -> None:
    before = dict(cluster.status)
    snapshot = observe(cluster, op, body, tasks, now)
    d = decide(snapshot)
    if d.status_patch:
        if op.seen_rv != cluster.rv:  # 409: the run changed since it was read; act writes nothing
            op.seen_rv, op.seen_status = cluster.rv, json.loads(json.dumps(cluster.status))
            return
        cluster.status = {**cluster.status, **json.loads(json.dumps(d.status_patch))}
        cluster.rv += 1
        op.seen_rv, op.seen_status = cluster.rv, json.loads(json.dumps(cluster.status))
        op.writes += 1
        assert_monotone(before, cluster.status)
    again = decide(dataclasses.replace(snapshot, status=op.seen_status))  # the same observation
    assert again.status_patch == {} and not again.accounted, again.status_patch  # no second write
    op.counted += d.accounted
    for name in d.delete:
        cluster.jobs.pop(name, None)
        op.cache.pop(name, None)
    for chunk, _ in d.create:
        name = job_name(chunk)
        if name not in cluster.jobs:
            cluster.jobs[name] = ClusterJob(chunk)
        op.cache[name] = copy_job(cluster.jobs[name])


def assert_monotone(before: dict[str, Any], after: dict[str, Any]) -> None:
    for name, model in (before.get("models") or {}).items():
        new = after["models"][name]
        for counter in COUNTERS:
            assert new.get(counter, 0) >= model.get(counter, 0), (name, counter)
        for ranges in ("chunksDone", "scoredTaskIndexes"):
            assert parse_ranges(new.get(ranges)) >= parse_ranges(model.get(ranges)), (name, ranges)


def summaries(model: str, repeat: int, task: str, kind: int) -> dict[str, Any]:
    summary: dict[str, Any] = [
        {"status": "scored", "passed": True, "coverage": 1.0},
        {"status": "scored", "passed": False, "coverage": 0.5},
        {"status": "error", "error_kind": "provider", "reason": "429"},
        {"status": "excluded", "error_kind": "server_not_enabled"},
    ][kind]
    return {**summary, "task": task, "model": model, "repeat": repeat, "wall_s": 1.0, "tool_calls": 2}


@st.composite
def runs(draw: st.DrawFn) -> tuple[RunSpecBody, TasksObs, Cluster]:
    models = ["a", "b"][: draw(st.integers(1, 2))]
    n_tasks, repeats = draw(st.integers(1, 4)), draw(st.integers(1, 2))
    body = RunSpecBody.model_validate(
        {
            "tasks": {"configMap": "tasks"},
            "repeats": repeats,
            "parallelism": 100,
            "models": [{"name": m, "maxConcurrency": 100} for m in models],
            "cluster": {"itemsPerJob": draw(st.integers(1, 3))},
            "output": {"bucket": "results", "prefix": "p"},
        }
    )
    tasks = TasksObs(pin=PIN, runnable=tuple(PlannedTask(f"t{i}", ("calculator",)) for i in range(n_tasks)))
    kinds = st.integers(0, 3)
    truth = {
        (m, f"t{i}", r): summaries(m, r, f"t{i}", draw(kinds))
        for m in models
        for i in range(n_tasks)
        for r in range(repeats)
    }
    return body, tasks, Cluster(truth)


def exercise(data: st.DataObject) -> None:
    body, tasks, cluster = data.draw(runs())
    op = Operator()
    clock = iter(f"2026-01-01T00:{m:02d}:{s:02d}Z" for m in range(60) for s in range(60))
    for step in data.draw(st.lists(st.sampled_from(STEPS), max_size=40)):
        names = sorted(cluster.jobs)
        if step == "progress" and names:
            job = cluster.jobs[data.draw(st.sampled_from(names))]
            todo = [i for i in range(len(job.chunk.items)) if i not in job.done]
            if todo:
                index = data.draw(st.sampled_from(todo))
                task, repeat = job.chunk.items[index]
                key = (job.chunk.model, task, repeat)
                cluster.stored[key] = json.dumps(cluster.truth[key])  # stored, then the pod ends
                job.done.add(index)
        elif step == "sync" and (names or op.cache):
            for name in data.draw(st.sets(st.sampled_from(sorted(set(names) | set(op.cache))))):
                if name in cluster.jobs:
                    op.cache[name] = copy_job(cluster.jobs[name])
                else:
                    op.cache.pop(name, None)  # the delete event arrived
        elif step in ("pass", "duplicate"):
            now = next(clock)
            run_pass(cluster, op, body, tasks, now)
            if step == "duplicate":
                run_pass(cluster, op, body, tasks, now)
        elif step == "restart":
            op.cache = {n: copy_job(j) for n, j in cluster.jobs.items()}  # LISTed afresh
            op.seen_rv, op.seen_status = cluster.rv, json.loads(json.dumps(cluster.status))
        elif step == "gc_pods" and names:
            cluster.jobs[data.draw(st.sampled_from(names))].pods = False
        elif step == "delete_job" and names:
            del cluster.jobs[data.draw(st.sampled_from(names))]

    for _ in range(50):  # the cluster runs every Job to its end; the watch delivers everything
        for job in cluster.jobs.values():
            for index, (task, repeat) in enumerate(job.chunk.items):
                cluster.stored[(job.chunk.model, task, repeat)] = json.dumps(
                    cluster.truth[(job.chunk.model, task, repeat)]
                )
                job.done.add(index)
        op.cache = {n: copy_job(j) for n, j in cluster.jobs.items()}
        run_pass(cluster, op, body, tasks, next(clock))
        if cluster.status.get("phase") in ("Succeeded", "Failed") and not cluster.jobs:
            break
    assert cluster.status["phase"] in ("Succeeded", "Failed"), cluster.status.get("progress")

    for model in body.models:  # every item counted exactly once, with its own outcome
        truth = [s for (m, _, _), s in cluster.truth.items() if m == model.name]
        counted = [o for o in op.counted if o.model == model.name]
        assert len(counted) == len(truth)
        status = cluster.status["models"][model.name]
        scored = [s for s in truth if s["status"] == "scored"]
        assert status["scored"] == len(scored) and status["passed"] == sum(1 for s in scored if s["passed"])
        assert status["errored"] == sum(1 for s in truth if s["status"] == "error")
        assert status["excludedItems"] == sum(1 for s in truth if s["status"] == "excluded")
        assert status["scoredTasks"] == len({(s["task"]) for s in scored})
        assert status["usage"]["toolCalls"] == 2 * len(truth)
    writes = op.writes
    run_pass(cluster, op, body, tasks, next(clock))  # a finished run, observed again: no write
    assert op.writes == writes


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_item_is_counted_exactly_once_whatever_the_event_order(data: st.DataObject) -> None:
    exercise(data)


@pytest.mark.heavy
@settings(max_examples=5000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_item_is_counted_exactly_once_long(data: st.DataObject) -> None:
    exercise(data)
