"""``make bench-node``: how many Jobs per second the real node (tests/cluster/node.py) completes.

The project's control plane plus one real node (containerd + runc + kubelet + kube-scheduler +
kube-router, CNI bridge). Each workload is N objects created at once; the figure is N divided by
the time from creation until the last one is complete:

- ``pods (floor)``: bare Pods (restartPolicy Never) of a static ``true`` image: what the node does
  with no Job controller in the way; the rows below are compared with it;
- ``jobs trivial``: one Job per pod, same container (the shape of the operator's pods, no sidecar);
- ``jobs + sidecar``: the same Jobs with one native sidecar (an initContainer with
  restartPolicy Always, the pause image), which the kubelet must start first and stop last.

The issue's reference figures on this kind of machine (~2.2 and ~1.5 Jobs/s) are printed beside
them. Needs root and ``make node``; writes ``bench/out/node_jobs.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from cluster.controlplane import ControlPlane, find_binaries, wait_for  # noqa: E402
from cluster.node import PAUSE_IMAGE, Node, node_paths  # noqa: E402

TRUE_IMAGE = "atlasrun.bench/true:1"
REFERENCE = {"jobs trivial": 2.2, "jobs + sidecar": 1.5}  # issue 11, measured on this kind of machine
SECURITY = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "runAsUser": 65535,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod_spec(sidecar: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {"name": "main", "image": TRUE_IMAGE, "imagePullPolicy": "Never", "securityContext": SECURITY}
        ],
    }
    if sidecar:
        spec["initContainers"] = [
            {
                "name": "side",
                "image": PAUSE_IMAGE,
                "imagePullPolicy": "Never",
                "restartPolicy": "Always",
                "securityContext": SECURITY,
            }
        ]
    return spec


def objects(kind: str, n: int, prefix: str, sidecar: bool) -> list[dict[str, Any]]:
    if kind == "Pod":
        return [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{prefix}-{i}"},
                "spec": pod_spec(sidecar),
            }
            for i in range(n)
        ]
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{prefix}-{i}"},
            "spec": {"backoffLimit": 0, "template": {"spec": pod_spec(sidecar)}},
        }
        for i in range(n)
    ]


def measure(cp: ControlPlane, ns: str, kind: str, n: int, prefix: str, sidecar: bool) -> float:
    """Seconds from creating ``n`` objects until all are done (Pods Succeeded / Jobs Complete)."""
    items = objects(kind, n, prefix, sidecar)
    t0 = time.monotonic()
    cp.kubectl(
        "apply", "-n", ns, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    with cp.client() as api:
        if kind == "Pod":
            path, done = f"/api/v1/namespaces/{ns}/pods", lambda o: o["status"].get("phase") == "Succeeded"
        else:
            path, done = f"/apis/batch/v1/namespaces/{ns}/jobs", lambda o: bool(o["status"].get("succeeded"))

        def all_done() -> bool:
            got = [o for o in api.get(path).json()["items"] if o["metadata"]["name"].startswith(prefix + "-")]
            failed = [
                o["metadata"]["name"]
                for o in got
                if o["status"].get("phase") == "Failed" or o["status"].get("failed")
            ]
            if failed:
                raise RuntimeError(f"{kind}s failed: {failed[:5]}")
            return len(got) == n and all(done(o) for o in got)

        wait_for(all_done, 60 + 10 * n, f"{n} {kind}s done", interval=0.2)
    wall = time.monotonic() - t0
    cp.kubectl("delete", "pods,jobs", "--all", "-n", ns, "--wait=true", "--timeout=300s")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=30, help="objects per workload (default 30)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "node_jobs.json")
    args = parser.parse_args()
    paths = node_paths()
    with ControlPlane(find_binaries()) as cp, Node(cp, paths) as node, tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "true.c"
        src.write_text("int main(void) { return 0; }\n")
        subprocess.run(["gcc", "-Os", "-static", "-o", str(Path(tmp) / "true"), str(src)], check=True)
        node.import_static_image(Path(tmp) / "true", TRUE_IMAGE)
        ns = "bench-node"
        cp.create_namespace(ns, {"pod-security.kubernetes.io/enforce": "restricted"})
        measure(cp, ns, "Pod", 3, "warm", False)  # first pod pays sandbox + image setup
        rows = []
        for label, kind, sidecar in (
            ("pods (floor)", "Pod", False),
            ("jobs trivial", "Job", False),
            ("jobs + sidecar", "Job", True),
        ):
            wall = measure(cp, ns, kind, args.n, label.split()[0] + ("-side" if sidecar else ""), sidecar)
            rows.append(
                {"workload": label, "n": args.n, "wall_s": round(wall, 2), "per_s": round(args.n / wall, 3)}
            )
        setup = {"control plane s": round(cp.startup_seconds, 1), "node s": round(node.startup_seconds, 1)}
    floor = rows[0]["per_s"]
    print(
        f"\nreal node, {args.n} objects per workload (control plane {setup['control plane s']} s, node {setup['node s']} s)"
    )
    print(f"{'workload':<16} {'n':>4} {'wall s':>8} {'per s':>7} {'vs floor':>9} {'issue ref':>10}")
    for row in rows:
        ref = REFERENCE.get(str(row["workload"]))
        print(
            f"{row['workload']:<16} {row['n']:>4} {row['wall_s']:>8.1f} {row['per_s']:>7.2f} "
            f"{float(row['per_s']) / float(floor):>8.2f}x {f'{ref:.1f}/s' if ref else '':>10}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"rows": rows, "setup": setup, "reference_per_s": REFERENCE}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
