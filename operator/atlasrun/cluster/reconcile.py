"""The reconcile decision, as a pure function: ``decide(Snapshot) -> Decision``.

No API types, no I/O: ``observe.py`` builds the ``Snapshot`` (the run, its pinned tasks, its
Jobs with their completion indexes and, once finished, the outcome of each index's last
attempt), ``act.py`` applies the ``Decision``. A restarted operator reaches the same decision
from the same observations:

- The work plan is fixed by the (immutable) spec and the pinned task document: per model, items
  ``(task, repeat)`` ordered by repeat then task (tasks grouped by the servers they need), cut
  into chunks of ``cluster.itemsPerJob``; chunk ``c`` of model ``m`` is one Indexed Job, whose
  completion index ``i`` runs ``cluster.itemsPerPod`` items (``k``): positions ``i*k`` .. ``i*k+k-1``.
  A Job's ``completions``, ``parallelism`` and live-pod budgets count pods (indexes); progress
  and the counts count items.
- ``status.models[m].chunksDone`` (ranges, e.g. ``0-4,7``) lists the chunks already folded into
  the counts. A finished Job is folded and marked in one status write, and deleted only after it,
  so a chunk is counted exactly once; a chunk neither done nor live is (re)created (the runner
  skips items whose result is already stored, so a re-run chunk costs little).
- Live pods are bounded per model (``maxConcurrency``) and overall (``parallelism``) through
  each Job's ``parallelism``.
- The status is O(models); it is written only when it differs, and ``lastTransitionTime`` moves
  only when a condition's status does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from atlasrun.cluster import usage
from atlasrun.cluster.contract import (
    BLOCKED,
    COMPLETE,
    CONDITION_TYPES,
    FAILED,
    PROGRESSING,
    READY,
    Phase,
    TasksRef,
)
from atlasrun.cluster.records import TaskSummary, status_dump
from atlasrun.runspec.run import RunSpecBody
from atlasrun.scoring.result import ErrorKind

Record = dict[str, Any]  # compact outcome: s=status p=passed c=coverage w=wall m=model k=error kind r=reason
# u=usage (tokens, cost, tool errors, provider retries: usage.from_summary)
MAX_REASON = 200
MAX_EXCLUDED_LISTED = 20
RESYNC_S = 300.0  # the safety-net pass when nothing happens
HEALTH_RECHECK_S = 20.0  # while pods wait (unschedulable, quota, image pull): look again this often
STORE_RECHECK_S = 30.0
_COUNTERS = ("scored", "passed", "errored", "excludedItems", "coverageSum")


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class PlannedTask:
    id: str
    servers: tuple[str, ...] = ()  # the sidecars its pod needs


@dataclass(frozen=True)
class TasksObs:
    """The pinned task document as observed: runnable tasks in document order, exclusions."""

    pin: TasksRef | None = None
    runnable: tuple[PlannedTask, ...] = ()
    excluded: tuple[tuple[str, str], ...] = ()  # (task id, reason)
    error: tuple[str, str] | None = None  # (InvalidTasks | ObjectStoreUnavailable, message)


@dataclass(frozen=True)
class JobObs:
    """One of the run's Jobs (owned by the run: adopted by owner UID only)."""

    name: str
    model: str
    chunk: int
    completions: int
    parallelism: int
    active: int = 0
    ready: int = 0
    completed: frozenset[int] = frozenset()
    failed_indexes: frozenset[int] = frozenset()
    finished: bool = False
    suspended: bool = False
    deleting: bool = False
    failure: str | None = None  # the Failed condition's reason and message
    outcomes: Mapping[int, Record] | None = None  # finished Jobs: the last attempt of each index
    outcomes_error: str | None = None  # why the outcomes could not be read (object store)

    @property
    def remaining(self) -> int:
        return max(0, self.completions - len(self.completed) - len(self.failed_indexes))


@dataclass(frozen=True)
class Snapshot:
    name: str
    uid: str
    generation: int
    body: RunSpecBody | None
    status: Mapping[str, Any]
    now: str  # RFC 3339, for transitions
    problems: tuple[tuple[str, str], ...] = ()  # (reason, message): InvalidSpec, NoRunnerImage, UnpinnedImage
    tasks: TasksObs | None = None
    jobs: tuple[JobObs, ...] = ()
    health: tuple[tuple[str, str], ...] = ()  # pods waiting: Unschedulable, QuotaExceeded, ImagePullBackOff
    results_uri: str = ""


