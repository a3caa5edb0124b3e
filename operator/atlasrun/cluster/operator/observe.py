"""Observe: one read-only snapshot of a run for ``reconcile.decide``.

Reads the run (as the watch delivered it), its pinned task document (once per process: cached by
digest), its Jobs (from the namespace's Job informer, ``informer.py``; before its first LIST, or
without informers, one LIST by label; only Jobs whose ownerReference is this run's UID are
adopted), the pods of finished Jobs not yet counted (from the finished-pod informer; a Job whose
attempts are not all there yet, one LIST of its pods: the last attempt of each completion index,
its termination message, else the stored result in object storage) and, only while pods wait,
the latest answer of what holds them (``health.py``, looked up off the pass).
The API's objects are read as the typed views of ``kube.py`` (cast once, where they enter: the
API reader, the informers' caches, the run as main.py holds it).
Nothing here writes: a new task document missing from object storage is handed to ``decide``
(``TasksObs.document``), which tells ``act`` to store it. The run's status is parsed once, into
``Snapshot.status`` (a ``RunStatus``); each item's outcome once, into an ``outcomes.Outcome``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from atlasrun.cluster.operator import kube
from atlasrun.cluster.operator.egress import declared_egress
from atlasrun.cluster.operator.health import PodHealth
from atlasrun.cluster.operator.images import cluster_catalog, cluster_spec_problems, unpinned_images
from atlasrun.cluster.operator.informer import Informers, complete
from atlasrun.cluster.operator.manifests import TASKS_DIR, label_value, run_labels
from atlasrun.cluster.operator.outcomes import Outcome, outcome_of
from atlasrun.cluster.operator.policy import blocked, check
from atlasrun.cluster.operator.queueing import (
    WorkloadReader,
    inactive,
    pending,
    with_default_queue,
)
from atlasrun.cluster.operator.reconcile import JobObs, PlannedTask, Snapshot, TasksObs, parse_ranges
from atlasrun.cluster.operator.settings import OperatorSettings
from atlasrun.cluster.wire.contract import (
    ANNOTATION_INDEX,
    ANNOTATION_MODEL,
    ENV_WORK_UNIT,
    LABEL_CHUNK,
    LABEL_JOB_NAME,
    LABEL_RUN,
    RUNNER,
    ChunkPlan,
    PlanRef,
    TasksRef,
    WorkUnit,
)
from atlasrun.cluster.wire.records import RunStatus, TasksStatus, TaskSummary, read_summary
from atlasrun.cluster.wire.sidecars import sidecar_servers
from atlasrun.cluster.wire.store import (
    S3Results,
    StoreError,
    parse_s3_uri,
    read_plan,
    results_uri,
    split_object_uri,
    tasks_uri,
)
from atlasrun.cluster.wire.usage import PodCost
from atlasrun.errors import AtlasError, format_validation
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import Catalog
from atlasrun.servers.selection import task_servers
from atlasrun.tasks.loader import load_tasks
from atlasrun.tasks.model import TaskLimits

MAX_STORES = 16  # object-store clients kept (one per location read)


class ApiReader:
    """The reads observe makes, as plain JSON (the client's model classes cost seconds per
    thousand objects), typed as the views of ``kube.py``."""

    def __init__(self) -> None:
        from kubernetes import client

        self.core, self.batch = client.CoreV1Api(), client.BatchV1Api()

    def list(self, kind: str, namespace: str, **params: Any) -> list[dict[str, Any]]:
        """A LIST's items as the API server sent them: Kubernetes objects enter here (``jobs`` and
        ``pods`` view them; health.py reads Pending pods and Events raw)."""
        call = {
            "jobs": self.batch.list_namespaced_job,
            "pods": self.core.list_namespaced_pod,
            "events": self.core.list_namespaced_event,
        }[kind]
        response = call(namespace, _preload_content=False, **params)
        return list(json.loads(response.data).get("items") or [])

    def jobs(self, namespace: str, **params: Any) -> Sequence[kube.Job]:
        return kube.jobs(self.list("jobs", namespace, **params))

    def pods(self, namespace: str, **params: Any) -> Sequence[kube.Pod]:
        return kube.pods(self.list("pods", namespace, **params))

    def config_map(self, namespace: str, name: str) -> kube.ConfigMap:
        response = self.core.read_namespaced_config_map(name, namespace, _preload_content=False)
        return kube.config_map(dict(json.loads(response.data)))


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Observer:
    """Builds snapshots; keeps only caches that a restart may lose (parsed task documents)."""

    def __init__(
        self,
        api: ApiReader | None = None,
        settings: OperatorSettings | None = None,
        store: Callable[[str], S3Results] | None = None,
        workloads: WorkloadReader | None = None,
        informers: Informers | None = None,
    ) -> None:
        self.api = api or ApiReader()
        self.workloads = workloads or WorkloadReader()
        self.settings = settings or OperatorSettings()
        self.informers = informers  # None: every pass LISTs the run's Jobs and finished pods
        self.health = PodHealth(self.api)
        self._store = store
        self._tasks: dict[tuple[str, str], TasksObs] = {}  # (run uid, sha256) -> parsed
        self._plans: dict[str, ChunkPlan] = {}  # sha256 -> a chunk's plan
        self._stores: dict[str, S3Results] = {}  # location -> client
        self._stores_lock = threading.Lock()

    def store(self, uri: str) -> S3Results:
        """One client per location, shared by the worker threads (a boto3 client costs ~10 MB)."""
        if self._store is not None:
            return self._store(uri)
        with self._stores_lock:
            store = self._stores.get(uri)
            if store is None:
                try:
                    store = S3Results(uri, self.settings.s3_endpoint, attempts=3, backoff_s=0.5)
                except AtlasError as exc:  # e.g. the operator has no credentials: the store is unusable
                    raise StoreError(f"object storage is not usable by the operator: {exc}") from exc
                if len(self._stores) >= MAX_STORES:
                    self._stores.clear()
                self._stores[uri] = store
            return store

    # ------------------------------------------------------------------ the snapshot

    def snapshot(self, run: kube.AtlasRun) -> Snapshot:
        meta = run["metadata"]
        name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
        spec = dict(run.get("spec") or {})
        base = Snapshot(
            name=name,
            uid=uid,
            namespace=namespace,
            generation=int(meta.get("generation") or 0),
            spec=spec,
            now=now(),
            body=None,
            status=RunStatus(),
        )
        try:
            status = RunStatus.from_data(dict(run.get("status") or {}), f"AtlasRun {namespace}/{name} status")
        except ValueError as exc:  # not ours to fix: counting on top of it would lose counts
            problem = ("InvalidStatus", f"the run's status cannot be read: {exc}")
            return dataclasses.replace(base, problems=(problem,))
        base = dataclasses.replace(base, status=status)
        try:
            body = RunSpecBody.model_validate(spec)
        except ValidationError as exc:
            return dataclasses.replace(base, problems=(("InvalidSpec", format_validation(exc)),))
        if unsupported := cluster_spec_problems(body):
            return dataclasses.replace(base, problems=(("InvalidSpec", "; ".join(unsupported)),))
        body = with_default_queue(body, self.settings.default_queue)
        base = dataclasses.replace(base, body=body, results_uri=results_uri(body, name))
        refused = blocked(check(body, self.settings.policy, namespace))
        if refused:
            return dataclasses.replace(base, problems=(refused,))
        try:  # the NetworkPolicy is derived from these: a bad apiBase blocks here, not in act
            declared_egress(body, [], self.settings.s3_endpoint)
        except AtlasError as exc:
            return dataclasses.replace(base, problems=(("InvalidSpec", str(exc)),))
        catalog = cluster_catalog(body)
        runner_image = body.cluster.runner_image or self.settings.runner_image
        base = dataclasses.replace(base, catalog=catalog, runner_image=runner_image)
        if not runner_image:
            problem = ("NoRunnerImage", "set spec.cluster.runnerImage (or the operator's default)")
            return dataclasses.replace(base, problems=(problem,))
        unpinned = unpinned_images(body, catalog, runner_image=runner_image)
        if unpinned and not body.cluster.allow_unpinned_images:
            message = (
                f"images must be pinned by digest (name@sha256:...): {', '.join(unpinned)}; "
                "set spec.cluster.allowUnpinnedImages to accept tags"
            )
            return dataclasses.replace(base, problems=(("UnpinnedImage", message),))
        tasks = self._tasks_obs(body, catalog, namespace, uid, status)
        if tasks.error:
            return dataclasses.replace(base, tasks=tasks)
        jobs = self._jobs(namespace, name, uid, status)
        health = self.health.check(namespace, name, jobs)
        queued = [j.name for j in jobs if j.suspended and not j.finished and not j.deleting]
        deactivated: tuple[str, ...] = ()
        if body.cluster.queue_name and queued and not body.cluster.suspend:
            workloads = self.workloads.list(namespace)
            deactivated = tuple(inactive(workloads, queued))  # decide reactivates them (resumed)
            waiting = None if deactivated else pending(workloads, queued)  # Kueue has not admitted them
            health = (waiting, *health) if waiting else health
        return dataclasses.replace(
            base, tasks=tasks, jobs=tuple(jobs), health=health, inactive_workloads=deactivated
        )

    def forget(self, uid: str, key: str) -> None:
        """Drop what is cached for a deleted run (``key``: namespace/name)."""
        for cached in [k for k in self._tasks if k[0] == uid]:
            del self._tasks[cached]
        self.health.forget(key)

    # ------------------------------------------------------------------ tasks

    def _tasks_obs(
        self, body: RunSpecBody, catalog: Catalog, namespace: str, uid: str, status: RunStatus
    ) -> TasksObs:
        """The pinned task document; before it is pinned, with its bytes if its content-addressed
        copy is not in object storage yet (one read per pass until the pin is written)."""
        obs = self._load_tasks(body, catalog, namespace, uid, status.tasks)
        if obs.document is None or obs.pin is None or not obs.pin.uri:
            return obs
        parent, key = split_object_uri(obs.pin.uri, "status.tasks.uri")
        try:
            present = self.store(parent).read_bytes(key) is not None
        except (StoreError, AtlasError) as exc:
            return TasksObs(error=("ObjectStoreUnavailable", f"cannot store the task document: {exc}"))
        return dataclasses.replace(obs, document=None) if present else obs

    def _load_tasks(
        self, body: RunSpecBody, catalog: Catalog, namespace: str, uid: str, pinned: TasksStatus | None
    ) -> TasksObs:
        digest = pinned.sha256 if pinned is not None and pinned.sha256 else None
        if digest and (uid, digest) in self._tasks:
            return self._tasks[(uid, digest)]
        try:
            name, data, configmap = self._read_source(body, namespace, pinned if digest else None)
        except StoreError as exc:
            return TasksObs(error=("ObjectStoreUnavailable", str(exc)))
        except AtlasError as exc:
            return TasksObs(error=("InvalidTasks", str(exc)))
        except Exception as exc:  # the API (ConfigMap read): missing, forbidden
            status = getattr(exc, "status", None)
            if status is None:
                raise
            return TasksObs(error=("InvalidTasks", f"cannot read the tasks: {exc.reason}"))  # type: ignore[attr-defined]
        sha = hashlib.sha256(data).hexdigest()
        if digest and sha != digest:
            message = f"the task document changed since the run pinned it (sha256 {digest[:12]}..., now {sha[:12]}...)"
            return TasksObs(error=("InvalidTasks", message))
        if body.output.bucket:
            ref = TasksRef(sha256=sha, uri=tasks_uri(body, sha), name=name)
            configmap = None
        elif configmap:
            ref = TasksRef(sha256=sha, path=f"{TASKS_DIR}/{name}", name=name)
        else:
            ref = TasksRef(sha256=sha, uri=body.tasks.uri, name=name)
        try:
            runnable, excluded, limits = _parse(body, catalog, name, data)
        except AtlasError as exc:
            return TasksObs(error=("InvalidTasks", str(exc)))
        if not runnable and not excluded:
            return TasksObs(error=("InvalidTasks", "the task document has no tasks"))
        upload = bool(body.output.bucket) and not digest
        obs = TasksObs(
            ref,
            tuple(runnable),
            tuple(excluded),
            document=data if upload else None,
            source_configmap=configmap,
            limits=limits,
        )
        if not upload:  # the document's bytes are kept only until the pin is written
            self._tasks[(uid, sha)] = obs
        return obs

    def _read_source(
        self, body: RunSpecBody, namespace: str, pinned: TasksStatus | None
    ) -> tuple[str, bytes, tuple[str, str] | None]:
        """(file name, bytes, (ConfigMap, key) if from one). A pinned S3 copy is read instead of
        the source: what the run started with, whatever happened to the source since."""
        source = body.tasks
        if pinned is not None and pinned.uri:
            parent, key = split_object_uri(pinned.uri, "status.tasks.uri")
            data = self.store(parent).read_bytes(key)
            if data is None:
                raise AtlasError(f"{pinned.uri}: the pinned task document is gone")
            return pinned.name or "tasks.yaml", data, None
        if source.config_map:
            cm = self.api.config_map(namespace, source.config_map)
            data_map = cm.get("data") or {}
            found: str | None = (
                source.path
                if source.path in data_map
                else next(
                    (k for k in sorted(data_map) if k.endswith((".yaml", ".yml", ".json", ".jsonl", ".csv"))),
                    None,
                )
            )
            if found is None:
                raise AtlasError(
                    f"ConfigMap {source.config_map!r} has no task file key (.yaml, .json, .jsonl, .csv)"
                )
            return found, str(data_map[found]).encode("utf-8"), (source.config_map, found)
        if source.uri:
            location = parse_s3_uri(source.uri, "spec.tasks.uri")
            parent, _, key = location.prefix.rpartition("/")
            if not key:
                raise AtlasError(f"{source.uri!r} names no object (expected s3://bucket/path/file.yaml)")
            data = self.store(f"s3://{location.bucket}/{parent}").read_bytes(key)
            if data is None:
                raise AtlasError(f"{source.uri}: no such object")
            return key, data, None
        if source.path:
            return Path(source.path).name, Path(source.path).read_bytes(), None
        raise AtlasError("tasks.dataset needs a reachable Hugging Face hub; use configMap or uri")

    # ------------------------------------------------------------------ Jobs

    def _jobs(self, namespace: str, run: str, uid: str, status: RunStatus) -> list[JobObs]:
        selector = ",".join(f"{k}={v}" for k, v in run_labels(run).items())
        done = {m: parse_ranges(s.chunks_done) for m, s in status.models.items()}
        jobs: list[JobObs] = []
        to_count: list[tuple[int, kube.Job]] = []  # finished, not yet counted: read their pods
        cached = self.informers.jobs(namespace) if self.informers is not None else None
        listed = cached if cached is not None else self.api.jobs(namespace, label_selector=selector)
        for job in listed:
            meta = job["metadata"]
            if (meta.get("labels") or {}).get(LABEL_RUN) != label_value(run):
                continue
            if not any(o.get("uid") == uid for o in meta.get("ownerReferences") or []):
                continue  # not this run's (a namesake's leftovers): never adopted
            model = (meta.get("annotations") or {}).get(ANNOTATION_MODEL)
            chunk = (meta.get("labels") or {}).get(LABEL_CHUNK)
            if model is None or chunk is None or not chunk.isdigit():
                continue
            spec, st = job.get("spec") or {}, job.get("status") or {}
            conditions = {c["type"]: c for c in st.get("conditions") or [] if c.get("status") == "True"}
            finished = "Complete" in conditions or "Failed" in conditions
            failure = None
            if "Failed" in conditions:
                c = conditions["Failed"]
                failure = f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")
            obs = JobObs(
                name=meta["name"],
                model=model,
                chunk=int(chunk),
                completions=int(spec.get("completions") or 0),
                parallelism=int(spec.get("parallelism") or 0),
                active=int(st.get("active") or 0),
                ready=int(st.get("ready") or 0),
                completed=frozenset(parse_ranges(st.get("completedIndexes"))),
                failed_indexes=frozenset(parse_ranges(st.get("failedIndexes"))),
                finished=finished,
                suspended=bool(spec.get("suspend")),
                deleting=bool(meta.get("deletionTimestamp")),
                failure=failure,
            )
            if finished and int(chunk) not in done.get(model, set()) and not obs.deleting:
                to_count.append((len(jobs), job))
            jobs.append(obs)
        watched = self.informers.finished_pods(namespace) if self.informers is not None else None
        pods = watched if watched is not None else self._finished_pods(namespace, selector, len(to_count))
        for position, job in to_count:
            obs = jobs[position]
            mine = None if pods is None else pods.get(obs.name, [])
            if mine is not None and watched is not None and not complete(mine, job):
                mine = None  # the watch has not brought every attempt yet: this Job's pods are LISTed
            job_pods: Sequence[kube.Pod] = (
                mine
                if mine is not None
                else self.api.pods(namespace, label_selector=f"{LABEL_JOB_NAME}={obs.name}")
            )
            outcomes, error = self._outcomes(job, obs, job_pods)
            jobs[position] = dataclasses.replace(
                obs, outcomes=outcomes, outcomes_error=error, cost=pod_cost(job_pods)
            )
        return jobs

    def _finished_pods(self, namespace: str, selector: str, jobs: int) -> dict[str, list[kube.Pod]] | None:
        """The run's finished pods by Job name: one LIST for every Job counted in this pass (None:
        one Job to count, its own LIST is smaller)."""
        if jobs < 2:
            return None
        by_job: dict[str, list[kube.Pod]] = {}
        for pod in self.api.pods(
            namespace,
            label_selector=selector,
            field_selector="status.phase!=Pending,status.phase!=Running",
        ):
            name = (pod["metadata"].get("labels") or {}).get(LABEL_JOB_NAME)
            if name:
                by_job.setdefault(name, []).append(pod)
        return by_job

    def _outcomes(
        self, job: kube.Job, obs: JobObs, pods: Sequence[kube.Pod]
    ) -> tuple[dict[int, Outcome] | None, str | None]:
        """Each index's outcome: its last attempt's termination message, else the stored result
        (``pods``: the Job's finished pods)."""
        last: dict[int, kube.Pod] = {}
        last_ok: dict[int, kube.Pod] = {}
        for pod in pods:
            index = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_INDEX)
            if index is None or not index.isdigit():
                continue
            key = _pod_key(pod)
            i = int(index)
            if i not in last or key > _pod_key(last[i]):
                last[i] = pod
            if (pod.get("status") or {}).get("phase") == "Succeeded" and (
                i not in last_ok or key > _pod_key(last_ok[i])
            ):
                last_ok[i] = pod
        unit = _unit_of(job)
        outcomes: dict[int, Outcome] = {}  # item position in the chunk -> its outcome
        missing: list[int] = []
        for i in range(obs.completions):
            attempt: kube.Pod | None
            if i in obs.completed:
                attempt, failed = last_ok.get(i) or last.get(i), False
            elif i in obs.failed_indexes:
                attempt, failed = last.get(i), True
            else:
                continue  # never finished (the Job as a whole failed): decide records job_failed
            positions = _positions(unit, i)
            where = f"pod {attempt['metadata']['name']}" if attempt else "pod"
            summary = read_summary(_runner_message(attempt) if attempt else None, where)
            if summary is not None and summary.status == "batch":
                items = summary.items or []
                if len(items) == len(positions):
                    for position, item in zip(positions, items, strict=True):
                        outcomes[position] = outcome_of(item, obs.model, failed)
                    continue
                summary = None  # cut short: the stored results tell
            for position in positions:
                if summary is not None:
                    outcomes[position] = outcome_of(summary, obs.model, failed)
                    continue
                missing.append(position)
                if failed:
                    outcomes[position] = outcome_of(
                        None, obs.model, True, _pod_failure(attempt) or obs.failure
                    )
        if missing:
            error = self._stored(unit, obs, missing, outcomes)
            if error:
                return None, error
        return outcomes, None

    def _stored(
        self, unit: WorkUnit | None, obs: JobObs, positions: list[int], outcomes: dict[int, Outcome]
    ) -> str | None:
        """Outcomes of items whose pods are gone (or said too little), from object storage."""
        if unit is None or not unit.results_uri:
            return None
        try:
            if unit.plan is not None and not unit.items:
                unit = unit.resolve(self._plan(unit.plan))
            store = self.store(unit.results_uri)
            for i in positions:
                task_id, repeat = unit.item(i)
                result = store.get_result(unit.model, task_id, repeat)
                if result is not None:
                    failed = i // unit.per_pod in obs.failed_indexes
                    outcomes[i] = outcome_of(TaskSummary.of_result(result), obs.model, failed)
        except (StoreError, AtlasError, ValueError) as exc:
            return str(exc)
        return None

    def _plan(self, ref: PlanRef) -> ChunkPlan:
        """A chunk's plan (cached by digest: its content never changes)."""
        plan = self._plans.get(ref.sha256)
        if plan is None:
            plan = read_plan(ref, self.store, where=f"plan of a Job ({ref.uri})")
            if len(self._plans) >= 256:
                self._plans.clear()
            self._plans[ref.sha256] = plan
        return plan


