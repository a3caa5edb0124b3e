"""Kueue: why a run's queued Jobs wait, read from their Workloads.

With ``spec.cluster.queueName`` every Job is created suspended with the
``kueue.x-k8s.io/queue-name`` label (``placement.apply_job_placement``); Kueue creates a Workload
per Job (owner reference: the Job), admits it when the ClusterQueue has quota and then unsuspends
the Job (the operator never does, see ``reconcile.decide``). While a Workload waits,
``pending(...)`` gives the run's ``Blocked/QuotaPending`` condition with Kueue's own message
(e.g. "couldn't assign flavors to pod set main: insufficient quota for cpu ..." or
"LocalQueue team-a doesn't exist").

Suspending a queued run cannot go through the Jobs (Kueue unsuspends an admitted Job again):
the operator deactivates the Jobs' Workloads (``spec.active: false``), Kueue evicts them and
suspends the Jobs, keeping their progress; on resume it reactivates them (``inactive(...)``
names those still deactivated) and Kueue admits them again.

Workloads are read and patched in the newest API version the cluster serves (``v1beta2`` since
Kueue v0.15, else ``v1beta1``): the fields used here (conditions, ``spec.active``,
``spec.queueName``) are the same in both, and the version Kueue itself works in needs no
conversion. Without Kueue (no such resource) or without the RBAC to read Workloads the reader
reports nothing and the run simply stays Pending.

The chart's ``kueue.defaultQueueName`` (env ``ATLASRUN_KUEUE_DEFAULT_QUEUE``) is the LocalQueue of
every run without ``spec.cluster.queueName`` (``with_default_queue``): the operator applies it to
the parsed spec once, in observe, so every step (Job labels, suspend, QuotaPending) sees one queue.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody

GROUP, PLURAL = "kueue.x-k8s.io", "workloads"
VERSIONS = ("v1beta2", "v1beta1")  # newest first
QUOTA_PENDING = "QuotaPending"
ADMITTED = ("QuotaReserved", "Admitted")

log = logging.getLogger("atlasrun.queueing")
DEFAULT_QUEUE_ENV = "ATLASRUN_KUEUE_DEFAULT_QUEUE"
# A LocalQueue name that is also a valid label value (the Job's kueue.x-k8s.io/queue-name).
_QUEUE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


def default_queue(environ: Mapping[str, str]) -> str | None:
    """The chart's ``kueue.defaultQueueName`` (``ATLASRUN_KUEUE_DEFAULT_QUEUE``); None if unset."""
    name = environ.get(DEFAULT_QUEUE_ENV, "").strip()
    if name and not _QUEUE_NAME.match(name):
        raise InputError(
            f"kueue.defaultQueueName {name!r} is not a LocalQueue name (lowercase letters, digits, "
            "'-' and '.', at most 63 characters, starting and ending alphanumeric)",
            where=DEFAULT_QUEUE_ENV,
        )
    return name or None


def with_default_queue(body: RunSpecBody, queue: str | None) -> RunSpecBody:
    """``body`` with ``spec.cluster.queueName`` set to ``queue`` when the run names none."""
    if not queue or body.cluster.queue_name:
        return body
    cluster = body.cluster.model_copy(update={"queue_name": queue})
    return body.model_copy(update={"cluster": cluster})


def _owner_job(workload: Mapping[str, Any]) -> str | None:
    for owner in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == "Job" and owner.get("apiVersion", "").startswith("batch/"):
            return str(owner.get("name"))
    return None


def owned(workloads: Iterable[Mapping[str, Any]], jobs: Iterable[str]) -> list[Mapping[str, Any]]:
    """The Workloads of ``jobs`` (by the Job owner reference)."""
    names = set(jobs)
    return [w for w in workloads if _owner_job(w) in names]


def inactive(workloads: Iterable[Mapping[str, Any]], jobs: Iterable[str]) -> list[str]:
    """Names of the Workloads of ``jobs`` that are deactivated (``spec.active: false``)."""
    return sorted(
        str(w["metadata"]["name"])
        for w in owned(workloads, jobs)
        if (w.get("spec") or {}).get("active") is False
    )


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
    """Lists Kueue Workloads of a namespace (plain JSON; empty without Kueue or RBAC) and
    (de)activates them."""

    def __init__(self) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi()
        self.version: str | None = None  # the first of VERSIONS the cluster serves
        self._unavailable_logged = False

    def list(self, namespace: str) -> list[dict[str, Any]]:
        from kubernetes.client.rest import ApiException

        error: ApiException | None = None
        for version in (self.version,) if self.version else VERSIONS:
            try:
                response = self.custom.list_namespaced_custom_object(
                    GROUP, version, namespace, PLURAL, _preload_content=False
                )
            except ApiException as exc:
                if exc.status not in (403, 404):
                    raise
                error = exc
                continue
            self.version = version
            return list(json.loads(response.data).get("items") or [])
        if not self._unavailable_logged and error is not None:
            log.warning(
                "cannot read Kueue Workloads (%s %s): queue waits stay unexplained",
                error.status,
                error.reason,
            )
            self._unavailable_logged = True
        return []

    def set_active(self, namespace: str, names: Iterable[str], active: bool) -> None:
        from kubernetes.client.rest import ApiException

        version = self.version or VERSIONS[0]
        for name in names:
            try:
                self.custom.patch_namespaced_custom_object(
                    GROUP, version, namespace, PLURAL, name, {"spec": {"active": active}}
                )
            except ApiException as exc:
                if exc.status != 404:  # gone with its Job: nothing to do
                    raise
