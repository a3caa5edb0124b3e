"""The operator on a shared cluster, on the real API server: tenancy policy, placement, egress,
the chart's ValidatingAdmissionPolicy, and runs with nothing to run.

The operator gets the chart's policy ConfigMap as its environment, exactly as the Deployment's
``envFrom`` gives it (the ConfigMap is rendered by ``helm template`` from the values below), and
the chart's RBAC. Real: kube-apiserver (CRD validation, PodSecurity ``restricted``, the
ValidatingAdmissionPolicy's CEL), kube-controller-manager (the Job controller creates the pods,
so the placement passes real pod validation and admission), moto's S3. No node: pods stay Pending.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from charts.tools import ensure_helm

from atlasrun.servers.instance import free_port
from cluster import test_operator_e2e as e2e
from cluster.controlplane import ControlPlane, wait_for
from cluster.tenant import prepare_tenant
from cluster.test_operator_e2e import GROUP_PATH, Operator, get_run, run_manifest, starter_tasks
from cluster.test_operator_scenarios import blocked_reason, condition, events_of

cp, s3 = e2e.cp, e2e.s3
pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "atlasrun"
DIGEST = "sha256:" + "0" * 64
NAMESPACE = "atlas-platform"
MINIO = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}},
    "podSelector": {"matchLabels": {"app": "minio"}},
}
K3S_DNS = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns", "tier": "dns"}}}
VALUES = [
    "policy.allowedApiHosts[0]=127.0.0.1",
    "policy.allowedApiHosts[1]=*.openai.azure.com",
    "runPlacement.dataVolumeSize=3Gi",
    "runPlacement.tolerations[0].key=atlasrun.dev/eval",
    "runPlacement.tolerations[0].operator=Exists",
    "runPlacement.tolerations[0].effect=NoSchedule",
]


def chart(
    *show_only: str, values: list[str] = VALUES, extra: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Objects the chart renders for ``show_only`` templates with ``values`` (--set) and ``extra`` (-f)."""
    args = [str(ensure_helm()), "template", "atlasrun", str(CHART), "--namespace", "atlasrun-system"]
    args += ["--set", f"image.digest={DIGEST}"]
    for value in values:
        args += ["--set", value]
    if extra:
        args += ["-f", "-"]
    for template in show_only:
        args += ["--show-only", f"templates/{template}"]
    proc = subprocess.run(args, capture_output=True, text=True, input=json.dumps(extra or {}), check=False)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def policy_env(values: list[str] = VALUES, extra: dict[str, Any] | None = None) -> dict[str, str]:
    """The operator's environment from the chart's policy ConfigMap (the Deployment's envFrom)."""
    (configmap,) = chart(
        "policy-configmap.yaml", values=[v for v in values if "priorityClassName" not in v], extra=extra
    )
    return dict(configmap["data"])


@pytest.fixture(scope="module")
def platform(cp: ControlPlane, s3: str) -> Iterator[dict[str, Any]]:
    api, kubeconfig = prepare_tenant(cp, NAMESPACE, "sk-platform-secret-value", starter_tasks())
    operator = Operator(kubeconfig, NAMESPACE, s3, metrics_port=free_port())
    operator.env.update(
        policy_env(extra={"runEgress": {"dns": [K3S_DNS], "objectStore": {"to": [MINIO], "ports": [9000]}}})
    )
    operator.log = operator.log.with_name(f"atlas-operator-{NAMESPACE}.log")
    operator.start()
    try:
        yield {"api": api, "cp": cp, "operator": operator}
    finally:
        operator.stop()


def runs_path(name: str = "") -> str:
    return f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns" + (f"/{name}" if name else "")


def jobs_of(api: httpx.Client, run: str) -> list[dict[str, Any]]:
    r = api.get(
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", params={"labelSelector": f"atlasrun.dev/run={run}"}
    )
    return list(r.json()["items"])


# ---------------------------------------------------------------- tenancy policy


