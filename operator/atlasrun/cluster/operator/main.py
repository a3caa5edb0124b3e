"""The kopf operator: thin handlers that feed a work queue; each pass is observe -> decide -> act.

- ``@kopf.on.event`` on AtlasRuns keeps the latest object of each run and queues a pass when the
  run is new, its spec changed (generation) or it is being deleted; our own status writes
  queue nothing.
- In each namespace that holds runs, informers (``informer.py``: LIST + WATCH with the label
  ``app.kubernetes.io/name=atlasrun``) keep the runs' Jobs and finished pods in memory: a pass
  reads them there instead of LISTing, and every Job change queues a pass for the owning run, so
  progress is event-driven. Passes of one run are coalesced (at most one per
  ``ATLASRUN_MIN_PASS_INTERVAL`` seconds, default 1) and a slow resync (``ATLASRUN_RESYNC_SECONDS``,
  default 300; shorter while pods wait or the object store is down) is the safety net. A failing
  pass is retried per run with exponential backoff and jitter (``retry.py``), one log line each.
  Settings: ``settings.py`` (read once at start-up; the table in docs/architecture.md). An idle
  run costs no request beyond the watches and no writes.
- With ``ATLASRUN_LEADER_ELECTION=1`` only the replica holding the Lease acts (``leader.py``).

kopf itself writes nothing to the runs (no changing handlers: no finalizers, no annotations).
Deletion needs no finalizer: everything created carries an owner reference, so Kubernetes'
garbage collector removes Jobs, pods, ConfigMap and policy.

Run with: ``kopf run -m atlasrun.cluster.operator.main --all-namespaces`` (see charts/).
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf

from atlasrun.cluster.operator import kube, metrics
from atlasrun.cluster.operator.act import Actor, Conflict
from atlasrun.cluster.operator.informer import Informers
from atlasrun.cluster.operator.leader import LeaderElector
from atlasrun.cluster.operator.observe import ApiReader, Observer
from atlasrun.cluster.operator.reconcile import decide
from atlasrun.cluster.operator.retry import Backoff
from atlasrun.cluster.operator.settings import OperatorSettings
from atlasrun.cluster.wire.contract import GROUP, KIND, PLURAL, VERSION
from atlasrun.errors import InputError

log = logging.getLogger("atlasrun.operator")


def _rv(run: Mapping[str, Any]) -> int:
    text = str((run.get("metadata") or {}).get("resourceVersion") or "0")
    return int(text) if text.isdigit() else 0


class Controller:
    """A work queue of run keys (``namespace/name``) served by a few threads; one pass per key at a time."""

    def __init__(self, settings: OperatorSettings, leader: LeaderElector | None = None) -> None:
        self.settings = settings
        self.backoff = Backoff(settings.retry)
        reader = ApiReader()
        self.informers = Informers(
            reader.batch.list_namespaced_job, reader.core.list_namespaced_pod, on_job=self.on_job
        )
        self.observer = Observer(api=reader, settings=settings, informers=self.informers)
        self.observer.health.on_change = self.wake
        self.actor = Actor(settings, informers=self.informers)
        self.leader = leader
        self.runs: dict[str, kube.AtlasRun] = {}
        self._generation: dict[str, int] = {}
        self._due: list[tuple[float, str]] = []
        self._scheduled: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._busy: set[str] = set()
        self._after: dict[str, float] = {}  # requests that came while the key's pass ran
        self._cond = threading.Condition()
        self._stop = False
        self._threads = [
            threading.Thread(target=self._work, name=f"reconcile-{i}", daemon=True)
            for i in range(settings.queue.workers)
        ]
        metrics.watch_queue(self.backlog)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self.informers.stop()
        for thread in self._threads:
            thread.join(timeout=30)

    # ------------------------------------------------------------------ events in

    def on_run(self, kind: str | None, run: Mapping[str, Any]) -> None:
        meta = run.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self._cond:
            if kind == "DELETED":
                self.runs.pop(key, None)
                self._generation.pop(key, None)
                self._scheduled.pop(key, None)
                self._last.pop(key, None)
                self._after.pop(key, None)
                self.observer.forget(str(meta.get("uid")), key)
                metrics.run_deleted(str(meta.get("namespace")), str(meta.get("name")))
                if not any(k.startswith(f"{meta.get('namespace')}/") for k in self.runs):
                    self.informers.release(str(meta.get("namespace")))
                return
            previous = self.runs.get(key)
            if (
                previous is not None
                and _rv(previous) > _rv(run)
                and previous["metadata"].get("uid") == meta.get("uid")
            ):
                return  # older than what our own write returned
            self.runs[key] = kube.atlas_run(json.loads(json.dumps(run)))  # the AtlasRun enters here
            if previous is None:
                self.informers.ensure(str(meta.get("namespace")))
            metrics.run_seen(run)
            if (
                previous is None
                or previous["metadata"].get("uid") != meta.get("uid")
                or self._generation.get(key) != meta.get("generation")
            ):
                self._schedule(key, time.monotonic())

    def on_job(self, job: Mapping[str, Any]) -> None:
        meta = job.get("metadata") or {}
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == KIND and owner.get("controller"):
                with self._cond:
                    self._schedule(f"{meta.get('namespace')}/{owner.get('name')}", time.monotonic())

    def wake(self, key: str) -> None:
        """Queue a pass of ``key`` now (what holds its pods changed)."""
        with self._cond:
            if key in self.runs:
                self._schedule(key, time.monotonic())

    def on_leadership(self, leading: bool) -> None:
        if leading:
            with self._cond:
                for key in self.runs:
                    self._schedule(key, time.monotonic())

    # ------------------------------------------------------------------ the queue

    def backlog(self) -> int:
        """Runs due for a pass that no worker has taken yet (``atlasrun_operator_queue_depth``)."""
        with self._cond:
            now = time.monotonic()
            return sum(1 for at in self._scheduled.values() if at <= now)

    def _schedule(self, key: str, at: float) -> None:
        """Queue ``key`` at ``at`` (the earliest request wins); the caller holds the lock. A key
        being reconciled is queued again when its pass ends."""
        at = max(at, self._last.get(key, -1e9) + self.settings.queue.min_pass_interval_s)
        if key in self._busy:
            self._after[key] = min(at, self._after.get(key, at))
            return
        if key in self._scheduled and self._scheduled[key] <= at:
            return
        self._scheduled[key] = at
        heapq.heappush(self._due, (at, key))
        self._cond.notify()

    def _next(self) -> str | None:
        with self._cond:
            while not self._stop:
                while self._due and self._scheduled.get(self._due[0][1]) != self._due[0][0]:
                    heapq.heappop(self._due)  # superseded
                now = time.monotonic()
                if self._due and self._due[0][0] <= now:
                    at, key = heapq.heappop(self._due)
                    del self._scheduled[key]
                    metrics.queue_waited(now - at)
                    self._busy.add(key)
                    return key
                self._cond.wait(timeout=min(1.0, self._due[0][0] - now) if self._due else 1.0)
            return None

    def _work(self) -> None:
        resync = self.settings.queue.resync_s
        while (key := self._next()) is not None:
            requeue: float | None
            started = time.monotonic()
            try:
                if self.leader is not None and not self.leader.is_leader():
                    requeue = resync  # on_leadership queues every run when this replica leads
                else:
                    requeue = self.reconcile(key)
                    metrics.pass_done(True, time.monotonic() - started)
                self.backoff.succeeded(key)
            except Exception as exc:
                metrics.pass_done(False, time.monotonic() - started)
                failures, requeue = self.backoff.failed(key)
                log.warning(
                    "reconcile %s failed (%d in a row): %s; retrying in %.1fs",
                    key,
                    failures,
                    f"{type(exc).__name__}: {exc}",
                    requeue,
                )
                log.debug("reconcile %s failed", key, exc_info=True)
            finally:
                with self._cond:
                    self._busy.discard(key)
                    now = time.monotonic()
                    self._last[key] = now
                    at = min(
                        now + requeue if requeue is not None else float("inf"),
                        self._after.pop(key, float("inf")),
                    )
                    if key in self.runs and at != float("inf"):
                        self._schedule(key, at)
                    if key not in self.runs:
                        self.backoff.succeeded(key)  # deleted: forget its failures

    # ------------------------------------------------------------------ one pass

    def reconcile(self, key: str) -> float | None:
        with self._cond:
            run = self.runs.get(key)
        if run is None:
            return None
        snapshot = self.observer.snapshot(run)
        metrics.jobs_seen(snapshot.namespace, snapshot.name, snapshot.jobs)
        decision = decide(snapshot)
        try:
            result = self.actor.apply(run, snapshot, decision)
        except Conflict:
            self._refresh(key)
            return 0.0
        with self._cond:
            if result.run is not None and key in self.runs:
                self.on_run("MODIFIED", result.run)
            self._generation[key] = snapshot.generation
        resync = self.settings.queue.resync_s
        return resync if decision.requeue_after is None else min(decision.requeue_after, resync)

    def _refresh(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        fresh = self.actor.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        self.on_run("MODIFIED", fresh)


CONTROLLER: Controller | None = None
LEADER: LeaderElector | None = None


def _leader_namespace(settings: OperatorSettings) -> str:
    explicit = settings.leader.namespace or os.environ.get("POD_NAMESPACE")
    if explicit:
        return explicit
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return path.read_text().strip() if path.exists() else "default"


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    global CONTROLLER, LEADER
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    settings.posting.enabled = False  # Events come from act.py only
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # not a line per watch event
    # A bad setting or a taken metrics port will not mend on a retry: stop (kopf exits non-zero)
    # with the reason, rather than retry every 60 s while no run is reconciled.
    try:
        operator_settings = OperatorSettings.from_env(os.environ)  # read once, here
        if operator_settings.metrics_port:
            metrics.serve(operator_settings.metrics_port)
    except InputError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    except OSError as exc:
        port = operator_settings.metrics_port
        raise kopf.PermanentError(
            f"cannot serve /metrics on port {port} (ATLASRUN_METRICS_PORT): {exc}"
        ) from exc
    if operator_settings.leader.enabled:
        LEADER = LeaderElector(
            _leader_namespace(operator_settings),
            lease_s=operator_settings.leader.lease_s,
            renew_s=operator_settings.leader.renew_s,
            on_change=_leadership_changed,
        )
        metrics.set_leading(False)  # until the Lease is ours
    CONTROLLER = Controller(operator_settings, LEADER)
    CONTROLLER.start()
    if LEADER is not None:
        LEADER.start()


def _leadership_changed(leading: bool) -> None:
    metrics.set_leading(leading)
    if CONTROLLER is not None:
        CONTROLLER.on_leadership(leading)


@kopf.on.cleanup()
def cleanup(**_: Any) -> None:
    if LEADER is not None:
        LEADER.stop()
    if CONTROLLER is not None:
        CONTROLLER.stop()


@kopf.on.event(GROUP, VERSION, PLURAL)  # type: ignore[arg-type]
def run_event(event: dict[str, Any], **_: Any) -> None:
    if CONTROLLER is not None and isinstance(event.get("object"), dict):
        CONTROLLER.on_run(event.get("type"), event["object"])