# ---------------------------------------------------------------- outputs


@dataclass(frozen=True)
class Chunk:
    model: str
    index: int
    items: tuple[tuple[str, int], ...]  # position -> (task id, repeat)
    servers: tuple[str, ...]

    def pods(self, per_pod: int) -> int:
        """Its Job's completions."""
        return -(-len(self.items) // per_pod)


def index_items(indexes: Iterable[int], per_pod: int, size: int) -> int:
    """How many of a chunk's ``size`` items the completion ``indexes`` cover."""
    return sum(max(0, min(per_pod, size - i * per_pod)) for i in indexes)


@dataclass
class Decision:
    create: list[tuple[Chunk, int]] = field(default_factory=list)  # (chunk, parallelism)
    parallelism: dict[str, int] = field(default_factory=dict)  # Job name -> new parallelism
    suspend: list[str] = field(default_factory=list)
    resume: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # finished Jobs, once counted
    status: dict[str, Any] = field(default_factory=dict)  # the whole desired status
    status_patch: dict[str, Any] = field(default_factory=dict)  # what differs: empty -> no write
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (Normal|Warning, reason, message)
    accounted: list[Record] = field(default_factory=list)  # newly counted outcomes (metrics)
    requeue_after: float = RESYNC_S
    phase: Phase = Phase.PENDING


# ---------------------------------------------------------------- records


def record(summary: TaskSummary | None, model: str, failed: bool, failure: str | None = None) -> Record:
    """The compact outcome of an item's last attempt: its termination summary, or, without one, an
    error (``job_failed``) when the attempt failed; a success without a summary is an error too."""
    if summary is not None:
        return {
            "s": summary.status,
            "p": summary.passed,
            "c": summary.coverage,
            "w": summary.wall_s,
            "m": model,
            "k": summary.error_kind if summary.status != "scored" else None,
            "r": _short(summary.reason),
            "u": usage.from_summary(summary.model_dump()),
        }
    reason = f"job failed: {failure or 'no termination message'}" if failed else "no result reported"
    return {
        "s": "error",
        "p": None,
        "c": None,
        "w": None,
        "m": model,
        "k": ErrorKind.JOB_FAILED.value,
        "r": _short(reason),
    }


def _short(text: Any) -> str | None:
    if text is None:
        return None
    out = str(text)
    return out if len(out) <= MAX_REASON else out[: MAX_REASON - 3] + "..."


# ---------------------------------------------------------------- ranges ("0-3,7")


def parse_ranges(text: str | None) -> set[int]:
    """Kubernetes' index ranges (``completedIndexes``) -> set; tolerant of empty text."""
    out: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def format_ranges(values: Iterable[int]) -> str:
    parts: list[str] = []
    run: list[int] = []
    for v in sorted(set(values)):
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [v]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


# ---------------------------------------------------------------- the plan


def plan_chunks(body: RunSpecBody, tasks: Sequence[PlannedTask]) -> dict[str, list[Chunk]]:
    """Every model's chunks (see the module docstring); deterministic."""
    return _plan(tuple(tasks), tuple(m.name for m in body.models), body.repeats, body.cluster.items_per_job)


@functools.lru_cache(maxsize=16)
def _plan(
    tasks: tuple[PlannedTask, ...], models: tuple[str, ...], repeats: int, per_job: int
) -> dict[str, list[Chunk]]:
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].servers, i))
    items = [(tasks[i], r) for r in range(repeats) for i in order]
    plan: dict[str, list[Chunk]] = {}
    for model in models:
        chunks = []
        for c, start in enumerate(range(0, len(items), per_job)):
            part = items[start : start + per_job]
            servers = tuple(sorted({s for t, _ in part for s in t.servers}))
            chunks.append(Chunk(model, c, tuple((t.id, r) for t, r in part), servers))
        plan[model] = chunks
    return plan


def budgets(body: RunSpecBody, remaining: Mapping[str, int]) -> dict[str, int]:
    """Live pods per model: ``parallelism`` shared round-robin, each capped by its
    ``maxConcurrency`` and its remaining items."""
    caps = {m.name: min(m.max_concurrency, remaining.get(m.name, 0)) for m in body.models}
    given = dict.fromkeys(caps, 0)
    left = body.parallelism
    while left > 0:
        moved = False
        for name in caps:
            if left and given[name] < caps[name]:
                given[name] += 1
                left -= 1
                moved = True
        if not moved:
            break
    return given