@pytest.mark.parametrize(
    ("name", "edit", "reason", "field"),
    [
        (
            "hostpath",
            {"cluster": {"dataVolume": {"hostPath": {"path": "/etc"}}}},
            "VolumeTypeNotAllowed",
            "spec.cluster.dataVolume.hostPath",
        ),
        (
            "elsewhere",
            {
                "models": [
                    {
                        "name": "m",
                        "apiBase": "https://collector.evil.example/v1",
                        "apiKeySecret": {"name": "model-key", "key": "key"},
                    }
                ]
            },
            "ApiHostNotAllowed",
            "spec.models[0].apiBase",
        ),
        (
            "unpinned-ok",
            {"cluster": {"allowUnpinnedImages": True}},
            "UnpinnedImageNotAllowed",
            "spec.cluster.allowUnpinnedImages",
        ),
    ],
)
def test_policy_violations_block_the_run_with_an_event_naming_the_field(
    platform: dict[str, Any], name: str, edit: dict[str, Any], reason: str, field: str
) -> None:
    api = platform["api"]
    manifest = run_manifest(name, "http://127.0.0.1:9/v1")
    for key, value in edit.items():
        if key == "cluster":
            manifest["spec"]["cluster"].update(value)
        else:
            manifest["spec"][key] = value
    api.post(runs_path(), json=manifest).raise_for_status()
    started = time.monotonic()
    wait_for(
        lambda: blocked_reason(api, NAMESPACE, name) == reason, 120, f"{name} Blocked/{reason}", interval=0.5
    )
    print(f"{name}: Blocked/{reason} {time.monotonic() - started:.1f}s after creation")
    run = get_run(api, NAMESPACE, name)
    assert run["status"]["phase"] == "Blocked" and field in condition(run, "Blocked")["message"]
    events = [e for e in events_of(api, NAMESPACE, name) if e["reason"] == reason]
    assert events and events[0]["type"] == "Warning" and field in events[0]["message"]
    assert jobs_of(api, name) == []
    assert "sk-platform-secret-value" not in json.dumps(run) + json.dumps(events)
    api.delete(runs_path(name))


# ---------------------------------------------------------------- placement and egress


def test_placement_layers_reach_the_jobs_and_pods(platform: dict[str, Any]) -> None:
    api = platform["api"]
    manifest = run_manifest("placed", "http://127.0.0.1:9/v1")
    manifest["spec"]["cluster"]["placement"] = {
        "nodeSelector": {"atlasrun.dev/pool": "eval"},
        "sidecarResources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
    }
    manifest["spec"]["models"][0]["placement"] = {
        "nodeSelector": {"atlasrun.dev/pool": "big"},
        "runnerResources": {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        },
    }
    api.post(runs_path(), json=manifest).raise_for_status()
    jobs = wait_for(
        lambda: len(jobs_of(api, "placed")) >= 2 and jobs_of(api, "placed"), 120, "the run's Jobs"
    )
    by_model = {j["metadata"]["annotations"]["atlasrun.dev/model"]: j for j in jobs}
    sharp = by_model["sharp"]["spec"]["template"]["spec"]
    sloppy = by_model["sloppy"]["spec"]["template"]["spec"]
    assert sharp["nodeSelector"] == {"atlasrun.dev/pool": "big"}  # the model's
    assert sloppy["nodeSelector"] == {"atlasrun.dev/pool": "eval"}  # the run's
    for pod in (sharp, sloppy):  # the chart's runPlacement
        assert pod["tolerations"] == [
            {"key": "atlasrun.dev/eval", "operator": "Exists", "effect": "NoSchedule"}
        ]
        assert next(v for v in pod["volumes"] if v["name"] == "data")["emptyDir"]["sizeLimit"] == "3Gi"
        sidecars = [c for c in pod["initContainers"] if c.get("restartPolicy") == "Always"]
        assert sidecars and all(c["resources"]["requests"]["cpu"] == "50m" for c in sidecars)
    assert (
        next(c for c in sharp["containers"] if c["name"] == "runner")["resources"]["requests"]["cpu"] == "1"
    )
    # The Job controller created pods from them: admitted by PodSecurity "restricted".
    pods = wait_for(
        lambda: api.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods", params={"labelSelector": "atlasrun.dev/run=placed"}
        ).json()["items"],
        60,
        "the run's pods",
    )
    assert {p["spec"]["nodeSelector"]["atlasrun.dev/pool"] for p in pods} <= {"big", "eval"}
    api.delete(runs_path("placed"))


def test_network_policy_allows_derived_destinations_dns_and_the_object_store(
    platform: dict[str, Any],
) -> None:
    api = platform["api"]
    api.post(runs_path(), json=run_manifest("egress", "http://127.0.0.1:9/v1")).raise_for_status()
    policies = wait_for(
        lambda: api.get(
            f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies",
            params={"labelSelector": "atlasrun.dev/run=egress"},
        ).json()["items"],
        60,
        "the run's NetworkPolicy",
    )
    (policy,) = policies
    egress = policy["spec"]["egress"]
    assert egress[0]["to"] == [K3S_DNS]  # runEgress.dns
    assert {"to": [MINIO], "ports": [{"protocol": "TCP", "port": 9000}]} in egress  # runEgress.objectStore
    destinations = json.loads(policy["metadata"]["annotations"]["atlasrun.dev/egress"])
    # The models' apiBase host:port (127.0.0.1:9) is derived without any egress declaration, and
    # so is the operator's S3 endpoint (moto, also on 127.0.0.1).
    s3_port = int(str(platform["operator"].env["ATLASRUN_S3_ENDPOINT"]).rsplit(":", 1)[1])
    assert destinations["127.0.0.1/32"] == sorted([9, s3_port])
    allowed = {
        (peer["ipBlock"]["cidr"], port["port"])
        for rule in egress[1:]
        for peer in rule["to"]
        if "ipBlock" in peer
        for port in rule["ports"]
    }
    assert {("127.0.0.1/32", 9), ("127.0.0.1/32", s3_port)} <= allowed
    described = (
        platform["cp"]
        .kubectl("describe", "networkpolicy", "-n", NAMESPACE, policy["metadata"]["name"])
        .stdout
    )
    assert "atlasrun.dev/egress" in described
    api.delete(runs_path("egress"))


