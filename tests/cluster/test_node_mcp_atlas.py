"""MCP-Atlas's own tasks in pods on the real node (issue 19, section 7).

The cluster example ``examples/mcp-atlas-cluster`` run as its docs say: MCP-Atlas's ``/data``
(``atlas init-workspace --catalog mcp-atlas``) packed into a ConfigMap and unpacked into a PVC by
its Job, the sample file's five offline tasks (5c6d7e8f9a: filesystem and calculator; 4b5c6d7e8f:
calculator; c6d7e8f9a0: memory and filesystem; 9d0e1f2a3b: filesystem and desktop-commander, built
from its pinned source; a0b1c2d3e4: desktop-commander and mcp-server-code-runner) as a CSV ConfigMap, the run
pinned by ``python -m images.archives pin`` to the ``mcp-atlas-<server>`` sidecar images built by
images/build.sh. Only the values a user sets are replaced (the model endpoint: a scripted model on
the node's bridge that calls each task's reference trajectory, test_operator_e2e's ``sharp``; S3: moto on the same address).

The same tasks then run locally (``atlas run``, same catalog, same /data, same scripted model): every
tool result in the pods' transcripts must be the local one, text for text (desktop-commander's
random client id and usage times masked, as in the parity test). Fresh /data per pod is
the operator's data seeding (``spec.cluster.dataVolume``), not part of this check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from images import archives

from atlasrun.tasks.loader import load_tasks
from atlasrun.testing.scripted_provider import ScriptedProvider
from cluster.controlplane import ControlPlane, wait_for
from cluster.node import Node, node_cluster  # noqa: F401  (fixture)
from cluster.node_run import GROUP_PATH, PodRecorder, host_operator, images_or_skip
from cluster.tenant import BUCKET, install_crd, prepare_tenant, s3_bucket
from cluster.test_operator_e2e import scripted
from mcp_atlas_env import VENDOR, without_config_noise

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1800)]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mcp-atlas-cluster"
SAMPLE = VENDOR / "mcp-atlas-619939a-sample_tasks.csv"
NAMESPACE = "mcp-atlas"
MODEL_KEY = "sk-mcp-atlas-node-secret"
SERVERS = ("filesystem", "memory", "calculator", "desktop-commander", "mcp-server-code-runner")
TARGETS = ("runner", *(f"mcp-atlas-{s}" for s in SERVERS))


def atlas(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
        check=False,
    )
    assert proc.returncode == 0, (
        f"atlas {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    return proc


def tool_results(results_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """task id -> [(tool name, result text)] in call order, from a results directory's task records."""
    out: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(results_dir.glob("tasks/*/*.json")):
        record = json.loads(path.read_text())
        names = {
            call["id"]: call["function"]["name"]
            for m in record["transcript"]["messages"]
            for call in m.get("tool_calls") or []
        }
        out[record["task_id"]] = [
            (names[m["tool_call_id"]], m["content"])
            for m in record["transcript"]["messages"]
            if m["role"] == "tool"
        ]
    return out


def data_volume(cp: ControlPlane, node: Node, namespace: str) -> Path:
    """Storage for the example's PVC: a hostPath PersistentVolume of no class bound to it (what a
    default StorageClass provisions in kind or minikube)."""
    path = node.workdir / "mcp-atlas-data-volume"
    path.mkdir()
    path.chmod(0o777)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-data"},
        "spec": {
            "capacity": {"storage": "100Mi"},
            "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": "mcp-atlas-data"},
        },
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(pv))
    return path


