"""Several items per pod on fresh state, in a real pod on the real node (issue 22, part 1).

The leak probes (leak_probes.py: a file in the data volume, a memory entity, a git branch, and a
detached background process started through the code runner) run four to a pod, in the project's
own sidecar images (their control endpoint: images/mcp-server/sidecar.py) from the node's
registry, with the workspace PVC as ``spec.cluster.dataVolume``. No probe may see another's
marks; each must see its own (the probes can see a leak). In the pod the code runner's sidecar is
PID 1 of its container, so its /stop kills every process of the container, detached ones too.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from atlasrun.scoring.result import TaskResult
from atlasrun.testing.scripted_provider import ScriptedProvider
from cluster import tenant
from cluster.leak_probes import leaks, probes_live
from cluster.node import node_cluster  # noqa: F401  (fixture)
from cluster.node_run import SERVER_PORTS, NodeRunEnv, images_or_skip, node_run_env  # noqa: F401
from cluster.test_operator_e2e import scripted
from cluster.test_pod_fresh_state import PROBES, load_probes

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1800)]
PORTS = {**SERVER_PORTS, "code-runner": 9107}


def test_four_items_in_one_real_pod_see_nothing_of_each_other(
    node_run_env: NodeRunEnv,  # noqa: F811
    tmp_path: Path,
) -> None:
    env = node_run_env
    archive = images_or_skip(("mcp-code-runner",))["mcp-code-runner"]
    images = {**env.images, "mcp-code-runner": env.node.push_oci_archive(archive, "atlasrun/mcp-code-runner")}
    probes = load_probes(tmp_path, PROBES)
    env.api.post(
        f"/api/v1/namespaces/{env.namespace}/configmaps",
        json={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "probe-tasks"},
            "data": {"tasks.yaml": tenant.tasks_yaml(probes)},
        },
    ).raise_for_status()
    with ScriptedProvider(scripted(probes), host=env.node.ip) as provider:
        host, port = provider.api_base.split("//", 1)[1].split("/", 1)[0].split(":")
        manifest = tenant.run_manifest(
            "fresh",
            api_base=provider.api_base,
            models=("sharp",),
            server_ports={s: PORTS[s] for s in ("filesystem", "memory", "git", "code-runner")},
            image_of=images.__getitem__,
            tasks_configmap="probe-tasks",
            prefix="node",
            max_concurrency=1,
            model_fields={"egress": {"hosts": [host], "ports": [int(port)]}},
            cluster={
                "dataVolume": {"persistentVolumeClaim": {"claimName": "workspace", "readOnly": True}},
                "itemsPerJob": PROBES,
                "itemsPerPod": PROBES,
            },
        )
        started = time.monotonic()
        with env.operator():
            env.create_run(manifest)
            run = env.wait_phase("fresh", {"Succeeded", "Failed"}, timeout=900)
        wall = time.monotonic() - started
    assert run["status"]["phase"] == "Succeeded", run["status"]
    seen = env.recorder.of_run("fresh")
    states = [
        (
            p["metadata"]["name"],
            p["status"].get("phase"),
            [c.get("state") for c in p["status"].get("containerStatuses", [])],
        )
        for p in seen
    ]
    assert len(seen) == 1, states  # one pod ran the four items, no retry
    (runner,) = [c for c in seen[0]["status"]["containerStatuses"] if c["name"] == "runner"]
    assert runner["state"]["terminated"]["exitCode"] == 0, states
    s3 = tenant.s3_client(env.s3)
    results = [
        TaskResult.model_validate_json(s3.get_object(Bucket=tenant.BUCKET, Key=key)["Body"].read())
        for key in env.s3_keys("node/fresh/tasks/")
    ]
    assert sorted(r.task_id for r in results) == [f"probe-{k}" for k in range(PROBES)]
    assert all(r.status == "scored" for r in results), [(r.task_id, r.reason) for r in results]
    assert probes_live(results) == []
    assert leaks(results) == {}
    print(f"\n{PROBES} probe items in one real pod on fresh state: {wall:.1f}s")
