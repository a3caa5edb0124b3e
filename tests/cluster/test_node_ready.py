"""The real node comes up (make node): Ready, and runs a restricted pod to completion."""

from __future__ import annotations

import json
import time

import pytest

from cluster.controlplane import ControlPlane, wait_for
from cluster.node import PAUSE_IMAGE, Node, node_cluster  # noqa: F401  (fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.node]


def test_node_ready_and_runs_a_pod(node_cluster: tuple[ControlPlane, Node]) -> None:  # noqa: F811
    cp, node = node_cluster
    out = cp.kubectl("get", "node", node.name, "-o", "json")
    status = json.loads(out.stdout)["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    assert node.ip in [a["address"] for a in status["addresses"]]
    ns = "node-smoke"
    cp.create_namespace(ns, {"pod-security.kubernetes.io/enforce": "restricted"})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pause", "namespace": ns},
        "spec": {
            "containers": [
                {
                    "name": "pause",
                    "image": PAUSE_IMAGE,
                    "imagePullPolicy": "Never",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ]
        },
    }
    t0 = time.monotonic()
    cp.kubectl("apply", "-f", "-", input=json.dumps(pod))

    def running() -> bool:
        phase = cp.kubectl("get", "pod", "pause", "-n", ns, "-o", "jsonpath={.status.phase}").stdout
        return phase == "Running"

    wait_for(running, 120, "pause pod Running")
    print(f"pod Running {time.monotonic() - t0:.1f}s after create")
    # The API server reaches the kubelet (its client certificate; the kubelet's serving
    # certificate verified against the cluster CA): kubectl logs and exec work.
    logs = cp.kubectl("logs", "pause", "-n", ns, check=False)
    assert logs.returncode == 0, logs.stderr
    version = cp.kubectl("exec", "pause", "-n", ns, "--", "/pause", "-v", check=False)
    assert version.returncode == 0 and "pause.c" in version.stdout, version.stderr
    cp.kubectl("delete", "pod", "pause", "-n", ns, "--grace-period=1")