def test_mcp_atlas_sample_tasks_run_in_pods_with_the_local_tool_outputs(
    node_cluster: tuple[ControlPlane, Node],  # noqa: F811
    tmp_path: Path,
) -> None:
    if not SAMPLE.is_file():
        pytest.skip(f"MCP-Atlas's sample file is not here: {SAMPLE}")
    cp, node = node_cluster
    timings: dict[str, float] = {}
    t = time.monotonic()
    built = images_or_skip(TARGETS)
    timings["images (build or cache)"] = time.monotonic() - t
    t = time.monotonic()
    lock = {target: node.push_oci_archive(path, f"atlasrun/{target}") for target, path in built.items()}
    timings["push"] = time.monotonic() - t

    spec = yaml.safe_load((EXAMPLE / "run.yaml").read_text())
    ids = spec["spec"]["tasks"]["ids"]
    tasks = [t for t in load_tasks(SAMPLE).tasks if t.id in ids]
    assert sorted(t.id for t in tasks) == sorted(ids)

    # MCP-Atlas's /data, built as the docs say; the code executor's venv stays out of the archive.
    t = time.monotonic()
    data = tmp_path / "mcp-atlas-data"
    atlas("init-workspace", "--catalog", "mcp-atlas", str(data), ATLAS_SOURCE_ARCHIVES=str(VENDOR))
    archive = tmp_path / "mcp-atlas-data.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(data, arcname=data.name, filter=lambda m: None if "/.venv" in m.name else m)
    assert archive.stat().st_size < 512 * 1024, "the archive must fit a ConfigMap"
    timings["/data archive"] = time.monotonic() - t

    with s3_bucket(node.ip) as s3, ScriptedProvider(scripted(tasks), host=node.ip) as provider:
        # Locally first: the reference tool outputs.
        t = time.monotonic()
        local_run = tmp_path / "local.yaml"
        local_spec = {
            "apiVersion": "atlasrun.dev/v1alpha1",
            "kind": "AtlasRun",
            "metadata": {"name": "local"},
            "spec": {
                "tasks": {"path": str(SAMPLE), "ids": ids},
                "models": [{"name": "sharp", "model": "openai/sharp", "apiBase": provider.api_base}],
                "judges": [{"name": "deterministic"}],
                "servers": {"catalog": "mcp-atlas", "enabled": list(SERVERS)},
                "parallelism": 3,
            },
        }
        local_run.write_text(yaml.safe_dump(local_spec))
        atlas(
            "run",
            str(local_run),
            "--data-dir",
            str(data),
            "--out",
            str(tmp_path / "local"),
            "--no-preflight",  # the scripted model answers the tasks' prompts only
            OPENAI_API_KEY="x",
        )
        timings["local run"] = time.monotonic() - t

        t = time.monotonic()
        install_crd(cp)
        api, kubeconfig = prepare_tenant(cp, NAMESPACE, MODEL_KEY, [], tasks_configmap="unused")
        data_volume(cp, node, NAMESPACE)
        for name, key, path in (
            ("mcp-atlas-data-archive", "mcp-atlas-data.tar.gz", archive),
            ("mcp-atlas-sample-tasks", "sample_tasks.csv", SAMPLE),
        ):
            cp.kubectl("create", "configmap", name, "-n", NAMESPACE, f"--from-file={key}={path}")
        cp.kubectl(
            "apply",
            "-n",
            NAMESPACE,
            "-f",
            "-",
            input=archives.pin((EXAMPLE / "workspace.yaml").read_text(), lock),
        )
        cp.kubectl(
            "wait", "job/mcp-atlas-data", "-n", NAMESPACE, "--for=condition=complete", "--timeout=300s"
        )
        timings["namespace, /data PVC filled"] = time.monotonic() - t

        (run,) = yaml.safe_load_all(archives.pin((EXAMPLE / "run.yaml").read_text(), lock))
        host, port = provider.api_base.split("//", 1)[1].split("/", 1)[0].split(":")
        (model,) = run["spec"]["models"]
        model.update(name="sharp", model="openai/sharp", apiBase=provider.api_base)  # yours
        model["egress"] = {"cidrs": [f"{host}/32"], "ports": [int(port)]}
        run["spec"]["output"]["bucket"] = BUCKET
        run["spec"]["cluster"]["runnerImage"] = lock["runner"]
        assert {s["image"] for s in run["spec"]["servers"]["inline"]} == {
            lock[f"mcp-atlas-{s}"] for s in SERVERS
        }

        t = time.monotonic()
        recorder = PodRecorder(api, NAMESPACE)
        with host_operator(node, api, kubeconfig, s3, NAMESPACE):
            api.post(f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns", json=run).raise_for_status()
            name = run["metadata"]["name"]

            def finished() -> dict[str, Any] | None:
                got = api.get(f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns/{name}").json()
                return got if got.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

            status = wait_for(finished, 900, f"AtlasRun {name} finished", interval=2.0)["status"]
            timings["cluster run"] = time.monotonic() - t
        recorder.stop()
        sidecars = sorted(
            {
                c["name"]
                for p in recorder.of_run(name)
                for c in p["spec"].get("initContainers", [])
                if c["name"].startswith("mcp-")
            }
        )
        print("\nmcp-atlas on the node: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
        assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
        assert sidecars == [f"mcp-{s}" for s in sorted(SERVERS)], sidecars

        pulled = tmp_path / "pulled"
        atlas(
            "pull",
            f"s3://{BUCKET}/{run['spec']['output']['prefix']}/{name}/",
            str(pulled),
            AWS_ENDPOINT_URL=s3,
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            AWS_REGION="us-east-1",
        )
    local, in_pods = tool_results(tmp_path / "local"), tool_results(pulled)
    assert sorted(in_pods) == sorted(ids), in_pods.keys()
    for task in tasks:
        calls = [c.name for turn in task.reference_trajectory for c in turn.calls]
        assert [n for n, _ in in_pods[task.id]] == calls, task.id
        assert [(n, without_config_noise(t)) for n, t in in_pods[task.id]] == [
            (n, without_config_noise(t)) for n, t in local[task.id]
        ], f"{task.id}: the pods' tool outputs differ from the local run's"
        assert not any(text.startswith('{"detail"') for _, text in in_pods[task.id]), in_pods[task.id]
    # MCP-Atlas's /data as the servers see it in the pods: the filesystem server's root and the
    # memory server's graph from MCP-Atlas's memories file.
    c6 = dict(in_pods["c6d7e8f9a0"])
    assert c6["filesystem_list_allowed_directories"] == "Allowed directories:\n/data"
    assert '"entities"' in c6["memory_read_graph"]
