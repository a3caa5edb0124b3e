"""AtlasRuns on the real node: the project's images in the node's registry, the starter workspace
as a read-only PersistentVolume, moto's S3 and the scripted model on the node's bridge address.

    env = node_run_env  (session fixture, shares cluster.node.node_cluster)
    env.images["runner"]               # 127.0.0.1:<port>/atlasrun/runner@sha256:...
    env.manifest("sweep", parallelism=4)
    with env.operator(): ...           # the operator as a host process with the chart's RBAC
    env.recorder.pods                  # every pod of the namespace as last seen (kept after deletion)

The six starter tasks below need only four servers (filesystem, memory, git, calculator): each
pod carries the sidecars its item needs, from images built by images/build.sh (node_images.py).
"""

from __future__ import annotations

import calendar
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from atlasrun.servers.instance import free_port
from atlasrun.starter.workspace import create_workspace
from atlasrun.tasks.loader import load_tasks
from atlasrun.tasks.model import Task
from atlasrun.testing.scripted_provider import ScriptedProvider
from cluster import node_images, tenant
from cluster.controlplane import ControlPlane, wait_for
from cluster.node import Node
from cluster.pod_unit import pod_item

REPO = Path(__file__).resolve().parents[2]
GROUP_PATH = "/apis/atlasrun.dev/v1alpha1"
NAMESPACE = "atlas-node"
TASK_IDS = [
    "rate-limit-change",
    "release-commit",
    "release-meeting-actions",
    "platform-team-commits",
    "csv-export-branch",
    "customer-renewals",
]
SERVER_PORTS = {"filesystem": 9101, "memory": 9102, "git": 9103, "calculator": 9104}
MODELS = ("sharp", "sloppy")
MODEL_KEY = "sk-node-secret-value"


def node_tasks() -> list[Task]:
    tasks = {t.id: t for t in load_tasks(REPO / "examples" / "starter" / "tasks.yaml").tasks}
    return [tasks[i] for i in TASK_IDS]


