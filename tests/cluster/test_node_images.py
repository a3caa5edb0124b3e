"""Scenario 1 (issue 11) with the project's images: runner, operator and the sidecars are built by
images/build.sh (buildah; base rootfs from mmdebstrap: no registry serves FROM here), pushed to the
node's registry unchanged (the pushed digest is the built one) and referenced only by digest. A
run whose runner image digest is not in the registry gets the Blocked/ImagePullBackOff condition
instead of hanging."""

from __future__ import annotations

import json
import tarfile
import time
from typing import Any

import pytest

from cluster import node_images
from cluster.controlplane import wait_for
from cluster.node import node_cluster  # noqa: F401  (fixture)
from cluster.node_run import NodeRunEnv, node_run_env  # noqa: F401  (fixture)

# The first test here may build the images (minutes on a bare machine, then cached by content).
pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(2400)]


def _archive_digest(target: str) -> str:
    with tarfile.open(node_images.archive_path(target)) as tar:
        f = tar.extractfile("index.json")
        assert f is not None
        index = json.load(f)
    (manifest,) = index["manifests"]
    return str(manifest["digest"])


def test_project_images_by_digest(node_run_env: NodeRunEnv) -> None:  # noqa: F811
    env = node_run_env
    assert set(env.images) == set(node_images.TARGETS)
    for target, ref in env.images.items():
        repo, digest = ref.split("@", 1)
        assert repo == f"{env.node.registry}/atlasrun/{target}"
        assert digest == _archive_digest(target), target  # pushed as built
    print("\nimages: " + ", ".join(f"{t}={r.split('@')[1][:19]}" for t, r in env.images.items()))


def _blocked_by(run: dict[str, Any], reason: str) -> dict[str, Any] | None:
    if (run.get("status") or {}).get("phase") != "Blocked":
        return None
    for c in run["status"].get("conditions") or []:
        if c["type"] == "Blocked" and c["status"] == "True" and c["reason"] == reason:
            return dict(c)
    return None


def test_missing_runner_digest_blocks_the_run(node_run_env: NodeRunEnv) -> None:  # noqa: F811
    env = node_run_env
    repo = env.images["runner"].split("@", 1)[0]
    manifest = env.manifest("no-such-digest", runnerImage=f"{repo}@sha256:{'0' * 64}")
    t0 = time.monotonic()
    with env.operator():
        env.create_run(manifest)
        # Before the first pull fails, pods that do not fit the node beside the ones pulling may be
        # seen (Unschedulable); the condition settles on the pull, which never resolves by waiting.
        condition = wait_for(
            lambda: _blocked_by(env.get_run("no-such-digest"), "ImagePullBackOff"),
            240,
            "AtlasRun no-such-digest Blocked/ImagePullBackOff",
            interval=1.0,
        )
        blocked_after = time.monotonic() - t0
        env.api.delete(f"/apis/atlasrun.dev/v1alpha1/namespaces/{env.namespace}/atlasruns/no-such-digest")
    assert condition["status"] == "True" and condition["reason"] == "ImagePullBackOff", condition
    assert "0000000000" in condition["message"] and "runner" in condition["message"]
    print(f"\nrun Blocked/ImagePullBackOff {blocked_after:.1f}s after it was created")
