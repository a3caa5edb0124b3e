"""The cluster quick-start of docs/cluster.md (the block after ``<!-- quickstart:cluster -->``)
run exactly as written on the project's control plane and real node.

The block runs in one ``bash -euo pipefail`` from a scratch directory holding this checkout (links;
``examples`` copied), with only the values the guide marks ``# yours`` replaced: the registry is
the node's, both S3 endpoints are a moto server on the node's bridge address, the model key is a
test value, and the quick-start run file's ``apiBase`` is the project's scripted OpenAI-compatible
model (it follows each task's reference trajectory). ``kubectl get atlasruns -w`` never ends, so
it alone is replaced by a bounded wait for the run's phase. What the cluster provides in kind or
minikube and not here is provided as such: storage for the workspace PVC (a hostPath PV, as a
default StorageClass would provision one) and the ``kubernetes`` Service reaching the API server.
``make images`` builds with this machine's build settings (tests/cluster/node_images.py: no
registry for ``FROM`` here) and reuses the archives the other node tests use (same content key).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.cluster.wire.contract import COMPLETE
from atlasrun.tasks.loader import load_tasks
from atlasrun.testing.scripted_provider import ScriptedProvider
from cluster import node_images
from cluster.controlplane import ControlPlane, wait_for
from cluster.node import Node, node_cluster  # noqa: F401  (fixture)
from cluster.node_run import PodRecorder, epoch, images_or_skip, pod_timeline

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(3600)]
REPO = Path(__file__).resolve().parents[2]
GUIDE = "docs/cluster.md"  # the cluster guide; the README links to it
MARK = "<!-- quickstart:cluster -->"
WATCH = "kubectl get atlasruns -n evals -w"
MODEL_KEY = "sk-quickstart-secret-value"
# Cluster-wide objects the chart's release "atlasrun" creates; node_run.py applies some of them
# without Helm for the host-process operator, and Helm does not adopt objects it did not create.
RELEASE_OBJECTS = [
    ("clusterrole", n) for n in ("atlasrun", "atlasrun-kopf-scanning", "atlasrun-view", "atlasrun-edit")
] + [("clusterrolebinding", n) for n in ("atlasrun", "atlasrun-kopf-scanning")]


def readme_block() -> list[str]:
    """The marked block's lines, as the user reads them."""
    text = (REPO / GUIDE).read_text()
    assert text.count(MARK) == 1, f"{GUIDE} must mark one block with {MARK}"
    block = text.split(MARK, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


def with_values(lines: list[str], values: dict[str, str]) -> str:
    """The block with the ``export`` lines marked ``# yours`` given ``values`` and the endless
    watch replaced by a bounded wait; every other line unchanged."""
    out, seen = [], set()
    for line in lines:
        if line.startswith("export ") and "# yours" in line:
            for name, value in values.items():
                line, n = re.subn(rf"\b{name}=\S+", f"{name}={value}", line)
                seen |= {name} if n else set()
        elif line.split("#", 1)[0].strip() == WATCH:
            line = (
                "for _ in $(seq 4800); do case $(kubectl get atlasrun starter -n evals -o "
                "jsonpath='{.status.phase}') in Succeeded|Failed) break;; esac; sleep 0.5; done; "
                "kubectl get atlasruns -n evals"
            )
        out.append(line)
    assert seen == set(values), f"{GUIDE} lacks user values {set(values) - seen}"
    assert WATCH in "\n".join(lines)
    return "\n".join(out) + "\n"


@contextmanager
def set_aside(cp: ControlPlane) -> Iterator[None]:
    """Remove the chart's cluster-wide objects that earlier tests applied without Helm (a fresh
    cluster has none), and put them back afterwards."""
    saved = []
    for kind, name in RELEASE_OBJECTS:
        got = cp.kubectl("get", kind, name, "-o", "json", check=False)
        if got.returncode == 0:
            obj = json.loads(got.stdout)
            # `helm template | kubectl apply` objects carry the chart's labels but no release annotations.
            if "meta.helm.sh/release-name" not in (obj["metadata"].get("annotations") or {}):
                for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
                    obj["metadata"].pop(key, None)
                saved.append(obj)
                cp.kubectl("delete", kind, name)
    try:
        yield
    finally:
        if saved:
            cp.kubectl(
                "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": saved})
            )


def workspace_storage(cp: ControlPlane, node: Node) -> Path:
    """A PersistentVolume of no class for the guide's PVC (a default StorageClass's job)."""
    path = node.workdir / "quickstart-storage"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    path.chmod(0o777)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "quickstart-storage"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "Directory"},
        },
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(pv))
    return path


