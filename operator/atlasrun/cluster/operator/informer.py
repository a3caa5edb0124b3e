"""Watch-fed caches of the runs' Jobs and finished pods: a pass reads memory, not the API.

One ``Informer`` per (kind, namespace) where AtlasRuns live: a LIST, then a WATCH from the list's
resourceVersion (bookmarks on, the server ends it every few minutes and it resumes from the last
version seen); 410 Gone or a broken stream: LIST again. The label selector is the operator's own
(``app.kubernetes.io/name=atlasrun``); the pod informer also has a field selector, so it only
ever sees finished pods (Succeeded or Failed). Objects are kept trimmed to what ``observe`` reads.

The caches may lag the API by a watch event; ``observe`` accounts for that: a finished Job whose
pods are not all cached yet is read with one LIST, a Job this operator created or patched is put
in the cache from the write's answer, one it deleted is marked deleting at once. Until an
informer's first LIST has returned, ``objects`` is None and observe LISTs as before.

Inside, objects are the API server's JSON (``Obj``); ``Informers`` hands them out as the views of
``kube.py`` (``jobs``, ``finished_pods``).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from atlasrun.cluster.operator import kube
from atlasrun.cluster.wire.contract import ANNOTATION_INDEX, APP, LABEL_APP, LABEL_JOB_NAME, RUNNER

log = logging.getLogger("atlasrun.informer")
WATCH_TIMEOUT_S = 290  # the server ends each WATCH after this; it resumes from the last version
RETRY_S = 2.0  # after a failed LIST or WATCH; doubles up to MAX_RETRY_S while they keep failing
MAX_RETRY_S = 60.0
FINISHED = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"

Obj = dict[str, Any]  # an object as a LIST or WATCH delivered it (trimmed)
ListCall = Callable[..., Any]  # a kubernetes client list_namespaced_* method


def rv(obj: Mapping[str, Any]) -> int:
    text = str((obj.get("metadata") or {}).get("resourceVersion") or "0")
    return int(text) if text.isdigit() else 0


class Informer:
    """LIST + WATCH of one kind in one namespace into a dict by name (thread-safe)."""

    def __init__(
        self,
        list_call: ListCall,
        namespace: str,
        *,
        fields: str | None = None,
        trim: Callable[[Obj], Obj] = lambda o: o,
        on_event: Callable[[Obj], None] | None = None,
    ) -> None:
        self.list_call, self.namespace = list_call, namespace
        self.params: dict[str, Any] = {"label_selector": f"{LABEL_APP}={APP}"}
        if fields:
            self.params["field_selector"] = fields
        self.trim, self.on_event = trim, on_event
        self._objects: dict[str, Obj] | None = None  # None until the first LIST
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{namespace}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ends the thread: its WATCH's socket is shut down (closing the response from here would
        wait for the reading thread's next event)."""
        self._stop.set()
        connection = getattr(self._response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass

    # ------------------------------------------------------------------ reads and local writes

    def objects(self) -> list[Obj] | None:
        """Every cached object, or None before the first LIST returned."""
        with self._lock:
            return None if self._objects is None else list(self._objects.values())

    def put(self, obj: Obj) -> None:
        """An object as a write of ours returned it (newer than the cache unless an event was faster)."""
        with self._lock:
            if self._objects is not None:
                self._upsert(self.trim(obj))

    def update(self, name: str, change: Callable[[Obj], Obj]) -> None:
        """Replace the cached ``name`` by ``change(it)`` (same resourceVersion: the next event wins)."""
        with self._lock:
            if self._objects is not None and name in self._objects:
                self._objects[name] = change(self._objects[name])

    # ------------------------------------------------------------------ the loop

    def _upsert(self, obj: Obj) -> bool:
        name = obj["metadata"]["name"]
        assert self._objects is not None
        known = self._objects.get(name)
        if known is not None and rv(known) > rv(obj):
            return False
        self._objects[name] = obj
        return True

    def _run(self) -> None:
        version: str | None = None
        delay = RETRY_S
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    delay = RETRY_S
                version = self._watch(version)
            except Exception as exc:  # API unreachable, forbidden, 410 Gone, a broken stream: LIST again
                if self._stop.is_set():
                    return
                log.warning(
                    "watch of %s in %s: %s; listing again in %.0fs", self._kind(), self.namespace, exc, delay
                )
                version = None
                self._stop.wait(delay)
                delay = min(MAX_RETRY_S, delay * 2)

    def _kind(self) -> str:
        return str(getattr(self.list_call, "__name__", "objects")).removeprefix("list_namespaced_")

    def _list(self) -> str:
        response = self.list_call(self.namespace, _preload_content=False, **self.params)
        data = json.loads(response.data)
        listed = {o["metadata"]["name"]: self.trim(o) for o in data.get("items") or []}
        version = str(data["metadata"]["resourceVersion"])
        with self._lock:
            if self._objects is not None:  # keep what our writes put that is newer than the LIST
                at = int(version) if version.isdigit() else 0
                for name, known in self._objects.items():
                    if name not in listed and rv(known) > at:
                        listed[name] = known
            self._objects = listed
        if self.on_event is not None:
            for obj in listed.values():
                self.on_event(obj)
        return version

    def _watch(self, version: str) -> str:
        from kubernetes.watch.watch import iter_resp_lines

        response = self.list_call(
            self.namespace,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
            _preload_content=False,
            _request_timeout=(10, WATCH_TIMEOUT_S + 30),
            **self.params,
        )
        self._response = response
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise RuntimeError(f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    continue
                trimmed = self.trim(obj)
                with self._lock:
                    assert self._objects is not None
                    if kind == "DELETED":
                        self._objects.pop(trimmed["metadata"]["name"], None)
                        changed = True
                    else:
                        changed = self._upsert(trimmed)
                if changed and self.on_event is not None:
                    self.on_event(trimmed)
        finally:
            self._response = None
            response.close()
            response.release_conn()
        return version


def trim_job(job: Obj) -> Obj:
    meta = job.get("metadata") or {}
    meta.pop("managedFields", None)
    return job


TERMINATED_KEPT = ("message", "startedAt", "finishedAt")


def trim_pod(pod: Obj) -> Obj:
    """What counting needs of a finished pod: index, attempt order, phase, the runner's message,
    and for its cost the pod's start and the runner's end."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    runner = [
        {
            "name": RUNNER,
            "state": {"terminated": {k: v for k, v in terminated.items() if k in TERMINATED_KEPT}},
        }
        for cs in status.get("containerStatuses") or []
        if cs.get("name") == RUNNER and (terminated := (cs.get("state") or {}).get("terminated"))
    ]
    return {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "labels": {LABEL_JOB_NAME: (meta.get("labels") or {}).get(LABEL_JOB_NAME)},
            "annotations": {ANNOTATION_INDEX: (meta.get("annotations") or {}).get(ANNOTATION_INDEX)},
        },
        "status": {
            "phase": status.get("phase"),
            "startTime": status.get("startTime"),
            "reason": status.get("reason"),
            "message": status.get("message"),
            "containerStatuses": runner,
        },
    }


class Informers:
    """The Job and finished-pod informers of each namespace that holds runs.

    ``on_job`` is called (from the informer's thread) with every Job that changed."""

    def __init__(self, jobs: ListCall, pods: ListCall, on_job: Callable[[Obj], None]) -> None:
        self._calls = (jobs, pods)
        self.on_job = on_job
        self._by_namespace: dict[str, tuple[Informer, Informer]] = {}
        self._lock = threading.Lock()

    def ensure(self, namespace: str) -> None:
        with self._lock:
            if namespace in self._by_namespace:
                return
            jobs = Informer(self._calls[0], namespace, trim=trim_job, on_event=self.on_job)
            pods = Informer(self._calls[1], namespace, fields=FINISHED, trim=trim_pod)
            self._by_namespace[namespace] = (jobs, pods)
        jobs.start()
        pods.start()

    def release(self, namespace: str) -> None:
        with self._lock:
            pair = self._by_namespace.pop(namespace, None)
        for informer in pair or ():
            informer.stop()

    def stop(self) -> None:
        for namespace in list(self._by_namespace):
            self.release(namespace)

    def _pair(self, namespace: str) -> tuple[Informer, Informer] | None:
        with self._lock:
            return self._by_namespace.get(namespace)

    def jobs(self, namespace: str) -> list[kube.Job] | None:
        pair = self._pair(namespace)
        jobs = None if pair is None else pair[0].objects()
        return None if jobs is None else kube.jobs(jobs)

    def finished_pods(self, namespace: str) -> dict[str, list[kube.Pod]] | None:
        """The namespace's cached finished pods by Job name (None: not listed yet)."""
        pair = self._pair(namespace)
        pods = None if pair is None else pair[1].objects()
        if pods is None:
            return None
        by_job: dict[str, list[kube.Pod]] = {}
        for pod in kube.pods(pods):
            name = pod["metadata"]["labels"].get(LABEL_JOB_NAME)
            if name:
                by_job.setdefault(name, []).append(pod)
        return by_job

    def job_written(self, namespace: str, job: Obj) -> None:
        if (pair := self._pair(namespace)) is not None:
            pair[0].put(trim_job(job))

    def job_deleted(self, namespace: str, name: str) -> None:
        """Deleted by us: marked deleting until the watch removes it."""
        if (pair := self._pair(namespace)) is None:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        def deleting(job: Obj) -> Obj:
            return {**job, "metadata": {**job["metadata"], "deletionTimestamp": stamp}}

        pair[0].update(name, deleting)


def complete(pods: Sequence[kube.Pod], job: kube.Job) -> bool:
    """Whether ``pods`` (cached) hold every finished attempt the Job's status counts."""
    status = job.get("status") or {}
    phases = [p["status"].get("phase") for p in pods]
    return phases.count("Succeeded") >= int(status.get("succeeded") or 0) and phases.count("Failed") >= int(
        status.get("failed") or 0
    )