# ---------------------------------------------------------------- decide


def decide(s: Snapshot) -> Decision:
    d = Decision()
    old = dict(s.status or {})
    status: dict[str, Any] = {
        "observedGeneration": s.generation,
        "resultsURI": s.results_uri or old.get("resultsURI"),
        "startTime": old.get("startTime") or s.now,
    }
    blocked = list(s.problems)
    if not blocked and s.tasks is not None and s.tasks.error is not None:
        blocked.append(s.tasks.error)
    if blocked or s.body is None or s.tasks is None or s.tasks.pin is None:
        reason, message = blocked[0] if blocked else ("InvalidSpec", "the run could not be planned")
        d.phase = Phase.BLOCKED
        status.update(
            {k: old[k] for k in ("progress", "running", "models", "passRates", "tasks") if k in old}
        )
        _finish(d, s, old, status, blocked=(reason, message), done=False, failure=None)
        d.requeue_after = STORE_RECHECK_S if reason == "ObjectStoreUnavailable" else RESYNC_S
        return d

    body, tasks = s.body, s.tasks
    assert tasks.pin is not None
    plan = plan_chunks(body, tasks.runnable)
    status["tasks"] = {
        **tasks.pin.model_dump(exclude_none=True),
        "count": len(tasks.runnable),
        "excluded": len(tasks.excluded),
    }
    status["excludedTasks"] = [{"task": t, "reason": r} for t, r in tasks.excluded[:MAX_EXCLUDED_LISTED]]
    jobs: dict[str, dict[int, JobObs]] = {}
    for job in s.jobs:
        jobs.setdefault(job.model, {})[job.chunk] = job
    old_models: Mapping[str, Any] = old.get("models") or {}
    models: dict[str, dict[str, Any]] = {}
    remaining: dict[str, int] = {}
    live_of: dict[str, list[JobObs]] = {}
    waiting_on_store = None
    k = body.cluster.items_per_pod
    for model in body.models:
        name = model.name
        prior = old_models.get(name) or {}
        counts = {k: prior.get(k, 0) for k in _COUNTERS}
        counts["usage"] = prior.get("usage")
        done_chunks = parse_ranges(prior.get("chunksDone"))
        chunks = plan.get(name, [])
        for chunk_index, job in sorted(jobs.get(name, {}).items()):
            if chunk_index >= len(chunks):
                continue  # not this plan's (cannot happen with an immutable spec): left alone
            if chunk_index in done_chunks:
                if not job.deleting:
                    d.delete.append(job.name)
                continue
            if not job.finished:
                continue
            if job.outcomes is None:
                waiting_on_store = job.outcomes_error or waiting_on_store
                continue
            for index in range(len(chunks[chunk_index].items)):
                outcome = job.outcomes.get(index) or record(None, name, True, job.failure)
                _fold(counts, outcome)
                d.accounted.append(outcome)
            done_chunks.add(chunk_index)
            d.delete.append(job.name)
        live = [
            j
            for c, j in sorted(jobs.get(name, {}).items())
            if c < len(chunks) and c not in done_chunks and not j.finished and not j.deleting
        ]
        live_of[name] = live
        total = sum(len(c.items) for c in chunks)
        accounted = sum(len(chunks[c].items) for c in done_chunks if c < len(chunks))
        live_done = {
            j.name: index_items(j.completed | j.failed_indexes, k, len(chunks[j.chunk].items)) for j in live
        }
        in_live = sum(live_done.values())
        existing = jobs.get(name, {})
        finished_unaccounted = sum(
            len(chunks[j.chunk].items)
            for j in existing.values()
            if j.finished and j.chunk < len(chunks) and j.chunk not in done_chunks
        )
        remaining[name] = sum(j.remaining for j in live) + sum(
            c.pods(k) for c in chunks if c.index not in done_chunks and c.index not in existing
        )  # pods still to run
        running = sum(min(j.active * k, len(chunks[j.chunk].items) - live_done[j.name]) for j in live)
        models[name] = _model_status(
            counts,
            total=total,
            done=accounted + in_live + finished_unaccounted,
            running=running,
            excluded_plan=len(tasks.excluded) * body.repeats,
            chunks_done=done_chunks,
        )

    # Live pods: budgets, Job parallelism, new chunks, suspend/resume.
    suspended = body.cluster.suspend
    share = budgets(body, remaining)
    for model in body.models:
        name, live = model.name, live_of[model.name]
        if suspended:
            d.suspend += [j.name for j in live if not j.suspended]
            continue
        if not body.cluster.queue_name:  # with Kueue, Kueue unsuspends a Job once it admits it
            d.resume += [j.name for j in live if j.suspended]
        _fill(
            d,
            share[name],
            live,
            plan.get(name, []),
            parse_ranges(models[name]["chunksDone"]),
            jobs.get(name, {}),
            k,
        )

    total = sum(m["total"] for m in models.values())
    done = sum(m["total"] - m["pending"] - m["running"] for m in models.values())
    all_counted = all(len(parse_ranges(models[m]["chunksDone"])) == len(plan.get(m, [])) for m in models)
    status.update(
        {
            "progress": f"{done}/{total}",
            "running": sum(m["running"] for m in models.values()),
            "models": models,
            "passRates": " ".join(
                f"{n}={m['passRate']:.2f}" if m["passRate"] is not None else f"{n}=-"
                for n, m in models.items()
            ),
        }
    )
    failure = _failure(body, models) if all_counted else None
    if not tasks.runnable:  # every task excluded: nothing can ever run (servers are immutable)
        first = tasks.excluded[0] if tasks.excluded else ("", "no tasks")
        failure = (
            "NoRunnableTasks",
            f"all {len(tasks.excluded)} task(s) are excluded, e.g. {first[0]}: {first[1]} (status.excludedTasks)",
        )
    health = s.health[0] if s.health and not all_counted else None
    if waiting_on_store and not health:
        health = ("ObjectStoreUnavailable", f"cannot read finished items' results: {waiting_on_store}")
    if suspended and not all_counted:
        d.phase = Phase.SUSPENDED
    elif all_counted:
        d.phase = Phase.FAILED if failure else Phase.SUCCEEDED
    elif health:
        d.phase = Phase.BLOCKED
    else:
        any_live = any(live_of.values()) or d.create
        d.phase = Phase.RUNNING if (done or any_live) else Phase.PENDING
    _finish(d, s, old, status, blocked=health, done=all_counted, failure=failure)
    if health:
        d.requeue_after = STORE_RECHECK_S if health[0] == "ObjectStoreUnavailable" else HEALTH_RECHECK_S
    elif any(j.active > j.ready for js in live_of.values() for j in js) or any(
        j.active < min(j.parallelism, j.remaining) for js in live_of.values() for j in js if not j.suspended
    ):
        d.requeue_after = HEALTH_RECHECK_S  # pods not running yet: look for what holds them
    if (
        d.create
        and not any(jobs.values())
        and not any(parse_ranges(m.get("chunksDone")) for m in old_models.values())
    ):
        d.events.append(("Normal", "Started", f"created {len(d.create)} Job(s) for {total} work items"))
    return d


