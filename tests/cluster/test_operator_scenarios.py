"""Operator scenarios on the real control plane: retries, immutability, Blocked reasons, failure,
leader failover, and ``atlas pull`` + ``atlas report`` on the result.

Real: kube-apiserver + kube-controller-manager (Job controller: Indexed Jobs, backoffLimitPerIndex,
podFailurePolicy; ResourceQuota admission), CEL transition rules, the chart's RBAC, moto's S3
server, litellm's HTTP path to a scripted provider, the MCP servers. Stand-ins: the node (see
node_standin.py) and, for ``Unschedulable``, the scheduler's verdict (there is no scheduler here:
the test writes the PodScheduled=False condition kube-scheduler writes when no node fits).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from atlasrun.servers.instance import free_port
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from cluster import test_operator_e2e as e2e
from cluster.controlplane import ControlPlane, wait_for
from cluster.operator_rbac import install_operator_rbac
from cluster.tenant import prepare_tenant
from cluster.test_operator_e2e import (
    GROUP_PATH,
    Operator,
    _first_turns,
    get_run,
    run_manifest,
    run_to_phase,
    scripted,
    starter_tasks,
    wait_phase,
)

# The e2e module's fixtures (a control plane, moto's S3, the workspace, the node stand-in's namespace).
cp, s3, workspace, env = e2e.cp, e2e.s3, e2e.workspace, e2e.env
pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
MERGE = {"Content-Type": "application/merge-patch+json"}


def condition(run: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in run.get("status", {}).get("conditions") or [] if c["type"] == kind)


def blocked_reason(api: httpx.Client, namespace: str, name: str) -> str | None:
    try:
        c = condition(get_run(api, namespace, name), "Blocked")
    except StopIteration:
        return None
    return str(c["reason"]) if c["status"] == "True" else None


def events_of(api: httpx.Client, namespace: str, name: str) -> list[dict[str, Any]]:
    items = api.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]
    return [
        e
        for e in items
        if e["involvedObject"].get("name") == name and e["involvedObject"].get("kind") == "AtlasRun"
    ]


def one_model(name: str, api_base: str, task_ids: list[str], **spec: Any) -> dict[str, Any]:
    manifest = run_manifest(name, api_base)
    manifest["spec"]["models"] = [dict(manifest["spec"]["models"][0], name="solo", model="openai/solo")]
    manifest["spec"]["tasks"]["ids"] = task_ids
    manifest["spec"].update(spec)
    return manifest


# ---------------------------------------------------------------- with the node stand-in


def test_failed_attempt_then_success_counts_the_success(env: dict[str, Any]) -> None:
    """The first attempt of the item dies on a provider 500 (exit 3: infrastructure); the Job
    controller retries that index; the second attempt scores. The item's outcome is its last attempt."""
    base = scripted(env["tasks"])
    failed_once: list[str] = []
    lock = threading.Lock()

    def flaky(body: dict[str, Any]) -> Reply:
        with lock:
            if not failed_once:
                failed_once.append(body["messages"][-1]["content"])
                return Reply(status=500, raw_body='{"error": {"message": "upstream exploded"}}')
        return base(body)  # type: ignore[no-any-return]

    with ScriptedProvider(flaky) as provider:
        manifest = one_model(
            "flaky",
            provider.api_base,
            ["q3-revenue-leader"],
            limits={"retryBackoffSeconds": 0, "providerRetries": 0},
        )
        run = run_to_phase(env, manifest, {"Succeeded", "Failed"}, timeout=300)
    solo = run["status"]["models"]["solo"]
    assert failed_once and (solo["scored"], solo["passed"], solo["errored"]) == (1, 1, 0), solo
    assert run["status"]["phase"] == "Succeeded"


def test_run_where_every_item_errors_ends_failed(env: dict[str, Any]) -> None:
    api, namespace = env["api"], env["namespace"]
    with ScriptedProvider(lambda body: Reply(status=500, raw_body='{"error": "down"}')) as provider:
        manifest = one_model(
            "doomed-errors",
            provider.api_base,
            ["q3-revenue-leader", "csv-row-counts"],
            limits={"retryBackoffSeconds": 0, "providerRetries": 0},
        )
        manifest["spec"]["cluster"]["backoffLimit"] = 0
        run = run_to_phase(env, manifest, {"Succeeded", "Failed"}, timeout=300)
    assert run["status"]["phase"] == "Failed" and run["status"]["models"]["solo"]["errored"] == 2
    failed = condition(run, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "AllItemsErrored")
    assert condition(run, "Ready")["status"] == "False" and condition(run, "Complete")["status"] == "False"
    assert "AllItemsErrored" in {e["reason"] for e in events_of(api, namespace, "doomed-errors")}