# ---------------------------------------------------------------- nothing to run


def test_a_run_whose_tasks_are_all_excluded_fails_with_no_runnable_tasks(platform: dict[str, Any]) -> None:
    api = platform["api"]
    manifest = run_manifest("nothing", "http://127.0.0.1:9/v1")
    manifest["spec"]["servers"]["enabled"] = ["time"]  # every starter task needs another server
    api.post(runs_path(), json=manifest).raise_for_status()
    run = wait_for(
        lambda: (
            (r := get_run(api, NAMESPACE, "nothing")).get("status", {}).get("phase")
            in ("Failed", "Succeeded")
            and r
        ),
        120,
        "the run to finish",
        interval=0.5,
    )
    assert run["status"]["phase"] == "Failed", run["status"]
    failed = condition(run, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "NoRunnableTasks")
    assert "are excluded" in failed["message"] and run["status"]["excludedTasks"]
    assert "NoRunnableTasks" in {e["reason"] for e in events_of(api, NAMESPACE, "nothing")}
    assert jobs_of(api, "nothing") == []


# ---------------------------------------------------------------- the chart's admission policy


def test_admission_policy_refuses_violating_runs_at_create_time(cp: ControlPlane) -> None:
    namespace, other = "atlas-vap", "atlas-vap-team"
    for ns in (namespace, other):
        cp.create_namespace(ns, wait_for_default_sa=False)
    values = [
        "admissionPolicy.enabled=true",
        "policy.allowedApiHosts[0]=api.openai.com",
        "policy.allowedApiHosts[1]=*.openai.azure.com",
    ]
    objects = chart(
        "admission-policy.yaml",
        values=values,
        extra={"policy": {"namespaceApiHosts": {other: ["*.team.internal"]}}},
    )
    assert [o["kind"] for o in objects] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    cp.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(o) for o in objects))
    api = cp.client()

    def create(ns: str, name: str, **spec: Any) -> httpx.Response:
        manifest = run_manifest(name, "https://api.openai.com/v1")
        for key, value in spec.items():
            if key == "cluster":
                manifest["spec"]["cluster"].update(value)
            else:
                manifest["spec"][key] = value
        return api.post(f"{GROUP_PATH}/namespaces/{ns}/atlasruns", json=manifest)

    # A policy is enforced once the API server has compiled it: wait for the first refusal.
    refused = wait_for(
        lambda: (
            (
                r := create(namespace, "hostpath", cluster={"dataVolume": {"hostPath": {"path": "/"}}})
            ).status_code
            == 403
            and r
        ),
        60,
        "the admission policy in force",
        interval=0.5,
    )
    message = refused.json()["message"]
    assert "spec.cluster.dataVolume.hostPath: volume type not allowed" in message, message
    unpinned = create(namespace, "unpinned", cluster={"allowUnpinnedImages": True})
    assert unpinned.status_code == 403 and "spec.cluster.allowUnpinnedImages" in unpinned.json()["message"]
    model = {"name": "m", "model": "openai/m", "apiBase": "https://collector.evil.example/v1"}
    elsewhere = create(namespace, "elsewhere", models=[model])
    assert (
        elsewhere.status_code == 403
        and "spec.models[m].apiBase: host not allowed" in elsewhere.json()["message"]
    )
    judge = {"name": "j", "model": "openai/j", "apiBase": "http://judge.evil.example:8000"}
    judged = create(namespace, "judged", judges=[{"name": "deterministic"}, judge])
    assert judged.status_code == 403 and "spec.judges[j].apiBase" in judged.json()["message"]
    # Allowed: the default pinned run, an Azure endpoint; the per-namespace list replaces the global one.
    assert create(namespace, "fine").status_code == 201
    azure = dict(model, apiBase="https://eu.openai.azure.com/openai")
    assert create(namespace, "azure", models=[azure]).status_code == 201
    assert create(other, "fine").status_code == 403  # api.openai.com is not on team's list
    internal = dict(model, apiBase="http://llm.team.internal:8000/v1")
    assert create(other, "internal", models=[internal]).status_code == 201
    cp.kubectl("delete", "-f", "-", input="\n---\n".join(yaml.safe_dump(o) for o in objects))