def _fold(counts: dict[str, Any], outcome: Record) -> None:
    counts["usage"] = usage.fold(counts.get("usage"), outcome)
    state = outcome.get("s")
    if state == "scored":
        counts["scored"] += 1
        counts["passed"] += 1 if outcome.get("p") else 0
        if outcome.get("c") is not None:
            counts["coverageSum"] = round(counts["coverageSum"] + float(outcome["c"]), 6)
    elif state == "excluded":
        counts["excludedItems"] += 1
    else:
        counts["errored"] += 1


def _model_status(
    counts: Mapping[str, Any],
    *,
    total: int,
    done: int,
    running: int,
    excluded_plan: int,
    chunks_done: set[int],
) -> dict[str, Any]:
    scored, passed = int(counts["scored"]), int(counts["passed"])
    return {
        "total": total,
        "pending": max(0, total - done - running),
        "running": running,
        "scored": scored,
        "passed": passed,
        "failed": scored - passed,
        "excluded": excluded_plan + int(counts["excludedItems"]),
        "errored": int(counts["errored"]),
        "passRate": round(passed / scored, 4) if scored else None,
        "meanCoverage": round(float(counts["coverageSum"]) / scored, 4) if scored else None,
        "coverageSum": counts["coverageSum"],
        "excludedItems": int(counts["excludedItems"]),
        "chunksDone": format_ranges(chunks_done),
        "usage": usage.ModelUsage.model_validate(counts.get("usage") or {}).model_dump(by_alias=True),
    }


