"""``make bench`` (operator part): the operator under load on the real control plane.

N work items (default 1,000) flow through the tests' node stand-in in *instant* mode
(each pod is bound and finished at once with a scored termination message: no MCP
servers, no model), so what is measured is the operator and the control plane:

- Jobs created per second, and the run's wall time from creation to Succeeded
- API requests per task made by the operator (counted in the apiserver's audit log for
  the operator's ServiceAccount, which has exactly the chart's RBAC)
- the operator process's peak RSS

The floor, measured in the same run: Jobs created by a bare client loop (one POST per
Job, no reconcile logic) and taken to Complete by the same Job controller and node
stand-in, i.e. what the control plane itself allows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

import yaml  # noqa: E402

from atlasrun.cluster.manifests import render_job  # noqa: E402
from atlasrun.runspec.run import RunSpecBody  # noqa: E402
from atlasrun.servers.catalog import load_catalog  # noqa: E402
from cluster.controlplane import ControlPlane, wait_for  # noqa: E402
from cluster.node_standin import NodeStandIn  # noqa: E402
from cluster.operator_rbac import install_operator_rbac  # noqa: E402

NAMESPACE = "bench"
PIN = "@sha256:" + "0" * 64
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "userGroups": ["system:serviceaccounts:bench"]}, {"level": "None"}],
}


def tasks_doc(n: int) -> str:
    return yaml.safe_dump(
        {
            "tasks": [
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
        }
    )


def run_manifest(name: str, parallelism: int) -> dict[str, Any]:
    calculator = load_catalog().get("calculator").model_dump(by_alias=True, exclude_none=True)
    calculator.update({"image": f"registry.example/mcp-calculator{PIN}", "port": 9000})
    return {
        "apiVersion": "atlasrun.dev/v1alpha1",
        "kind": "AtlasRun",
        "metadata": {"name": name},
        "spec": {
            "tasks": {"configMap": "bench-tasks"},
            "parallelism": parallelism,
            "models": [{"name": "instant", "model": "openai/instant", "maxConcurrency": parallelism}],
            "servers": {"inline": [calculator], "enabled": ["calculator"]},
            "cluster": {"runnerImage": f"registry.example/runner{PIN}"},
        },
    }


def instant_finish(pod: dict[str, Any]) -> tuple[int, str]:
    return 0, json.dumps({"status": "scored", "passed": True, "coverage": 1.0, "wall_s": 0.1})


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def bare_job_floor(cp: ControlPlane, n: int) -> float:
    """Floor: Jobs/s when a bare client loop creates the same Jobs (rendered by the same code, no
    reconcile logic) and the same node stand-in and Job controller take them to Complete."""
    body = RunSpecBody.model_validate(run_manifest("floor", 1)["spec"])
    server = (
        load_catalog()
        .get("calculator")
        .model_copy(update={"image": f"registry.example/mcp{PIN}", "port": 9000})
    )
    jobs = [
        render_job(
            "floor",
            "00000000-0000-0000-0000-000000000000",
            NAMESPACE,
            body,
            body.models[0],
            f"floor-{i}",
            0,
            [server],
            runner_image=f"registry.example/runner{PIN}",
            spec_configmap="x",
            results_uri="",
            s3_secret=None,
            s3_endpoint=None,
        )
        for i in range(n)
    ]
    with cp.client() as api:
        started = time.perf_counter()
        for job in jobs:
            job["metadata"].pop("ownerReferences", None)
            api.post(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", json=job).raise_for_status()

        def complete() -> bool:
            items = api.get(
                f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
                params={"labelSelector": "atlasrun.dev/run=floor"},
            ).json()["items"]
            return (
                sum(
                    1
                    for j in items
                    for c in (j.get("status", {}).get("conditions") or [])
                    if c["type"] == "Complete" and c["status"] == "True"
                )
                == n
            )

        wait_for(complete, 3600, "the floor's Jobs to complete", interval=0.5)
        return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=100)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="atlas-opbench-"))
    (work / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = work / "audit.log"
    # The controller manager's client is raised from its default 20 QPS (production clusters
    # tune it too): otherwise the Job controller, not the operator, sets the pace.
    with ControlPlane(
        apiserver_args=[
            f"--audit-policy-file={work / 'audit-policy.yaml'}",
            f"--audit-log-path={audit_log}",
            "--audit-log-mode=blocking",
        ],
        controller_manager_args=["--kube-api-qps=200", "--kube-api-burst=400"],
    ) as cp:
        cp.kubectl("apply", "--server-side", "-f", str(REPO / "crds" / "atlasrun.yaml"))
        cp.create_namespace(NAMESPACE)
        kubeconfig = install_operator_rbac(cp, NAMESPACE)
        api = cp.client()
        api.post(
            f"/api/v1/namespaces/{NAMESPACE}/configmaps",
            json={
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "bench-tasks"},
                "data": {"tasks.yaml": tasks_doc(args.tasks)},
            },
        ).raise_for_status()
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "ATLAS_METRICS_PORT": "0",
            "ATLAS_RECONCILE_INTERVAL": "1",
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
                "atlasrun.cluster.operator",
                "--namespace",
                NAMESPACE,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            with NodeStandIn(api, NAMESPACE, None, max_pods=8, instant=instant_finish, poll_s=0.1):
                time.sleep(3)  # the operator is up and watching
                before = len(audit_log.read_text().splitlines()) if audit_log.exists() else 0
                started = time.perf_counter()
                api.post(
                    f"/apis/atlasrun.dev/v1alpha1/namespaces/{NAMESPACE}/atlasruns",
                    json=run_manifest("load", args.parallelism),
                ).raise_for_status()
                rss = 0.0

                def done() -> bool:
                    nonlocal rss
                    rss = max(rss, peak_rss_mb(operator.pid))
                    run = api.get(f"/apis/atlasrun.dev/v1alpha1/namespaces/{NAMESPACE}/atlasruns/load").json()
                    return run.get("status", {}).get("phase") == "Succeeded"

                wait_for(done, 3600, "the benchmark run to finish", interval=1.0)
                wall = time.perf_counter() - started
                rss = max(rss, peak_rss_mb(operator.pid))
                requests = len(audit_log.read_text().splitlines()) - before
                operator.terminate()
                operator.wait(timeout=30)
                floor = bare_job_floor(cp, min(args.tasks, 300))
        finally:
            if operator.poll() is None:
                operator.terminate()
                operator.wait(timeout=30)
            log.close()
    rate = args.tasks / wall
    rows = [
        ("metric", "operator", "floor (same run)", "ratio"),
        (
            f"Jobs/s ({args.tasks} tasks, window {args.parallelism})",
            f"{rate:.1f}",
            f"{floor:.1f} bare client loop",
            f"{rate / floor:.2f}x floor",
        ),
        ("run wall time (s)", f"{wall:.0f}", "-", "create -> Succeeded"),
        (
            "API requests per task (operator)",
            f"{requests / args.tasks:.2f}",
            "1 (one POST per Job)",
            f"{requests} requests in the audit log",
        ),
        ("operator peak RSS (MB)", f"{rss:.0f}", "-", "VmHWM of the kopf process"),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