def scratch_checkout(tmp: Path, api_base: str) -> Path:
    """This checkout as links, ``examples`` copied with the run file's ``# yours`` apiBase set."""
    work = tmp / "checkout"
    work.mkdir()
    for entry in [*REPO.iterdir()]:
        if entry.name not in ("examples", "runs", ".git") and not entry.name.startswith(".pytest"):
            (work / entry.name).symlink_to(entry)
    shutil.copytree(REPO / "examples", work / "examples")
    run_file = work / "examples" / "quickstart" / "run.yaml"
    text, n = re.subn(r"apiBase: \S+(\s+# yours)", rf"apiBase: {api_base}\1", run_file.read_text())
    assert n == 1, "examples/quickstart/run.yaml must mark its apiBase # yours"
    run_file.write_text(text)
    return work


def test_readme_cluster_quickstart_runs_as_written(
    node_cluster: tuple[ControlPlane, Node],  # noqa: F811
    tmp_path: Path,
) -> None:
    from charts.tools import ensure_helm
    from moto.server import ThreadedMotoServer

    from cluster.test_operator_e2e import scripted

    cp, node = node_cluster
    # The guide's prerequisite `make venv`: up to date, so `make images` does not reinstall the
    # venv (the scratch checkout links this one's .venv).
    pyproject = REPO / "pyproject.toml"
    stamp = REPO / ".venv" / f".deps-{hashlib.sha1(pyproject.read_bytes()).hexdigest()[:12]}"
    if not stamp.exists() or stamp.stat().st_mtime < pyproject.stat().st_mtime:
        pytest.fail("the checkout's .venv is not up to date: run make venv (the quick-start's prerequisite)")
    t0 = time.monotonic()
    images_or_skip(tuple(node_images.archives.context.targets()))  # built by other tests' runs, or now
    built = time.monotonic() - t0
    tasks = load_tasks(REPO / "examples" / "starter" / "tasks.yaml").tasks
    node.expose_api_server()
    for ns in ("atlasrun-system", "evals"):  # the guide creates them: an earlier test's must be gone
        wait_for(
            lambda ns=ns: cp.kubectl("get", "namespace", ns, check=False).returncode != 0, 180, f"{ns} gone"
        )
    storage = workspace_storage(cp, node)
    s3_server = ThreadedMotoServer(ip_address=node.ip, port=0)
    s3_server.start()
    host, port = s3_server.get_host_and_port()
    s3 = f"http://{host}:{port}"
    lock = tmp_path / "images.lock"
    helm = ensure_helm()
    assert Path(helm).name == "helm" and cp.binaries.kubectl.name == "kubectl"  # found on PATH as such
    env = {
        **node_images.build_env(),
        "PATH": f"{Path(helm).parent}:{cp.binaries.kubectl.parent}:{os.environ['PATH']}",
        "KUBECONFIG": str(cp.kubeconfig),
        "ATLAS_IMAGES_LOCK": str(lock),  # the checkout's images/images.lock stays as it is
    }
    try:
        with ScriptedProvider(scripted(tasks), host=node.ip) as provider, set_aside(cp):
            work = scratch_checkout(tmp_path, provider.api_base)
            script = with_values(
                readme_block(),
                {
                    "REGISTRY": f"{node.registry}/atlasrun",
                    "S3_ENDPOINT": s3,
                    "AWS_ENDPOINT_URL": s3,
                    "AWS_ACCESS_KEY_ID": "test",
                    "AWS_SECRET_ACCESS_KEY": "test",
                    "OPENAI_API_KEY": MODEL_KEY,
                },
            )
            # Tracing (each command with its start time) is the only line added.
            (tmp_path / "quickstart.sh").write_text("PS4='+ $(date +%s.%N) '; set -x\n" + script)
            t1 = time.monotonic()
            recorder = PodRecorder(cp.client(), "evals", log_of="runner")
            try:
                done = subprocess.run(
                    ["bash", "-euo", "pipefail", str(tmp_path / "quickstart.sh")],
                    cwd=work,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=3000,
                )
                wall, ended = time.monotonic() - t1, time.time()
                assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
                check_outcome(cp, work, lock, node, provider)
                print(f"\ncluster quick-start: {wall:.0f}s (images ensured first: {built:.0f}s)")
                print(step_times(done.stderr, ended))
                print(run_timeline(cp, recorder, "starter"))
                first = run_wall(done.stderr, ended, len(recorder.of_run("starter")))
                again = rerun_wall(cp, work, env)
                print(run_timeline(cp, recorder, AGAIN))
                print(
                    f"the same run again (images on the node): {again:.1f}s from kubectl apply to Succeeded seen"
                )
                if out := os.environ.get("ATLAS_QUICKSTART_OUT"):
                    pods = len(recorder.of_run("starter"))
                    result = {
                        "cluster_wall_s": round(first, 1),
                        "cluster_again_wall_s": round(again, 1),
                        "cluster_cpu_s": run_cpu(cp, "starter"),
                        "cluster_again_cpu_s": run_cpu(cp, AGAIN),
                        "pods": pods,
                    }
                    Path(out).write_text(json.dumps(result))
            finally:
                recorder.stop()
                subprocess.run(
                    [
                        str(helm),
                        "--kubeconfig",
                        str(cp.kubeconfig),
                        "uninstall",
                        "atlasrun",
                        "-n",
                        "atlasrun-system",
                    ],
                    capture_output=True,
                    timeout=180,
                )
                cp.kubectl("delete", "namespace", "evals", "atlasrun-system", "--wait=false", check=False)
                for ns in ("evals", "atlasrun-system"):
                    wait_for(
                        lambda ns=ns: (
                            not cp.kubectl("get", "pods", "-n", ns, "-o", "name", check=False).stdout.strip()
                        ),
                        180,
                        f"the quick-start's pods in {ns} gone",
                    )
    finally:
        s3_server.stop()
        cp.kubectl("delete", "pv", "quickstart-storage", "--wait=false", check=False)
        shutil.rmtree(storage, ignore_errors=True)


