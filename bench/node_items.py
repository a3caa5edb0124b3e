"""``make bench-node`` (part 2): what one work item costs in pods on the real node, against the
local engine on the same machine, for several ``spec.cluster.itemsPerPod``.

The same run everywhere: the node tests' six starter tasks x two scripted models (the scripted
provider follows each task's reference trajectory), ``--repeats`` times, on the four starter
servers with the workspace as ``dataVolume``, every item on fresh state. Per item:

- ``items/s``: items divided by the wall time from creating the AtlasRun until it is Succeeded
  (locally: ``atlas run`` of the same run file, from start to exit);
- ``cpu s/item``: node CPU-seconds of the pods (cgroup v1 ``cpuacct.usage`` of the kubelet's
  ``kubepods`` cgroup, which charges every container of every pod; locally the ``atlas run``
  process tree's user + system time);
- ``pod s/item``: the pods' summed lifetime (start to the runner's finish);
- ``api req/item``: requests the API server served during the run (``apiserver_request_total``);
- ``reported/node``: the CPU-seconds the operator exported for the run (``status.models[*].usage
  .cpuSeconds``: each pod's runner and sidecars reading their own cgroups) over the node's
  ``kubepods`` figure above (which also charges pause and seed containers and the sidecars' stop).

And the cluster quick-start (docs/cluster.md): its run's wall time on the node, from ``kubectl
apply`` to Succeeded, as tests/cluster/test_node_quickstart.py runs the guide's block (its own
control plane and node, the scripted model) and then applies the same run file again (the images
now on the node), against ``atlas run`` of the same run file on this machine (tasks from the
file, no ``cluster``/``output``; the median of three runs).

Needs root and ``make node`` (the images are built by the node tests' helper, cached by content).
Writes ``bench/out/node.json``: ``{"local": {...}, "cluster": [{...}, ...], "quickstart": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from atlasrun.tasks.loader import load_tasks  # noqa: E402
from atlasrun.testing.scripted_provider import ScriptedProvider  # noqa: E402
from cluster.controlplane import ControlPlane, find_binaries  # noqa: E402
from cluster.node import Node, node_paths  # noqa: E402
from cluster.node_run import SERVER_PORTS, NodeRunEnv, epoch, node_run_env_for  # noqa: E402
from cluster.tenant import tasks_yaml  # noqa: E402
from cluster.test_operator_e2e import scripted  # noqa: E402

KUBEPODS_CPU = Path("/sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage")


def api_requests(env: NodeRunEnv) -> float:
    text = env.cp.client().get("/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("apiserver_request_total{")
    )


def runner_done(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The runner container's terminated state, None while it runs (or never ran)."""
    runner = next((c for c in pod["status"].get("containerStatuses", []) if c["name"] == "runner"), None)
    done = (runner or {}).get("state", {}).get("terminated")
    return dict(done) if done else None


def pods_seconds(pods: list[dict[str, Any]]) -> float:
    total = 0.0
    for pod in pods:
        done, start = runner_done(pod), pod["status"].get("startTime")
        if done and start:
            total += epoch(done["finishedAt"]) - epoch(start)
    return total


def cluster_row(env: NodeRunEnv, per_pod: int, repeats: int) -> dict[str, Any]:
    name = f"cost-{per_pod}"
    manifest = env.manifest(name, itemsPerPod=per_pod, itemsPerJob=max(per_pod, 100))
    manifest["spec"]["repeats"] = repeats
    items = len(env.tasks) * 2 * repeats
    cpu0, api0 = int(KUBEPODS_CPU.read_text()), api_requests(env)
    started = time.monotonic()
    with env.operator():
        env.create_run(manifest)
        run = env.wait_phase(name, {"Succeeded", "Failed"}, timeout=3600)
        wall = time.monotonic() - started
        time.sleep(3)  # the last pods' sidecars stop after their runner
        cpu = (int(KUBEPODS_CPU.read_text()) - cpu0) / 1e9
        api = api_requests(env) - api0
    assert run["status"]["phase"] == "Succeeded", run["status"]
    # Pods whose runner ended: the last state seen of a pod deleted once counted may still be
    # Running (its sidecars stopping), so the phase would miss some.
    pods = [p for p in env.recorder.of_run(name) if runner_done(p)]
    spent = [m.get("usage", {}) for m in run["status"]["models"].values()]
    reported = sum(u.get("cpuSeconds", 0) for u in spent)
    return {
        "items_per_pod": per_pod,
        "items": items,
        "pods": len(pods),
        "wall_s": round(wall, 1),
        "items_per_s": round(items / wall, 3),
        "cpu_s_per_item": round(cpu / items, 3),
        "pod_s_per_item": round(pods_seconds(pods) / items, 2),
        "api_requests_per_item": round(api / items, 1),
        "reported_cpu_s_per_item": round(reported / items, 3),
        "reported_pod_s_per_item": round(sum(u.get("podSeconds", 0) for u in spent) / items, 2),
        "reported_pods": sum(u.get("pods", 0) for u in spent),
    }


