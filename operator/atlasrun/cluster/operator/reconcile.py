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

import datetime as dt
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from atlasrun.cluster.operator.outcomes import Outcome, outcome_of
from atlasrun.cluster.wire import usage
from atlasrun.cluster.wire.contract import (
    BLOCKED,
    COMPLETE,
    CONDITION_TYPES,
    FAILED,
    PROGRESSING,
    READY,
    Phase,
    TasksRef,
)
from atlasrun.cluster.wire.records import (
    Condition,
    ExcludedTask,
    ModelStatus,
    RunStatus,
    TasksStatus,
    status_dump,
    status_patch,
)
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import Catalog
from atlasrun.tasks.model import TaskLimits

record = outcome_of  # its former name, for importers outside cluster/ (tests/test_interval_agreement.py)
MAX_EXCLUDED_LISTED = 20
HEALTH_RECHECK_S = 20.0  # while pods wait (unschedulable, quota, image pull): look again this often
STORE_RECHECK_S = 30.0


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
    document: bytes | None = (
        None  # the document's bytes while its content-addressed copy (pin.uri) is missing
    )
    source_configmap: tuple[str, str] | None = None  # (ConfigMap, key) the pods mount (no object storage)
    limits: Mapping[str, TaskLimits] = field(default_factory=dict)  # per-task limits, by task id


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
    outcomes: Mapping[int, Outcome] | None = None  # finished Jobs: each item position's outcome
    outcomes_error: str | None = None  # why the outcomes could not be read (object store)
    cost: usage.PodCost = field(default_factory=usage.PodCost)  # finished Jobs: what their pods cost

    @property
    def remaining(self) -> int:
        return max(0, self.completions - len(self.completed) - len(self.failed_indexes))


@dataclass(frozen=True)
class Snapshot:
    """One observation of a run. ``status`` is parsed once, here: given as stored (a mapping with
    camelCase keys), it becomes a ``RunStatus``; a status this operator cannot read raises."""

    name: str
    uid: str
    generation: int
    body: RunSpecBody | None
    status: RunStatus
    now: str  # RFC 3339, for transitions
    problems: tuple[tuple[str, str], ...] = ()  # (reason, message): InvalidSpec, NoRunnerImage, UnpinnedImage
    tasks: TasksObs | None = None
    jobs: tuple[JobObs, ...] = ()
    health: tuple[tuple[str, str], ...] = ()  # pods waiting: Unschedulable, QuotaExceeded, ImagePullBackOff
    results_uri: str = ""
    inactive_workloads: tuple[str, ...] = ()  # Kueue Workloads of queued Jobs seen deactivated
    # What act needs to render the run's objects (decide reads none of it):
    namespace: str = ""
    # The AtlasRun's spec as the user wrote it (kube.AtlasRun's): leaves as the pods' run.yaml.
    spec: Mapping[str, Any] = field(default_factory=dict)
    catalog: Catalog | None = None
    runner_image: str | None = None

    def __post_init__(self) -> None:
        stored: object = self.status
        if not isinstance(stored, RunStatus):
            data = dict(stored) if isinstance(stored, Mapping) else {}
            object.__setattr__(self, "status", RunStatus.from_data(data, f"{self.name} status"))


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


@dataclass(frozen=True)
class Upload:
    """A content-addressed document to store before anything names it."""

    uri: str
    data: bytes