def check_outcome(cp: ControlPlane, work: Path, lock: Path, node: Node, provider: ScriptedProvider) -> None:
    run: dict[str, Any] = json.loads(
        cp.kubectl("get", "atlasrun", "starter", "-n", "evals", "-o", "json").stdout
    )
    status = run["status"]
    assert status["phase"] == "Succeeded", status
    (model,) = status["models"].values()
    assert (model["total"], model["scored"], model["excluded"], model["errored"]) == (20, 20, 0, 0), model
    locked = yaml.safe_load(lock.read_text())["images"]
    assert set(locked) == set(node_images.archives.context.targets())
    assert all(ref.startswith(f"{node.registry}/atlasrun/{name}@sha256:") for name, ref in locked.items())
    summary = json.loads((work / "runs" / "starter" / "summary.json").read_text())
    (row,) = summary["models"].values()
    assert (row["scored"], row["passed"]) == (model["scored"], model["passed"])
    assert row["pass_rate"] == pytest.approx(model["passRate"])
    assert len(list((work / "runs" / "starter" / "tasks").rglob("*.json"))) == 20
    report = (work / "runs" / "starter" / "report.html").read_text()
    assert "gpt-4o-mini" in report and f"{100 * model['passRate']:.1f}%" in report
    for path in (work / "runs" / "starter").rglob("*"):
        assert not path.is_file() or MODEL_KEY not in path.read_text(errors="replace"), path
    assert MODEL_KEY not in json.dumps(run)
    assert {r["model"] for r in provider.requests} >= {"gpt-4o-mini"}


AGAIN = "starter-again"