def local_row(env: NodeRunEnv, repeats: int, root: Path) -> dict[str, Any]:
    """The same items with ``atlas run`` on this machine (same tasks, provider, servers, data)."""
    manifest = env.manifest("local")
    spec = {k: v for k, v in manifest["spec"].items() if k not in ("cluster", "output")}
    (root / "tasks.yaml").write_text(tasks_yaml(env.tasks))
    spec.update(
        tasks={"path": str(root / "tasks.yaml")}, servers={"enabled": list(SERVER_PORTS)}, repeats=repeats
    )
    run_file = root / "run.yaml"
    run_file.write_text(
        json.dumps(
            {
                "apiVersion": "atlasrun.dev/v1alpha1",
                "kind": "AtlasRun",
                "metadata": {"name": "local"},
                "spec": spec,
            }
        )
    )
    items = len(env.tasks) * 2 * repeats
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", "run", str(run_file), "--data-dir", str(env.workspace),
         "--out", str(root / "out"), "--no-preflight"],
        env={**os.environ, "OPENAI_API_KEY": "sk-local"},
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "items": items,
        "wall_s": round(wall, 1),
        "items_per_s": round(items / wall, 3),
        "cpu_s_per_item": round(cpu / items, 3),
    }


QUICKSTART_CLUSTER = ("cluster_wall_s", "cluster_again_wall_s", "cluster_cpu_s", "cluster_again_cpu_s")


