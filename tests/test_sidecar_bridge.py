"""The sidecar's MCP endpoint (images/mcp-server/bridge.py): streamable HTTP in front of the server
generations, as the runner's MCP client (the SDK's streamable-HTTP transport) uses it in a pod.

- parity: real catalog servers give the runner's client the same tools and the same tool results
  through a sidecar as over stdio in a local run (no re-validation in between);
- the handshake the sidecar gives each generation is the one the runner's client sends locally;
- the transport's edges: JSON answers, 202 for notifications, 405 for the event stream, 400 for a
  malformed body; clients whose request ids collide each get their own answer; a call in flight
  when its server is stopped gets a JSON-RPC error, never a hang; what a server asks of its client
  (ping) is answered.
"""

from __future__ import annotations

import ast
import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from atlasrun.servers.mcp_sdk import ClientSession, StdioServerParameters, stdio_client
from test_images import IMAGES, INITIALIZE, _load, _rpc
from test_sidecar_control import HEADERS, _catalog_env, _spec, sidecar

HANDSHAKE = _load("mcp-server/generations").HANDSHAKE

# A stdio MCP server of the test's own (standard library): a slow tool, a tool that pings its
# client and one that sends notifications before it answers; every line it reads goes to a log.
PROBE_SERVER = r"""
import json, os, sys, time
log = open(os.environ["PROBE_LOG"], "a")
def send(message):
    sys.stdout.write(json.dumps(message) + "\n"); sys.stdout.flush()
def text(request_id, value):
    send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": value}]}})
for line in sys.stdin:
    log.write(line); log.flush()
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if method is None or request_id is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": request_id, "result": {
            "protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "probe", "version": str(os.getpid())}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [
            {"name": n, "inputSchema": {"type": "object"}} for n in ("echo", "ask_ping", "chatty")]}})
    elif method == "tools/call":
        name, arguments = message["params"]["name"], message["params"].get("arguments") or {}
        if name == "echo":
            time.sleep(float(arguments.get("sleep", 0)))
            text(request_id, arguments["text"])
        elif name == "ask_ping":
            send({"jsonrpc": "2.0", "id": "probe-ping", "method": "ping"})
            reply = json.loads(sys.stdin.readline())
            text(request_id, json.dumps(reply))
        elif name == "chatty":
            send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}})
            print("not JSON-RPC: a server logging to stdout")
            text(request_id, "done")
"""


def _probe(tmp_path: Path) -> tuple[dict[str, Any], dict[str, str], Path]:
    script = tmp_path / "probe_server.py"
    script.write_text(PROBE_SERVER)
    log = tmp_path / "probe.log"
    return {"command": sys.executable, "args": [str(script)]}, {"PROBE_LOG": str(log)}, log


def _tool_call(name: str, arguments: dict[str, Any], request_id: Any = 2) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def _text(reply: dict[str, Any]) -> str:
    return str(reply["result"]["content"][0]["text"])


# ---------------------------------------------------------------- parity with a local run