class Gate:
    """Holds the first model request of one (model, task) item until released: a test knows the
    item's runner is mid-task (tools listed, waiting for the model) while it injects a fault."""

    def __init__(self, tasks: list[Task]) -> None:
        self._ids = {t.prompt: t.id for t in tasks}
        self._armed: tuple[str, str] | None = None
        self.arrived = threading.Event()
        self._released = threading.Event()

    def arm(self, model: str, task_id: str) -> None:
        self.arrived.clear()
        self._released.clear()
        self._armed = (model, task_id)

    def release(self) -> None:
        self._armed = None
        self._released.set()

    def wrap(self, script: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        def gated(body: dict[str, Any]) -> Any:
            messages = body["messages"]
            item = (body["model"].rsplit("/", 1)[-1], self._ids.get(messages[-1]["content"], ""))
            if len(messages) == 1 and self._armed == item:
                self._armed = None  # once: a re-run of the item passes
                self.arrived.set()
                self._released.wait(300)
            return script(body)

        return gated


def item_of(pod: dict[str, Any], s3_endpoint: str) -> tuple[str, str]:
    """(model, task id) of the item a run pod works on (its WorkUnit, plan and completion index)."""
    unit, task_id, _ = pod_item(pod, s3_endpoint)
    return unit.model, task_id


class PodRecorder:
    """Polls the namespace's pods and keeps the last seen state of each (pods of finished Jobs are
    deleted once the operator has counted them; the tests still want their container states)."""

    def __init__(
        self, api: httpx.Client, namespace: str, interval: float = 0.5, log_of: str | None = None
    ) -> None:
        self.api, self.namespace, self.interval = api, namespace, interval
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        # ``log_of``: a container whose log (kubelet-stamped) is kept once it has terminated.
        self.log_of, self.logs = log_of, dict[str, str]()  # pod name -> log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pod-recorder", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                items = self.api.get(f"/api/v1/namespaces/{self.namespace}/pods").json().get("items", [])
                for pod in items:
                    self.pods[pod["metadata"]["uid"]] = pod
                    if self.log_of is not None and pod["metadata"]["name"] not in self.logs:
                        self._keep_log(pod)
            except (httpx.HTTPError, ValueError):
                pass
            self._stop.wait(self.interval)

    def _keep_log(self, pod: dict[str, Any]) -> None:
        statuses = pod["status"].get("containerStatuses", [])
        if any(c["name"] == self.log_of and "terminated" in c.get("state", {}) for c in statuses):
            name = pod["metadata"]["name"]
            url = f"/api/v1/namespaces/{self.namespace}/pods/{name}/log"
            answer = self.api.get(url, params={"container": self.log_of, "timestamps": "true"})
            if answer.status_code == 200:
                self.logs[name] = answer.text

    def of_run(self, run: str) -> list[dict[str, Any]]:
        return [
            p for p in self.pods.values() if p["metadata"].get("labels", {}).get("atlasrun.dev/run") == run
        ]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def pod_timeline(pods: list[dict[str, Any]], since: float) -> str:
    """One line per pod (by creation): seconds after ``since`` (epoch) at which it was created,
    started, its last container started, its runner finished and its last container (a sidecar,
    stopped after the runner) finished (the API's one-second stamps)."""

    def at(stamp: str | None) -> str:
        return f"{epoch(stamp) - since:6.0f}" if stamp else "     -"

    rows = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"]):
        statuses = pod["status"].get("containerStatuses", []) + pod["status"].get("initContainerStatuses", [])
        started = [
            s.get("state", {}).get("running", {}).get("startedAt")
            or s.get("state", {}).get("terminated", {}).get("startedAt")
            for s in statuses
        ]
        runner = next((s for s in statuses if s["name"] == "runner"), {})
        finished = [s.get("state", {}).get("terminated", {}).get("finishedAt") for s in statuses]
        rows.append(
            f"{pod['metadata']['name'][-28:]:<28} {at(pod['metadata']['creationTimestamp'])} "
            f"{at(pod['status'].get('startTime'))} {at(max((s for s in started if s), default=None))} "
            f"{at(runner.get('state', {}).get('terminated', {}).get('finishedAt'))} "
            f"{at(max((f for f in finished if f), default=None))}  {len(statuses)} containers"
        )
    header = f"{'pod':<28} {'created':>6} {'start':>6} {'last c.':>6} {'runner done':>6} {'all done':>6}"
    return header + "\n" + "\n".join(rows)


def epoch(stamp: str) -> float:
    """Seconds since the epoch of an API timestamp (RFC 3339, UTC, one-second resolution)."""
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


@dataclass
class NodeRunEnv:
    cp: ControlPlane
    node: Node
    api: httpx.Client
    images: dict[str, str]
    s3: str
    provider: ScriptedProvider
    tasks: list[Task]
    workspace: Path  # the host copy behind the PersistentVolume
    operator_kubeconfig: Path
    recorder: PodRecorder
    gate: Gate
    namespace: str = NAMESPACE
    timings: dict[str, float] = field(default_factory=dict)

    def manifest(self, name: str, **cluster: Any) -> dict[str, Any]:
        """An AtlasRun of MODELS x the six tasks with the four sidecars, images by digest."""
        host, port = self.provider.api_base.split("//", 1)[1].split("/", 1)[0].split(":")
        return tenant.run_manifest(
            name,
            api_base=self.provider.api_base,
            models=MODELS,
            server_ports=SERVER_PORTS,
            image_of=self.images.__getitem__,
            tasks_configmap="node-tasks",
            prefix="node",
            max_concurrency=4,
            model_fields={"egress": {"hosts": [host], "ports": [int(port)]}},
            cluster={
                "dataVolume": {"persistentVolumeClaim": {"claimName": "workspace", "readOnly": True}},
                **cluster,
            },
        )

    def first_turns(self, since: int = 0) -> list[tuple[str, str]]:
        """(model, task id) of every model request that started an item, from request ``since``."""
        ids = {t.prompt: t.id for t in self.tasks}
        return [
            (r["model"].rsplit("/", 1)[-1], ids.get(r["messages"][-1]["content"], "?"))
            for r in self.provider.requests[since:]
            if len(r["messages"]) == 1
        ]

    def running_pod(self, run: str, item: tuple[str, str]) -> dict[str, Any]:
        """The live pod of ``run`` working on ``item`` (model, task id)."""

        def find() -> dict[str, Any] | None:
            pods = self.api.get(
                f"/api/v1/namespaces/{self.namespace}/pods",
                params={"labelSelector": f"atlasrun.dev/run={run}"},
            ).json()["items"]
            live = [p for p in pods if p["status"].get("phase") == "Running" and item_of(p, self.s3) == item]
            return live[0] if live else None

        return wait_for(find, 300, f"the running pod of {item}")

    def create_run(self, manifest: dict[str, Any]) -> None:
        self.api.post(f"{GROUP_PATH}/namespaces/{self.namespace}/atlasruns", json=manifest).raise_for_status()

    def get_run(self, name: str) -> dict[str, Any]:
        response = self.api.get(f"{GROUP_PATH}/namespaces/{self.namespace}/atlasruns/{name}")
        response.raise_for_status()
        return dict(response.json())

    def wait_phase(self, name: str, phases: set[str], timeout: float) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            run = self.get_run(name)
            return run if run.get("status", {}).get("phase") in phases else None

        return wait_for(reached, timeout, f"AtlasRun {name} phase in {phases}", interval=1.0)

    @contextmanager
    def operator(self, **extra_env: str) -> Iterator[subprocess.Popen[bytes]]:
        """The operator as a host process (kopf), authenticated as the chart's ServiceAccount."""
        with host_operator(
            self.node, self.api, self.operator_kubeconfig, self.s3, self.namespace, **extra_env
        ) as proc:
            yield proc

    def s3_keys(self, prefix: str) -> list[str]:
        out = tenant.s3_client(self.s3).list_objects_v2(Bucket=tenant.BUCKET, Prefix=prefix)
        return [o["Key"] for o in out.get("Contents", [])]


@contextmanager
def host_operator(
    node: Node, api: httpx.Client, kubeconfig: Path, s3: str, namespace: str, **extra_env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """The operator as a host process (kopf) watching ``namespace``, authenticated by ``kubeconfig``
    (the chart's ServiceAccount); its log appends to the node's ``operator.log``. On exit the
    namespace's AtlasRuns are deleted (the garbage collector removes their Jobs and pods, so a failed
    test leaves nothing competing with the next one) and the process is stopped."""
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "ATLASRUN_S3_ENDPOINT": s3,
        "ATLASRUN_METRICS_PORT": str(free_port()),
        "ATLASRUN_MIN_PASS_INTERVAL": "0.5",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        **extra_env,
    }
    log = node.workdir / "operator.log"
    args = [sys.executable, "-m", "kopf", "run", "--standalone", "-m", "atlasrun.cluster.operator.main"]
    with log.open("ab") as out:
        proc = subprocess.Popen([*args, "--namespace", namespace], env=env, stdout=out, stderr=out)
    try:
        yield proc
    finally:
        for run in api.get(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns").json().get("items", []):
            api.delete(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns/{run['metadata']['name']}")
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _workspace_volume(cp: ControlPlane, node: Node, namespace: str) -> Path:
    """The starter workspace on the host, world-readable, as a pre-bound read-only PV + PVC."""
    ws = create_workspace(node.workdir / "workspace")
    subprocess.run(["chmod", "-R", "a+rX", str(ws)], check=True)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-workspace"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(ws), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": "workspace"},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "workspace", "namespace": namespace},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "volumeName": pv["metadata"]["name"],  # type: ignore[index]
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([pv, pvc]))
    wait_for(
        lambda: (
            cp.kubectl(
                "get", "pvc", "workspace", "-n", namespace, "-o", "jsonpath={.status.phase}"
            ).stdout.strip()
            == "Bound"
        ),
        60,
        "workspace PVC Bound",
    )
    return ws


