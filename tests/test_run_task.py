"""``atlas run-task`` as a pod runs it: a real S3 server (moto), a real MCP server over
streamable HTTP (the calculator behind mcp-proxy), litellm's real HTTP path to a scripted model,
and none of the dependencies the runner image leaves out (images/context.py RUNNER_LEAVES_OUT)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import httpx
import pytest
import yaml
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import MotoRequestHandler
from moto.server import (
    ThreadedMotoServer as PublicThreadedMotoServer,  # the documented import
)

from atlasrun.cluster.pod.items import exit_code, stored_result
from atlasrun.cluster.pod.termination import compact
from atlasrun.cluster.wire.contract import TasksRef, WorkUnit
from atlasrun.cluster.wire.store import S3Results, StoreError, parse_s3_uri
from atlasrun.errors import InputError
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.scoring.store import task_record_name
from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.install import install_dir
from atlasrun.servers.instance import free_port
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider, tool_call
from conftest import write_run, write_tasks
from test_images import context

pytestmark = pytest.mark.servers

assert ThreadedMotoServer is PublicThreadedMotoServer
BUCKET = "atlas-results"
RESULTS_URI = f"s3://{BUCKET}/bench/calc-run/"
OBJECT_KEY = "bench/calc-run/" + task_record_name("solver", "add-numbers", 0)
MODEL_KEY = "sk-test-SECRET-model-key-123456"
AWS_SECRET = "aws-SECRET-access-key-abcdef"
CALC_TASK: dict[str, Any] = {
    "id": "add-numbers",
    "prompt": "What is 12 plus 30? Use the calculator.",
    "domain": "Analytics",
    "enabled_tools": ["calculator_calculate"],
    "claims": ["The sum is 42"],
    "reference_answer": "The sum is 42.",
    "reference_trajectory": [
        {"calls": [{"name": "calculator_calculate", "arguments": {"expression": "12+30"}}]}
    ],
}


def wait_listening(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listening on 127.0.0.1:{port}")


class S3Server:
    """moto in server mode on 127.0.0.1; ``down()`` closes the port, so clients get 'connection refused'."""

    def __init__(self) -> None:
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.running = True

    def down(self) -> None:
        if self.running:
            self.running = False
            self.server.stop()
            assert self.server._server is not None
            self.server._server.server_close()

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key=AWS_SECRET,
        )


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    # One request per connection: once the server is down, no kept-alive connection still reaches it.
    monkeypatch.setattr(MotoRequestHandler, "protocol_version", "HTTP/1.0", raising=False)
    server = S3Server()
    httpx.post(f"{server.endpoint}/moto-api/reset").raise_for_status()  # moto's state is per process
    server.client().create_bucket(Bucket=BUCKET)
    try:
        yield server
    finally:
        server.down()


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[int]:
    """The calculator behind mcp-proxy: streamable HTTP on 127.0.0.1:<port>/mcp, like a pod's sidecar."""
    spec = load_catalog().get("calculator-http")
    port = free_port()
    rendered = spec.render({"install_dir": str(install_dir(spec)), "port": str(port)})
    assert rendered.command
    with (tmp_path / "sidecar.log").open("wb") as log:
        proc = subprocess.Popen(
            [rendered.command, *rendered.args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        wait_listening(port)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def solver(body: dict[str, Any]) -> Reply:
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if not results:
        return Reply(tool_calls=[tool_call("calculator_calculate", {"expression": "12+30"}, "c1")])
    return Reply(content=f"The sum is {str(results[-1]['content']).strip()}.")


# Imported first by every Python process started with it on PYTHONPATH: makes the modules the
# runner image does not have unimportable, as they are in the image.
LEFT_OUT_BLOCKER = """
import sys
LEFT_OUT = {left_out!r}
class LeftOut:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in LEFT_OUT:
            raise ModuleNotFoundError(f"{{name}} is not in the runner image", name=name)
        return None
sys.meta_path.insert(0, LeftOut())
"""


def without_left_out(folder: Path) -> str:
    """A PYTHONPATH entry whose sitecustomize hides what the runner image leaves out."""
    folder.mkdir(exist_ok=True)
    modules = sorted(name.replace("-", "_") for name in context.RUNNER_LEAVES_OUT)
    (folder / "sitecustomize.py").write_text(LEFT_OUT_BLOCKER.format(left_out=modules))
    return str(folder)


def pod_env(
    tmp_path: Path, s3: S3Server, provider: ScriptedProvider, port: int, **extra: str
) -> dict[str, str]:
    """A run file whose calculator is a sidecar on ``port``, and the env of the pod running one item."""
    tasks = write_tasks(tmp_path / "tasks.yaml", [CALC_TASK])
    model = {
        "name": "solver",
        "model": "openai/solver",
        "apiBase": provider.api_base,
        "apiKeyEnv": "SOLVER_KEY",
    }
    calculator = {
        "name": "calculator",
        "transport": "http",
        "url": "http://127.0.0.1:{port}/mcp",
        "port": port,
        "image": "registry.local/calculator@sha256:" + "0" * 64,  # a sidecar: the pod's servers have images
        "stateful": False,
    }
    run_file = write_run(
        tmp_path / "calc-run.yaml",
        tmp_path / "unused.yaml",
        [model],
        servers={"enabled": ["calculator"], "inline": [calculator]},
        limits={"retryBackoffSeconds": 0, "providerRetries": 1, "serverStartTimeoutSeconds": 2},
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ATLAS_"))}
    env.update(
        {
            "ATLAS_RUN_SPEC": str(run_file),
            "ATLAS_TASKS": str(tasks),
            "ATLAS_TASK_ID": "add-numbers",
            "ATLAS_MODEL": "solver",
            "ATLAS_REPEAT": "0",
            "ATLAS_RESULTS_URI": RESULTS_URI,
            "ATLAS_TERMINATION_PATH": str(tmp_path / "termination-log"),
            "ATLAS_WORK_DIR": str(tmp_path / "work"),
            "ATLAS_S3_ATTEMPTS": "3",
            "ATLAS_S3_BACKOFF_SECONDS": "0.05",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": s3.endpoint,
            "SOLVER_KEY": MODEL_KEY,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": os.pathsep.join(
                filter(None, [without_left_out(tmp_path / "image-modules"), os.environ.get("PYTHONPATH")])
            ),
        }
    )
    env.update(extra)
    return env


def run_task(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", "run-task", *args],
        check=False,
        env=env,
        text=True,
        capture_output=True,
        timeout=180,
        cwd=env["ATLAS_WORK_DIR"].rsplit("/", 1)[0],
    )
    for stream in (proc.stdout, proc.stderr):
        assert MODEL_KEY not in stream and AWS_SECRET not in stream
    return proc


def termination(env: dict[str, str]) -> dict[str, Any]:
    raw = Path(env["ATLAS_TERMINATION_PATH"]).read_bytes()
    assert len(raw) < 4096 and MODEL_KEY.encode() not in raw and AWS_SECRET.encode() not in raw
    data = json.loads(raw)
    assert isinstance(data, dict)
    return data


def stored_keys(s3: S3Server) -> list[str]:
    return [o["Key"] for o in s3.client().list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def test_the_runner_image_leaves_out_what_run_task_never_imports(tmp_path: Path) -> None:
    """The blocker run_task's pods get works: each left-out module is unimportable with it, and
    importable without (installed here), so run-task's success below proves it does without."""
    env = {**os.environ, "PYTHONPATH": without_left_out(tmp_path / "image-modules")}
    for name in sorted(context.RUNNER_LEAVES_OUT):
        module = name.replace("-", "_")
        probe = [sys.executable, "-c", f"import {module}"]
        hidden = subprocess.run(probe, env=env, capture_output=True, text=True, check=False)
        assert hidden.returncode == 1 and "is not in the runner image" in hidden.stderr, (name, hidden.stderr)
        assert subprocess.run(probe, capture_output=True, check=False).returncode == 0, name
    assert all(
        context.requirement_name(r) not in context.RUNNER_LEAVES_OUT for r in context.runner_requirements()
    )
    assert {"litellm", "mcp", "boto3"} <= {context.requirement_name(r) for r in context.runner_requirements()}


def test_pod_solves_task_and_stores_result(tmp_path: Path, s3: S3Server, sidecar: int) -> None:
    with ScriptedProvider(solver) as provider:
        env = pod_env(tmp_path, s3, provider, sidecar)
        proc = run_task(env)
        assert proc.returncode == 0, proc.stderr
        assert {t["function"]["name"] for t in provider.requests[0]["tools"]} == {"calculator_calculate"}
        calls = len(provider.requests)

        body = s3.client().get_object(Bucket=BUCKET, Key=OBJECT_KEY)["Body"].read()
        local = (tmp_path / "work" / task_record_name("solver", "add-numbers", 0)).read_bytes()
        assert body == local  # the full record, byte for byte
        result = TaskResult.model_validate_json(body)
        assert result.status == "scored" and result.passed and result.coverage == 1.0, result
        assert result.transcript and result.transcript.calls[0].name == "calculator_calculate"
        assert "42" in (result.transcript.final_answer or "")

        summary = termination(env)
        assert summary == json.loads(proc.stdout.strip().splitlines()[-1])
        assert {
            k: summary[k]
            for k in (
                "task",
                "model",
                "repeat",
                "status",
                "passed",
                "coverage",
                "tool_calls",
                "infra",
                "exit_code",
            )
        } == {
            "task": "add-numbers",
            "model": "solver",
            "repeat": 0,
            "status": "scored",
            "passed": True,
            "coverage": 1.0,
            "tool_calls": 1,
            "infra": False,
            "exit_code": 0,
        }
        assert summary["tokens"] == {"prompt": 20, "completion": 10} and summary["reason"] is None
        assert summary["result"] == f"s3://{BUCKET}/{OBJECT_KEY}"
        assert isinstance(summary["wall_s"], float) and isinstance(summary["cost_usd"], float)

        # a retried pod finds the result stored and does not run the item again
        again = run_task(env)
        assert again.returncode == 0 and "not run again" in again.stderr
        assert len(provider.requests) == calls
        assert termination(env)["status"] == "scored"


@pytest.mark.parametrize(
    ("var", "value", "named"),
    [
        ("ATLAS_TASK_ID", "no-such-task", "'no-such-task'"),
        ("ATLAS_MODEL", "gpt-nope", "'gpt-nope'"),
        ("ATLAS_REPEAT", "3", "repeat 3"),
        ("ATLAS_RESULTS_URI", "s3://Bad_Bucket/x/", "Bad_Bucket"),
        ("ATLAS_RESULTS_URI", "https://example.com/x/", "not an s3:// URI"),
        ("AWS_ACCESS_KEY_ID", "", "AWS_ACCESS_KEY_ID"),
        ("ATLAS_RUN_SPEC", "/nonexistent/run.yaml", "cannot read run file"),
    ],
)
def test_bad_input_exits_2_naming_it(tmp_path: Path, s3: S3Server, var: str, value: str, named: str) -> None:
    with ScriptedProvider(solver) as provider:
        env = pod_env(tmp_path, s3, provider, free_port(), **{var: value})
        proc = run_task(env)
        assert not provider.requests
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr and "Traceback" not in proc.stderr
    summary = termination(env)
    assert summary["status"] == "error" and summary["exit_code"] == 2 and summary["infra"] is False
    assert named in summary["reason"] and summary["result"] is None
    assert stored_keys(s3) == []


def test_storage_outage_is_retried_then_fails_the_pod(tmp_path: Path, s3: S3Server, sidecar: int) -> None:
    def solver_then_outage(body: dict[str, Any]) -> Reply:
        reply = solver(body)
        if reply.content:  # the agent is about to finish: S3 goes away before the upload
            s3.down()
        return reply

    with ScriptedProvider(solver_then_outage) as provider:
        env = pod_env(tmp_path, s3, provider, sidecar)
        proc = run_task(env)
    assert not s3.running
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.count("retrying in") == 2  # 3 attempts
    assert "result not stored" in proc.stderr and "after 3 attempts" in proc.stderr
    assert f"s3://{BUCKET}/{OBJECT_KEY}" in proc.stderr
    summary = termination(env)
    assert summary["status"] == "error" and summary["passed"] is None and summary["coverage"] is None
    assert summary["infra"] is True and summary["result"] is None and summary["exit_code"] == 4
    assert summary["reason"].startswith("storage: scored result not stored: could not write")
    assert summary["tool_calls"] == 1 and summary["tokens"]["prompt"] > 0  # the work was done and paid for
    assert '"scored"' not in proc.stdout
    # the result was finished locally: it was lost only because storage was down, and said so
    assert json.loads((tmp_path / "work" / task_record_name("solver", "add-numbers", 0)).read_text())[
        "passed"
    ]
    # moto's state outlives its server: a new one on another port shows nothing was stored
    again = S3Server()
    try:
        assert [o["Key"] for o in again.client().list_objects_v2(Bucket=BUCKET).get("Contents", [])] == []
    finally:
        again.down()


def test_sidecar_not_listening_is_a_stored_infra_error(tmp_path: Path, s3: S3Server) -> None:
    with ScriptedProvider(solver) as provider:
        env = pod_env(tmp_path, s3, provider, free_port())
        proc = run_task(env)
        assert not provider.requests  # the model is never asked without its tools
    assert proc.returncode == 3, proc.stderr
    assert "sidecar 'calculator' is not listening" in proc.stderr and "Job retries" in proc.stderr
    result = TaskResult.model_validate_json(
        s3.client().get_object(Bucket=BUCKET, Key=OBJECT_KEY)["Body"].read()
    )
    assert result.status == "error" and result.reason and result.reason.startswith("infra:")
    assert "calculator" in result.reason and result.passed is None
    summary = termination(env)
    assert summary["status"] == "error" and summary["infra"] is True and summary["exit_code"] == 3
    assert summary["result"] == f"s3://{BUCKET}/{OBJECT_KEY}"


def test_excluded_task_is_stored_and_exits_0(tmp_path: Path, s3: S3Server) -> None:
    with ScriptedProvider(solver) as provider:
        env = pod_env(tmp_path, s3, provider, free_port())
        run_file = Path(env["ATLAS_RUN_SPEC"])
        run_file.write_text(run_file.read_text().replace("- calculator\n", "- time\n", 1))
        proc = run_task(env)
        assert not provider.requests
    assert proc.returncode == 0, proc.stderr
    result = TaskResult.model_validate_json(
        s3.client().get_object(Bucket=BUCKET, Key=OBJECT_KEY)["Body"].read()
    )
    assert result.status == "excluded" and result.reason == "needs server(s) not enabled: calculator"
    assert termination(env)["status"] == "excluded"


def test_needed_server_without_port_is_bad_input(tmp_path: Path, s3: S3Server) -> None:
    with ScriptedProvider(solver) as provider:
        env = pod_env(tmp_path, s3, provider, free_port())
        run_file = Path(env["ATLAS_RUN_SPEC"])
        spec = yaml.safe_load(run_file.read_text())
        spec["spec"]["servers"]["inline"] = [
            {
                "name": "calculator",
                "command": "mcp-server-calculator",
                "image": "calculator@sha256:" + "0" * 64,
            }
        ]
        run_file.write_text(yaml.safe_dump(spec))
        proc = run_task(env)
    assert proc.returncode == 2 and "server 'calculator' has no 'port'" in proc.stderr
    assert stored_keys(s3) == []


# -- the pieces on their own -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "bucket", "prefix"),
    [
        ("s3://bucket/a/run/", "bucket", "a/run"),
        ("s3://my.bucket-1", "my.bucket-1", ""),
        ("s3://b12/run", "b12", "run"),
    ],
)
def test_parse_s3_uri(uri: str, bucket: str, prefix: str) -> None:
    location = parse_s3_uri(uri)
    assert (location.bucket, location.prefix) == (bucket, prefix)


@pytest.mark.parametrize(
    "uri",
    [
        "bucket/x",
        "s3://",
        "s3://UPPER/x",
        "s3://b/a//c",
        "s3://b/../x",
        "s3://key:secret@bucket/x",
        "s3://bucket/x?versionId=1",
        "s3://ab/x",
    ],
)
def test_bad_s3_uri_is_input_error(uri: str) -> None:
    with pytest.raises(InputError):
        parse_s3_uri(uri)


def test_store_round_trip_and_unreachable_endpoint(tmp_path: Path, s3: S3Server) -> None:
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": AWS_SECRET}
    store = S3Results(f"s3://{BUCKET}/p/run/", s3.endpoint, env=env, attempts=2, backoff_s=0.01)
    result = TaskResult(task_id="t/1", model="org/m", repeat=2, status="scored", passed=True, coverage=1.0)
    uri = store.put_result(result)
    assert uri == f"s3://{BUCKET}/p/run/{task_record_name('org/m', 't/1', 2)}"
    assert store.get_result("org/m", "t/1", 2) == result
    assert store.get_result("org/m", "t/1", 0) is None
    assert store.list_results() == [result]
    store.write_json("summary.json", {"passed": 1})
    assert json.loads(store.read_bytes("summary.json") or b"") == {"passed": 1}
    assert store.read_bytes("nope.json") is None
    with pytest.raises(InputError, match="not a relative object name"):
        store.read_bytes("../other-run/summary.json")

    warnings: list[str] = []
    dead = S3Results(
        f"s3://{BUCKET}/p/",
        f"http://127.0.0.1:{free_port()}",
        env=env,
        attempts=3,
        backoff_s=0.01,
        warn=warnings.append,
    )
    with pytest.raises(StoreError, match="after 3 attempts"):
        dead.put_result(result)
    assert len(warnings) == 2 and all(AWS_SECRET not in w for w in warnings)
    missing_bucket = S3Results("s3://no-such-bucket/p/", s3.endpoint, env=env, attempts=3, backoff_s=0.01)
    with pytest.raises(StoreError, match="NoSuchBucket"):  # not retried: it will not fix itself
        missing_bucket.put_result(result)


def test_termination_summary_is_hard_capped() -> None:
    result = TaskResult(
        task_id="t" * 3000,
        model="m" * 3000,
        status="error",
        error_kind=ErrorKind.SERVER_TRANSPORT,
        reason="infra: " + "x" * 100_000,
    )
    text = compact(
        {
            "task": result.task_id,
            "model": result.model,
            "reason": result.reason,
            "status": "error",
            "exit_code": exit_code(result),
        }
    )
    assert len(text.encode()) <= 4000
    data = json.loads(text)
    assert data["status"] == "error" and data["exit_code"] == 3 and data["reason"].startswith("infra: ")


def test_exit_codes() -> None:
    def result(status: str, kind: ErrorKind | None = None) -> TaskResult:
        scored = {"coverage": 1.0, "passed": True} if status == "scored" else {}
        return TaskResult(task_id="t", model="m", status=status, error_kind=kind, **scored)  # type: ignore[arg-type]

    assert exit_code(result("scored")) == 0
    assert exit_code(result("excluded", ErrorKind.SERVER_NOT_ENABLED)) == 0
    assert exit_code(result("error", ErrorKind.JUDGE)) == 0  # the transcript is kept: rejudged, not rerun
    for kind in (ErrorKind.SERVER_TRANSPORT, ErrorKind.PROVIDER, ErrorKind.HARNESS):
        assert exit_code(result("error", kind)) == 3


def test_write_only_credentials_still_run_the_item() -> None:
    class Denied:
        def get_result(self, *args: object) -> None:
            raise StoreError("could not read s3://b/x: AccessDenied", denied=True)

    class Down:
        def get_result(self, *args: object) -> None:
            raise StoreError("could not read s3://b/x after 3 attempts")

    warnings: list[str] = []
    assert stored_result(Denied(), "m", "t", 0, warnings.append) is None  # type: ignore[arg-type]
    assert "running the item" in warnings[0]
    with pytest.raises(StoreError):
        stored_result(Down(), "m", "t", 0, warnings.append)  # type: ignore[arg-type]


# ---------------------------------------------------------------- Indexed Jobs: the work unit


def unit_env(env: dict[str, str], tasks_key: str, digest: str, index: int) -> dict[str, str]:
    """The pod env of an Indexed Job: the work unit names the pinned task document and the items."""
    unit = WorkUnit(
        run="calc-run",
        model="solver",
        chunk=0,
        items=[("add-numbers", 1), ("add-numbers", 0)],
        tasks=TasksRef(sha256=digest, uri=f"s3://{BUCKET}/{tasks_key}", name="tasks.yaml"),
        results_uri=RESULTS_URI,
    )
    out = {
        k: v
        for k, v in env.items()
        if k not in ("ATLAS_TASKS", "ATLAS_TASK_ID", "ATLAS_MODEL", "ATLAS_REPEAT")
    }
    return {**out, "ATLAS_WORK_UNIT": unit.to_env(), "JOB_COMPLETION_INDEX": str(index)}


def test_indexed_pod_runs_its_item_from_the_pinned_task_document(
    tmp_path: Path, s3: S3Server, sidecar: int
) -> None:
    with ScriptedProvider(solver) as provider:
        env = pod_env(tmp_path, s3, provider, sidecar)
        data = Path(env["ATLAS_TASKS"]).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        key = f"bench/tasks/{digest}"
        s3.client().put_object(Bucket=BUCKET, Key=key, Body=data)
        proc = run_task(unit_env(env, key, digest, index=1))  # index 1: repeat 0
        assert proc.returncode == 0, proc.stderr
        assert termination(env)["repeat"] == 0 and termination(env)["status"] == "scored"
        assert OBJECT_KEY in stored_keys(s3)

        # The document changed under the run: bad input, never a silently different task.
        s3.client().put_object(Bucket=BUCKET, Key=key, Body=data + b"\n# edited\n")
        proc = run_task(unit_env(env, key, digest, index=0))
        assert proc.returncode == 2 and "sha256" in termination(env)["reason"]
        proc = run_task(unit_env(env, key, digest, index=2))
        assert proc.returncode == 2 and "outside 0..1" in termination(env)["reason"]


def test_pull_turns_stored_results_into_a_results_directory(tmp_path: Path, s3: S3Server) -> None:
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": AWS_SECRET, "AWS_REGION": "us-east-1"}
    store = S3Results(RESULTS_URI, s3.endpoint, env=env)
    results = [
        TaskResult(
            task_id=f"t{i}", model=m, repeat=0, status="scored", passed=bool(i % 2), coverage=0.5 * (i % 3)
        )
        for i in range(4)
        for m in ("a", "b")
    ]
    for result in results:
        store.put_result(result)
    from atlasrun.commands.pull import pull

    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        pulled = pull(RESULTS_URI, tmp_path / "out", endpoint_url=s3.endpoint)
        with pytest.raises(InputError, match="give s3://bucket/prefix/ or atlasrun/NAME"):
            pull("runs/x", tmp_path / "other")
        with pytest.raises(InputError, match="no task results"):
            pull(f"s3://{BUCKET}/empty/", tmp_path / "other", endpoint_url=s3.endpoint)
    assert pulled.results == 8 and pulled.models == ["a", "b"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["models"]["a"]["scored"] == 4 and summary["models"]["a"]["passed"] == 2
    report = subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", "report", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "out" / "report.html").exists()