def _pod_key(pod: kube.Pod) -> tuple[str, str]:
    """Attempts of one index, oldest first."""
    return (pod["metadata"].get("creationTimestamp") or "", pod["metadata"]["name"])


def pod_cost(pods: Sequence[kube.Pod]) -> PodCost:
    """What a Job's pods cost, every attempt: seconds from the pod's start on its node to its
    runner's end, and the CPU-seconds its runner reported (runner and sidecars)."""
    seconds = cpu = 0.0
    without_cpu = 0
    for pod in pods:
        status = pod.get("status") or {}
        runner = next((c for c in status.get("containerStatuses") or [] if c.get("name") == RUNNER), None)
        terminated = ((runner or {}).get("state") or {}).get("terminated") or {}
        start = _time(status.get("startTime")) or _time(terminated.get("startedAt"))
        end = _time(terminated.get("finishedAt"))
        if start is not None and end is not None:
            seconds += max(0.0, (end - start).total_seconds())
        summary = read_summary(terminated.get("message"), "pod")
        if summary is not None and summary.cpu_s is not None:
            cpu += summary.cpu_s
        else:
            without_cpu += 1
    return PodCost(len(pods), round(seconds, 3), round(cpu, 3), without_cpu)


def _time(text: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text) if text else None  # RFC 3339 ("...Z": Python 3.11+)
    except ValueError:
        return None