def test_work_defining_fields_are_immutable_parallelism_is_not(env: dict[str, Any]) -> None:
    api, namespace = env["api"], env["namespace"]
    manifest = run_manifest("frozen", env["provider"].api_base, suspend=True)
    api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
    path = f"{GROUP_PATH}/namespaces/{namespace}/atlasruns/frozen"
    for field, value in [
        ("repeats", 3),
        ("tasks", {"configMap": "other-tasks"}),
        ("models", [{"name": "other", "model": "openai/other"}]),
        ("judges", [{"name": "deterministic"}, {"name": "j2", "model": "openai/j"}]),
        ("servers", {"enabled": ["calculator"]}),
    ]:
        response = api.patch(path, json={"spec": {field: value}}, headers=MERGE)
        assert response.status_code == 422, (field, response.text)
        assert f"spec.{field} is immutable" in response.json()["message"], response.json()["message"]
    response = api.patch(path, json={"spec": {"cluster": {"itemsPerJob": 7}}}, headers=MERGE)
    assert response.status_code == 422 and "spec.cluster.itemsPerJob is immutable" in response.text
    for edit in ({"parallelism": 2}, {"cluster": {"suspend": False}}, {"limits": {"maxTurns": 9}}):
        api.patch(path, json={"spec": edit}, headers=MERGE).raise_for_status()
    api.delete(path).raise_for_status()


