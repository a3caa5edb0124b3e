"""The operator end to end on a real control plane: AtlasRun -> Jobs -> node stand-in -> S3 -> status.

Real: kube-apiserver + kube-controller-manager (Job controller, garbage collector), CRD
validation, RBAC, PodSecurity ``restricted``; moto's S3 server; the MCP servers; litellm's
HTTP path to a scripted provider. Stand-in: the node (see node_standin.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from atlasrun.runner.local import run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.servers.instance import free_port
from atlasrun.starter.workspace import create_workspace
from atlasrun.tasks.loader import load_tasks
from atlasrun.tasks.model import Task
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider, tool_call
from cluster import tenant
from cluster.controlplane import ControlPlane, wait_for
from cluster.node_standin import NodeStandIn
from cluster.tenant import control_plane_with_crd, prepare_tenant, s3_bucket, s3_client

# Runs of real servers through the stand-in wait up to 600 s for a phase on a loaded 2-core host.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
GROUP_PATH = "/apis/atlasrun.dev/v1alpha1"
PIN = "@sha256:" + "0" * 64
TASK_IDS = [
    "q3-revenue-leader",
    "engineering-salaries",
    "latest-commit-author",
    "northwind-account",
    "release-meeting-actions",
    "csv-row-counts",
]
SERVER_PORTS = {
    "filesystem": 9101,
    "memory": 9102,
    "git": 9103,
    "calculator": 9104,
    "cli-mcp-server": 9105,
    "time": 9106,
    "code-runner": 9107,
    "everything": 9108,
}


def starter_tasks() -> list[Task]:
    tasks = {t.id: t for t in load_tasks(REPO / "examples" / "starter" / "tasks.yaml").tasks}
    return [tasks[i] for i in TASK_IDS]


def scripted(tasks: list[Task]) -> Any:
    """Two scripted models: ``sharp`` follows each reference trajectory and answers with the
    reference answer; ``sloppy`` does the same but gives up on every other task."""
    by_prompt = {t.prompt: (i, t) for i, t in enumerate(tasks)}

    def script(body: dict[str, Any]) -> Reply:
        index, task = by_prompt[
            body["messages"][-1]["content"]
            if body["messages"][-1]["role"] == "user"
            else next(m["content"] for m in body["messages"] if m["role"] == "user")
        ]
        done = sum(1 for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls"))
        turns = [t for t in task.reference_trajectory if t.calls]
        if done < len(turns):
            return Reply(
                tool_calls=[
                    tool_call(c.name, c.arguments, f"c{done}_{j}") for j, c in enumerate(turns[done].calls)
                ]
            )
        if body["model"].endswith("sloppy") and index % 2:
            return Reply(content="I could not work that out.")
        return Reply(content=task.reference_answer or "")

    return script


@pytest.fixture(scope="module")
def cp() -> Iterator[ControlPlane]:
    with control_plane_with_crd() as plane:
        yield plane


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    with s3_bucket() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create_workspace(tmp_path_factory.mktemp("ws") / "workspace")


def run_manifest(name: str, api_base: str, **cluster: Any) -> dict[str, Any]:
    return tenant.run_manifest(
        name,
        api_base=api_base,
        models=("sharp", "sloppy"),
        server_ports=SERVER_PORTS,
        image_of=lambda target: f"registry.example/atlasrun/{target}{PIN}",
        tasks_configmap="starter-tasks",
        prefix="e2e",
        max_concurrency=2,
        cluster=cluster,
    )


class Operator:
    """The operator as its own process, with the given kubeconfig; stoppable and restartable."""

    def __init__(self, kubeconfig: Path, namespace: str, s3_endpoint: str, metrics_port: int) -> None:
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "ATLASRUN_S3_ENDPOINT": s3_endpoint,
            "ATLASRUN_METRICS_PORT": str(metrics_port),
            "ATLASRUN_MIN_PASS_INTERVAL": "0.5",
            # The operator's own object-storage identity (the chart: s3.credentialsSecret).
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
        }
        self.namespace = namespace
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"atlas-operator-{namespace}.log"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kopf",
                "run",
                "--standalone",
                "-m",
                "atlasrun.cluster.operator.main",
                "--namespace",
                self.namespace,
            ],
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def get_run(api: httpx.Client, namespace: str, name: str) -> dict[str, Any]:
    response = api.get(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns/{name}")
    response.raise_for_status()
    return dict(response.json())


@pytest.fixture(scope="module")
def env(cp: ControlPlane, s3: str, workspace: Path) -> Iterator[dict[str, Any]]:
    namespace = "atlas-e2e"
    tasks = starter_tasks()
    api, operator_kubeconfig = prepare_tenant(cp, namespace, "sk-e2e-secret-value", tasks)  # the chart's RBAC
    with ScriptedProvider(scripted(tasks)) as provider, NodeStandIn(api, namespace, workspace) as node:
        yield {
            "cp": cp,
            "api": api,
            "namespace": namespace,
            "provider": provider,
            "node": node,
            "s3": s3,
            "tasks": tasks,
            "workspace": workspace,
            "kubeconfig": operator_kubeconfig,
        }


def run_to_phase(
    env: dict[str, Any], manifest: dict[str, Any], phases: set[str], timeout: float
) -> dict[str, Any]:
    """Create ``manifest`` in the env's namespace with an operator of its own running, and return
    the run once its phase is in ``phases`` (the operator is stopped either way)."""
    api, namespace = env["api"], env["namespace"]
    operator = Operator(env["kubeconfig"], namespace, env["s3"], metrics_port=free_port())
    operator.start()
    try:
        api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
        return wait_phase(api, namespace, manifest["metadata"]["name"], phases, timeout=timeout)
    finally:
        operator.stop()


def wait_phase(
    api: httpx.Client, namespace: str, name: str, phases: set[str], timeout: float
) -> dict[str, Any]:
    return wait_for(
        lambda: (run := get_run(api, namespace, name)).get("status", {}).get("phase") in phases and run,
        timeout,
        f"AtlasRun {name} phase in {phases}",
        interval=1.0,
    )


def test_run_completes_with_the_same_numbers_as_atlas_run(
    env: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, namespace, cp = env["api"], env["namespace"], env["cp"]
    operator = Operator(env["kubeconfig"], namespace, env["s3"], metrics_port=free_port())
    operator.start()
    try:
        manifest = run_manifest("sweep", env["provider"].api_base)
        api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
        job = wait_for(
            lambda: (
                (jobs := api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs").json()["items"]) and jobs[0]
            ),
            120,
            "the run's first Job",
        )
        # The pods read their items from the chunk's plan in S3: the Job carries only its reference.
        runner = job["spec"]["template"]["spec"]["containers"][0]
        unit = json.loads(next(e["value"] for e in runner["env"] if e["name"] == "ATLAS_WORK_UNIT"))
        assert unit["items"] == [] and unit["plan"]["uri"].startswith("s3://results/e2e/plans/")
        assert job["spec"]["completions"] == unit["plan"]["size"] == 3
        run = wait_phase(api, namespace, "sweep", {"Succeeded"}, timeout=600)
        metrics_text = httpx.get(f"http://127.0.0.1:{operator.env['ATLASRUN_METRICS_PORT']}/metrics").text
    finally:
        operator.stop()
    assert not env["node"].errors, env["node"].errors
    status = run["status"]
    assert status["progress"] == "12/12"

    # The same tasks and models locally: identical pass rates and coverage.
    local_run = tmp_path / "run.yaml"
    local_spec = {k: v for k, v in manifest["spec"].items() if k not in ("cluster", "output")}
    local_spec["tasks"] = {"path": str(tmp_path / "tasks.yaml")}
    local_spec["servers"] = {"enabled": list(SERVER_PORTS)}
    (tmp_path / "tasks.yaml").write_text(
        yaml.safe_dump({"tasks": [t.model_dump(mode="json", exclude={"source"}) for t in env["tasks"]]})
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")  # not os.environ: later tests must not see it
    local_run.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "atlasrun.dev/v1alpha1",
                "kind": "AtlasRun",
                "metadata": {"name": "local"},
                "spec": local_spec,
            }
        )
    )
    local = run_local(load_run_spec(local_run), tmp_path / "out", env["workspace"], progress=False)
    for model in ("sharp", "sloppy"):
        ours, theirs = status["models"][model], local.summary["models"][model]
        assert (ours["scored"], ours["passed"]) == (theirs["scored"], theirs["passed"]), (ours, theirs)
        assert ours["passRate"] == pytest.approx(theirs["pass_rate"])
        assert ours["meanCoverage"] == pytest.approx(theirs["mean_coverage"], abs=1e-3)
    assert status["models"]["sharp"]["passRate"] == 1.0 and status["models"]["sloppy"]["passRate"] == 0.5

    # Every per-task result is in S3, and the metrics agree with the status.
    objects = s3_client(env["s3"]).list_objects_v2(Bucket="results", Prefix="e2e/sweep/tasks/")
    assert objects.get("KeyCount") == 12, objects
    assert status["resultsURI"] == "s3://results/e2e/sweep/"
    finished = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics_text.splitlines()
        if line.startswith("atlasrun_items_total{") and 'run="sweep"' in line
    )
    assert finished == 12
    assert f'atlasrun_pass_rate{{model="sharp",namespace="{namespace}",run="sweep"}} 1.0' in metrics_text

    # kubectl shows the printer columns; the secret never reached status or events.
    table = cp.kubectl("get", "atlasruns", "-n", namespace).stdout
    assert "PHASE" in table and "PROGRESS" in table and "sharp=1.00 sloppy=0.50" in table
    everything = json.dumps(run) + cp.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert "sk-e2e-secret-value" not in everything


def test_items_per_pod_runs_several_items_in_one_pod_with_real_servers(env: dict[str, Any]) -> None:
    """``spec.cluster.itemsPerPod: 2``: a pod runs two items one after the other against the same
    real MCP server processes; the counts and stored results equal those of one item per pod."""
    api, namespace, node, provider = env["api"], env["namespace"], env["node"], env["provider"]
    since, pods_before = len(provider.requests), len(node.ran)
    operator = Operator(env["kubeconfig"], namespace, env["s3"], metrics_port=free_port())
    operator.start()
    try:
        manifest = run_manifest("batched", provider.api_base, itemsPerPod=2)
        api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
        job = wait_for(
            lambda: (
                (
                    jobs := api.get(
                        f"/apis/batch/v1/namespaces/{namespace}/jobs",
                        params={"labelSelector": "atlasrun.dev/run=batched"},
                    ).json()["items"]
                )
                and jobs[0]
            ),
            120,
            "the run's first Job",
        )
        run = wait_phase(api, namespace, "batched", {"Succeeded", "Failed"}, timeout=600)
    finally:
        operator.stop()
    assert job["spec"]["completions"] == 2  # 3 items per Job, 2 per pod: indexes 0 (2 items) and 1 (1)
    status = run["status"]
    assert status["phase"] == "Succeeded" and status["progress"] == "12/12", status
    models = status["models"]
    unscored = _unscored_results(env["s3"], "e2e/batched/tasks/")
    assert (models["sharp"]["scored"], models["sharp"]["passed"]) == (6, 6), (models["sharp"], unscored)
    assert (models["sloppy"]["scored"], models["sloppy"]["passed"]) == (6, 3), (models["sloppy"], unscored)
    # 2 models x 2 Jobs x 2 pods, not 12; a pod the Job retried (an infrastructure failure on a
    # loaded host, e.g. a server slow to start again between items) adds one, and changes no count.
    assert 8 <= len(node.ran) - pods_before < 12, node.ran[pods_before:]
    # What the pods cost, as the operator counted it: every pod, its seconds, the CPU it reported
    # (runner plus sidecars, their process trees on the stand-in).
    spent = [models[m]["usage"] for m in ("sharp", "sloppy")]
    assert sum(u["pods"] for u in spent) == len(node.ran) - pods_before, spent
    assert all(u["podsWithoutCpu"] == 0 and u["cpuSeconds"] > 0.5 and u["podSeconds"] > 1 for u in spent), (
        spent
    )
    starts = _first_turns(provider, since)
    assert len(starts) == 12 and len(set(starts)) == 12  # every (model, task) ran exactly once
    objects = s3_client(env["s3"]).list_objects_v2(Bucket="results", Prefix="e2e/batched/tasks/")
    assert objects.get("KeyCount") == 12, objects


def test_unpinned_image_blocks_with_a_condition_and_no_jobs(env: dict[str, Any]) -> None:
    api, namespace = env["api"], env["namespace"]
    manifest = run_manifest("unpinned", env["provider"].api_base)
    manifest["spec"]["cluster"]["runnerImage"] = "registry.example/atlasrun/runner:latest"
    run = run_to_phase(env, manifest, {"Blocked"}, timeout=120)
    condition = next(c for c in run["status"]["conditions"] if c["type"] == "Blocked")
    assert condition["status"] == "True" and condition["reason"] == "UnpinnedImage"
    assert "runner:latest" in condition["message"]
    jobs = api.get(
        f"/apis/batch/v1/namespaces/{namespace}/jobs", params={"labelSelector": "atlasrun.dev/run=unpinned"}
    ).json()["items"]
    assert jobs == []


def test_invalid_field_is_rejected_by_the_api_server(env: dict[str, Any]) -> None:
    manifest = run_manifest("invalid", env["provider"].api_base)
    manifest["spec"]["parallelism"] = 0
    response = env["api"].post(f"{GROUP_PATH}/namespaces/{env['namespace']}/atlasruns", json=manifest)
    assert response.status_code == 422
    assert "spec.parallelism" in response.json()["message"]


def _unscored_results(s3: str, prefix: str) -> list[tuple[str, str, str | None, str | None]]:
    """(key, status, error kind, reason) of each stored result that is not ``scored``: a failing
    count then says which item went wrong, and why."""
    client = s3_client(s3)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="results", Prefix=prefix).get("Contents", [])]
    found = []
    for key in keys:
        record = json.loads(client.get_object(Bucket="results", Key=key)["Body"].read())
        if record.get("status") != "scored":
            found.append((key, record.get("status"), record.get("error_kind"), record.get("reason")))
    return found


def _first_turns(provider: ScriptedProvider, since: int) -> list[tuple[str, str]]:
    """(model, prompt) of every request that started a task (only the user message so far)."""
    return [
        (r["model"], r["messages"][-1]["content"])
        for r in provider.requests[since:]
        if len(r["messages"]) == 1
    ]


def test_operator_killed_mid_run_neither_loses_nor_repeats_work(env: dict[str, Any]) -> None:
    api, namespace, provider = env["api"], env["namespace"], env["provider"]
    since = len(provider.requests)
    operator = Operator(env["kubeconfig"], namespace, env["s3"], metrics_port=free_port())
    operator.start()
    manifest = run_manifest("restart", provider.api_base)
    manifest["spec"]["parallelism"] = 2
    try:
        api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
        wait_for(
            lambda: (
                int(get_run(api, namespace, "restart").get("status", {}).get("progress", "0/1").split("/")[0])
                >= 2
            ),
            300,
            "two finished items",
            interval=0.5,
        )
        operator.stop(signal.SIGKILL)  # no cleanup, no goodbye
        time.sleep(5)  # Jobs keep running and finishing while no operator watches
        operator.start()
        run = wait_phase(api, namespace, "restart", {"Succeeded"}, timeout=600)
    finally:
        operator.stop()
    assert run["status"]["progress"] == "12/12"
    models = run["status"]["models"]
    assert sum(m["scored"] + m["errored"] + m["excluded"] for m in models.values()) == 12
    jobs = api.get(
        f"/apis/batch/v1/namespaces/{namespace}/jobs", params={"labelSelector": "atlasrun.dev/run=restart"}
    ).json()["items"]
    assert [j for j in jobs if not j["metadata"].get("deletionTimestamp")] == []  # counted, then removed
    starts = _first_turns(provider, since)
    assert len(starts) == 12 and len(set(starts)) == 12  # every (model, task) ran exactly once


def test_deleting_a_run_garbage_collects_its_objects(env: dict[str, Any]) -> None:
    api, namespace = env["api"], env["namespace"]
    operator = Operator(env["kubeconfig"], namespace, env["s3"], metrics_port=free_port())
    operator.start()
    selector = {"labelSelector": "atlasrun.dev/run=doomed"}
    try:
        api.post(
            f"{GROUP_PATH}/namespaces/{namespace}/atlasruns",
            json=run_manifest("doomed", env["provider"].api_base),
        ).raise_for_status()
        wait_for(
            lambda: api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs", params=selector).json()["items"],
            120,
            "first Jobs",
        )
        assert api.get(
            f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies", params=selector
        ).json()["items"]
        api.delete(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns/doomed").raise_for_status()

        def gone() -> bool:
            kinds = [
                f"/apis/batch/v1/namespaces/{namespace}/jobs",
                f"/api/v1/namespaces/{namespace}/pods",
                f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
                f"/api/v1/namespaces/{namespace}/configmaps",
            ]
            left = {
                k.rsplit("/", 1)[1]: [
                    i["metadata"]["name"] for i in api.get(k, params=selector).json()["items"]
                ]
                for k in kinds
            }
            remaining.clear()
            remaining.update({k: v for k, v in left.items() if v})
            return not remaining

        remaining: dict[str, list[str]] = {}
        try:
            wait_for(gone, 180, "the run's Jobs, pods, policy and ConfigMap garbage-collected", interval=1.0)
        except TimeoutError as exc:
            raise AssertionError(f"still there: {remaining}") from exc
    finally:
        operator.stop()


def test_suspend_cancels_live_jobs_and_resume_finishes_the_run(env: dict[str, Any]) -> None:
    api, namespace = env["api"], env["namespace"]
    operator = Operator(env["kubeconfig"], namespace, env["s3"], metrics_port=free_port())
    operator.start()
    selector = {"labelSelector": "atlasrun.dev/run=pausable"}
    path = f"{GROUP_PATH}/namespaces/{namespace}/atlasruns/pausable"
    merge = {"Content-Type": "application/merge-patch+json"}
    manifest = run_manifest("pausable", env["provider"].api_base)
    manifest["spec"]["parallelism"] = 2
    try:
        api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
        wait_for(
            lambda: api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs", params=selector).json()["items"],
            120,
            "first Jobs",
        )
        api.patch(path, json={"spec": {"cluster": {"suspend": True}}}, headers=merge).raise_for_status()
        run = wait_phase(api, namespace, "pausable", {"Suspended"}, timeout=120)
        done_at_suspend = int(run["status"]["progress"].split("/")[0])

        def no_live_jobs() -> bool:
            jobs = api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs", params=selector).json()["items"]
            return all(
                j.get("status", {}).get("completionTime")
                or j["metadata"].get("deletionTimestamp")
                or (j["spec"].get("suspend") and not j.get("status", {}).get("active"))
                for j in jobs
            )

        wait_for(no_live_jobs, 120, "live Jobs cancelled")
        time.sleep(3)  # several reconciles: nothing new starts while suspended
        assert (
            int(get_run(api, namespace, "pausable")["status"]["progress"].split("/")[0])
            <= done_at_suspend + 2
        )
        api.patch(path, json={"spec": {"cluster": {"suspend": False}}}, headers=merge).raise_for_status()
        run = wait_phase(api, namespace, "pausable", {"Succeeded"}, timeout=600)
    finally:
        operator.stop()
    assert run["status"]["progress"] == "12/12"