async def _session_results(read: Any, write: Any, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    async with ClientSession(read, write) as session:
        init = await session.initialize()
        tools = await session.list_tools()
        results = [
            (await session.call_tool(name, arguments)).model_dump(mode="json") for name, arguments in calls
        ]
    return {
        "protocol": init.protocol_version,
        "server": init.server_info.name,
        "tools": [tool.model_dump(mode="json") for tool in tools.tools],
        "results": results,
    }


def _through_sidecar(url: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> dict[str, Any]:
        async with streamable_http_client(url) as (read, write):
            return await _session_results(read, write, calls)

    return asyncio.run(run())


def _over_stdio(
    spec: dict[str, Any], cwd: Path, env: dict[str, str], calls: list[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    command = spec["command"].replace("{install_dir}", spec.get("install_dir", ""))

    async def run() -> dict[str, Any]:
        params = StdioServerParameters(command=command, args=spec["args"], env=env, cwd=str(cwd))
        async with stdio_client(params) as (read, write):
            return await _session_results(read, write, calls)

    return asyncio.run(run())


PARITY = {
    "calculator": [("calculate", {"expression": "2**10 / 3"}), ("calculate", {"expression": "1/0"})],
    "time": [
        ("convert_time", {"source_timezone": "Europe/Oslo", "time": "09:30", "target_timezone": "Asia/Tokyo"})
    ],
    "memory": [
        (
            "create_entities",
            {"entities": [{"name": "Ada", "entityType": "person", "observations": ["née Byron"]}]},
        ),
        ("search_nodes", {"query": "Ada"}),
        ("read_graph", {}),
    ],
    "filesystem": [
        ("list_directory", {"path": "{data}"}),
        ("read_text_file", {"path": "{data}/notes.txt", "head": 2}),
        ("read_text_file", {"path": "/etc/passwd"}),  # outside the allowed directory: an error result
    ],
}


@pytest.mark.servers
@pytest.mark.parametrize("server", sorted(PARITY))
def test_a_sidecar_gives_the_same_tools_and_results_as_a_local_server(tmp_path: Path, server: str) -> None:
    spec = _spec(server)
    results = {}
    for where in ("local", "sidecar"):
        folder = tmp_path / where
        folder.mkdir()
        data, scratch = folder / "data", folder / "scratch"
        # Both sides see their data at the same path (the sidecar's data dir is <tmp>/data).
        env = {**_catalog_env(server, data, scratch), "MEMORY_FILE_PATH": str(scratch / "memory.jsonl")}
        calls = [
            (name, json.loads(json.dumps(args).replace("{data}", str(data)))) for name, args in PARITY[server]
        ]
        if where == "local":
            data.mkdir()
            scratch.mkdir()
            (data / "notes.txt").write_text("first\nsecond\nthird\n")
            local_spec = {**spec, "args": [a.replace("{data_dir}", str(data)) for a in spec["args"]]}
            cwd = Path(str(spec["cwd"]).replace("{data_dir}", str(data)))
            results[where] = _over_stdio(local_spec, cwd, {"PATH": "/usr/bin:/bin", **env}, calls)
        else:
            with sidecar(folder, spec, env) as running:
                (running.data / "notes.txt").write_text("first\nsecond\nthird\n")
                running.wait_ready()
                results[where] = _through_sidecar(f"http://127.0.0.1:{running.port}/mcp", calls)
    local, remote = results["local"], results["sidecar"]
    # The data folders differ by their parent's name only: compare with it taken out.
    assert json.dumps(remote).replace(str(tmp_path / "sidecar"), "<tmp>") == json.dumps(local).replace(
        str(tmp_path / "local"), "<tmp>"
    )
    assert local["results"], local


def test_the_handshake_is_the_one_the_runners_client_sends_a_local_server(tmp_path: Path) -> None:
    spec, env, log = _probe(tmp_path)
    params = StdioServerParameters(command=spec["command"], args=spec["args"], env=env)

    async def run() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()

    asyncio.run(run())
    sent = json.loads(log.read_text().splitlines()[0])
    assert sent["method"] == "initialize" and sent["params"] == HANDSHAKE


# ---------------------------------------------------------------- the transport's edges


def test_the_endpoint_answers_as_the_streamable_http_transport_asks(tmp_path: Path) -> None:
    spec, env, log = _probe(tmp_path)
    with sidecar(tmp_path, spec, env) as running, httpx.Client(timeout=30) as client:
        running.wait_ready()
        url = f"http://127.0.0.1:{running.port}/mcp"
        init = client.post(url, headers=HEADERS, json=INITIALIZE)
        assert init.status_code == 200 and init.headers["content-type"] == "application/json"
        assert init.json()["result"]["serverInfo"]["name"] == "probe" and init.json()["id"] == 1
        note = client.post(
            url, headers=HEADERS, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        assert (note.status_code, note.content) == (202, b"")
        stray = client.post(url, headers=HEADERS, json={"jsonrpc": "2.0", "id": 9, "result": {}})
        assert stray.status_code == 202  # a response to nothing the server asked: dropped

        for method in ("GET", "DELETE"):
            answer = client.request(method, url)
            assert answer.status_code == 405 and answer.headers["allow"] == "POST", method
        assert client.get(f"http://127.0.0.1:{running.port}/sse").status_code == 404
        assert client.post(f"http://127.0.0.1:{running.port}/other", json={}).status_code == 404
        broken = client.post(url, headers=HEADERS, content=b'{"jsonrpc": "2.0", "id": 1, "method": ')
        assert broken.status_code == 400 and broken.json()["error"]["code"] == -32700
        batch = client.post(url, headers=HEADERS, json=[_tool_call("echo", {"text": "a"})])
        assert batch.status_code == 400 and "batch" in batch.json()["error"]["message"]
        assert client.post(url, headers=HEADERS, json={"id": 1, "method": "ping"}).status_code == 400

        # The server pings its client: the sidecar answers for it.
        pinged = _rpc(client, url, HEADERS, _tool_call("ask_ping", {}, request_id="a-string-id"))
        assert pinged["id"] == "a-string-id"
        assert json.loads(_text(pinged)) == {"jsonrpc": "2.0", "id": "probe-ping", "result": {}}
        # Its notifications and stdout logging go nowhere; its answer still comes.
        assert _text(_rpc(client, url, HEADERS, _tool_call("chatty", {}))) == "done"
        # The server saw one initialize (the sidecar's), never the client's, nor its initialized.
        methods = [json.loads(line).get("method") for line in log.read_text().splitlines()]
        assert methods.count("initialize") == 1 and methods.count("notifications/initialized") == 1


def test_colliding_request_ids_of_two_clients_each_get_their_own_answer(tmp_path: Path) -> None:
    spec, env, _ = _probe(tmp_path)
    with sidecar(tmp_path, spec, env) as running:
        running.wait_ready()
        url = f"http://127.0.0.1:{running.port}/mcp"
        answers: dict[str, str] = {}

        def client(text: str) -> None:
            with httpx.Client(timeout=30) as http:
                answers[text] = _text(
                    _rpc(http, url, HEADERS, _tool_call("echo", {"text": text, "sleep": 0.3}, 7))
                )

        threads = [threading.Thread(target=client, args=(t,)) for t in ("first", "second", "third")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert answers == {"first": "first", "second": "second", "third": "third"}


def test_a_call_in_flight_when_the_server_stops_gets_an_error_not_a_hang(tmp_path: Path) -> None:
    spec, env, _ = _probe(tmp_path)
    with sidecar(tmp_path, spec, env) as running, httpx.Client(timeout=30) as client:
        running.wait_ready()
        url = f"http://127.0.0.1:{running.port}/mcp"
        replies: list[dict[str, Any]] = []
        slow = threading.Thread(
            target=lambda: replies.append(
                _rpc(client, url, HEADERS, _tool_call("echo", {"text": "x", "sleep": 60}))
            )
        )
        slow.start()
        time.sleep(0.5)  # the call is with the server
        started = time.monotonic()
        assert running.post("stop").status_code == 200
        slow.join(timeout=10)
        assert replies, "the call in flight was never answered"
        print(f"answered {time.monotonic() - started:.2f}s after /stop")
        assert replies[0]["id"] == 2 and "stopped before it answered" in replies[0]["error"]["message"]

        with httpx.Client(timeout=30) as other:  # while stopped: errors, at once
            stopped = other.post(url, headers=HEADERS, json=INITIALIZE)
            assert stopped.status_code == 503 and "stopped" in stopped.json()["error"]["message"]
            call = _rpc(other, url, HEADERS, _tool_call("echo", {"text": "y"}))
            assert "between two work items" in call["error"]["message"]
        assert running.post("start").status_code == 200
        assert _text(_rpc(client, url, HEADERS, _tool_call("echo", {"text": "back"}))) == "back"


def test_the_sidecar_does_not_need_mcp_proxy() -> None:
    """The image runs the sidecar with the base image's Python: no bridge venv, no third-party code."""
    dockerfile = (IMAGES / "mcp-server" / "Dockerfile").read_text()
    assert "mcp-proxy" not in dockerfile
    folder = IMAGES / "mcp-server"
    for script in folder.glob("*.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                local = (folder / f"{top}.py").exists()
                assert top in sys.stdlib_module_names or local or top == "__future__", (script.name, name)
