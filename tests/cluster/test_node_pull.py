"""Scenario 1 (issue 11), node level: an image pushed to the node's registry and referenced only
by digest is pulled and runs; a digest the registry does not hold ends in ImagePullBackOff (the
operator turns that into the run's Blocked/ImagePullBackOff condition: tested with the operator)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from cluster.controlplane import ControlPlane, wait_for
from cluster.node import Node, node_cluster, static_image_tar  # noqa: F401  (fixture)
from cluster.test_node_networkpolicy import PROBE_SRC  # runs after it: see issue 11 note

pytestmark = [pytest.mark.cluster, pytest.mark.node]
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _pod(name: str, ns: str, image: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": image, "args": ["--help"], "securityContext": RESTRICTED}],
        },
    }


def test_pull_by_digest_and_missing_digest(node_cluster: tuple[ControlPlane, Node], tmp_path: Path) -> None:  # noqa: F811
    cp, node = node_cluster
    t0 = time.monotonic()
    probe = tmp_path / "probe"
    subprocess.run(["gcc", "-Os", "-static", "-o", str(probe), str(PROBE_SRC)], check=True)
    # A label makes this image's ID differ from the probe the NetworkPolicy tests import. Once the
    # kubelet has pulled an image ID from a registry, it records which names it was pulled under
    # (ImagePulledRecord, kubelet/image_manager/pulled) and refuses that ID under any other name
    # with imagePullPolicy Never (ErrImageNeverPull): it must "attempt a pull" to check credentials.
    static_image_tar(
        probe, "atlasrun.test/probe:pushed", tmp_path / "probe.tar", labels={"atlasrun.test/use": "pull"}
    )
    ref = node.push_oci_archive(tmp_path / "probe.tar", "atlasrun/probe")
    assert "@sha256:" in ref
    missing = ref.split("@", 1)[0] + "@sha256:" + "0" * 64
    ns = "node-images"
    cp.create_namespace(ns, {"pod-security.kubernetes.io/enforce": "restricted"})
    items = [_pod("pulled", ns, ref), _pod("missing", ns, missing)]
    cp.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

    def status(name: str) -> dict[str, object]:
        out = cp.kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout
        return dict(json.loads(out).get("status", {}))

    def terminated() -> dict[str, object] | None:
        cs = status("pulled").get("containerStatuses") or []
        assert isinstance(cs, list)
        return cs[0]["state"].get("terminated") if cs else None

    done = wait_for(terminated, 120, "pod pulled by digest terminated")
    assert done["exitCode"] == 2  # probe's usage exit: the pulled binary ran
    pulled = status("pulled")["containerStatuses"]
    assert isinstance(pulled, list) and pulled[0]["imageID"].endswith(ref.split("@", 1)[1])

    def backoff() -> bool:
        cs = status("missing").get("containerStatuses") or []
        assert isinstance(cs, list)
        return bool(cs) and cs[0]["state"].get("waiting", {}).get("reason") == "ImagePullBackOff"

    wait_for(backoff, 120, "ImagePullBackOff for a digest not in the registry")
    print(f"\npulled {ref} and saw ImagePullBackOff for the missing digest in {time.monotonic() - t0:.1f}s")
    cp.kubectl("delete", "namespace", ns, "--wait=false")
