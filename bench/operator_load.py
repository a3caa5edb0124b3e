"""``make bench-operator SWEEP=MxTxR``: one AtlasRun of M models x T tasks x R repeats, end to end.

On the project's control plane (kube-apiserver + kube-controller-manager at its default QPS unless
``--kcm-qps``, etcd), moto's S3 server for the pinned task document and the results, and the
tests' node stand-in in *instant* mode (each pod is bound and finished at once with a scored
termination message: no MCP servers, no model), so what is measured is the operator and the
control plane. The operator runs as in the chart: its ServiceAccount with the chart's RBAC, leader
election on. Writes ``bench/out/operator.json`` and prints the figures with their goals:

- ``items``, ``recorded`` (items the run's status counts), ``wall_s``, ``items_per_s``;
- ``floor_items_per_s``: a bare client creating the same Indexed Jobs (same chunks, same pod
  template, no operator) in the same control plane, taken to Complete by the same Job controller
  and stand-in (on a subset of the items, at most ``--floor-items``);
- ``api_writes_per_item`` / ``api_requests_per_item``: the apiserver's audit log, operator's
  ServiceAccount only, from the run's creation to its end (Lease renewals listed apart);
- ``etcd_bytes_peak`` / ``etcd_bytes_end``: bytes of the live keys under ``/registry`` (etcd's
  range API, sampled every few seconds), ``status_bytes_max`` (the run's status as JSON);
- ``operator_rss_mb_peak`` (VmHWM), ``idle_writes_per_min`` (operator writes, Lease excluded,
  during ``--idle-seconds`` after the run ended);
- ``operator_cpu_s`` (the operator's CPU time during the sweep) and the machine's 1-minute load
  average during the sweep (``load_avg_1m_mean`` / ``_max``): the figures depend on both.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

import httpx  # noqa: E402
import yaml  # noqa: E402

from atlasrun.cluster.operator.manifests import render_job  # noqa: E402
from atlasrun.cluster.operator.reconcile import PlannedTask, plan_chunks  # noqa: E402
from atlasrun.cluster.wire.contract import (  # noqa: E402
    ANNOTATION_INDEX,
    ENV_WORK_UNIT,
    ChunkPlan,
    PlanRef,
    TasksRef,
    WorkUnit,
)
from atlasrun.runspec.run import RunSpecBody  # noqa: E402
from atlasrun.servers.catalog import load_catalog  # noqa: E402
from cluster.controlplane import ControlPlane, wait_for  # noqa: E402
from cluster.node_standin import NodeStandIn  # noqa: E402
from cluster.operator_rbac import install_operator_rbac  # noqa: E402

NAMESPACE = "bench"
PIN = "@sha256:" + "0" * 64
BUCKET = "bench-results"
SA_USER = f"system:serviceaccount:{NAMESPACE}:atlasrun"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{NAMESPACE}"]},
        {"level": "None"},
    ],
}
GOALS = {
    "recorded": "== items",
    "items_per_s": ">= 50 and >= 0.8x floor",
    "api_writes_per_item": "<= 0.2",
    "status_bytes_max": "<= 65536",
    "etcd_bytes_end": "<= 20 MB",
    "operator_rss_mb_peak": "<= 200",
    "idle_writes_per_min": "0",
}


def tasks_doc(n: int) -> bytes:
    tasks = [
        {
            "id": f"bench-{i:05d}",
            "prompt": f"What is {i}+1?",
            "enabled_tools": ["calculator_calculate"],
            "claims": [f"The answer is {i + 1}"],
            "reference_trajectory": [
                {"calls": [{"name": "calculator_calculate", "arguments": {"expression": f"{i}+1"}}]}
            ],
        }
        for i in range(n)
    ]
    return yaml.safe_dump({"tasks": tasks}).encode()


def run_manifest(
    name: str, models: int, repeats: int, parallelism: int, per_job: int, per_pod: int
) -> dict[str, Any]:
    calculator = load_catalog().get("calculator").model_dump(by_alias=True, exclude_none=True)
    calculator.update({"image": f"registry.example/mcp-calculator{PIN}", "port": 9000})
    return {
        "apiVersion": "atlasrun.dev/v1alpha1",
        "kind": "AtlasRun",
        "metadata": {"name": name},
        "spec": {
            "tasks": {"uri": f"s3://{BUCKET}/input/tasks.yaml"},
            "repeats": repeats,
            "parallelism": parallelism,
            "models": [
                {"name": f"model-{m:02d}", "model": f"openai/model-{m:02d}", "maxConcurrency": parallelism}
                for m in range(models)
            ],
            "servers": {"inline": [calculator], "enabled": ["calculator"]},
            "output": {"bucket": BUCKET, "prefix": "sweeps"},
            "cluster": {
                "runnerImage": f"registry.example/runner{PIN}",
                "itemsPerJob": per_job,
                "itemsPerPod": per_pod,
            },
        },
    }


SCORED = {"status": "scored", "passed": True, "coverage": 1.0, "wall_s": 0.1}


def instant_finish(pod: dict[str, Any]) -> tuple[int, str]:
    """What ``atlas run-task`` reports for a scored pod: one summary, or a batch of them when the
    pod's completion index names several items (``cluster.itemsPerPod``)."""
    index = int(pod["metadata"]["annotations"][ANNOTATION_INDEX])
    env = {e["name"]: e.get("value") for c in pod["spec"]["containers"] for e in c.get("env") or []}
    unit = WorkUnit.model_validate_json(env[ENV_WORK_UNIT] or "{}")
    items = len(unit.positions(index))
    if items == 1:
        return 0, json.dumps(SCORED)
    return 0, json.dumps(
        {"status": "batch", "exit_code": 0, "items": [SCORED] * items}, separators=(",", ":")
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (``/proc/<pid>/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def etcd_live_bytes(endpoint: str) -> int:
    """Bytes (keys + values) of every live key under /registry, via etcd's v3 range API."""
    key = base64.b64encode(b"/registry/").decode()
    end = base64.b64encode(b"/registry0").decode()
    response = httpx.post(f"{endpoint}/v3/kv/range", json={"key": key, "range_end": end}, timeout=60)
    response.raise_for_status()
    return sum(
        len(base64.b64decode(kv["key"])) + len(base64.b64decode(kv.get("value", "")))
        for kv in response.json().get("kvs", [])
    )


def audit_counts(path: Path, start: str, end: str) -> dict[str, int]:
    """Operator requests (and writes) with requestReceivedTimestamp in [start, end)."""
    counts = {"requests": 0, "writes": 0, "lease_requests": 0, "lease_writes": 0}
    if not path.exists():
        return counts
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("stage") != "ResponseComplete" or event.get("user", {}).get("username") != SA_USER:
            continue
        if not start <= event.get("requestReceivedTimestamp", "") < end:
            continue
        lease = (event.get("objectRef") or {}).get("resource") == "leases"
        write = event.get("verb") in WRITES
        counts["lease_requests" if lease else "requests"] += 1
        counts["lease_writes" if lease else "writes"] += 1 if write else 0
    return counts


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 1_000_000:06d}Z"


def floor_rate(
    cp: ControlPlane,
    models: int,
    tasks: int,
    repeats: int,
    parallelism: int,
    per_job: int,
    per_pod: int,
    cap: int,
) -> tuple[float, int]:
    """Items/s when a bare client creates the same Indexed Jobs (no operator) and the same Job
    controller and stand-in take them to Complete; at most ``cap`` items."""
    manifest = run_manifest("floor", models, repeats, parallelism, per_job, per_pod)
    body = RunSpecBody.model_validate(manifest["spec"])
    plan = plan_chunks(body, tuple(PlannedTask(f"bench-{i:05d}", ("calculator",)) for i in range(tasks)))
    server = (
        load_catalog()
        .get("calculator")
        .model_copy(update={"image": f"registry.example/mcp{PIN}", "port": 9000})
    )
    ref = TasksRef(sha256="0" * 64, uri=f"s3://{BUCKET}/sweeps/tasks/{'0' * 64}")
    jobs, items, pods = [], 0, 0
    for model in body.models:
        for chunk in plan[model.name]:
            if items >= cap:
                break
            plan_bytes = ChunkPlan(items=list(chunk.items)).to_bytes()
            digest = hashlib.sha256(plan_bytes).hexdigest()
            unit = WorkUnit(
                schema_version=2,
                run="floor",
                model=model.name,
                chunk=chunk.index,
                plan=PlanRef(
                    sha256=digest, uri=f"s3://{BUCKET}/sweeps/plans/{digest}", size=len(chunk.items)
                ),
                per_pod=per_pod,
                tasks=ref,
                results_uri="",
            )
            job = render_job(
                "floor",
                "floor-uid",
                NAMESPACE,
                body,
                model,
                unit,
                [server],
                runner_image=f"registry.example/runner{PIN}",
                spec_configmap="x",
                s3_secret=None,
                s3_endpoint=None,
                parallelism=max(1, parallelism // models),
            )
            job["metadata"].pop("ownerReferences", None)
            jobs.append(job)
            items += len(chunk.items)
            pods += job["spec"]["completions"]
    with cp.client() as api:
        started = time.perf_counter()
        for job in jobs:
            api.post(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", json=job).raise_for_status()

        def complete() -> bool:
            listed = api.get(
                f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
                params={"labelSelector": "atlasrun.dev/run=floor"},
            ).json()["items"]
            # succeeded counts completion indexes (pods), each of which ran itemsPerPod items
            return sum(int(j.get("status", {}).get("succeeded") or 0) for j in listed) >= pods

        wait_for(complete, 7200, "the floor's Jobs to complete", interval=1.0)
        return items / (time.perf_counter() - started), items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="20x500x3", help="MODELSxTASKSxREPEATS")
    parser.add_argument("--parallelism", type=int, default=200)
    parser.add_argument("--items-per-job", type=int, default=100)
    parser.add_argument("--items-per-pod", type=int, default=10, help="spec.cluster.itemsPerPod")
    parser.add_argument(
        "--kcm-qps", type=int, default=0, help="kube-controller-manager --kube-api-qps (0: its default)"
    )
    parser.add_argument("--floor-items", type=int, default=6000)
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--out", default=str(REPO / "bench" / "out" / "operator.json"))
    args = parser.parse_args()
    models, tasks, repeats = (int(x) for x in args.sweep.lower().split("x"))
    items = models * tasks * repeats
    work = Path(tempfile.mkdtemp(prefix="atlas-opbench-"))
    (work / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = work / "audit.log"
    kcm = (
        ["--kube-api-qps", str(args.kcm_qps), "--kube-api-burst", str(args.kcm_qps * 2)]
        if args.kcm_qps
        else []
    )
    from moto.server import ThreadedMotoServer

    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    s3.start()
    host, port = s3.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    import boto3  # type: ignore[import-untyped]

    aws = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="input/tasks.yaml", Body=tasks_doc(tasks))
    result: dict[str, Any] = {
        "sweep": args.sweep,
        "items": items,
        "parallelism": args.parallelism,
        "items_per_job": args.items_per_job,
        "items_per_pod": args.items_per_pod,
        "kcm_qps": args.kcm_qps or "default",
    }
    try:
        with ControlPlane(
            apiserver_args=[
                f"--audit-policy-file={work / 'audit-policy.yaml'}",
                f"--audit-log-path={audit_log}",
                "--audit-log-mode=blocking",
            ],
            controller_manager_args=kcm,
        ) as cp:
            etcd = next(a for a in cp.processes["etcd"].args if str(a).startswith("--listen-client-urls="))
            etcd_url = str(etcd).split("=", 1)[1]
            cp.kubectl("apply", "--server-side", "-f", str(REPO / "crds" / "atlasrun.yaml"))
            cp.create_namespace(NAMESPACE)
            kubeconfig = install_operator_rbac(cp, NAMESPACE)
            api = cp.client(timeout=120)
            env = {
                **os.environ,
                **aws,
                "KUBECONFIG": str(kubeconfig),
                "ATLASRUN_METRICS_PORT": "0",
                "ATLASRUN_S3_ENDPOINT": endpoint,
                "ATLASRUN_LEADER_ELECTION": "1",
                "ATLASRUN_LEADER_NAMESPACE": NAMESPACE,
            }
            log = (work / "operator.log").open("wb")
            operator = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kopf",
                    "run",
                    "--standalone",
                    "-m",
                    "atlasrun.cluster.operator.main",
                    "--namespace",
                    NAMESPACE,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            peaks = {"rss": 0.0, "etcd": 0, "status": 0}
            stop_sampling = threading.Event()

            def sample_etcd() -> None:
                while not stop_sampling.wait(5):
                    try:
                        peaks["etcd"] = max(peaks["etcd"], etcd_live_bytes(etcd_url))
                    except httpx.HTTPError:
                        pass

            try:
                with NodeStandIn(
                    api, NAMESPACE, None, max_pods=16, instant=instant_finish, poll_s=0.2, pending_only=True
                ) as node:
                    time.sleep(5)  # the operator is up, leading and watching
                    sampler = threading.Thread(target=sample_etcd, daemon=True)
                    sampler.start()
                    t0 = stamp()
                    started = time.perf_counter()
                    path = f"/apis/atlasrun.dev/v1alpha1/namespaces/{NAMESPACE}/atlasruns/sweep"
                    api.post(
                        f"/apis/atlasrun.dev/v1alpha1/namespaces/{NAMESPACE}/atlasruns",
                        json=run_manifest(
                            "sweep", models, repeats, args.parallelism, args.items_per_job, args.items_per_pod
                        ),
                    ).raise_for_status()
                    last_print = 0.0
                    cpu_start = cpu_seconds(operator.pid)
                    loads: list[float] = []

                    def done() -> bool:
                        nonlocal last_print
                        loads.append(os.getloadavg()[0])
                        peaks["rss"] = max(peaks["rss"], peak_rss_mb(operator.pid))
                        run = api.get(path).json()
                        status = run.get("status") or {}
                        peaks["status"] = max(peaks["status"], len(json.dumps(status)))
                        if time.monotonic() - last_print > 30:
                            last_print = time.monotonic()
                            print(
                                f"  {time.perf_counter() - started:6.0f}s {status.get('phase')} {status.get('progress')}",
                                flush=True,
                            )
                        return status.get("phase") in ("Succeeded", "Failed")

                    wait_for(done, 4 * 3600, "the sweep to finish", interval=1.0)
                    wall = time.perf_counter() - started
                    operator_cpu = cpu_seconds(operator.pid) - cpu_start
                    t1 = stamp()
                    run = api.get(path).json()
                    status = run["status"]
                    time.sleep(3)  # the last deletes
                    t_idle = stamp()
                    time.sleep(args.idle_seconds)
                    t_idle_end = stamp()
                    peaks["rss"] = max(peaks["rss"], peak_rss_mb(operator.pid))
                    etcd_end = etcd_live_bytes(etcd_url)
                    stop_sampling.set()
                    operator.terminate()
                    operator.wait(timeout=30)
                    floor, floor_items = floor_rate(
                        cp,
                        models,
                        tasks,
                        repeats,
                        args.parallelism,
                        args.items_per_job,
                        args.items_per_pod,
                        args.floor_items,
                    )
                    if node.errors:
                        print(f"node stand-in errors: {node.errors[:3]}", file=sys.stderr)
            finally:
                stop_sampling.set()
                if operator.poll() is None:
                    operator.terminate()
                    operator.wait(timeout=30)
                log.close()
            busy = audit_counts(audit_log, t0, t1)
            idle = audit_counts(audit_log, t_idle, t_idle_end)
    finally:
        s3.stop()
    recorded = sum(
        int(m["scored"]) + int(m["errored"]) + int(m["excluded"]) for m in status["models"].values()
    )
    result.update(
        {
            "recorded": recorded,
            "phase": status["phase"],
            "wall_s": round(wall, 1),
            "items_per_s": round(items / wall, 2),
            "floor_items_per_s": round(floor, 2),
            "floor_items": floor_items,
            "api_requests_per_item": round(busy["requests"] / items, 4),
            "api_writes_per_item": round(busy["writes"] / items, 4),
            "api_requests": busy["requests"],
            "api_writes": busy["writes"],
            "lease_writes_per_min": round(idle["lease_writes"] * 60 / args.idle_seconds, 1),
            "etcd_bytes_peak": peaks["etcd"],
            "etcd_bytes_end": etcd_end,
            "status_bytes_max": peaks["status"],
            "operator_rss_mb_peak": round(peaks["rss"], 1),
            "idle_writes_per_min": round(idle["writes"] * 60 / args.idle_seconds, 2),
            "idle_requests_per_min": round(idle["requests"] * 60 / args.idle_seconds, 2),
            "operator_cpu_s": round(operator_cpu, 1),
            "load_avg_1m_mean": round(sum(loads) / max(1, len(loads)), 1),
            "load_avg_1m_max": round(max(loads, default=0.0), 1),
            "cpus": os.cpu_count(),
            "work_dir": str(work),
        }
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    rows = [("metric", "measured", "goal")]
    rows += [
        ("items / recorded", f"{items} / {recorded}", GOALS["recorded"]),
        ("wall time (s)", f"{wall:.0f}", "-"),
        (
            "items/s",
            f"{items / wall:.1f} ({items / wall / floor:.2f}x floor {floor:.1f})",
            GOALS["items_per_s"],
        ),
        ("API writes per item", f"{result['api_writes_per_item']}", GOALS["api_writes_per_item"]),
        ("API requests per item", f"{result['api_requests_per_item']}", "-"),
        ("status bytes (max)", f"{peaks['status']}", GOALS["status_bytes_max"]),
        (
            "etcd live bytes peak / end",
            f"{peaks['etcd'] / 1e6:.1f} MB / {etcd_end / 1e6:.1f} MB",
            GOALS["etcd_bytes_end"],
        ),
        ("operator RSS peak (MB)", f"{peaks['rss']:.0f}", GOALS["operator_rss_mb_peak"]),
        ("operator CPU (s) during the sweep", f"{operator_cpu:.1f}", "-"),
        (
            "idle writes/min (Lease apart)",
            f"{result['idle_writes_per_min']} (Lease {result['lease_writes_per_min']})",
            GOALS["idle_writes_per_min"],
        ),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(
        f"\nAtlasRun operator, sweep {args.sweep} ({items} items), kube-controller-manager QPS {result['kcm_qps']}, "
        f"load average (1 min) during the sweep {result['load_avg_1m_mean']} mean, {result['load_avg_1m_max']} max "
        f"on {result['cpus']} CPUs"
    )
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
