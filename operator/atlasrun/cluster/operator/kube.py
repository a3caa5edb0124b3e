"""Typed views of the Kubernetes objects the operator reads: only the fields it reads.

The API server's JSON stays plain dicts (the client's model classes cost seconds per thousand
objects); these TypedDicts say which fields ``observe``, ``informer`` and ``act`` read, so a
misspelt or misplaced field is a mypy error, not a silent ``None``. Every field may be absent
(``total=False``): the server omits unset ones, and the informer's cache keeps trimmed objects.
A run's ``spec`` and ``status`` stay mappings here: ``observe`` validates them into
``RunSpecBody`` and ``RunStatus``.

The functional syntax spells each key as the API does, and keeps vulture (which cannot see a
subscript read) from reporting every field as unused.

Raw JSON becomes a view only through the functions at the end (the edges: the API reader's LIST
and GET, the informer's cache, the run as the watch delivered it). Each is an unchecked ``cast``:
the API server's schema is the promise; what users write is validated by the pydantic models.
"""

# ruff: noqa: UP013  (the functional TypedDict syntax is deliberate: see above)
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

OwnerReference = TypedDict(
    "OwnerReference", {"uid": str, "kind": str, "name": str, "controller": bool}, total=False
)

ObjectMeta = TypedDict(
    "ObjectMeta",
    {
        "name": str,
        "namespace": str,
        "uid": str,
        "labels": dict[str, str],
        "annotations": dict[str, str],
        "ownerReferences": list[OwnerReference],
        "deletionTimestamp": str,
        "creationTimestamp": str,
        "resourceVersion": str,
        "generation": int,
    },
    total=False,
)

# A Job's or a pod's condition (status "True" | "False" | "Unknown").
Condition = TypedDict("Condition", {"type": str, "status": str, "reason": str, "message": str}, total=False)

# ------------------------------------------------------------------ Job

EnvVar = TypedDict("EnvVar", {"name": str, "value": str}, total=False)
Container = TypedDict("Container", {"name": str, "env": list[EnvVar]}, total=False)
PodSpec = TypedDict("PodSpec", {"containers": list[Container]}, total=False)
PodTemplateSpec = TypedDict("PodTemplateSpec", {"spec": PodSpec}, total=False)

JobSpec = TypedDict(
    "JobSpec",
    {"completions": int, "parallelism": int, "suspend": bool, "template": PodTemplateSpec},
    total=False,
)
JobStatus = TypedDict(
    "JobStatus",
    {
        "active": int,
        "ready": int,
        "succeeded": int,  # pods (attempts), not indexes
        "failed": int,
        "completedIndexes": str,  # ranges, "0-3,7"
        "failedIndexes": str,
        "conditions": list[Condition],
    },
    total=False,
)
Job = TypedDict("Job", {"metadata": ObjectMeta, "spec": JobSpec, "status": JobStatus}, total=False)

# ------------------------------------------------------------------ Pod

Terminated = TypedDict(  # message: the runner's TaskSummary; RFC 3339 times
    "Terminated", {"message": str, "startedAt": str, "finishedAt": str}, total=False
)
Waiting = TypedDict("Waiting", {"reason": str, "message": str}, total=False)
ContainerState = TypedDict("ContainerState", {"terminated": Terminated, "waiting": Waiting}, total=False)
ContainerStatus = TypedDict(
    "ContainerStatus", {"name": str, "image": str, "state": ContainerState}, total=False
)
PodStatus = TypedDict(
    "PodStatus",
    {
        "phase": str,  # Pending | Running | Succeeded | Failed | Unknown
        "startTime": str,  # when the kubelet took the pod (RFC 3339)
        "reason": str,  # e.g. Evicted
        "message": str,
        "conditions": list[Condition],
        "containerStatuses": list[ContainerStatus],
        "initContainerStatuses": list[ContainerStatus],  # native sidecars among them
    },
    total=False,
)
Pod = TypedDict("Pod", {"metadata": ObjectMeta, "status": PodStatus}, total=False)

# ------------------------------------------------------------------ ConfigMap, AtlasRun

ConfigMap = TypedDict("ConfigMap", {"metadata": ObjectMeta, "data": dict[str, str]}, total=False)

AtlasRun = TypedDict(
    "AtlasRun",
    {
        "metadata": ObjectMeta,
        "spec": Mapping[str, Any],  # as the user wrote it: validated into RunSpecBody
        "status": Mapping[str, Any],  # as stored (camelCase): parsed into RunStatus
    },
    total=False,
)

# ------------------------------------------------------------------ the edges (raw JSON -> views)


def atlas_run(raw: Mapping[str, Any]) -> AtlasRun:
    """The run as the watch (or a write's answer) delivered it."""
    return cast(AtlasRun, raw)


def jobs(raw: list[dict[str, Any]]) -> list[Job]:
    """Jobs as a LIST or the Job informer's cache holds them."""
    return cast(list[Job], raw)


def pods(raw: list[dict[str, Any]]) -> list[Pod]:
    """Pods as a LIST or the finished-pod informer's cache (trimmed) holds them."""
    return cast(list[Pod], raw)


def config_map(raw: dict[str, Any]) -> ConfigMap:
    return cast(ConfigMap, raw)
