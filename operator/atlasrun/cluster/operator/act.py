"""Act: the only module that writes. Applies a ``Decision`` in an order that is safe to interrupt.

Everything it does is a field of the ``Decision``; what it needs besides (the run's name, spec,
catalog, task limits) is the ``Snapshot`` the decision was made from.

1. The content-addressed task document (``Decision.uploads``) and the plans of the chunks about to
   be created go to object storage (before anything names them; a failure writes nothing to the API).
2. The status patch (the dumped desired status minus the dumped observed one: nothing when it is
   empty), with the run's resourceVersion as a
   precondition: a chunk's counts and its ``chunksDone`` mark land together or not at all, and a
   stale leader's write is refused (409) instead of counting twice.
3. Only then are counted Jobs deleted, new chunks created (deterministic names: a 409 means it
   exists), Jobs' parallelism and suspend patched (these writes concern distinct Jobs and run
   concurrently), Events posted, metrics updated.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypedDict

from atlasrun.cluster.operator import kube, metrics
from atlasrun.cluster.operator.informer import Informers
from atlasrun.cluster.operator.manifests import owner_reference, render_job, render_network_policy, run_labels
from atlasrun.cluster.operator.queueing import WorkloadReader
from atlasrun.cluster.operator.reconcile import Chunk, Decision, Snapshot
from atlasrun.cluster.operator.settings import OperatorSettings
from atlasrun.cluster.wire.contract import (
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    ChunkPlan,
    PlanRef,
    TasksRef,
    WorkUnit,
)
from atlasrun.cluster.wire.store import S3Results, StoreError, plans_uri, split_object_uri, store_plan
from atlasrun.errors import AtlasError
from atlasrun.redact import scrub
from atlasrun.runspec.run import API_VERSION
from atlasrun.tasks.model import TaskLimits

log = logging.getLogger("atlasrun.act")
WRITERS = 8  # concurrent Job writes per pass (the client's connection pool holds more)
MAX_STORES = 16  # object-store clients kept (one per location written)


class Conflict(Exception):
    """The run changed since it was observed (409 on the status patch): observe again."""


class UploadFailed(Exception):
    """The task document could not be stored."""


class JobSpecPatch(TypedDict, total=False):
    """What a pass changes of a live Job (a merge patch of its spec)."""

    parallelism: int
    suspend: bool


@dataclass
class Result:
    run: kube.AtlasRun | None = None  # the run as the status patch returned it


class Actor:
    def __init__(self, settings: OperatorSettings | None = None, informers: Informers | None = None) -> None:
        from kubernetes import client

        self.client = client
        self.core, self.batch = client.CoreV1Api(), client.BatchV1Api()
        self.custom, self.networking = client.CustomObjectsApi(), client.NetworkingV1Api()
        self.settings = settings or OperatorSettings()
        self._ensured: set[str] = set()  # run UIDs whose ConfigMap and policy exist
        self._plans: dict[tuple[str, str], PlanRef] = {}  # (plans URI, sha256) -> stored plan
        self._stores: dict[str, S3Results] = {}
        self._stores_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="act")
        self._workloads: WorkloadReader | None = None  # Kueue, for queued runs only
        self.informers = informers  # told of every Job written, so the next pass sees it

    # ------------------------------------------------------------------ entry point

    def apply(self, run: kube.AtlasRun, s: Snapshot, d: Decision) -> Result:
        """``run``: the one ``s`` was observed from (its resourceVersion is the status patch's
        precondition)."""
        from kubernetes.client.rest import ApiException

        result = Result()
        for upload in d.uploads:
            self._upload(upload.uri, upload.data)
        plans = self._store_plans(s, d)
        if d.status_patch:
            body = {
                "metadata": {"resourceVersion": run["metadata"]["resourceVersion"]},
                "status": d.status_patch,
            }
            try:
                answer = self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, s.namespace, PLURAL, s.name, body
                )
                result.run = kube.atlas_run(answer)
            except ApiException as exc:
                if exc.status == 409:
                    raise Conflict(s.name) from exc
                raise
        calls: list[Callable[[], Any]] = [partial(self._delete_job, s.namespace, n) for n in d.delete]
        if d.create:
            self._ensure_run_objects(s, d)
            for chunk, width in d.create:
                job = self._render(s, chunk, width, d, plans.get(chunk.items))
                calls.append(partial(self._create_job, s.namespace, job))
        patches: dict[str, JobSpecPatch] = {}
        for name, width in d.parallelism.items():
            patches.setdefault(name, {})["parallelism"] = width
        queued = s.body is not None and s.body.cluster.queue_name
        if queued and (d.suspend or d.reactivate):  # Kueue owns suspend: (de)activate Workloads
            self._kueue_suspend(s.namespace, d.suspend, d.reactivate)
        for name in [] if queued else d.suspend:
            patches.setdefault(name, {})["suspend"] = True
        for name in d.resume:
            patches.setdefault(name, {})["suspend"] = False
        calls += [partial(self._patch_job, s.namespace, n, spec) for n, spec in patches.items()]
        self._concurrently(calls)
        for kind, reason, message in d.events:
            self._event(s, kind, reason, message)
        for outcome in d.accounted:
            metrics.item_counted(s.namespace, s.name, outcome)
        return result

    # ------------------------------------------------------------------ pieces

    def _kueue_suspend(self, namespace: str, jobs: list[str], reactivate: list[str]) -> None:
        """A queued run: deactivate its suspended Jobs' Workloads (Kueue evicts them and suspends
        the Jobs) or reactivate those observed deactivated (Kueue admits them again)."""
        from atlasrun.cluster.operator.queueing import owned

        if self._workloads is None:
            self._workloads = WorkloadReader()
        if jobs:
            found = owned(self._workloads.list(namespace), jobs)
            self._workloads.set_active(namespace, [str(w["metadata"]["name"]) for w in found], False)
        if reactivate:
            self._workloads.set_active(namespace, reactivate, True)

    def _upload(self, uri: str, data: bytes) -> None:
        try:
            parent, key = split_object_uri(uri, "task document")
            self._open_store(parent).put_bytes(key, data)  # content-addressed: rewriting is harmless
        except (StoreError, AtlasError) as exc:
            raise UploadFailed(str(exc)) from exc

    def _store_plans(self, s: Snapshot, d: Decision) -> dict[tuple[tuple[str, int], ...], PlanRef]:
        """The plans of the chunks to create, in object storage (once per content per process).
        Without a bucket: none, and the Jobs list their items inline."""
        base = plans_uri(s.body) if s.body is not None else ""
        if not base or not d.create:
            return {}
        digests: dict[tuple[tuple[str, int], ...], str] = {}
        new: dict[str, tuple[int, ChunkPlan]] = {}  # digest -> (a chunk index, plan) not stored yet
        for chunk, _ in d.create:
            plan = ChunkPlan(items=list(chunk.items))
            digests[chunk.items] = digest = hashlib.sha256(plan.to_bytes()).hexdigest()
            if (base, digest) not in self._plans:
                new.setdefault(digest, (chunk.index, plan))
        stored = {  # concurrently: a pass that starts many chunks does not wait on each upload
            digest: (index, self._pool.submit(store_plan, base, plan, self._open_store))
            for digest, (index, plan) in new.items()
        }
        for digest, (index, future) in stored.items():
            try:
                self._plans[(base, digest)] = future.result()
            except (StoreError, AtlasError) as exc:
                raise UploadFailed(f"cannot store the plan of chunk {index}: {exc}") from exc
        return {items: self._plans[(base, digest)] for items, digest in digests.items()}

    def _open_store(self, uri: str) -> S3Results:
        """One client per location, shared by the writer threads (boto3 clients are thread-safe;
        building one costs ~10 MB and tens of ms: concurrent uploads each building theirs cost
        the operator 70 MB of peak RSS)."""
        with self._stores_lock:
            store = self._stores.get(uri)
            if store is None:
                if len(self._stores) >= MAX_STORES:
                    self._stores.clear()
                store = self._stores[uri] = S3Results(
                    uri, self.settings.s3_endpoint, attempts=3, backoff_s=0.5
                )
            return store

    def _ensure_run_objects(self, s: Snapshot, d: Decision) -> None:
        """The run's ConfigMap (run.yaml, no tasks) and network policy, once per run."""
        if s.uid in self._ensured:
            return
        import yaml

        assert s.body is not None and s.catalog is not None
        owner = owner_reference(s.name, s.uid)
        run_file = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": s.name},
            "spec": dict(s.spec),
        }
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": config_map_name(s.name),
                "labels": run_labels(s.name),
                "ownerReferences": [owner],
            },
            "data": {"run.yaml": yaml.safe_dump(run_file)},
        }
        self._ignore(409, lambda: self.core.create_namespaced_config_map(s.namespace, configmap))
        policy = render_network_policy(
            s.name,
            s.namespace,
            s.uid,
            s.body,
            [s.catalog.get(server) for server in d.servers],
            s3_endpoint=self.settings.s3_endpoint,
            run_egress=self.settings.run_egress,
        )
        namespace = s.namespace
        if policy and policy["kind"] == "NetworkPolicy":
            self._ignore(409, lambda: self.networking.create_namespaced_network_policy(namespace, policy))
        elif policy:
            self._ignore(
                409,
                lambda: self.custom.create_namespaced_custom_object(
                    "cilium.io", "v2", namespace, "ciliumnetworkpolicies", policy
                ),
            )
        self._ensured.add(s.uid)

    def _render(
        self, s: Snapshot, chunk: Chunk, width: int, d: Decision, plan: PlanRef | None
    ) -> dict[str, Any]:  # a Job manifest (outgoing JSON: manifests.render_job)
        assert s.body is not None and s.catalog is not None and s.runner_image and s.tasks is not None
        pin = d.desired.tasks
        assert pin is not None
        ref = TasksRef(sha256=pin.sha256, uri=pin.uri, path=pin.path, name=pin.name)
        unit = WorkUnit(
            run=s.name,
            model=chunk.model,
            chunk=chunk.index,
            items=[] if plan else list(chunk.items),
            plan=plan,
            per_pod=s.body.cluster.items_per_pod,
            tasks=ref,
            results_uri=d.desired.results_uri or "",
        )
        model = next(m for m in s.body.models if m.name == chunk.model)
        return render_job(
            s.name,
            s.uid,
            s.namespace,
            s.body,
            model,
            unit,
            [s.catalog.get(server) for server in chunk.servers],
            runner_image=s.runner_image,
            spec_configmap=config_map_name(s.name),
            s3_secret=s.body.output.credentials_secret,
            s3_endpoint=self.settings.s3_endpoint,
            parallelism=width,
            tasks_configmap=s.tasks.source_configmap if ref.path else None,
            task_limits=longest_limits([s.tasks.limits.get(t) for t, _ in chunk.items]),
            placement=self.settings.placement,
        )

    def _event(self, s: Snapshot, kind: str, reason: str, message: str) -> None:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{s.name}.", "namespace": s.namespace},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": s.name,
                "namespace": s.namespace,
                "uid": s.uid,
            },
            "type": kind,
            "reason": reason,
            "message": scrub(message)[:1024],
            "source": {"component": "atlasrun-operator"},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(s.namespace, event)
        except Exception as exc:  # an Event is best effort: never fail a pass for it
            log.warning("cannot post event %s for %s: %s", reason, s.name, exc)

    def _delete_job(self, namespace: str, name: str) -> None:
        self._ignore(
            404,
            lambda: self.batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _preload_content=False
            ),
        )
        if self.informers is not None:
            self.informers.job_deleted(namespace, name)

    def _create_job(self, namespace: str, job: dict[str, Any]) -> None:  # job: outgoing manifest
        created = self._ignore(  # 409: it exists, created before
            409, lambda: self.batch.create_namespaced_job(namespace, job, _preload_content=False)
        )
        self._written(namespace, created)

    def _patch_job(self, namespace: str, name: str, spec: JobSpecPatch) -> None:
        patched = self._ignore(
            404,
            lambda: self.batch.patch_namespaced_job(name, namespace, {"spec": spec}, _preload_content=False),
        )
        self._written(namespace, patched)

    def _written(self, namespace: str, response: Any) -> None:
        """The Job as the API answered a write (raw JSON, not the client's slow model classes)."""
        if response is not None and self.informers is not None:
            self.informers.job_written(namespace, json.loads(response.data))

    def _concurrently(self, calls: list[Callable[[], Any]]) -> None:
        """Independent Job writes (distinct names) at once: a pass's latency is not their sum.
        The first failure is raised after all have run."""
        if len(calls) < 2:
            for call in calls:
                call()
            return
        futures = [self._pool.submit(call) for call in calls]
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error

    @staticmethod
    def _ignore(status: int, call: Any) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            return call()
        except ApiException as exc:
            if exc.status != status:
                raise
            return None


def config_map_name(run: str) -> str:
    return f"atlasrun-{run}"[:253]


def longest_limits(limits: list[TaskLimits | None]) -> TaskLimits:
    """The largest of each per-task limit (a chunk's pods share one deadline)."""
    values: dict[str, float] = {}
    for item in limits:
        if item is None:
            continue
        for key, value in item.model_dump().items():
            if value is not None and (values.get(key) is None or value > values[key]):
                values[key] = value
    return TaskLimits.model_validate(values)


__all__ = ["Actor", "Conflict", "UploadFailed", "config_map_name", "owner_reference"]
