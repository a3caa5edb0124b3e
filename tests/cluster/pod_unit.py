"""The WorkUnit a run pod carries, with its plan resolved: tests that answer for the runner (the
node stand-in's instant pods, the real node's fault tests) need the pod's item. A unit whose plan
is by reference (version 2) is resolved from object storage as ``atlas run-task`` does, verified
against its sha256."""

from __future__ import annotations

from typing import Any

from atlasrun.cluster.wire.contract import ANNOTATION_INDEX, ENV_WORK_UNIT, RUNNER, WorkUnit
from atlasrun.cluster.wire.store import S3Results, read_plan

TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}  # moto's


def pod_unit(pod: dict[str, Any], s3_endpoint: str) -> WorkUnit:
    """The pod's WorkUnit with its items (read from the plan in object storage if need be)."""
    runner = next(c for c in pod["spec"]["containers"] if c["name"] == RUNNER)
    unit = WorkUnit.model_validate_json(next(e["value"] for e in runner["env"] if e["name"] == ENV_WORK_UNIT))
    if unit.plan is None or unit.items:
        return unit
    plan = read_plan(unit.plan, lambda uri: S3Results(uri, s3_endpoint, env=TEST_CREDENTIALS))
    return unit.resolve(plan)


def pod_item(pod: dict[str, Any], s3_endpoint: str) -> tuple[WorkUnit, str, int]:
    """(unit, task id, repeat) of the item a one-item-per-pod run pod works on."""
    unit = pod_unit(pod, s3_endpoint)
    task, repeat = unit.item(int(pod["metadata"]["annotations"][ANNOTATION_INDEX]))
    return unit, task, repeat