def _runner_message(pod: kube.Pod) -> str | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if status.get("name") == RUNNER and terminated.get("message"):
            return str(terminated["message"])
    return None


def _pod_failure(pod: kube.Pod | None) -> str | None:
    if not pod:
        return None
    st = pod.get("status") or {}
    return " ".join(x for x in (st.get("reason"), st.get("message")) if x) or None


def _positions(unit: WorkUnit | None, index: int) -> list[int]:
    """The chunk positions completion ``index`` ran (one per index without a readable unit)."""
    if unit is None:
        return [index]
    try:
        return list(unit.positions(index))
    except IndexError:
        return []


def _unit_of(job: kube.Job) -> WorkUnit | None:
    for container in job["spec"]["template"]["spec"].get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == ENV_WORK_UNIT and env.get("value"):
                try:
                    return WorkUnit.from_json(env["value"], ENV_WORK_UNIT)
                except (ValueError, AtlasError):  # malformed, or of an unknown schema version
                    return None
    return None


def _parse(
    body: RunSpecBody, catalog: Catalog, name: str, data: bytes
) -> tuple[list[PlannedTask], list[tuple[str, str]], dict[str, TaskLimits]]:
    with tempfile.TemporaryDirectory(prefix="atlas-tasks-") as tmp:
        path = Path(tmp) / Path(name).name
        path.write_bytes(data)
        loaded = load_tasks(path)
    tasks = loaded.tasks
    source = body.tasks
    if source.ids is not None:
        wanted = set(source.ids)
        tasks = [t for t in tasks if t.id in wanted]
    if source.limit:
        tasks = tasks[: source.limit]
    sidecars = set(sidecar_servers(body, catalog))
    runnable: list[PlannedTask] = []
    excluded: list[tuple[str, str]] = [
        (r.where, f"rejected: {r.field}: {r.message}") for r in loaded.rejected
    ]
    limits: dict[str, TaskLimits] = {}
    for task in tasks:
        servers = task_servers(task, sidecars)
        if servers.missing:
            excluded.append(
                (task.id, f"needs server(s) not enabled or without an image: {', '.join(servers.missing)}")
            )
            continue
        runnable.append(PlannedTask(task.id, tuple(servers.connect)))
        if task.limits is not None:
            limits[task.id] = task.limits
    return runnable, excluded, limits
