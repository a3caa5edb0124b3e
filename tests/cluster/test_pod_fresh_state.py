"""Several items per pod on fresh state: the leak probes (leak_probes.py) run four to a pod.

Real control plane, operator, S3 (moto), MCP servers behind the server image's own entrypoint
(images/mcp-server/sidecar.py, control endpoint included) and litellm's path to a scripted
model; the node is the stand-in (node_standin.py). The same probes run in real pods on the
real node in test_node_fresh_state.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.scoring.result import TaskResult
from atlasrun.starter.workspace import create_workspace
from atlasrun.tasks.loader import load_tasks
from atlasrun.tasks.model import Task
from atlasrun.testing.scripted_provider import ScriptedProvider
from cluster import tenant
from cluster.controlplane import ControlPlane
from cluster.leak_probes import SERVERS, leaks, probe_tasks, probes_live
from cluster.node_standin import NodeStandIn
from cluster.tenant import control_plane_with_crd, prepare_tenant, s3_bucket, s3_client
from cluster.test_operator_e2e import PIN, SERVER_PORTS, run_to_phase, scripted

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
NAMESPACE = "atlas-fresh"
PROBES = 4


def load_probes(directory: Path, n: int) -> list[Task]:
    path = directory / "probes.yaml"
    path.write_text(yaml.safe_dump({"tasks": probe_tasks(n)}, sort_keys=False))
    loaded = load_tasks(path)
    assert not loaded.rejected, loaded.rejected
    return loaded.tasks


def stored_results(endpoint: str, prefix: str) -> list[TaskResult]:
    s3 = s3_client(endpoint)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=tenant.BUCKET, Prefix=prefix).get("Contents", [])]
    return [
        TaskResult.model_validate_json(s3.get_object(Bucket=tenant.BUCKET, Key=k)["Body"].read())
        for k in keys
    ]


@pytest.fixture(scope="module")
def cp() -> Iterator[ControlPlane]:
    with control_plane_with_crd() as plane:
        yield plane


def test_four_items_in_one_pod_see_nothing_of_each_other(cp: ControlPlane, tmp_path: Path) -> None:
    tasks = load_probes(tmp_path, PROBES)
    workspace = create_workspace(tmp_path / "workspace")
    api, kubeconfig = prepare_tenant(cp, NAMESPACE, "sk-fresh-secret", tasks)
    with (
        s3_bucket() as s3,
        ScriptedProvider(scripted(tasks)) as provider,
        NodeStandIn(api, NAMESPACE, workspace) as node,
    ):
        manifest = tenant.run_manifest(
            "fresh",
            api_base=provider.api_base,
            models=("sharp",),
            server_ports={s: SERVER_PORTS[s] for s in SERVERS},
            image_of=lambda target: f"registry.example/atlasrun/{target}{PIN}",
            tasks_configmap="starter-tasks",
            prefix="e2e",
            max_concurrency=1,
            cluster={"itemsPerJob": PROBES, "itemsPerPod": PROBES},
        )
        env: dict[str, Any] = {"api": api, "namespace": NAMESPACE, "kubeconfig": kubeconfig, "s3": s3}
        run = run_to_phase(env, manifest, {"Succeeded", "Failed"}, timeout=600)
        results = stored_results(s3, "e2e/fresh/tasks/")
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert len(node.ran) == 1  # one pod ran the four items, one after the other
    assert sorted(r.task_id for r in results) == [f"probe-{k}" for k in range(PROBES)]
    assert all(r.status == "scored" for r in results), [(r.task_id, r.reason) for r in results]
    assert probes_live(results) == []  # each probe saw its own writes: the probes can see a leak
    assert leaks(results) == {}  # and none saw another's
