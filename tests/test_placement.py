"""Placement overrides (atlasrun.cluster.placement) applied to a Job the renderer built."""

from __future__ import annotations

from typing import Any

import pytest

from atlasrun.cluster.placement import (
    DEFAULTS_ENV,
    LABEL_QUEUE,
    apply_job_placement,
    apply_placement,
    chart_defaults,
    merged,
)
from atlasrun.errors import InputError
from atlasrun.runspec.run import Placement, RunSpecBody


def pod() -> dict[str, Any]:
    return {
        "initContainers": [
            {"name": "seed-data", "resources": {"limits": {"cpu": "1"}}},
            {"name": "srv", "restartPolicy": "Always", "resources": {}},
        ],
        "containers": [{"name": "runner", "resources": {}}],
        "volumes": [
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "data", "emptyDir": {"sizeLimit": "2Gi"}},
        ],
    }


def job() -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "labels": {"a": "b"}},
        "spec": {"suspend": False, "template": {"spec": pod()}},
    }


def test_apply_placement_sets_pod_fields_and_leaves_input_alone() -> None:
    original = pod()
    placement = Placement.model_validate(
        {
            "runnerResources": {"requests": {"cpu": "2"}},
            "sidecarResources": {"limits": {"memory": "1Gi"}},
            "nodeSelector": {"pool": "eval"},
            "tolerations": [{"key": "eval", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}},
            "priorityClassName": "low",
            "imagePullSecrets": ["regcred"],
            "serviceAccountName": "runner",
            "dataVolumeSize": "10Gi",
        }
    )
    out = apply_placement(original, placement)
    assert original == pod()
    assert out["containers"][0]["resources"] == {"requests": {"cpu": "2"}}
    assert out["initContainers"][1]["resources"] == {"limits": {"memory": "1Gi"}}
    assert out["initContainers"][0]["resources"] == {"limits": {"cpu": "1"}}  # the seeder keeps its own
    assert out["nodeSelector"] == {"pool": "eval"} and out["priorityClassName"] == "low"
    assert out["tolerations"] == [{"key": "eval", "operator": "Exists"}]
    assert out["affinity"] == {"nodeAffinity": {}} and out["serviceAccountName"] == "runner"
    assert out["imagePullSecrets"] == [{"name": "regcred"}]
    assert out["volumes"][1]["emptyDir"]["sizeLimit"] == "10Gi"
    assert out["volumes"][0]["emptyDir"]["sizeLimit"] == "1Gi"
    assert apply_placement(pod(), Placement()) == pod()


def test_model_placement_wins_over_run_and_chart_defaults() -> None:
    body = RunSpecBody.model_validate(
        {
            "tasks": {"path": "t.jsonl"},
            "models": [{"name": "big", "placement": {"nodeSelector": {"gpu": "yes"}}}, {"name": "small"}],
            "cluster": {"placement": {"nodeSelector": {"pool": "eval"}, "priorityClassName": "low"}},
        }
    )
    chart = Placement(priority_class_name="default", data_volume_size="4Gi")
    big = merged(chart, body.cluster.placement, body.models[0].placement)
    assert (
        big.node_selector == {"gpu": "yes"}
        and big.priority_class_name == "low"
        and big.data_volume_size == "4Gi"
    )
    small = merged(chart, body.cluster.placement, body.models[1].placement)
    assert small.node_selector == {"pool": "eval"}


def test_kueue_queue_creates_suspended_labelled_job() -> None:
    out = apply_job_placement(job(), Placement(active_deadline_seconds=600), queue_name="team-a")
    assert out["metadata"]["labels"] == {"a": "b", LABEL_QUEUE: "team-a"}
    assert out["spec"]["suspend"] is True and out["spec"]["activeDeadlineSeconds"] == 600
    plain = apply_job_placement(job(), Placement())
    assert plain == job()


def test_chart_defaults_from_env() -> None:
    env = {DEFAULTS_ENV: '{"priorityClassName": "batch", "dataVolumeSize": "8Gi"}'}
    assert chart_defaults(env) == Placement(priority_class_name="batch", data_volume_size="8Gi")
    assert chart_defaults({}) == Placement()
    with pytest.raises(InputError, match=DEFAULTS_ENV):
        chart_defaults({DEFAULTS_ENV: '{"hostNetwork": true}'})