def test_leader_failover_neither_loses_nor_repeats_work_then_pull_and_report(
    env: dict[str, Any], tmp_path: Path
) -> None:
    """Two replicas with Lease election; the leader is killed mid-run; the other takes over.
    Then ``atlas pull atlasrun/NAME`` gives a results directory that ``atlas report`` accepts."""
    api, namespace, provider, cp = env["api"], env["namespace"], env["provider"], env["cp"]
    since = len(provider.requests)
    replicas = []
    for _ in range(2):
        replica = Operator(env["kubeconfig"], namespace, env["s3"], metrics_port=free_port())
        replica.env.update(
            {
                "ATLASRUN_LEADER_ELECTION": "1",
                "ATLASRUN_LEADER_NAMESPACE": namespace,
                "ATLASRUN_LEASE_SECONDS": "8",
                "ATLASRUN_LEASE_RENEW_SECONDS": "2",
            }
        )
        replica.log = replica.log.with_name(f"atlas-operator-{namespace}-replica{len(replicas)}.log")
        replica.start()
        replicas.append(replica)
    manifest = run_manifest("failover", provider.api_base)
    manifest["spec"]["parallelism"] = 2
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/atlasrun-operator"
    try:
        api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
        wait_for(
            lambda: (
                int(
                    get_run(api, namespace, "failover").get("status", {}).get("progress", "0/1").split("/")[0]
                )
                >= 2
            ),
            300,
            "two finished items",
            interval=0.5,
        )
        holder = api.get(lease_path).json()["spec"]["holderIdentity"]
        leader = next(r for r in replicas if r.proc and holder.endswith(f"-{r.proc.pid}"))
        killed_at = time.monotonic()
        leader.stop(signal.SIGKILL)
        new_holder = wait_for(
            lambda: (h := api.get(lease_path).json()["spec"]["holderIdentity"]) not in ("", holder) and h,
            60,
            "the standby to take the Lease",
            interval=0.5,
        )
        print(f"failover: {new_holder} leads {time.monotonic() - killed_at:.1f}s after the leader was killed")
        run = wait_phase(api, namespace, "failover", {"Succeeded", "Failed"}, timeout=600)
    finally:
        for replica in replicas:
            replica.stop()
    assert run["status"]["phase"] == "Succeeded" and run["status"]["progress"] == "12/12"
    starts = _first_turns(provider, since)
    assert len(starts) == 12 and len(set(starts)) == 12  # every (model, task) ran exactly once

    out = tmp_path / "pulled"
    pull_env = {
        **os.environ,
        "KUBECONFIG": str(cp.kubeconfig),
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": env["s3"],
    }
    atlas = [sys.executable, "-m", "atlasrun.cli"]
    pulled = subprocess.run(
        [*atlas, "pull", "atlasrun/failover", str(out), "-n", namespace],
        env=pull_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pulled.returncode == 0, pulled.stderr
    summary = json.loads((out / "summary.json").read_text())
    for model in ("sharp", "sloppy"):
        ours = run["status"]["models"][model]
        assert (summary["models"][model]["scored"], summary["models"][model]["passed"]) == (
            ours["scored"],
            ours["passed"],
        )
    report = subprocess.run(
        [*atlas, "report", str(out)], env=pull_env, capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0, report.stderr
    assert (out / "report.html").stat().st_size > 10_000 and "sharp" in (out / "report.html").read_text()


# ---------------------------------------------------------------- Blocked, without a node


@pytest.fixture(scope="module")
def bare(cp: ControlPlane, s3: str) -> Iterator[dict[str, Any]]:
    """A namespace no node serves: pods stay Pending, as on a cluster that cannot run them."""
    namespace = "atlas-blocked"
    api, kubeconfig = prepare_tenant(cp, namespace, "sk-e2e-secret-value", starter_tasks())
    operator = Operator(kubeconfig, namespace, s3, metrics_port=free_port())
    operator.start()
    try:
        yield {"api": api, "namespace": namespace, "kubeconfig": kubeconfig, "s3": s3}
    finally:
        operator.stop()


def _wait_blocked(api: httpx.Client, namespace: str, name: str, reason: str) -> dict[str, Any]:
    started = time.monotonic()
    wait_for(
        lambda: blocked_reason(api, namespace, name) == reason, 180, f"{name} Blocked/{reason}", interval=1.0
    )
    print(f"{name}: Blocked/{reason} {time.monotonic() - started:.0f}s after creation")
    run = get_run(api, namespace, name)
    assert run["status"]["phase"] == "Blocked" and condition(run, "Ready")["status"] == "False"
    # The Event is posted after the status write that carries the condition.
    wait_for(lambda: reason in {e["reason"] for e in events_of(api, namespace, name)}, 60, f"{reason} Event")
    return run


def test_quota_refusal_blocks_with_quota_exceeded(bare: dict[str, Any]) -> None:
    api, namespace = bare["api"], bare["namespace"]
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}},
    }
    api.post(f"/api/v1/namespaces/{namespace}/resourcequotas", json=quota).raise_for_status()
    try:
        api.post(
            f"{GROUP_PATH}/namespaces/{namespace}/atlasruns",
            json=run_manifest("quota", "http://127.0.0.1:9/v1"),
        ).raise_for_status()
        run = _wait_blocked(api, namespace, "quota", "QuotaExceeded")
        assert "quota" in condition(run, "Blocked")["message"]
    finally:
        api.delete(f"/api/v1/namespaces/{namespace}/resourcequotas/no-pods")
        api.delete(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns/quota")


def test_unschedulable_pods_block_with_unschedulable(bare: dict[str, Any]) -> None:
    api, namespace = bare["api"], bare["namespace"]
    stop = threading.Event()

    def scheduler_verdict() -> None:  # what kube-scheduler writes when no node fits
        while not stop.wait(0.5):
            pods = api.get(
                f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": "atlasrun.dev/run=nowhere"}
            )
            for pod in pods.json().get("items", []):
                if not (pod.get("status") or {}).get("conditions"):
                    api.patch(
                        f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status",
                        json={
                            "status": {
                                "conditions": [
                                    {
                                        "type": "PodScheduled",
                                        "status": "False",
                                        "reason": "Unschedulable",
                                        "message": "0/0 nodes are available: no nodes available to schedule pods.",
                                    }
                                ]
                            }
                        },
                        headers={"Content-Type": "application/strategic-merge-patch+json"},
                    )

    thread = threading.Thread(target=scheduler_verdict, daemon=True)
    thread.start()
    try:
        api.post(
            f"{GROUP_PATH}/namespaces/{namespace}/atlasruns",
            json=run_manifest("nowhere", "http://127.0.0.1:9/v1"),
        ).raise_for_status()
        run = _wait_blocked(api, namespace, "nowhere", "Unschedulable")
        assert "cannot be scheduled" in condition(run, "Blocked")["message"]
    finally:
        stop.set()
        thread.join()
        api.delete(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns/nowhere")


def test_missing_task_object_blocks_with_invalid_tasks(bare: dict[str, Any]) -> None:
    api, namespace = bare["api"], bare["namespace"]
    manifest = run_manifest("missing", "http://127.0.0.1:9/v1")
    manifest["spec"]["tasks"] = {"uri": "s3://results/nowhere/tasks.yaml"}
    api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
    run = _wait_blocked(api, namespace, "missing", "InvalidTasks")
    assert "no such object" in condition(run, "Blocked")["message"]
    assert not api.get(
        f"/apis/batch/v1/namespaces/{namespace}/jobs", params={"labelSelector": "atlasrun.dev/run=missing"}
    ).json()["items"]


def test_object_store_down_blocks_with_object_store_unavailable(cp: ControlPlane, s3: str) -> None:
    namespace = "atlas-nostore"
    cp.create_namespace(namespace)
    api = cp.client()
    api.post(
        f"/api/v1/namespaces/{namespace}/configmaps",
        json={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "starter-tasks"},
            "data": {"tasks.yaml": "tasks: []\n"},
        },
    ).raise_for_status()
    operator = Operator(
        install_operator_rbac(cp, namespace), namespace, f"http://127.0.0.1:{free_port()}", free_port()
    )
    operator.env["ATLAS_S3_ATTEMPTS"] = "1"
    operator.start()
    try:
        manifest = run_manifest("offline", "http://127.0.0.1:9/v1")
        manifest["spec"]["tasks"] = {"uri": "s3://results/e2e/tasks.yaml"}
        api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
        run = _wait_blocked(api, namespace, "offline", "ObjectStoreUnavailable")
    finally:
        operator.stop()
    assert "127.0.0.1" in condition(run, "Blocked")["message"]
