"""What holds a run's pods (Unschedulable, QuotaExceeded, ImagePullBackOff), looked up off the pass.

Only while some live Job has pods waiting (active > ready) or fewer pods than it may have (the
Job controller cannot create them), and at most every ``HEALTH_RECHECK_S / 2`` seconds per run:
one LIST of the run's Pending pods, one LIST of the Job controller's FailedCreate Events. The
lookup runs on a thread of its own, so a pass never waits on it: the pass uses the latest answer,
and a changed answer queues a pass (``on_change``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from atlasrun.cluster.operator import kube
from atlasrun.cluster.operator.manifests import run_labels
from atlasrun.cluster.operator.reconcile import HEALTH_RECHECK_S, JobObs

log = logging.getLogger("atlasrun.health")
Problem = tuple[str, str]

# Which problem names the run's condition when pods wait for several reasons: an image that cannot
# be pulled never resolves by waiting (and its pods hold the node's capacity, so their siblings
# report Unschedulable); quota and capacity may free up.
_PROBLEM_RANK = {"ImagePullBackOff": 0, "QuotaExceeded": 1, "Unschedulable": 2}


class Lister(Protocol):
    def list(self, kind: str, namespace: str, **params: Any) -> list[dict[str, Any]]: ...  # Events: raw
    def pods(self, namespace: str, **params: Any) -> Sequence[kube.Pod]: ...


class PodHealth:
    def __init__(self, api: Lister, on_change: Callable[[str], None] | None = None) -> None:
        self.api = api
        self.on_change = on_change  # called with "namespace/run" when a lookup's answer changed
        self._at: dict[str, float] = {}
        self._found: dict[str, tuple[Problem, ...]] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="health")

    def check(self, namespace: str, run: str, jobs: Sequence[JobObs]) -> tuple[Problem, ...]:
        """The latest answer for the run; starts a lookup when one is due."""
        live = [j for j in jobs if not j.finished and not j.deleting and not j.suspended]
        starved = {j.name for j in live if j.active < min(j.parallelism, j.remaining)}
        waiting = any(j.active > j.ready for j in live)
        key = f"{namespace}/{run}"
        with self._lock:
            if not starved and not waiting:
                self._found.pop(key, None)
                return ()
            due = time.monotonic() - self._at.get(key, -1e9) >= HEALTH_RECHECK_S / 2
            if due and key not in self._running:
                self._at[key] = time.monotonic()
                self._running.add(key)
                progressing = any(j.ready for j in live)
                active = sum(j.active for j in live)
                self._pool.submit(self._lookup, key, namespace, run, waiting, starved, progressing, active)
            return self._found.get(key, ())

    def forget(self, key: str) -> None:
        with self._lock:
            self._at.pop(key, None)
            self._found.pop(key, None)

    def _lookup(
        self,
        key: str,
        namespace: str,
        run: str,
        waiting: bool,
        starved: set[str],
        progressing: bool,
        active: int,
    ) -> None:
        try:
            problems, pending = self._problems(namespace, run, waiting, starved)
            found = holding(problems, progressing or started(active, pending))
        except Exception as exc:  # the API: the next lookup tries again
            log.warning("cannot look up what holds the pods of %s: %s", key, exc)
            with self._lock:
                self._running.discard(key)
            return
        with self._lock:
            self._running.discard(key)
            changed = self._found.get(key, ()) != found
            self._found[key] = found
        if changed and self.on_change is not None:
            self.on_change(key)

    def _problems(
        self, namespace: str, run: str, waiting: bool, starved: set[str]
    ) -> tuple[list[Problem], Sequence[kube.Pod]]:
        """The problems found, and the run's Pending pods (listed only when some wait)."""
        found: list[Problem] = []
        pending: Sequence[kube.Pod] = ()
        if waiting:
            selector = ",".join(f"{k}={v}" for k, v in run_labels(run).items())
            pending = self.api.pods(namespace, label_selector=selector, field_selector="status.phase=Pending")
            for pod in pending:
                problem = pod_problem(pod)
                if problem and problem not in found:
                    found.append(problem)
        if starved:
            events = self.api.list(
                "events", namespace, field_selector="involvedObject.kind=Job,reason=FailedCreate"
            )
            for event in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
                if (event.get("involvedObject") or {}).get("name") in starved and "quota" in (
                    event.get("message") or ""
                ):
                    found = [p for p in found if p[0] != "QuotaExceeded"]
                    found.append(
                        (
                            "QuotaExceeded",
                            f"the Job controller cannot create pods: {event.get('message', '')}",
                        )
                    )
        return found, pending


def started(active: int, pending: Sequence[kube.Pod]) -> bool:
    """Some pod of the run is past scheduling: running (the Jobs count more active pods than are
    Pending) or scheduled and starting its containers (native sidecars first)."""
    if active > len(pending):
        return True
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "True"
        for pod in pending
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def holding(found: list[Problem], progressing: bool) -> tuple[Problem, ...]:
    """The problems holding a run's pods, most telling first, one per kind. A pod that waits for
    capacity while others of the run run or start is queueing, not held: Unschedulable then drops."""
    kept: dict[str, Problem] = {}
    for problem in found:
        if problem[0] == "Unschedulable" and progressing:
            continue
        kept.setdefault(problem[0], problem)
    return tuple(sorted(kept.values(), key=lambda p: _PROBLEM_RANK.get(p[0], len(_PROBLEM_RANK))))


def pod_problem(pod: kube.Pod) -> Problem | None:
    st = pod.get("status") or {}
    name = pod["metadata"]["name"]
    for c in st.get("conditions") or []:
        if (
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ):
            return "Unschedulable", f"pod {name} cannot be scheduled: {c.get('message', '')}"
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
            return (
                "ImagePullBackOff",
                f"pod {name} container {cs.get('name')} cannot pull {cs.get('image', '')}: "
                f"{waiting.get('message') or waiting.get('reason')}",
            )
    return None
