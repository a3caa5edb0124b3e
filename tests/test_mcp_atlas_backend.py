"""``spec.servers.backend: mcp-atlas-env``: a real ``atlas run`` against MCP-Atlas's own agent-environment.

The environment (vendored commit 5b6220c, built by tests/mcp_atlas_env.py) runs here in bubblewrap;
the ``replay`` agent replays each task's reference trajectory through it. Every tool output in the
transcripts must be exactly what MCP-Atlas's harness gives its model for that environment's answer
to the same ``POST /call-tool`` (the harness's mapping, sandbox-client.ts, written out here); a task
needing a server it does not serve is excluded with the reason; an environment that dies mid-run, or
a URL with nothing listening, ends items as infrastructure errors (exit 3), never as model failures.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import mcp_atlas_env
from atlasrun.cluster.operator.images import cluster_spec_problems
from atlasrun.errors import InputError
from atlasrun.runspec.run import ServersSpec, load_run_spec

pytestmark = pytest.mark.servers

SERVERS = ["filesystem", "calculator", "memory", "mcp-server-code-runner"]
MISSING = "/data/sales_2031.csv"
SLOW_MARKER = "atlasrun-slow-call-started"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def task(
    task_id: str, tools: list[str], turns: list[list[dict[str, Any]]], claims: list[str]
) -> dict[str, Any]:
    """A native task whose reference answer states its claims (the deterministic judge passes it)."""
    return {
        "id": task_id,
        "domain": "Analytics",
        "prompt": f"Task {task_id}: answer from the data under /data.",
        "enabled_tools": tools,
        "claims": claims,
        "reference_answer": " ".join(f"{c}." for c in claims),
        "reference_trajectory": [{"calls": calls} for calls in turns],
    }


TASKS = [
    task(
        "top-movie",
        # git_git_log is a distractor of a server the environment does not serve: hidden, not excluded
        ["filesystem_list_directory", "filesystem_read_text_file", "calculator_calculate", "git_git_log"],
        [
            [call("filesystem_list_directory", path="/data")],
            [call("filesystem_read_text_file", path="/data/Top Movies.csv", head=4)],
            [call("calculator_calculate", expression="9.3-9.2")],
        ],
        ["The Shawshank Redemption has an IMDb rating of 9.3", "The Godfather has an IMDb rating of 9.2"],
    ),
    task(  # the reference's first call fails: the recorded result is the environment's error body
        "missing-file",
        ["filesystem_read_text_file", "filesystem_list_directory"],
        [
            [call("filesystem_read_text_file", path=MISSING)],
            [call("filesystem_list_directory", path="/data")],
        ],
        ["The data root holds 8 CSV files"],
    ),
    task(
        "memory-note",
        ["memory_create_entities", "memory_search_nodes", "calculator_calculate"],
        [
            [
                call(
                    "memory_create_entities",
                    entities=[
                        {"name": "AtlasRun Probe", "entityType": "Test", "observations": ["answer 42"]}
                    ],
                )
            ],
            [
                call("memory_search_nodes", query="AtlasRun Probe"),
                call("calculator_calculate", expression="6*7"),
            ],
        ],
        ["Six times seven is 42"],
    ),
    task(  # a snippet that prints nothing: the harness's "success"
        "silent-snippet",
        ["mcp-server-code-runner_run-code"],
        [[call("mcp-server-code-runner_run-code", languageId="python", code="x = 6 * 7")]],
        ["The snippet computed 42"],
    ),
    task(  # git is not served by the environment: excluded, with the reason
        "needs-git",
        ["git_git_status", "filesystem_read_text_file"],
        [[call("git_git_status", repo_path="/data")]],
        ["The repository is clean"],
    ),
]


def slow_task(task_id: str) -> dict[str, Any]:
    """A quick call, then one the environment is still running when the test stops it."""
    code = f"open('/data/{SLOW_MARKER}-{task_id}', 'w').close()\nimport time\ntime.sleep(120)"
    return task(
        task_id,
        ["calculator_calculate", "mcp-server-code-runner_run-code"],
        [
            [call("calculator_calculate", expression="1+1")],
            [call("mcp-server-code-runner_run-code", languageId="python", code=code)],
        ],
        ["One plus one is 2"],
    )


def harness_result(response: httpx.Response) -> tuple[str, bool]:
    """What MCP-Atlas's harness (sandbox-client.ts callTool) gives the model for this answer."""
    if not response.is_success:
        return response.text, True
    texts = [b["text"] for b in response.json() if b.get("type") == "text"]
    return ("\n".join(texts) if any(t.strip() for t in texts) else "success"), False


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not mcp_atlas_env.STAMP.is_file():
        reason = mcp_atlas_env.unavailable_reason() or "run: .venv/bin/python tests/mcp_atlas_env.py build"
        message = f"MCP-Atlas's agent-environment is not built ({mcp_atlas_env.STAMP}): {reason}"
        if os.environ.get(mcp_atlas_env.REQUIRE_ENV):
            pytest.fail(message)
        pytest.skip(message)
    return mcp_atlas_env.fresh_data(tmp_path_factory.mktemp("env"))