@dataclass
class Decision:
    """Everything a pass does, decided: ``act`` applies it and decides nothing."""

    observed: RunStatus = field(default_factory=RunStatus)  # the status the decision started from
    desired: RunStatus = field(default_factory=RunStatus)  # the whole desired status
    create: list[tuple[Chunk, int]] = field(default_factory=list)  # (chunk, parallelism)
    parallelism: dict[str, int] = field(default_factory=dict)  # Job name -> new parallelism
    suspend: list[str] = field(default_factory=list)
    resume: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # finished Jobs, once counted
    uploads: list[Upload] = field(default_factory=list)  # stored before the status names them
    reactivate: list[str] = field(default_factory=list)  # Kueue Workloads to activate (the run resumed)
    servers: tuple[str, ...] = ()  # the servers the run's network policy allows (its pods' sidecars)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (Normal|Warning, reason, message)
    accounted: list[Outcome] = field(default_factory=list)  # newly counted outcomes (metrics)
    requeue_after: float | None = None  # None: nothing to look at sooner than the resync
    phase: Phase = Phase.PENDING

    @functools.cached_property
    def status(self) -> dict[str, Any]:
        """The desired status as the API server stores it (camelCase, only the fields set): the
        JSON that leaves (status_dump)."""
        return status_dump(self.desired)

    @functools.cached_property
    def status_patch(self) -> dict[str, Any]:
        """The top-level fields whose dumped value differs from the observed one: empty, no write
        (the body of act's status patch: outgoing JSON)."""
        return status_patch(self.observed, self.desired)


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
    old = s.status
    d = Decision(observed=old)
    fields: dict[str, object] = {  # RunStatus's, validated at the end (_finish)
        "observed_generation": s.generation,
        "results_uri": s.results_uri or old.results_uri,
        "start_time": old.start_time or s.now,
    }
    blocked = list(s.problems)
    if not blocked and s.tasks is not None and s.tasks.error is not None:
        blocked.append(s.tasks.error)
    if blocked or s.body is None or s.tasks is None or s.tasks.pin is None:
        reason, message = blocked[0] if blocked else ("InvalidSpec", "the run could not be planned")
        d.phase = Phase.BLOCKED
        kept = ("progress", "running", "models", "pass_rates", "tasks")
        fields.update({k: getattr(old, k) for k in kept if k in old.model_fields_set})
        _finish(d, s, fields, blocked=(reason, message), done=False, failure=None)
        d.requeue_after = STORE_RECHECK_S if reason == "ObjectStoreUnavailable" else None
        return d

    body, tasks = s.body, s.tasks
    assert tasks.pin is not None
    plan = plan_chunks(body, tasks.runnable)
    fields["tasks"] = TasksStatus(
        **tasks.pin.model_dump(exclude_none=True), count=len(tasks.runnable), excluded=len(tasks.excluded)
    )
    fields["excluded_tasks"] = [
        ExcludedTask(task=t, reason=r) for t, r in tasks.excluded[:MAX_EXCLUDED_LISTED]
    ]
    if tasks.document is not None and not (old.tasks and old.tasks.sha256) and tasks.pin.uri:
        d.uploads.append(Upload(tasks.pin.uri, tasks.document))  # stored before the status pins it
    d.servers = tuple(sorted({server for task in tasks.runnable for server in task.servers}))
    task_index = {task.id: i for i, task in enumerate(tasks.runnable)}
    jobs: dict[str, dict[int, JobObs]] = {}
    for job in s.jobs:
        jobs.setdefault(job.model, {})[job.chunk] = job
    models: dict[str, ModelStatus] = {}
    remaining: dict[str, int] = {}
    live_of: dict[str, list[JobObs]] = {}
    waiting_on_store = None
    k = body.cluster.items_per_pod
    for model in body.models:
        name = model.name
        counts = _Counts.of(old.models.get(name) or ModelStatus())
        chunks = plan.get(name, [])
        for chunk_index, job in sorted(jobs.get(name, {}).items()):
            if chunk_index >= len(chunks):
                continue  # not this plan's (cannot happen with an immutable spec): left alone
            if chunk_index in counts.chunks_done:
                if not job.deleting:
                    d.delete.append(job.name)
                continue
            if not job.finished:
                continue
            if job.outcomes is None:
                waiting_on_store = job.outcomes_error or waiting_on_store
                continue
            for index, (task_id, _) in enumerate(chunks[chunk_index].items):
                outcome = job.outcomes.get(index) or outcome_of(None, name, True, job.failure)
                counts.fold(outcome, task_index.get(task_id))
                d.accounted.append(outcome)
            counts.usage = usage.fold_cost(counts.usage, job.cost)
            counts.chunks_done.add(chunk_index)
            d.delete.append(job.name)
        done_chunks = counts.chunks_done
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
        models[name] = counts.status(
            total=total,
            done=accounted + in_live + finished_unaccounted,
            running=running,
            excluded_plan=len(tasks.excluded) * body.repeats,
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
            parse_ranges(models[name].chunks_done),
            jobs.get(name, {}),
            k,
        )
    if body.cluster.queue_name and not suspended:
        d.reactivate = list(s.inactive_workloads)  # the run was resumed: Kueue admits them again

    total = sum(m.total for m in models.values())
    done = sum(m.total - m.pending - m.running for m in models.values())
    all_counted = all(len(parse_ranges(models[m].chunks_done)) == len(plan.get(m, [])) for m in models)
    fields.update(
        progress=f"{done}/{total}",
        running=sum(m.running for m in models.values()),
        models=models,
        pass_rates=" ".join(
            f"{n}={m.pass_rate:.2f}" if m.pass_rate is not None else f"{n}=-" for n, m in models.items()
        ),
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
    _finish(d, s, fields, blocked=health, done=all_counted, failure=failure)
    if health:
        d.requeue_after = STORE_RECHECK_S if health[0] == "ObjectStoreUnavailable" else HEALTH_RECHECK_S
    elif any(j.active > j.ready for js in live_of.values() for j in js) or any(
        j.active < min(j.parallelism, j.remaining) for js in live_of.values() for j in js if not j.suspended
    ):
        d.requeue_after = HEALTH_RECHECK_S  # pods not running yet: look for what holds them
    if d.create and not any(jobs.values()) and not any(m.chunks_done for m in old.models.values()):
        d.events.append(("Normal", "Started", f"created {len(d.create)} Job(s) for {total} work items"))
    return d


@dataclass
class _Counts:
    """A model's running totals while a pass folds newly counted chunks into them."""

    scored: int
    passed: int
    errored: int
    excluded_items: int
    coverage_sum: float
    usage: usage.ModelUsage
    chunks_done: set[int]
    scored_tasks: set[int]  # indexes of the runnable tasks with a scored item

    @classmethod
    def of(cls, prior: ModelStatus) -> _Counts:
        return cls(
            prior.scored,
            prior.passed,
            prior.errored,
            prior.excluded_items,
            prior.coverage_sum,
            prior.usage,
            parse_ranges(prior.chunks_done),
            parse_ranges(prior.scored_task_indexes),
        )

    def fold(self, outcome: Outcome, task: int | None) -> None:
        self.usage = usage.fold(self.usage, outcome.usage, outcome.error)
        if outcome.status == "scored":
            self.scored += 1
            self.passed += 1 if outcome.passed else 0
            if outcome.coverage is not None:
                self.coverage_sum = round(self.coverage_sum + outcome.coverage, 6)
            if task is not None:
                self.scored_tasks.add(task)
        elif outcome.status == "excluded":
            self.excluded_items += 1
        else:
            self.errored += 1

    def status(self, *, total: int, done: int, running: int, excluded_plan: int) -> ModelStatus:
        scored, passed = self.scored, self.passed
        return ModelStatus(
            total=total,
            pending=max(0, total - done - running),
            running=running,
            scored=scored,
            passed=passed,
            failed=scored - passed,
            excluded=excluded_plan + self.excluded_items,
            errored=self.errored,
            pass_rate=round(passed / scored, 4) if scored else None,
            mean_coverage=round(self.coverage_sum / scored, 4) if scored else None,
            coverage_sum=self.coverage_sum,
            excluded_items=self.excluded_items,
            chunks_done=format_ranges(self.chunks_done),
            scored_tasks=len(self.scored_tasks),
            scored_task_indexes=format_ranges(self.scored_tasks),
            usage=self.usage,
        )


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


def _failure(body: RunSpecBody, models: Mapping[str, ModelStatus]) -> tuple[str, str] | None:
    errored = sum(m.errored for m in models.values())
    finished = errored + sum(m.scored for m in models.values())
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


# ---------------------------------------------------------------- conditions and the status


def _finish(
    d: Decision,
    s: Snapshot,
    fields: dict[str, object],
    *,
    blocked: tuple[str, str] | None,
    done: bool,
    failure: tuple[str, str] | None,
) -> None:
    old, now = s.status, dt.datetime.fromisoformat(s.now)
    phase = d.phase
    fields["phase"] = phase
    if old.completion_time is not None:
        fields["completion_time"] = old.completion_time
    elif done:
        fields["completion_time"] = s.now
    progress = fields.get("progress", "")
    wanted = {
        BLOCKED: (True, *blocked) if blocked else (False, "NotBlocked", ""),
        FAILED: (True, *failure) if failure else (False, "NotFailed", ""),
        COMPLETE: (True, "AllItemsFinished", f"all {progress} work items finished")
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
    previous = {c.type: c for c in old.conditions}
    conditions = []
    for kind in CONDITION_TYPES:
        ok, reason, message = wanted[kind]
        value: Literal["True", "False"] = "True" if ok else "False"
        before = previous.get(kind)
        changed = before is None or before.status != value
        conditions.append(
            Condition(
                type=kind,
                status=value,
                reason=reason,
                message=message[:1000],
                last_transition_time=now
                if changed or before is None or before.last_transition_time is None
                else before.last_transition_time,
                observed_generation=s.generation,
            )
        )
        if changed and ok and kind in (BLOCKED, FAILED, COMPLETE):
            level = "Normal" if kind == COMPLETE else "Warning"
            text = message or reason
            if kind == COMPLETE:
                text = f"{message}; pass rates {fields.get('pass_rates', '')}"
            d.events.append((level, reason if kind != COMPLETE else "Completed", text))
    fields["conditions"] = conditions
    d.desired = RunStatus.model_validate(fields)  # the CRD's status schema
    if blocked is None and "tasks" in d.status_patch and not (old.tasks and old.tasks.sha256):
        pin = d.desired.tasks
        assert pin is not None
        d.events.append(
            ("Normal", "TasksPinned", f"{pin.count} task(s) pinned by sha256 {pin.sha256[:12]}...")
        )