def images_or_skip(targets: tuple[str, ...] = node_images.TARGETS) -> dict[str, Path]:
    """The OCI archives of ``targets``, building what is missing (cached by content)."""
    try:
        return node_images.ensure(targets)
    except node_images.ImagesUnavailable as exc:
        if os.environ.get("ATLASRUN_REQUIRE_NODE"):
            pytest.fail(f"ATLASRUN_REQUIRE_NODE is set but the images cannot be built: {exc}")
        pytest.skip(f"the project's images cannot be built here: {exc}")


_shared: list[NodeRunEnv] = []


@contextmanager
def node_run_env_for(cp: ControlPlane, node: Node) -> Iterator[NodeRunEnv]:
    """Set up (once per session) everything an AtlasRun on the node needs; see the module doc."""
    if _shared:
        yield _shared[0]
        return
    from cluster.tenant import install_crd, prepare_tenant, s3_bucket
    from cluster.test_operator_e2e import scripted

    timings: dict[str, float] = {}
    t = time.monotonic()
    archives = images_or_skip()
    timings["images (build or cache)"] = time.monotonic() - t
    t = time.monotonic()
    images = {target: node.push_oci_archive(path, f"atlasrun/{target}") for target, path in archives.items()}
    timings["push to the node's registry"] = time.monotonic() - t
    t = time.monotonic()
    with ExitStack() as cleanup:
        s3 = cleanup.enter_context(s3_bucket(node.ip))
        install_crd(cp)
        tasks = node_tasks()
        api, kubeconfig = prepare_tenant(cp, NAMESPACE, MODEL_KEY, tasks, tasks_configmap="node-tasks")
        cleanup.callback(api.close)
        workspace = _workspace_volume(cp, node, NAMESPACE)
        cleanup.callback(shutil.rmtree, workspace, ignore_errors=True)
        recorder = PodRecorder(api, NAMESPACE)
        cleanup.callback(recorder.stop)
        timings["S3, namespace, workspace volume, RBAC"] = time.monotonic() - t
        gate = Gate(tasks)
        with ScriptedProvider(gate.wrap(scripted(tasks)), host=node.ip) as provider:
            env = NodeRunEnv(
                cp,
                node,
                api,
                images,
                s3,
                provider,
                tasks,
                workspace,
                kubeconfig,
                recorder,
                gate,
                timings=timings,
            )
            print("\nnode run env: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
            _shared.append(env)
            try:
                yield env
            finally:
                gate.release()
                _shared.clear()


@pytest.fixture(scope="session")
def node_run_env(node_cluster: tuple[ControlPlane, Node]) -> Iterator[NodeRunEnv]:
    cp, node = node_cluster
    with node_run_env_for(cp, node) as env:
        yield env