def rerun_wall(cp: ControlPlane, work: Path, env: dict[str, str]) -> float:
    """The guide's run file applied once more under another name (``pin ... | kubectl apply``),
    now that the node has its images: what a run on a cluster in use takes (the local figure is a
    median of warm runs too). Seconds from the pin to ``Succeeded`` seen (polled every 0.5 s)."""
    started = time.monotonic()
    pinned = subprocess.run(
        [".venv/bin/python", "-m", "images.archives", "pin", "examples/quickstart/run.yaml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    run = yaml.safe_load(pinned)
    run["metadata"]["name"] = AGAIN
    cp.kubectl("apply", "-n", "evals", "-f", "-", input=yaml.safe_dump(run))
    phase = ""
    while phase != "Succeeded":
        assert phase != "Failed" and time.monotonic() < started + 600, f"{AGAIN}: {phase or 'no phase'}"
        time.sleep(0.5)
        phase = cp.kubectl("get", "atlasrun", AGAIN, "-n", "evals", "-o", "jsonpath={.status.phase}").stdout
    return time.monotonic() - started


def run_cpu(cp: ControlPlane, name: str) -> float:
    """The run's CPU-seconds as the operator exports them (each pod's runner and sidecars, read
    from their own cgroups): ``status.models[*].usage.cpuSeconds``."""
    run = json.loads(cp.kubectl("get", "atlasrun", name, "-n", "evals", "-o", "json").stdout)
    return round(
        float(sum(m.get("usage", {}).get("cpuSeconds", 0) for m in run["status"]["models"].values())), 2
    )


def run_timeline(cp: ControlPlane, recorder: PodRecorder, name: str) -> str:
    """Where the run's wall time went: each pod's timeline from the AtlasRun's creation, and the
    node's image pulls (kubelet events)."""
    run = json.loads(cp.kubectl("get", "atlasrun", name, "-n", "evals", "-o", "json").stdout)
    created = epoch(run["metadata"]["creationTimestamp"])
    done = next(
        (
            c["lastTransitionTime"]
            for c in run["status"].get("conditions", [])
            if c["type"] == COMPLETE and c["status"] == "True"
        ),
        None,
    )
    events = json.loads(cp.kubectl("get", "events", "-n", "evals", "-o", "json").stdout)["items"]
    pulls = [e["message"] for e in events if e.get("reason") == "Pulled" and "pulled image" in e["message"]]
    pods = recorder.of_run(name)
    names = {pod["metadata"]["name"] for pod in pods}
    return (
        f"run created -> Succeeded: {done and epoch(done) - created}s\n"
        + pod_timeline(pods, created)
        + "\n"
        + "\n".join(pulls)
        + "".join(resets_timeline(pod, log, created) for pod, log in recorder.logs.items() if pod in names)
    )


def resets_timeline(pod: str, log: str, since: float) -> str:
    """When the pod's runner made the servers fresh between two items, and what it took (its
    ``fresh state:`` log lines, stamped by the kubelet): where a pod's items spend their time; and
    its ``pod CPU:`` line, what each of its containers cost."""
    rows = [
        f"{epoch(stamp[:19] + 'Z') + float('0' + stamp[19:-1]) - since:7.2f}s {line}"
        for stamp, line in (entry.split(" ", 1) for entry in log.splitlines())
        if line.startswith(("fresh state:", "pod CPU:"))  # its last line: what each container cost
    ]
    resets = sum(" fresh state:" in row for row in rows)
    return f"\n{pod}: {resets} resets\n" + "\n".join(rows)


def run_wall(trace: str, end: float, pods: int) -> float:
    """The run's wall time as the user sees it: from the command that applies the run (``pin ...
    | kubectl apply``; xtrace prints a pipeline's two sides in either order) to the end of the wait
    for its phase (polled every 0.5 s). ``make bench-node`` sets ATLAS_QUICKSTART_OUT to take it
    and the second run's (bench/node_items.py compares them with the same run file run locally)."""
    stamps = [(float(m[1]), m[2]) for m in re.finditer(r"^\+ (\d+\.\d+) (.*)$", trace, re.M)]
    pinned = next(i for i, (_, c) in enumerate(stamps) if c.endswith("pin examples/quickstart/run.yaml"))
    applied = min(
        s
        for s, c in stamps[pinned - 1 : pinned + 2]
        if c.startswith("kubectl apply") or "pin examples/q" in c
    )
    waited = next(s for s, c in stamps[pinned:] if c.startswith("kubectl get atlasruns -n evals"))
    wall = waited - applied
    print(
        f"the run: {wall:.1f}s from kubectl apply to Succeeded seen, {pods} pods (over {end - applied:.1f}s in all)"
    )
    return wall


def step_times(trace: str, end: float) -> str:
    """Seconds per command of the block, from bash's xtrace (PS4 carries the time); the bounded
    wait that stands in for the watch is one row; ``end`` is when bash exited (epoch)."""
    steps: list[tuple[float, str]] = []
    for m in re.finditer(r"^\+ (\d+\.\d+) (.*)$", trace, re.M):
        command = m[2]
        if re.fullmatch(r"\w+=\S*", command):
            continue  # the assignments of an export line
        if command.startswith(
            ("for _ in", "case ", "sleep ", "kubectl get atlasrun starter", "seq ", "break")
        ):
            command = "(bounded wait for the run's phase, in place of: kubectl get atlasruns -n evals -w)"
            if steps and steps[-1][1] == command:
                continue
        steps.append((float(m[1]), command[:100]))
    steps.append((end, ""))
    return "\n".join(f"{b[0] - a[0]:7.1f}s  {a[1]}" for a, b in itertools.pairwise(steps))
