"""Runs through a real Kueue (v0.15.0, tests/cluster/kueue.py) on the project's control plane.

A run with ``spec.cluster.queueName`` gets its Jobs created suspended with the
``kueue.x-k8s.io/queue-name`` label; Kueue makes a Workload of each and admits it against its
ClusterQueue's quota, then unsuspends the Job. Over quota, the run is ``Blocked/QuotaPending``
with Kueue's own message and the Jobs stay suspended (the operator never unsuspends them); once
the quota allows, Kueue admits them and the run is no longer blocked. Suspending the run
deactivates its Workloads (Kueue suspends the Jobs), resuming reactivates them. A missing
LocalQueue is explained the same way. A run without ``queueName`` goes to the chart's
``kueue.defaultQueueName``. The operator runs with the chart's RBAC only (it reads Workloads) and
the chart's policy ConfigMap as its environment (rendered by ``helm template``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from atlasrun.servers.instance import free_port
from cluster import test_operator_e2e as e2e
from cluster.controlplane import ControlPlane, wait_for
from cluster.kueue import Kueue, kueue_or_skip
from cluster.tenant import prepare_tenant
from cluster.test_operator_e2e import GROUP_PATH, Operator, get_run, run_manifest, starter_tasks
from cluster.test_operator_scenarios import blocked_reason, condition, events_of
from cluster.test_platform import policy_env

cp, s3 = e2e.cp, e2e.s3
pytestmark = pytest.mark.cluster
NAMESPACE = "atlas-queued"
DEFAULT_QUEUE = "team-default"  # the chart's kueue.defaultQueueName here


@pytest.fixture(scope="module")
def kueue(cp: ControlPlane) -> Iterator[Kueue]:
    binary, manifests = kueue_or_skip()
    with Kueue(cp, binary, manifests) as k:
        yield k


@pytest.fixture(scope="module")
def queued(cp: ControlPlane, s3: str, kueue: Kueue) -> Iterator[dict[str, Any]]:
    api, kubeconfig = prepare_tenant(cp, NAMESPACE, "sk-queued-secret-value", starter_tasks())
    operator = Operator(kubeconfig, NAMESPACE, s3, metrics_port=free_port())
    operator.log = operator.log.with_name(f"atlas-operator-{NAMESPACE}.log")
    operator.env.update(policy_env(values=[f"kueue.defaultQueueName={DEFAULT_QUEUE}"]))
    operator.start()
    try:
        yield {"api": api, "kueue": kueue}
    finally:
        operator.stop()


def jobs_of(api: httpx.Client, run: str) -> list[dict[str, Any]]:
    r = api.get(
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", params={"labelSelector": f"atlasrun.dev/run={run}"}
    )
    return list(r.json()["items"])


def owned_workloads(kueue: Kueue, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = {j["metadata"]["name"] for j in jobs}
    return [
        w
        for w in kueue.workloads(NAMESPACE)
        if any(
            o.get("kind") == "Job" and o.get("name") in names
            for o in w["metadata"].get("ownerReferences") or []
        )
    ]


def admitted(workload: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Admitted" and c["status"] == "True"
        for c in workload.get("status", {}).get("conditions") or []
    )


def test_over_quota_run_is_quota_pending_until_kueue_admits_it(queued: dict[str, Any]) -> None:
    api, kueue = queued["api"], queued["kueue"]
    # Less than one pod's requests (the runner alone asks for 250m CPU).
    kueue.cluster_queue("evals", {"cpu": "100m", "memory": "64Mi"})
    kueue.local_queue(NAMESPACE, "team-a", "evals")
    manifest = run_manifest("queued", "http://127.0.0.1:9/v1", queueName="team-a")
    manifest["spec"]["parallelism"] = 2
    api.post(f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns", json=manifest).raise_for_status()
    started = time.monotonic()
    wait_for(
        lambda: blocked_reason(api, NAMESPACE, "queued") == "QuotaPending",
        120,
        "Blocked/QuotaPending",
        interval=0.5,
    )
    print(f"queued: Blocked/QuotaPending {time.monotonic() - started:.1f}s after creation")
    # Kueue's first word on a Workload may come before its cache has the new ClusterQueue
    # ("ClusterQueue evals doesn't exist"); the operator relays each word, so wait for the quota one.
    message = wait_for(
        lambda: _quota_message(get_run(api, NAMESPACE, "queued")),
        60,
        "the Blocked message to name the quota",
        interval=0.5,
    )
    assert "LocalQueue team-a" in message, message
    run = get_run(api, NAMESPACE, "queued")
    assert run["status"]["phase"] == "Blocked"
    assert "QuotaPending" in {e["reason"] for e in events_of(api, NAMESPACE, "queued")}
    jobs = jobs_of(api, "queued")
    assert jobs and all(j["spec"]["suspend"] for j in jobs)
    assert all(j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" for j in jobs)
    workloads = owned_workloads(kueue, jobs)
    assert len(workloads) == len(jobs) and not any(admitted(w) for w in workloads)
    time.sleep(3)  # a few operator passes: the Jobs stay suspended (only Kueue may start them)
    assert all(j["spec"]["suspend"] for j in jobs_of(api, "queued"))

    kueue.cluster_queue("evals", {"cpu": "64", "memory": "64Gi"})
    wait_for(
        lambda: (js := jobs_of(api, "queued")) and all(not j["spec"].get("suspend") for j in js),
        120,
        "Kueue to admit and unsuspend the Jobs",
        interval=0.5,
    )
    assert all(admitted(w) for w in owned_workloads(kueue, jobs_of(api, "queued")))
    wait_for(
        lambda: blocked_reason(api, NAMESPACE, "queued") is None,
        60,
        "the run no longer blocked",
        interval=0.5,
    )
    assert get_run(api, NAMESPACE, "queued")["status"]["phase"] in ("Pending", "Running")

    # Suspending a queued run: its Workloads are deactivated, Kueue evicts them and suspends the
    # Jobs (patching the Jobs instead would be undone: Kueue unsuspends admitted Jobs).
    path = f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns/queued"
    merge = {"Content-Type": "application/merge-patch+json"}
    api.patch(path, json={"spec": {"cluster": {"suspend": True}}}, headers=merge).raise_for_status()

    def suspended() -> bool:
        js = jobs_of(api, "queued")
        wls = owned_workloads(kueue, js)
        return (
            bool(js)
            and all(j["spec"]["suspend"] for j in js)
            and all(w["spec"].get("active") is False for w in wls)
        )

    wait_for(suspended, 120, "the Workloads deactivated and the Jobs suspended by Kueue", interval=0.5)
    wait_for(
        lambda: get_run(api, NAMESPACE, "queued")["status"]["phase"] == "Suspended", 60, "phase Suspended"
    )
    time.sleep(3)
    assert suspended()  # and they stay so
    api.patch(path, json={"spec": {"cluster": {"suspend": False}}}, headers=merge).raise_for_status()
    wait_for(
        lambda: (js := jobs_of(api, "queued")) and all(not j["spec"].get("suspend") for j in js),
        120,
        "Kueue to admit the reactivated Workloads again",
        interval=0.5,
    )
    assert all(
        w["spec"].get("active") is not False and admitted(w)
        for w in owned_workloads(kueue, jobs_of(api, "queued"))
    )
    assert get_run(api, NAMESPACE, "queued")["status"]["phase"] in ("Pending", "Running")
    api.delete(path)


def test_a_missing_local_queue_is_explained(queued: dict[str, Any]) -> None:
    api = queued["api"]
    manifest = run_manifest("lost", "http://127.0.0.1:9/v1", queueName="no-such-queue")
    api.post(f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns", json=manifest).raise_for_status()
    wait_for(
        lambda: blocked_reason(api, NAMESPACE, "lost") == "QuotaPending",
        120,
        "Blocked/QuotaPending",
        interval=0.5,
    )
    message = condition(get_run(api, NAMESPACE, "lost"), "Blocked")["message"]
    assert "no-such-queue" in message, message
    assert all(j["spec"]["suspend"] for j in jobs_of(api, "lost"))
    api.delete(f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns/lost")


def test_a_run_without_queue_name_goes_to_the_charts_default_queue(queued: dict[str, Any]) -> None:
    api, kueue = queued["api"], queued["kueue"]
    kueue.cluster_queue("fallback", {"cpu": "64", "memory": "64Gi"})
    kueue.local_queue(NAMESPACE, DEFAULT_QUEUE, "fallback")
    manifest = run_manifest("unnamed-queue", "http://127.0.0.1:9/v1")
    assert "queueName" not in manifest["spec"]["cluster"]
    api.post(f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns", json=manifest).raise_for_status()

    def admitted_by_default_queue() -> bool:
        jobs = jobs_of(api, "unnamed-queue")
        workloads = owned_workloads(kueue, jobs)
        return (
            bool(jobs)
            and len(workloads) == len(jobs)
            and all(w["spec"]["queueName"] == DEFAULT_QUEUE and admitted(w) for w in workloads)
            and all(not j["spec"].get("suspend") for j in jobs)
        )

    wait_for(admitted_by_default_queue, 120, f"Kueue to admit the Jobs through {DEFAULT_QUEUE}", interval=0.5)
    jobs = jobs_of(api, "unnamed-queue")
    assert all(j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == DEFAULT_QUEUE for j in jobs)
    run = get_run(api, NAMESPACE, "unnamed-queue")
    assert "queueName" not in run["spec"]["cluster"]  # the default is the operator's, not written back
    api.delete(f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns/unnamed-queue")


def _quota_message(run: dict[str, Any]) -> str | None:
    message: str = condition(run, "Blocked")["message"]
    return message if "insufficient quota" in message else None
