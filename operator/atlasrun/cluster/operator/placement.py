"""Placement overrides: a run's and a model's ``Placement`` applied to a rendered Job.

Pure functions on manifest dicts (the renderer in ``manifests.py`` calls them last):
``merged(run, model)`` is the effective placement (the model's fields win, then the run's,
then the chart defaults passed as ``defaults``); ``apply_placement(pod_spec, placement)``
sets the pod-level fields; ``apply_job_placement(job, placement, queue_name)`` also sets the
Job's ``activeDeadlineSeconds`` and, for Kueue, the ``kueue.x-k8s.io/queue-name`` label with
the Job created suspended (Kueue unsuspends it when the workload is admitted).
"""

from __future__ import annotations

import copy
from typing import Any

from atlasrun.cluster.wire.contract import LABEL_QUEUE, RUNNER
from atlasrun.errors import InputError
from atlasrun.runspec.run import Placement

DATA_VOLUME = "data"


def merged(*layers: Placement | None) -> Placement:
    """Later layers win field by field: ``merged(chart_defaults, run, model)``."""
    update: dict[str, Any] = {}
    for layer in layers:
        if layer is not None:
            update.update({k: v for k, v in layer.model_dump(exclude_none=True).items()})
    return Placement.model_validate(update)


def apply_placement(pod_spec: dict[str, Any], placement: Placement) -> dict[str, Any]:
    """A copy of ``pod_spec`` with ``placement``'s pod-level fields applied."""
    pod = copy.deepcopy(pod_spec)
    p = placement
    if p.runner_resources is not None or p.sidecar_resources is not None:
        for group in ("containers", "initContainers"):
            for container in pod.get(group, []):
                # Sidecars are restartable init containers; the data seeder keeps its own.
                is_runner = container.get("name") == RUNNER
                is_sidecar = group == "initContainers" and container.get("restartPolicy") == "Always"
                resources = p.runner_resources if is_runner else p.sidecar_resources if is_sidecar else None
                if resources is not None:
                    container["resources"] = copy.deepcopy(resources)
    if p.node_selector is not None:
        pod["nodeSelector"] = dict(p.node_selector)
    if p.tolerations is not None:
        pod["tolerations"] = copy.deepcopy(p.tolerations)
    if p.affinity is not None:
        pod["affinity"] = copy.deepcopy(p.affinity)
    if p.priority_class_name is not None:
        pod["priorityClassName"] = p.priority_class_name
    if p.image_pull_secrets is not None:
        pod["imagePullSecrets"] = [{"name": name} for name in p.image_pull_secrets]
    if p.service_account_name is not None:
        pod["serviceAccountName"] = p.service_account_name
    if p.data_volume_size is not None:
        for volume in pod.get("volumes", []):
            if volume.get("name") == DATA_VOLUME and "emptyDir" in volume:
                volume["emptyDir"]["sizeLimit"] = p.data_volume_size
    return pod


def apply_job_placement(
    job: dict[str, Any], placement: Placement, queue_name: str | None = None
) -> dict[str, Any]:
    """A copy of a batch/v1 Job with ``placement`` and the Kueue queue applied."""
    out = copy.deepcopy(job)
    spec = out["spec"]
    spec["template"]["spec"] = apply_placement(spec["template"]["spec"], placement)
    if placement.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = placement.active_deadline_seconds
    if queue_name:
        out["metadata"].setdefault("labels", {})[LABEL_QUEUE] = queue_name
        spec["suspend"] = True
    return out


DEFAULTS_ENV = "ATLASRUN_PLACEMENT_DEFAULTS"


def chart_defaults(environ: dict[str, str]) -> Placement:
    """The chart's ``runPlacement`` values (JSON in ``ATLASRUN_PLACEMENT_DEFAULTS``); empty if unset."""
    raw = environ.get(DEFAULTS_ENV, "").strip()
    try:
        return Placement.model_validate_json(raw) if raw else Placement()
    except ValueError as exc:
        raise InputError(f"invalid placement defaults: {exc}", where=DEFAULTS_ENV) from exc