def _fill(
    d: Decision,
    budget: int,
    live: list[JobObs],
    chunks: list[Chunk],
    done_chunks: set[int],
    existing: Mapping[int, JobObs],
    per_pod: int = 1,
) -> None:
    """Fit the model's live Jobs' parallelism to ``budget``; spare room starts the next chunks."""
    use = [min(j.parallelism, j.remaining) for j in live]
    excess = sum(use) - budget
    if excess > 0:
        for j, u in reversed(list(zip(live, use, strict=True))):
            cut = min(excess, u)
            if cut:
                d.parallelism[j.name] = u - cut
                excess -= cut
        return
    spare = -excess
    for chunk in chunks:
        if spare <= 0:
            break
        if chunk.index in done_chunks or chunk.index in existing:
            continue
        width = min(chunk.pods(per_pod), spare)
        d.create.append((chunk, width))
        spare -= width
    for j in live:
        if spare <= 0:
            break
        want = j.remaining - j.parallelism
        if want > 0:
            add = min(want, spare)
            d.parallelism[j.name] = j.parallelism + add
            spare -= add


def _failure(body: RunSpecBody, models: Mapping[str, Mapping[str, Any]]) -> tuple[str, str] | None:
    errored = sum(int(m["errored"]) for m in models.values())
    finished = errored + sum(int(m["scored"]) for m in models.values())
    if not errored:
        return None
    if errored == finished:
        return "AllItemsErrored", f"all {errored} work items ended in an error"
    limit = body.max_error_rate
    if limit is not None and errored / finished > limit:
        return (
            "ErrorRateExceeded",
            f"{errored}/{finished} work items ended in an error ({errored / finished:.1%}), "
            f"more than spec.maxErrorRate {limit:.1%}",
        )
    return None


# ---------------------------------------------------------------- conditions and the patch


def _finish(
    d: Decision,
    s: Snapshot,
    old: Mapping[str, Any],
    status: dict[str, Any],
    *,
    blocked: tuple[str, str] | None,
    done: bool,
    failure: tuple[str, str] | None,
) -> None:
    phase = d.phase
    status["phase"] = phase
    if done and not old.get("completionTime"):
        status["completionTime"] = s.now
    elif old.get("completionTime"):
        status["completionTime"] = old["completionTime"]
    wanted = {
        BLOCKED: (True, *blocked) if blocked else (False, "NotBlocked", ""),
        FAILED: (True, *failure) if failure else (False, "NotFailed", ""),
        COMPLETE: (True, "AllItemsFinished", f"all {status.get('progress', '')} work items finished")
        if done and not failure
        else (False, "Failed" if failure else "ItemsRemaining", ""),
        PROGRESSING: (
            phase in (Phase.RUNNING, Phase.PENDING),
            str(phase) if phase != Phase.BLOCKED else blocked[0] if blocked else str(phase),
            "",
        ),
        READY: (not blocked and not failure, str(phase) if not blocked else blocked[0], ""),
    }
    if done:
        wanted[PROGRESSING] = (False, "Finished", "")
    previous = {c.get("type"): c for c in old.get("conditions") or []}
    conditions = []
    for kind in CONDITION_TYPES:
        ok, reason, message = wanted[kind]
        value = "True" if ok else "False"
        before = previous.get(kind) or {}
        changed = before.get("status") != value
        conditions.append(
            {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message[:1000],
                "lastTransitionTime": s.now
                if changed or not before.get("lastTransitionTime")
                else before["lastTransitionTime"],
                "observedGeneration": s.generation,
            }
        )
        if changed and ok and kind in (BLOCKED, FAILED, COMPLETE):
            level = "Normal" if kind == COMPLETE else "Warning"
            text = message or reason
            if kind == COMPLETE:
                text = f"{message}; pass rates {status.get('passRates', '')}"
            d.events.append((level, reason if kind != COMPLETE else "Completed", text))
    status["conditions"] = conditions
    d.status = status = status_dump(status)  # validated against records.RunStatus (the CRD's schema)
    d.status_patch = {k: v for k, v in status.items() if old.get(k) != v}
    if blocked is None and "tasks" in d.status_patch and not (old.get("tasks") or {}).get("sha256"):
        pin = status["tasks"]
        d.events.append(
            ("Normal", "TasksPinned", f"{pin['count']} task(s) pinned by sha256 {pin['sha256'][:12]}...")
        )
