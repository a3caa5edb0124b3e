"""Leader election with a coordination.k8s.io/v1 Lease (kopf's peering pauses, it does not elect).

Every replica runs a ``LeaderElector``; the one holding the Lease acts, the others only watch.
The holder renews every ``renew_s``; a replica takes the Lease over when its ``renewTime`` is
older than ``leaseDurationSeconds``. Every write is a replace with the Lease's resourceVersion,
so two replicas never both win one round. A leader that cannot renew for ``lease_s`` stops
acting at once (``is_leader`` turns false before any other replica may take over). On a
clean shutdown the holder releases the Lease, so the next replica takes over within
``retry_s``; when a leader dies, within ``lease_s + retry_s``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("atlasrun.leader")
LEASE_NAME = "atlasrun-operator"


def _stamp(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    text = text.rstrip("Z")
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S"):
        try:
            return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
    return None


class LeaderElector:
    def __init__(
        self,
        namespace: str,
        *,
        name: str = LEASE_NAME,
        identity: str | None = None,
        lease_s: float = 15.0,
        renew_s: float = 5.0,
        retry_s: float = 2.0,
        on_change: Callable[[bool], None] = lambda leading: None,
    ) -> None:
        from kubernetes import client

        self.api = client.CoordinationV1Api()
        self.namespace, self.name = namespace, name
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.lease_s, self.renew_s, self.retry_s = lease_s, renew_s, retry_s
        self.on_change = on_change
        self._renewed = -1e9  # monotonic time of the last successful acquire/renew
        self._leading = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="leader-election", daemon=True)

    def is_leader(self) -> bool:
        return self._leading and time.monotonic() - self._renewed < self.lease_s

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._leading:
            self._release()
        self._set(False)

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._set(self._try())
            except Exception as exc:  # the API server unreachable: keep trying, lose the lead in time
                log.warning("leader election: %s", exc)
                if not self.is_leader():
                    self._set(False)
            self._stop.wait(self.renew_s if self._leading else self.retry_s)

    def _set(self, leading: bool) -> None:
        if leading != self._leading:
            log.info("leader election: %s %s", self.identity, "leads" if leading else "stands by")
            self._leading = leading
            self.on_change(leading)

    def _try(self) -> bool:
        from kubernetes.client.rest import ApiException

        now = dt.datetime.now(dt.UTC)
        try:
            response = self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            lease: dict[str, Any] = json.loads(response.data)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return self._create(now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = _parse(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.lease_s)
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder != self.identity and holder and not expired:
            return False
        spec = dict(spec)
        if holder != self.identity:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = _stamp(now)
        spec.update(
            {
                "holderIdentity": self.identity,
                "renewTime": _stamp(now),
                "leaseDurationSeconds": int(self.lease_s),
            }
        )
        lease["spec"] = spec
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:  # someone else wrote first
                return False
            raise
        self._renewed = time.monotonic()
        return True

    def _create(self, now: dt.datetime) -> bool:
        from kubernetes.client.rest import ApiException

        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_s),
                "acquireTime": _stamp(now),
                "renewTime": _stamp(now),
                "leaseTransitions": 0,
            },
        }
        try:
            self.api.create_namespaced_lease(self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._renewed = time.monotonic()
        return True

    def _release(self) -> None:
        try:
            response = self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            lease = json.loads(response.data)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["renewTime"] = _stamp(dt.datetime(1970, 1, 1, tzinfo=dt.UTC))
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except Exception as exc:
            log.warning("leader election: release failed: %s", exc)
