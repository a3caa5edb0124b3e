"""Kueue: why a run's queued Jobs wait, read from their Workloads.

With ``spec.cluster.queueName`` every Job is created suspended with the
``kueue.x-k8s.io/queue-name`` label (``placement.apply_job_placement``); Kueue creates a Workload
per Job (owner reference: the Job), admits it when the ClusterQueue has quota and then unsuspends
the Job (the operator never does, see ``reconcile.decide``). While a Workload waits,
``pending(...)`` gives the run's ``Blocked/QuotaPending`` condition with Kueue's own message
(e.g. "couldn't assign flavors to pod set main: insufficient quota for cpu ..." or
"LocalQueue team-a doesn't exist").

Workloads are read as ``kueue.x-k8s.io/v1beta1`` (served by every Kueue release with this API,
v0.15 included). Without Kueue (no such resource) or without the RBAC to read Workloads the
reader reports nothing and the run simply stays Pending.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta1", "workloads"
QUOTA_PENDING = "QuotaPending"
ADMITTED = ("QuotaReserved", "Admitted")

log = logging.getLogger("atlasrun.queueing")


def _owner_job(workload: Mapping[str, Any]) -> str | None:
    for owner in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == "Job" and owner.get("apiVersion", "").startswith("batch/"):
            return str(owner.get("name"))
    return None


def pending(workloads: Iterable[Mapping[str, Any]], queued_jobs: Iterable[str]) -> tuple[str, str] | None:
    """``(QuotaPending, message)`` for the first of ``queued_jobs`` (suspended, queue-labelled Jobs
    of a run) whose Workload Kueue has not admitted; None when none waits (or no Workload exists
    yet: Kueue has not seen the Job)."""
    names = set(queued_jobs)
    waiting = []
    for workload in workloads:
        job = _owner_job(workload)
        if job is None or job not in names:
            continue
        conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
        if any((conditions.get(kind) or {}).get("status") == "True" for kind in ADMITTED):
            continue
        reserved = conditions.get("QuotaReserved") or conditions.get("Pending") or {}
        message = reserved.get("message") or "waiting for Kueue to reserve quota"
        queue = ((workload.get("spec") or {}).get("queueName")) or "?"
        waiting.append((job, f"Kueue has not admitted Job {job} (LocalQueue {queue}): {message}"))
    if not waiting:
        return None
    job, message = sorted(waiting)[0]
    more = len(waiting) - 1
    return QUOTA_PENDING, message + (f" (and {more} more Job(s) of this run)" if more else "")


class WorkloadReader:
    """Lists Kueue Workloads of a namespace (plain JSON); empty without Kueue or RBAC."""

    def __init__(self) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi()
        self._unavailable_logged = False

    def list(self, namespace: str) -> list[dict[str, Any]]:
        from kubernetes.client.rest import ApiException

        try:
            response = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, _preload_content=False
            )
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            if not self._unavailable_logged:
                log.warning(
                    "cannot read Kueue Workloads (%s %s): queue waits stay unexplained",
                    exc.status,
                    exc.reason,
                )
                self._unavailable_logged = True
            return []
        return list(json.loads(response.data).get("items") or [])
