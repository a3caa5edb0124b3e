"""Placement overrides (atlasrun.cluster.operator.placement) applied to a Job the renderer built."""

from __future__ import annotations

from typing import Any

import pytest

from atlasrun.cluster.operator.placement import (
    DEFAULTS_ENV,
    LABEL_QUEUE,
    apply_job_placement,
    apply_placement,
    chart_defaults,
    merged,
)
from atlasrun.errors import InputError
from atlasrun.runspec.run import Placement, RunSpecBody
from atlasrun.servers.catalog import ServerSpec


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


def test_render_job_layers_chart_run_and_model_placement_and_kueue() -> None:
    from atlasrun.cluster.operator.manifests import render_job
    from atlasrun.cluster.wire.contract import TasksRef, WorkUnit

    body = RunSpecBody.model_validate(
        {
            "tasks": {"configMap": "t"},
            "models": [
                {
                    "name": "big",
                    "placement": {
                        "nodeSelector": {"gpu": "yes"},
                        "runnerResources": {"limits": {"cpu": "4"}},
                    },
                },
                {"name": "small"},
            ],
            "cluster": {
                "queueName": "team-a",
                "placement": {
                    "nodeSelector": {"pool": "eval"},
                    "tolerations": [{"key": "eval", "operator": "Exists", "effect": "NoSchedule"}],
                    "priorityClassName": "low",
                },
            },
        }
    )
    chart = Placement.model_validate(
        {
            "priorityClassName": "batch",
            "affinity": {"nodeAffinity": {}},
            "sidecarResources": {"requests": {"cpu": "50m"}},
        }
    )
    unit = WorkUnit(
        run="r",
        model="big",
        chunk=0,
        items=[("t1", 0)],
        tasks=TasksRef(sha256="0" * 64, uri="s3://b/t"),
        results_uri="",
    )
    server = ServerSpec(name="calc", command="calc", image="ghcr.io/x/calc@sha256:" + "a" * 64, port=9000)

    def render(model: int) -> dict[str, Any]:
        return render_job(
            "r",
            "uid",
            "ns",
            body,
            body.models[model],
            unit,
            [server],
            runner_image="ghcr.io/x/runner@sha256:" + "b" * 64,
            spec_configmap="cm",
            s3_secret=None,
            s3_endpoint=None,
            placement=chart,
        )

    big, small = render(0)["spec"], render(1)["spec"]
    pod = big["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu": "yes"}  # the model's
    assert pod["priorityClassName"] == "low"  # the run's over the chart's
    assert pod["affinity"] == {"nodeAffinity": {}}  # the chart's
    assert pod["tolerations"][0]["key"] == "eval"
    runner = next(c for c in pod["containers"] if c["name"] == "runner")
    sidecar = next(c for c in pod["initContainers"] if c["name"] == "mcp-calc")
    assert runner["resources"] == {"limits": {"cpu": "4"}} and sidecar["resources"] == {
        "requests": {"cpu": "50m"}
    }
    assert small["template"]["spec"]["nodeSelector"] == {"pool": "eval"}
    assert small["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "250m"  # built-in
    assert big["suspend"] is True and render(0)["metadata"]["labels"][LABEL_QUEUE] == "team-a"


def test_with_kueue_the_operator_never_unsuspends_a_job() -> None:
    """Kueue unsuspends a Job when it admits its Workload; the operator must not bypass the quota."""
    from atlasrun.cluster.operator.reconcile import JobObs, PlannedTask, Snapshot, TasksObs, decide
    from atlasrun.cluster.wire.contract import TasksRef

    def snapshot(queue: str | None) -> Snapshot:
        spec = {"tasks": {"configMap": "t"}, "models": [{"name": "m"}], "cluster": {"itemsPerJob": 2}}
        if queue:
            spec["cluster"]["queueName"] = queue  # type: ignore[index]
        tasks = TasksObs(
            pin=TasksRef(sha256="0" * 64, uri="s3://b/t"), runnable=(PlannedTask("a"), PlannedTask("b"))
        )
        job = JobObs(name="m-c0", model="m", chunk=0, completions=2, parallelism=2, suspended=True)
        return Snapshot(
            name="r",
            uid="u",
            generation=1,
            body=RunSpecBody.model_validate(spec),
            status={},
            now="2026-01-01T00:00:00Z",
            tasks=tasks,
            jobs=(job,),
        )

    assert decide(snapshot(None)).resume == ["m-c0"]
    assert decide(snapshot("team-a")).resume == []
