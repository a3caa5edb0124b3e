"""Scenario 5 (issue 11): the operator itself runs as pods of its Helm chart on the real node.

``helm install`` of charts/atlasrun with the chart's default values except what this cluster
must supply (the operator and runner images by digest from the node's registry, the S3 endpoint
and its credentials Secret, the watched namespace). The operator pods reach the API server the
way they would in any cluster: in-cluster config, the ``kubernetes`` Service's ClusterIP (DNAT
on the node, see ``Node.expose_api_server``) with their ServiceAccount token. Proof that they
work: the Deployment becomes Available and a small AtlasRun completes with no other operator."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cluster.controlplane import wait_for
from cluster.node import node_cluster  # noqa: F401  (fixture)
from cluster.node_run import GROUP_PATH, NodeRunEnv, node_run_env  # noqa: F401  (fixture)

# The first test here may build the images (minutes on a bare machine, then cached by content).
pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(2400)]
REPO = Path(__file__).resolve().parents[2]
RELEASE = "atlasrun-node"
SYSTEM = "atlasrun-system"


@contextmanager
def operator_from_chart(env: NodeRunEnv) -> Iterator[str]:
    """``helm install`` of the chart into SYSTEM, the cluster's values set (images by digest, S3,
    the watched namespace); yields the Deployment's name once its rollout is done. On exit: helm
    uninstall and the namespace deleted, its pods gone. Pods reach the API server through the
    ``kubernetes`` Service: ``expose_api_server`` of every node they may land on comes first."""
    from charts.tools import ensure_helm

    cp = env.cp
    cp.create_namespace(SYSTEM, {"pod-security.kubernetes.io/enforce": "restricted"})
    cp.kubectl(
        "create",
        "secret",
        "generic",
        "s3-credentials",
        "-n",
        SYSTEM,
        "--from-literal=AWS_ACCESS_KEY_ID=test",
        "--from-literal=AWS_SECRET_ACCESS_KEY=test",
        "--from-literal=AWS_REGION=us-east-1",
    )
    operator_repo, operator_digest = env.images["operator"].split("@", 1)
    runner_repo, runner_digest = env.images["runner"].split("@", 1)
    helm = [str(ensure_helm()), "--kubeconfig", str(cp.kubeconfig)]
    values = {
        "image.repository": operator_repo,
        "image.digest": operator_digest,
        "runnerImage.repository": runner_repo,
        "runnerImage.digest": runner_digest,
        "s3.endpoint": env.s3,
        "s3.credentialsSecret": "s3-credentials",
        "watchNamespaces[0]": env.namespace,
        "userRoles.create": "false",  # the host-process tests applied the same ClusterRoles
    }
    args = [a for k, v in values.items() for a in ("--set", f"{k}={v}")]
    try:
        subprocess.run(
            [
                *helm,
                "install",
                RELEASE,
                str(REPO / "charts" / "atlasrun"),
                "-n",
                SYSTEM,
                "--skip-crds",
                *args,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        deployment = cp.kubectl("get", "deployment", "-n", SYSTEM, "-o", "name").stdout.split()[0]
        try:
            cp.kubectl("rollout", "status", deployment, "-n", SYSTEM, "--timeout=300s", timeout=330)
        except subprocess.CalledProcessError as exc:
            pods = cp.kubectl("get", "pods", "-n", SYSTEM, "-o", "yaml").stdout
            raise AssertionError(f"operator pods not Ready:\n{pods[-4000:]}") from exc
        yield deployment
    finally:
        for run in env.api.get(f"{GROUP_PATH}/namespaces/{env.namespace}/atlasruns").json().get("items", []):
            env.api.delete(f"{GROUP_PATH}/namespaces/{env.namespace}/atlasruns/{run['metadata']['name']}")
        subprocess.run(
            [*helm, "uninstall", RELEASE, "-n", SYSTEM, "--wait"], capture_output=True, timeout=180
        )
        cp.kubectl("delete", "namespace", SYSTEM, "--wait=false", check=False)
        wait_for(
            lambda: not cp.kubectl("get", "pods", "-n", SYSTEM, "-o", "name", check=False).stdout.strip(),
            120,
            "operator pods gone",
        )


def leader_pod(env: NodeRunEnv) -> str:
    """The operator pod holding the Lease ("" if none): holders are ``<pod name>-<pid>``."""
    holder = env.cp.kubectl(
        "get", "lease", "-n", SYSTEM, "-o", "jsonpath={.items[*].spec.holderIdentity}"
    ).stdout.strip()
    return holder.rsplit("-", 1)[0] if holder else ""


def test_operator_runs_as_a_pod_from_its_chart(node_run_env: NodeRunEnv, tmp_path: Path) -> None:  # noqa: F811
    env, cp = node_run_env, node_run_env.cp
    t0 = time.monotonic()
    cluster_ip = env.node.expose_api_server()
    with operator_from_chart(env):
        ready_after = time.monotonic() - t0
        pods = cp.kubectl("get", "pods", "-n", SYSTEM, "-o", "jsonpath={.items[*].spec.containers[0].image}")
        assert set(pods.stdout.split()) == {env.images["operator"]}

        manifest = env.manifest("from-pod")
        manifest["spec"]["models"] = manifest["spec"]["models"][:1]
        manifest["spec"]["tasks"]["ids"] = ["release-meeting-actions", "customer-renewals"]
        del manifest["spec"]["cluster"]["runnerImage"]  # the chart's runnerImage (ATLASRUN_RUNNER_IMAGE)
        env.create_run(manifest)
        run = env.wait_phase("from-pod", {"Succeeded", "Failed"}, timeout=600)
        assert run["status"]["phase"] == "Succeeded", run["status"]
        assert run["status"]["progress"] == "2/2"
        holder = leader_pod(env)
        assert holder, "no operator replica holds the Lease"
        print(
            f"\noperator pods Ready {ready_after:.1f}s after helm install (API server via Service "
            f"{cluster_ip}); run from-pod Succeeded {time.monotonic() - t0:.1f}s after install; leader {holder}"
        )
