"""Act: the only module that writes. Applies a ``Decision`` in an order that is safe to interrupt.

1. The content-addressed task document and the plans of the chunks about to be created go to
   object storage (before anything names them; a failure writes nothing to the API).
2. The status patch (only when something changed), with the run's resourceVersion as a
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
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from atlasrun.cluster import metrics
from atlasrun.cluster.contract import GROUP, KIND, PLURAL, VERSION, ChunkPlan, PlanRef, TasksRef, WorkUnit
from atlasrun.cluster.images import sidecar_servers
from atlasrun.cluster.informer import Informers
from atlasrun.cluster.manifests import owner_reference, render_job, render_network_policy, run_labels
from atlasrun.cluster.observe import Context, Settings, plans_uri
from atlasrun.cluster.queueing import WorkloadReader
from atlasrun.cluster.reconcile import Chunk, Decision
from atlasrun.cluster.store import S3Results, parse_s3_uri, store_plan
from atlasrun.errors import AtlasError
from atlasrun.redact import scrub
from atlasrun.runspec.run import API_VERSION
from atlasrun.servers.selection import task_servers
from atlasrun.tasks.model import TaskLimits

log = logging.getLogger("atlasrun.act")
WRITERS = 8  # concurrent Job writes per pass (the client's connection pool holds more)


class Conflict(Exception):
    """The run changed since it was observed (409 on the status patch): observe again."""


class UploadFailed(Exception):
    """The task document could not be stored."""


@dataclass
class Result:
    run: dict[str, Any] | None = None  # the run as the status patch returned it


class Actor:
    def __init__(self, settings: Settings | None = None, informers: Informers | None = None) -> None:
        from kubernetes import client

        self.client = client
        self.core, self.batch = client.CoreV1Api(), client.BatchV1Api()
        self.custom, self.networking = client.CustomObjectsApi(), client.NetworkingV1Api()
        self.settings = settings or Settings.from_env()
        self._ensured: set[str] = set()  # run UIDs whose ConfigMap and policy exist
        self._plans: dict[tuple[str, str], PlanRef] = {}  # (plans URI, sha256) -> stored plan
        self._pool = ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="act")
        self._workloads: WorkloadReader | None = None  # Kueue, for queued runs only
        self.informers = informers  # told of every Job written, so the next pass sees it

    # ------------------------------------------------------------------ entry point

    def apply(self, run: Mapping[str, Any], ctx: Context, d: Decision) -> Result:
        from kubernetes.client.rest import ApiException

        result = Result()
        if ctx.upload and "tasks" in d.status_patch:
            self._upload(*ctx.upload)
        plans = self._store_plans(ctx, d)
        if d.status_patch:
            body = {
                "metadata": {"resourceVersion": run["metadata"]["resourceVersion"]},
                "status": d.status_patch,
            }
            try:
                result.run = self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, ctx.namespace, PLURAL, ctx.name, body
                )
            except ApiException as exc:
                if exc.status == 409:
                    raise Conflict(ctx.name) from exc
                raise
        calls: list[Callable[[], Any]] = [partial(self._delete_job, ctx.namespace, n) for n in d.delete]
        if d.create:
            self._ensure_run_objects(ctx)
            for chunk, width in d.create:
                job = self._render(ctx, chunk, width, d, plans.get(chunk.items))
                calls.append(partial(self._create_job, ctx.namespace, job))
        patches: dict[str, dict[str, Any]] = {}
        for name, width in d.parallelism.items():
            patches.setdefault(name, {})["parallelism"] = width
        queued = ctx.body is not None and ctx.body.cluster.queue_name
        if queued and (d.suspend or ctx.reactivate):  # Kueue owns suspend: (de)activate Workloads
            self._kueue_suspend(ctx, d.suspend)
        for name in [] if queued else d.suspend:
            patches.setdefault(name, {})["suspend"] = True
        for name in d.resume:
            patches.setdefault(name, {})["suspend"] = False
        calls += [partial(self._patch_job, ctx.namespace, n, spec) for n, spec in patches.items()]
        self._concurrently(calls)
        for kind, reason, message in d.events:
            self._event(ctx, kind, reason, message)
        for outcome in d.accounted:
            metrics.item_counted(ctx.namespace, ctx.name, outcome)
        return result

    # ------------------------------------------------------------------ pieces

    def _kueue_suspend(self, ctx: Context, jobs: list[str]) -> None:
        """A queued run: deactivate its suspended Jobs' Workloads (Kueue evicts them and suspends
        the Jobs) or reactivate those observed deactivated (Kueue admits them again)."""
        from atlasrun.cluster.queueing import WorkloadReader, owned

        if self._workloads is None:
            self._workloads = WorkloadReader()
        if jobs:
            found = owned(self._workloads.list(ctx.namespace), jobs)
            self._workloads.set_active(ctx.namespace, [str(w["metadata"]["name"]) for w in found], False)
        if ctx.reactivate:
            self._workloads.set_active(ctx.namespace, ctx.reactivate, True)

    def _upload(self, uri: str, data: bytes) -> None:
        from atlasrun.cluster.store import StoreError

        location = parse_s3_uri(uri, "task document")
        parent, _, key = location.prefix.rpartition("/")
        try:
            store = S3Results(
                f"s3://{location.bucket}/{parent}", self.settings.s3_endpoint, attempts=3, backoff_s=0.5
            )
            if store.read_bytes(key) is None:  # content-addressed: present means identical
                store.put_bytes(key, data)
        except (StoreError, AtlasError) as exc:
            raise UploadFailed(str(exc)) from exc

    def _store_plans(self, ctx: Context, d: Decision) -> dict[tuple[tuple[str, int], ...], PlanRef]:
        """The plans of the chunks to create, in object storage (once per content per process).
        Without a bucket: none, and the Jobs list their items inline."""
        base = plans_uri(ctx.body) if ctx.body is not None else ""
        if not base or not d.create:
            return {}
        from atlasrun.cluster.store import StoreError

        refs: dict[tuple[tuple[str, int], ...], PlanRef] = {}
        for chunk, _ in d.create:
            plan = ChunkPlan(items=list(chunk.items))
            digest = hashlib.sha256(plan.to_bytes()).hexdigest()
            known = self._plans.get((base, digest))
            if known is None:
                try:
                    known = store_plan(base, plan, self._open_store)
                except (StoreError, AtlasError) as exc:
                    raise UploadFailed(f"cannot store the plan of chunk {chunk.index}: {exc}") from exc
                self._plans[(base, digest)] = known
            refs[chunk.items] = known
        return refs

    def _open_store(self, uri: str) -> S3Results:
        return S3Results(uri, self.settings.s3_endpoint, attempts=3, backoff_s=0.5)

    def _ensure_run_objects(self, ctx: Context) -> None:
        """The run's ConfigMap (run.yaml, no tasks) and network policy, once per run."""
        if ctx.uid in self._ensured:
            return
        import yaml

        assert ctx.body is not None and ctx.catalog is not None
        owner = owner_reference(ctx.name, ctx.uid)
        run_file = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": ctx.name},
            "spec": ctx.spec,
        }
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": config_map_name(ctx.name),
                "labels": run_labels(ctx.name),
                "ownerReferences": [owner],
            },
            "data": {"run.yaml": yaml.safe_dump(run_file)},
        }
        self._ignore(409, lambda: self.core.create_namespaced_config_map(ctx.namespace, configmap))
        sidecars = sidecar_servers(ctx.body, ctx.catalog)
        servers = sorted({s for t in ctx.tasks.values() for s in task_servers(t, sidecars).connect})
        policy = render_network_policy(
            ctx.name,
            ctx.namespace,
            ctx.uid,
            ctx.body,
            [ctx.catalog.get(s) for s in servers],
            s3_endpoint=self.settings.s3_endpoint,
            run_egress=self.settings.run_egress,
        )
        if policy and policy["kind"] == "NetworkPolicy":
            self._ignore(409, lambda: self.networking.create_namespaced_network_policy(ctx.namespace, policy))
        elif policy:
            namespace = ctx.namespace
            self._ignore(
                409,
                lambda: self.custom.create_namespaced_custom_object(
                    "cilium.io", "v2", namespace, "ciliumnetworkpolicies", policy
                ),
            )
        self._ensured.add(ctx.uid)

    def _render(
        self, ctx: Context, chunk: Chunk, width: int, d: Decision, plan: PlanRef | None
    ) -> dict[str, Any]:
        assert ctx.body is not None and ctx.catalog is not None and ctx.runner_image
        pin = TasksRef.model_validate(d.status["tasks"])
        unit = WorkUnit(
            run=ctx.name,
            model=chunk.model,
            chunk=chunk.index,
            items=[] if plan else list(chunk.items),
            plan=plan,
            per_pod=ctx.body.cluster.items_per_pod,
            tasks=pin,
            results_uri=str(d.status.get("resultsURI") or ""),
        )
        model = next(m for m in ctx.body.models if m.name == chunk.model)
        return render_job(
            ctx.name,
            ctx.uid,
            ctx.namespace,
            ctx.body,
            model,
            unit,
            [ctx.catalog.get(s) for s in chunk.servers],
            runner_image=ctx.runner_image,
            spec_configmap=config_map_name(ctx.name),
            s3_secret=ctx.body.output.credentials_secret,
            s3_endpoint=self.settings.s3_endpoint,
            parallelism=width,
            tasks_configmap=ctx.source_configmap if pin.path else None,
            task_limits=longest_limits([ctx.tasks[t].limits for t, _ in chunk.items if t in ctx.tasks]),
            placement=self.settings.placement,
        )

    def _event(self, ctx: Context, kind: str, reason: str, message: str) -> None:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{ctx.name}.", "namespace": ctx.namespace},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": ctx.name,
                "namespace": ctx.namespace,
                "uid": ctx.uid,
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
            self.core.create_namespaced_event(ctx.namespace, event)
        except Exception as exc:  # an Event is best effort: never fail a pass for it
            log.warning("cannot post event %s for %s: %s", reason, ctx.name, exc)

    def _delete_job(self, namespace: str, name: str) -> None:
        self._ignore(
            404,
            lambda: self.batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _preload_content=False
            ),
        )
        if self.informers is not None:
            self.informers.job_deleted(namespace, name)

    def _create_job(self, namespace: str, job: dict[str, Any]) -> None:
        created = self._ignore(  # 409: it exists, created before
            409, lambda: self.batch.create_namespaced_job(namespace, job, _preload_content=False)
        )
        self._written(namespace, created)

    def _patch_job(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
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
    values: dict[str, Any] = {}
    for item in limits:
        if item is None:
            continue
        for key, value in item.model_dump().items():
            if value is not None and (values.get(key) is None or value > values[key]):
                values[key] = value
    return TaskLimits(**values)


__all__ = ["Actor", "Conflict", "UploadFailed", "config_map_name", "owner_reference"]