def quickstart_cluster() -> dict[str, float]:
    """The quick-start run on the node (the guide's block, run by its test): its wall time and
    CPU-seconds (the operator's export), the first run after the guide's ``helm install --wait``
    (``cluster_*``) and the same run file again (``cluster_again_*``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "quickstart.json"
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/cluster/test_node_quickstart.py"],
            cwd=REPO,
            env={**os.environ, "ATLAS_QUICKSTART_OUT": str(out), "ATLASRUN_REQUIRE_NODE": "1"},
            check=True,
        )  # fmt: skip
        measured = json.loads(out.read_text())
        return {k: float(measured[k]) for k in QUICKSTART_CLUSTER}


def quickstart_local(root: Path, runs: int = 3) -> dict[str, float]:
    """The median wall time and CPU-seconds (the process tree) of ``atlas run`` of the
    quick-start's run file on this machine: its tasks, servers, parallelism and judge; the
    scripted model; the starter workspace as data."""
    run = yaml.safe_load((REPO / "examples" / "quickstart" / "run.yaml").read_text())
    spec = {k: v for k, v in run["spec"].items() if k not in ("cluster", "output")}
    starter = REPO / "examples" / "starter" / "tasks.yaml"
    spec["tasks"] = {"path": str(starter)}
    walls, cpus = [], []
    with ScriptedProvider(scripted(load_tasks(starter).tasks)) as provider:
        spec["models"] = [
            {k: v for k, v in m.items() if k not in ("apiKeySecret", "egress")}
            | {"apiBase": provider.api_base}
            for m in spec["models"]
        ]
        run_file = root / "quickstart.yaml"
        run_file.write_text(yaml.safe_dump({**run, "spec": spec}))
        workspace = root / "quickstart-workspace"
        atlas = [sys.executable, "-m", "atlasrun.cli"]
        subprocess.run([*atlas, "init-workspace", str(workspace)], check=True, stdout=subprocess.DEVNULL)
        for i in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.monotonic()
            subprocess.run(
                [*atlas, "run", str(run_file), "--data-dir", str(workspace), "--out", str(root / f"qs{i}"),
                 "--no-preflight"],
                env={**os.environ, "OPENAI_API_KEY": "sk-local"},
                check=True,
                stdout=subprocess.DEVNULL,
            )  # fmt: skip
            walls.append(time.monotonic() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {
        "local_wall_s": round(statistics.median(walls), 1),
        "local_cpu_s": round(statistics.median(cpus), 2),
    }


def print_quickstart(quickstart: dict[str, float]) -> None:
    wall, cpu = quickstart["local_wall_s"], quickstart["local_cpu_s"]
    print(
        f"\nthe cluster quick-start's run (20 tasks, one model), kubectl apply to Succeeded, after the guide's "
        f"helm install --wait: node {quickstart['cluster_wall_s']:.1f}s on its first run "
        f"({quickstart['cluster_wall_s'] / wall:.2f}x), {quickstart['cluster_again_wall_s']:.1f}s run again "
        f"({quickstart['cluster_again_wall_s'] / wall:.2f}x); local {wall:.1f}s (atlas run, median of 3)\n"
        f"its CPU-seconds: node {quickstart['cluster_cpu_s']:.1f} ({quickstart['cluster_cpu_s'] / cpu:.2f}x), "
        f"again {quickstart['cluster_again_cpu_s']:.1f} ({quickstart['cluster_again_cpu_s'] / cpu:.2f}x); "
        f"local {cpu:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-pod", default="1,5,20,50", help="itemsPerPod values (comma-separated)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the 2 models x 6 tasks")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "node.json")
    parser.add_argument(
        "--quickstart-only", action="store_true", help="only the quick-start's run (its part of --out)"
    )
    args = parser.parse_args()
    per_pod = [int(v) for v in args.per_pod.split(",")]
    cluster_wall = quickstart_cluster()  # first: its own control plane and node
    if args.quickstart_only:
        with tempfile.TemporaryDirectory() as tmp:
            quickstart = {**quickstart_local(Path(tmp)), **cluster_wall}
        print_quickstart(quickstart)
        saved = json.loads(args.out.read_text()) if args.out.exists() else {}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**saved, "quickstart": quickstart}, indent=2) + "\n")
        return
    with (
        ControlPlane(find_binaries()) as cp,
        Node(cp, node_paths()) as node,
        node_run_env_for(cp, node) as env,
        tempfile.TemporaryDirectory() as tmp,
    ):
        local = local_row(env, args.repeats, Path(tmp))
        quickstart = {**quickstart_local(Path(tmp)), **cluster_wall}
        rows = [cluster_row(env, k, args.repeats) for k in per_pod]
    print(f"\nper item, {local['items']} items (2 models x 6 tasks x {args.repeats}), fresh state per item")
    print(f"{'where':<22} {'pods':>5} {'items/s':>8} {'vs local':>9} {'cpu s/item':>11} {'vs local':>9} "
          f"{'pod s/item':>11} {'api req/item':>13} {'reported/node':>14}")  # fmt: skip
    print(f"{'local (atlas run)':<22} {'-':>5} {local['items_per_s']:>8.2f} {'1.00x':>9} "
          f"{local['cpu_s_per_item']:>11.3f} {'1.00x':>9} {'-':>11} {'-':>13} {'-':>14}")  # fmt: skip
    for row in rows:
        print(
            f"{'itemsPerPod ' + str(row['items_per_pod']):<22} {row['pods']:>5} {row['items_per_s']:>8.2f} "
            f"{row['items_per_s'] / local['items_per_s']:>8.2f}x {row['cpu_s_per_item']:>11.3f} "
            f"{row['cpu_s_per_item'] / local['cpu_s_per_item']:>8.2f}x {row['pod_s_per_item']:>11.2f} "
            f"{row['api_requests_per_item']:>13.1f} "
            f"{row['reported_cpu_s_per_item'] / row['cpu_s_per_item']:>13.2f}x"
        )
    print_quickstart(quickstart)
    print("goal (issue 22): cluster within 2x of local in wall time and CPU-seconds per item")
    print(
        "reported/node: the operator's exported CPU-seconds over the node's kubepods cgroup (goal: 0.8-1.0x)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"local": local, "cluster": rows, "quickstart": quickstart}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