@pytest.fixture(scope="module")
def environment(data_root: Path) -> Iterator[mcp_atlas_env.AgentEnv]:
    with mcp_atlas_env.running(SERVERS, data_root) as env:
        yield env


def write_run(tmp: Path, url: str, tasks: list[dict[str, Any]], **spec: Any) -> Path:
    (tmp / "tasks.yaml").write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False))
    body = {
        "tasks": {"path": "tasks.yaml"},
        "models": [{"name": "replay"}],
        "judges": [{"name": "deterministic"}],
        "servers": {"backend": "mcp-atlas-env", "url": url},
        **spec,
    }
    run = {
        "apiVersion": "atlasrun.dev/v1alpha1",
        "kind": "AtlasRun",
        "metadata": {"name": "env"},
        "spec": body,
    }
    (tmp / "run.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
    return tmp / "run.yaml"


def atlas(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(Path.home()), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.Popen(  # no proxy variables: the environment is on 127.0.0.1
        [sys.executable, "-m", "atlasrun.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
    )


def finish(process: subprocess.Popen[str], timeout_s: float = 120) -> tuple[int, str]:
    try:
        out, err = process.communicate(timeout=timeout_s)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out + err


def results(out: Path) -> dict[str, dict[str, Any]]:
    """The per-task JSON records, by task id."""
    return {r["task_id"]: r for r in (json.loads(p.read_text()) for p in (out / "tasks").rglob("*.json"))}


def test_run_through_the_environment_gives_the_model_its_exact_outputs(
    environment: mcp_atlas_env.AgentEnv, tmp_path: Path
) -> None:
    url = environment.url
    run_file = write_run(tmp_path, url, TASKS, limits={"toolOutputChars": 100_000})
    code, output = finish(
        atlas("run", str(run_file), "--out", str(tmp_path / "out"), "--quiet", cwd=tmp_path)
    )
    assert code == 0, output
    assert (
        f"excluded: task needs-git: needs server(s) not enabled: git (not served by the agent-environment at {url})"
        in output
    )

    records = results(tmp_path / "out")
    assert records["needs-git"]["status"] == "excluded"
    assert records["needs-git"]["error_kind"] == "server_not_enabled"
    ran = [t for t in TASKS if t["id"] != "needs-git"]
    assert {t["id"]: records[t["id"]]["status"] for t in ran} == {t["id"]: "scored" for t in ran}
    assert all(records[t["id"]]["passed"] for t in ran), {k: r.get("claims") for k, r in records.items()}

    listed = {t["name"]: t for t in environment.list_tools()}
    for spec in ran:
        transcript = records[spec["id"]]["transcript"]
        # the surface is the task's enabled tools the environment serves, as it describes them
        shown = {t["function"]["name"]: t["function"] for t in transcript["tools"]}
        assert set(shown) == {n for n in spec["enabled_tools"] if n in listed}
        for name, function in shown.items():
            assert function["description"] == listed[name]["description"]
            assert function["parameters"]["properties"] == listed[name]["inputSchema"]["properties"]
        calls = transcript["calls"]
        reference = [c for turn in spec["reference_trajectory"] for c in turn["calls"]]
        # calls of one reference turn run concurrently: recorded in the order they finished
        assert sorted(json.dumps([c["name"], c["arguments"]]) for c in calls) == sorted(
            json.dumps([c["name"], c["arguments"]]) for c in reference
        )
        for recorded in calls:
            # The same request again: the environment answers these from its state or its 48 h cache
            # (memory, calculator, code-runner) exactly as it answered the run.
            response = environment.client.post(
                "/call-tool", json={"tool_name": recorded["name"], "tool_args": recorded["arguments"]}
            )
            assert (recorded["result"], recorded["is_error"]) == harness_result(response), recorded["name"]
            assert recorded["error_kind"] == ("tool_error" if recorded["is_error"] else None)
    assert (
        "tools of servers not enabled were hidden: git_git_log" in records["top-movie"]["transcript"]["notes"]
    )

    missing = records["missing-file"]["transcript"]["calls"][0]
    assert missing["is_error"]
    assert json.loads(missing["result"]) == {
        "detail": f"Failed to call tool 'filesystem_read_text_file': ENOENT: no such file or directory, open '{MISSING}'"
    }
    assert records["silent-snippet"]["transcript"]["calls"][0]["result"] == "success"
    assert records["top-movie"]["transcript"]["calls"][2]["result"] == "0.10000000000000142"


def test_environment_stopped_mid_run_ends_items_as_infrastructure_errors(
    data_root: Path, tmp_path: Path
) -> None:
    tasks = [slow_task("slow-a"), slow_task("slow-b")]
    with mcp_atlas_env.running(["calculator", "mcp-server-code-runner"], data_root) as env:
        run_file = write_run(tmp_path, env.url, tasks, parallelism=1, limits={"toolTimeoutSeconds": 110})
        process = atlas("run", str(run_file), "--out", str(tmp_path / "out"), "--quiet", cwd=tmp_path)
        try:
            deadline = time.monotonic() + 60
            while not list(data_root.glob(f"{SLOW_MARKER}-*")) and time.monotonic() < deadline:
                assert process.poll() is None, process.communicate()
                time.sleep(0.05)
            started = list(data_root.glob(f"{SLOW_MARKER}-*"))
            assert len(started) == 1, "the slow call never started"
            os.killpg(env.process.pid, signal.SIGKILL)  # the environment dies with a call in flight
            env.process.wait(30)
            code, output = finish(process)
        finally:
            if process.poll() is None:  # a failed assertion above: the run is stopped too
                process.kill()
                process.communicate()
            for marker in data_root.glob(f"{SLOW_MARKER}-*"):
                marker.unlink()
    assert code == 3, output
    records = results(tmp_path / "out")
    assert {r["status"] for r in records.values()} == {"error"}
    assert {r["error_kind"] for r in records.values()} == {"server_transport"}
    first = started[0].name.removeprefix(f"{SLOW_MARKER}-")
    second = ({"slow-a", "slow-b"} - {first}).pop()
    in_flight = records[first]["reason"]
    assert in_flight.startswith(
        f"infra: agent-environment at {env.url} during 'mcp-server-code-runner_run-code': "
    )
    assert "RemoteProtocolError" in in_flight or "ReadError" in in_flight, in_flight
    assert records[first]["transcript"]["calls"][0]["result"] == "2"  # before the stop: served as usual
    # the next call: refused, or (on a connection kept alive from before the stop) reset
    after = records[second]["reason"]
    assert re.match(rf"infra: agent-environment at {re.escape(env.url)} during 'calculator_calculate': "
                    r"(ConnectError|ReadError|WriteError|RemoteProtocolError): \S", after), after  # fmt: skip
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["models"]["replay"]
    assert (summary["scored"], summary["passed"], summary["errored"]) == (0, 0, 2)


def test_nothing_listening_ends_every_item_as_an_infrastructure_error(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on (bound, never listening)
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        run_file = write_run(tmp_path, url, TASKS[:2] + TASKS[-1:])
        code, output = finish(
            atlas("run", str(run_file), "--out", str(tmp_path / "out"), "--quiet", cwd=tmp_path)
        )
    assert code == 3, output
    records = results(tmp_path / "out")
    # What it serves is unknown: no task is excluded for a server, every item is an infra error.
    assert {k: (r["status"], r["error_kind"]) for k, r in records.items()} == {
        t: ("error", "server_start") for t in ("top-movie", "missing-file", "needs-git")
    }
    for record in records.values():
        assert record["reason"].startswith(
            f"infra: the agent-environment at {url} is unreachable: POST /list-tools: ConnectError"
        ), record["reason"]


class GatewayInFront(http.server.BaseHTTPRequestHandler):
    """A proxy in front of the environment: listings pass through; a call of ``1+1`` is held past
    the client's timeout then passed on; any other call gets 502 Bad Gateway."""

    upstream = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _relay(self, method: str, body: bytes | None = None) -> None:
        answer = httpx.request(method, self.upstream + self.path, content=body, timeout=60)
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client may have given up (its timeout)
            self.wfile.write(answer.content)

    def do_GET(self) -> None:
        self._relay("GET")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/call-tool":
            return self._relay("POST", body)
        if json.loads(body)["tool_args"] == {"expression": "1+1"}:
            time.sleep(3)
            return self._relay("POST", body)
        page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
        self.send_response(502)
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


def test_gateway_errors_are_infrastructure_and_slow_tools_are_the_models_timeouts(
    environment: mcp_atlas_env.AgentEnv, tmp_path: Path
) -> None:
    handler = type("Gateway", (GatewayInFront,), {"upstream": environment.url})
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    serving = threading.Thread(target=proxy.serve_forever, daemon=True)
    serving.start()
    try:
        url = f"http://127.0.0.1:{proxy.server_address[1]}"
        tasks = [
            task("slow-answer", ["calculator_calculate"], [[call("calculator_calculate", expression="1+1")]],
                 ["One plus one is 2"]),
            task("bad-gateway", ["calculator_calculate"], [[call("calculator_calculate", expression="2+2")]],
                 ["Two plus two is 4"]),
        ]  # fmt: skip
        run_file = write_run(tmp_path, url, tasks, limits={"toolTimeoutSeconds": 1})
        code, output = finish(
            atlas("run", str(run_file), "--out", str(tmp_path / "out"), "--quiet", cwd=tmp_path)
        )
    finally:
        proxy.shutdown()
        proxy.server_close()
        serving.join()
    assert code == 3, output
    records = results(tmp_path / "out")
    slow = records["slow-answer"]
    assert slow["status"] == "scored"  # a slow tool is the model's to handle, as MCP-Atlas's harness has it
    (timed_out,) = slow["transcript"]["calls"]
    assert (timed_out["error_kind"], timed_out["is_error"]) == ("tool_timeout", True)
    assert timed_out["result"] == "Error: tool calculator_calculate timed out after 1s"
    gateway = records["bad-gateway"]
    assert (gateway["status"], gateway["error_kind"]) == ("error", "server_transport")
    assert gateway["reason"] == (
        f"infra: agent-environment at {url} during 'calculator_calculate': HTTP 502 "
        "'<html><body><h1>502 Bad Gateway</h1></body></html>'"
    )


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"backend": "mcp-atlas-env"}, "backend mcp-atlas-env needs url"),
        ({"backend": "mcp-atlas-env", "url": "ftp://127.0.0.1:1984"}, "the agent-environment's http(s) URL"),
        ({"url": "http://127.0.0.1:1984"}, "url is the agent-environment's, for backend mcp-atlas-env only"),
        (
            {"backend": "mcp-atlas-env", "url": "http://h:1", "inline": [{"name": "x", "command": "x"}]},
            "remove inline",
        ),
    ],
)
def test_backend_needs_an_http_url(tmp_path: Path, servers: dict[str, Any], message: str) -> None:
    body = {"tasks": {"path": "t.yaml"}, "models": [{"name": "replay"}], "servers": servers}
    run = {"apiVersion": "atlasrun.dev/v1alpha1", "kind": "AtlasRun", "metadata": {"name": "r"}, "spec": body}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    with pytest.raises(InputError) as failed:
        load_run_spec(tmp_path / "run.yaml")
    assert message in str(failed.value) and "servers" in str(failed.value)


def test_cluster_runs_refuse_the_backend(tmp_path: Path) -> None:
    body = load_run_spec(write_run(tmp_path, "http://127.0.0.1:1984", [])).spec
    assert cluster_spec_problems(body) == [
        "spec.servers.backend: mcp-atlas-env (a running MCP-Atlas agent-environment) is for local runs "
        "(`atlas run`) only; in a cluster run the servers are the pods' sidecars: remove backend and url"
    ]
    assert cluster_spec_problems(body.model_copy(update={"servers": ServersSpec()})) == []


def test_default_backend_dumps_as_before() -> None:
    """Run records and fingerprints of local runs keep their shape: older results directories resume."""
    assert ServersSpec().model_dump(by_alias=True) == {"catalog": None, "enabled": None, "inline": []}
    remote = ServersSpec(backend="mcp-atlas-env", url="http://127.0.0.1:1984/")
    assert remote.model_dump()["url"] == "http://127.0.0.1:1984/"
    assert remote.environment_url == "http://127.0.0.1:1984"
