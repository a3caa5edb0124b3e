"""The test control plane behaves like a real cluster where the operator depends on it:
PodSecurity admission, the Job controller, the garbage collector, ttl-after-finished and RBAC.

Needs the binaries from ``tests/cluster/build-controlplane.sh``; without them these tests are
skipped, or fail if ``ATLASRUN_REQUIRE_CLUSTER=1`` (set that in CI).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.controlplane import (
    HERE,
    Binaries,
    ControlPlane,
    binaries_or_skip,
    wait_for,
)

pytestmark = pytest.mark.cluster

K8S_VERSION = re.search(
    r"^\s*k8s\.io/kubernetes (v\S+)", (HERE / "controlplane" / "go.mod").read_text(), re.MULTILINE
)


@pytest.fixture(scope="module")
def binaries() -> Binaries:
    return binaries_or_skip()


@pytest.fixture(scope="module")
def cp(binaries: Binaries) -> Iterator[ControlPlane]:
    with ControlPlane(binaries) as plane:
        print(f"control plane up in {plane.startup_seconds:.1f}s at {plane.server}")
        yield plane


def pod(name: str, **container_extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"], **container_extra}]
        },
    }


RESTRICTED_CONTAINER = {
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
}


def job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            **spec,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
                }
            },
        },
    }


def job_pods(c: httpx.Client, ns: str, name: str) -> list[dict[str, Any]]:
    r = c.get(
        f"/api/v1/namespaces/{ns}/pods", params={"labelSelector": f"batch.kubernetes.io/job-name={name}"}
    )
    r.raise_for_status()
    return list(r.json()["items"])


def test_server_is_the_pinned_release_and_kubectl_works(cp: ControlPlane) -> None:
    assert K8S_VERSION
    with cp.client() as c:
        assert c.get("/readyz").text == "ok"
        assert c.get("/version").json()["gitVersion"] == K8S_VERSION.group(1)
    out = cp.kubectl("get", "serviceaccount", "default", "-n", "default", "-o", "name").stdout
    assert out.strip() == "serviceaccount/default"
    assert cp.startup_seconds < cp.startup_timeout


def test_pod_security_rejects_privileged_pod_in_restricted_namespace(cp: ControlPlane) -> None:
    ns = "restricted"
    cp.create_namespace(ns, {"pod-security.kubernetes.io/enforce": "restricted"})
    with cp.client() as c:
        r = c.post(
            f"/api/v1/namespaces/{ns}/pods", json=pod("privileged", securityContext={"privileged": True})
        )
        assert r.status_code == 403, r.text
        assert 'violates PodSecurity "restricted:latest"' in r.json()["message"]
        assert "privileged" in r.json()["message"]

        r = c.post(f"/api/v1/namespaces/{ns}/pods", json=pod("compliant", **RESTRICTED_CONTAINER))
        assert r.status_code == 201, r.text
        assert r.json()["status"]["phase"] == "Pending"  # no scheduler, no kubelet


def test_job_controller_creates_pod_and_garbage_collector_deletes_it(cp: ControlPlane) -> None:
    ns = "jobs"
    cp.create_namespace(ns)
    with cp.client() as c:
        r = c.post(f"/apis/batch/v1/namespaces/{ns}/jobs", json=job("hello"))
        assert r.status_code == 201, r.text
        uid = r.json()["metadata"]["uid"]

        pods = wait_for(lambda: job_pods(c, ns, "hello"), 60, "the Job controller to create a pod")
        assert len(pods) == 1
        owner = pods[0]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "Job",
            "hello",
            uid,
            True,
        )
        assert pods[0]["status"]["phase"] == "Pending"

        r = c.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{ns}/jobs/hello",
            json={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
        )
        assert r.status_code == 200, r.text
        wait_for(
            lambda: c.get(f"/apis/batch/v1/namespaces/{ns}/jobs/hello").status_code == 404,
            60,
            "the Job to go away",
        )
        wait_for(lambda: job_pods(c, ns, "hello") == [], 60, "the garbage collector to delete the pod")


def test_finished_job_is_deleted_by_ttl_controller(cp: ControlPlane) -> None:
    """Play kubelet: mark the Job's pod Succeeded; the Job completes, ttl-after-finished deletes
    it and the garbage collector its pod."""
    ns = "ttl"
    cp.create_namespace(ns)
    with cp.client() as c:
        assert (
            c.post(
                f"/apis/batch/v1/namespaces/{ns}/jobs", json=job("done", ttlSecondsAfterFinished=3)
            ).status_code
            == 201
        )
        (p,) = wait_for(lambda: job_pods(c, ns, "done"), 60, "the Job controller to create a pod")
        name = p["metadata"]["name"]
        now = "2026-01-01T00:00:00Z"
        p["status"] = {
            "phase": "Succeeded",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
            ],
        }
        r = c.put(f"/api/v1/namespaces/{ns}/pods/{name}/status", json=p)
        assert r.status_code == 200, r.text

        def complete() -> bool:
            status = c.get(f"/apis/batch/v1/namespaces/{ns}/jobs/done").json()["status"]
            return status.get("succeeded") == 1 and any(
                cond["type"] == "Complete" and cond["status"] == "True"
                for cond in status.get("conditions", [])
            )

        wait_for(complete, 60, "the Job controller to mark the Job Complete")
        wait_for(
            lambda: c.get(f"/apis/batch/v1/namespaces/{ns}/jobs/done").status_code == 404,
            90,
            "ttl-after-finished to delete the completed Job",
        )
        wait_for(lambda: job_pods(c, ns, "done") == [], 60, "the garbage collector to delete the pod")


def test_rbac_denies_service_account_without_binding(cp: ControlPlane) -> None:
    ns = "rbac"
    cp.create_namespace(ns)
    token = cp.service_account_token(ns, "operator", create=True)
    kubeconfig = cp.token_kubeconfig(token, namespace=ns)

    with cp.client(token=token) as sa:
        me = sa.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert me.json()["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:operator"
        r = sa.get(f"/api/v1/namespaces/{ns}/pods")
        assert r.status_code == 403, r.text
        assert 'User "system:serviceaccount:rbac:operator" cannot list resource "pods"' in r.json()["message"]
        assert sa.post(f"/apis/batch/v1/namespaces/{ns}/jobs", json=job("nope")).status_code == 403
    denied = cp.kubectl("get", "pods", kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr
    assert (
        cp.kubectl("auth", "can-i", "create", "jobs.batch", kubeconfig=kubeconfig, check=False).stdout.strip()
        == "no"
    )

    # Positive control: a RoleBinding grants exactly what it says.
    with cp.client() as admin:
        admin.post(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
            json={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
            },
        ).raise_for_status()
        admin.post(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
            json={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "operator"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": ns}],
            },
        ).raise_for_status()
    with cp.client(token=token) as sa:
        assert wait_for(lambda: sa.get(f"/api/v1/namespaces/{ns}/pods").status_code == 200, 30, "the binding")
        assert sa.post(f"/apis/batch/v1/namespaces/{ns}/jobs", json=job("nope")).status_code == 403
        assert sa.get("/api/v1/namespaces/default/pods").status_code == 403
    assert cp.kubectl("auth", "can-i", "list", "pods", kubeconfig=kubeconfig).stdout.strip() == "yes"

    # Arbitrary users (client certificates) get nothing either unless bound.
    alice = cp.user_kubeconfig("alice", ["atlasrun-users"])
    whoami = cp.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", kubeconfig=alice)
    assert whoami.stdout == "alice"
    assert (
        cp.kubectl("auth", "can-i", "list", "pods", "-n", ns, kubeconfig=alice, check=False).stdout.strip()
        == "no"
    )


def test_exit_stops_every_process_and_cleans_up(binaries: Binaries) -> None:
    with ControlPlane(
        binaries, controllers="serviceaccount-controller,serviceaccount-token-controller"
    ) as plane:
        procs = plane.processes
        assert sorted(procs) == ["etcd", "kube-apiserver", "kube-controller-manager"]
        assert all(p.poll() is None for p in procs.values())
        workdir: Path = plane.workdir  # type: ignore[assignment]
        assert (workdir / "admin.kubeconfig").exists()
    assert all(p.poll() is not None for p in procs.values())
    assert not workdir.exists()
    assert not plane.processes


def test_component_that_fails_to_start_is_reported_and_the_rest_stopped(binaries: Binaries) -> None:
    plane = ControlPlane(binaries, apiserver_args=["--no-such-flag"])
    with pytest.raises(RuntimeError, match=r"(?s)kube-apiserver did not start.*unknown flag: --no-such-flag"):
        plane.start()
    assert not plane.processes
    assert plane.workdir is not None and not plane.workdir.exists()
