"""The sidecar's control endpoint (images/mcp-server/sidecar.py): fresh server state per work item
inside a long-lived pod, with real catalog servers behind its MCP endpoint.

The runner's side of the protocol is atlasrun/cluster/pod/fresh.py; here the sidecar alone: /stop
kills the server's whole process tree (daemons a snippet detached included) and empties its scratch,
/start brings a new generation up and answers once it answers ``initialize``, a start that fails is
a 503 that leaves the sidecar alive, and only an exit nobody asked for ends the sidecar.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.instance import free_port
from test_images import IMAGES, INITIALIZE, _rpc, _server, context

SIDECAR = IMAGES / "mcp-server" / "sidecar.py"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _spec(server: str) -> dict[str, Any]:
    """server.json as the image's build writes it, for the server installed on this host."""
    build = context.server_build_args(server)
    folder = "bin" if build["SERVER_MANAGER"] == "pip" else "node_modules/.bin"  # npm: a local install here
    return {
        "command": f"{{install_dir}}/{folder}/{build['SERVER_BIN']}",
        "install_dir": str(_server(server)),
        "args": json.loads(build["SERVER_ARGS"]),
        "cwd": build["SERVER_CWD"],
        "path_aliases": json.loads(build["SERVER_PATH_ALIASES"]),
    }


def _catalog_env(server: str, data: Path, scratch: Path) -> dict[str, str]:
    """The entry's ``env`` as the operator renders it into the sidecar container."""
    entry = next(s for s in load_catalog().servers if s.name == server)
    return entry.render({"data_dir": str(data), "scratch_dir": str(scratch)}).env


@dataclass
class Sidecar:
    proc: subprocess.Popen[bytes]
    port: int
    control: int
    data: Path
    scratch: Path
    log: Path
    in_namespace: bool

    def post(self, action: str, timeout: float = 30) -> httpx.Response:
        return httpx.post(f"http://127.0.0.1:{self.control}/{action}", timeout=timeout)

    def get(self, action: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.control}/{action}", timeout=10)

    def pid(self) -> int:
        """The sidecar's own pid (under ``unshare --fork`` it is unshare's child)."""
        if not self.in_namespace:
            return self.proc.pid
        deadline = time.monotonic() + 10
        while not (children := _children(self.proc.pid)):
            assert time.monotonic() < deadline, "unshare started no child"
            time.sleep(0.05)
        return children[0]

    def wait_ready(self) -> None:
        """Until the first generation answers (a /start does this itself for later ones)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                with httpx.Client(timeout=10) as client:
                    _initialize(client, f"http://127.0.0.1:{self.port}/mcp")
                return
            except httpx.TransportError:
                assert self.proc.poll() is None, self.log.read_text()
                assert time.monotonic() < deadline, "the sidecar did not serve within 30 s"
                time.sleep(0.1)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_bytes()
                if int(stat[stat.rindex(b")") + 2 :].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return "gone"


def _with_marker(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    stat = (entry / "stat").read_bytes()
                    if stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X"):
                        found.append(int(entry.name))
    return found


@contextlib.contextmanager
def sidecar(
    tmp_path: Path, spec: dict[str, Any], env: dict[str, str] | None = None, *, pid1: bool = False
) -> Iterator[Sidecar]:
    """The sidecar with a control port, its $TMPDIR a scratch folder of its own (it gets emptied);
    ``pid1``: as PID 1 of a new PID namespace, as in its container."""
    (tmp_path / "server.json").write_text(json.dumps(spec))
    data, scratch = tmp_path / "data", tmp_path / "scratch"
    data.mkdir()
    scratch.mkdir()
    port = free_port()
    control = free_port()
    assert control != port
    full_env = {
        **os.environ,
        "ATLAS_SIDECAR_SPEC": str(tmp_path / "server.json"),
        "ATLAS_SERVER_PORT": str(port),
        "ATLAS_CONTROL_PORT": str(control),
        "ATLAS_DATA_DIR": str(data),
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        **(env or {}),
    }
    command = [sys.executable, str(SIDECAR)]
    if pid1:  # --kill-child: should the test die, the namespace's PID 1 and everything in it go too
        command = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *command]
    log = tmp_path / "sidecar.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    running = Sidecar(proc, port, control, data, scratch, log, in_namespace=pid1)
    try:
        yield running
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(running.pid(), signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _initialize(client: httpx.Client, url: str) -> dict[str, Any]:
    """MCP's handshake with the sidecar; its ``initialize`` result."""
    reply = _rpc(client, url, HEADERS, INITIALIZE)
    _rpc(client, url, HEADERS, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return dict(reply["result"])


def _call(
    sidecar: Sidecar, tool: str, arguments: dict[str, Any], client: httpx.Client | None = None
) -> dict[str, Any]:
    """One tool call (on ``client``'s connection if given, else after a handshake of its own)."""
    url = f"http://127.0.0.1:{sidecar.port}/mcp"
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(httpx.Client(timeout=30))
            _initialize(client, url)
        body = {"name": tool, "arguments": arguments}
        reply = _rpc(
            client, url, HEADERS, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": body}
        )
    assert not reply["result"].get("isError"), reply
    return dict(reply["result"])


def _server_pid(running: Sidecar) -> int:
    """The sidecar's one live child: the server generation (no spare asked for)."""
    servers = [pid for pid in _children(running.pid()) if _state(pid) not in ("Z", "gone")]
    assert len(servers) == 1, servers
    return servers[0]


def _health(running: Sidecar) -> dict[str, Any]:
    """``GET /healthz`` without its CPU figure (checked on its own)."""
    answer = dict(running.get("healthz").json())
    assert isinstance(answer.pop("cpu_s"), float)
    return answer


@pytest.mark.servers
def test_respawn_gives_the_memory_server_fresh_state(tmp_path: Path) -> None:
    data, scratch = tmp_path / "data", tmp_path / "scratch"
    env = {**_catalog_env("memory", data, scratch), "MEMORY_FILE_PATH": str(scratch / "memory.jsonl")}
    spec = {**_spec("memory"), "path_aliases": {"python": "python3"}}  # .atlas-path survives /stop
    with sidecar(tmp_path, spec, env) as running:
        running.wait_ready()
        assert _health(running) == {"running": True, "generation": 1}
        first_cpu = running.get("healthz").json()["cpu_s"]
        assert first_cpu > 0.05  # node started: a live descendant of the sidecar
        url = f"http://127.0.0.1:{running.port}/mcp"
        client = httpx.Client(timeout=30)  # one connection for both generations: the endpoint stays
        first_init = _initialize(client, url)
        entity = {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}
        _call(running, "create_entities", {"entities": [entity]}, client)
        assert "Ada" in json.dumps(_call(running, "read_graph", {}, client))
        assert (scratch / "memory.jsonl").exists()
        (scratch / "left-by-the-task").mkdir()
        first_server = _server_pid(running)

        respawn = running.post("respawn")
        assert respawn.status_code == 200, respawn.text
        answer = respawn.json()
        assert answer["ready"] is True and answer["stopped"] is True and answer["generation"] == 2
        assert answer["killed"] >= 1 and answer["prestarted"] is False  # node (in a session of its own)
        assert _server_pid(running) != first_server  # a new process
        assert answer["stop_seconds"] > 0 and 0 < answer["start_seconds"] < 30
        print(f"respawn: stop {answer['stop_seconds']:.3f}s, start {answer['start_seconds']:.3f}s")
        assert sorted(p.name for p in scratch.iterdir()) == [".atlas-path"]
        assert (scratch / ".atlas-path" / "python").is_symlink()
        graph = _call(running, "read_graph", {}, client)  # the same connection, the new generation
        client.close()
        assert _initialize(httpx.Client(timeout=30), url) == first_init  # its own handshake's answer
        assert "Ada" not in json.dumps(graph) and '"entities": []' in json.dumps(graph["structuredContent"])
        assert _health(running) == {"running": True, "generation": 2}
        # The killed generation's CPU stays counted (reaped by the sidecar), the new one's is added.
        assert running.get("healthz").json()["cpu_s"] > first_cpu
        deadline = time.monotonic() + 3  # the old generation's processes were reaped, not left as zombies
        while zombies := [p for p in _children(running.pid()) if _state(p) == "Z"]:
            assert time.monotonic() < deadline, f"zombie children of the sidecar: {zombies}"
            time.sleep(0.05)

        # The protocol's edges, on the same sidecar.
        again = running.post("start")
        assert again.status_code == 409 and "already running (generation 2)" in again.json()["error"]
        assert running.post("start?timeout=soon").status_code == 400
        assert "timeout" in running.post("respawn?timeout=0").json()["error"]
        assert "'force'" in running.post("stop?force=1").json()["error"]
        assert running.get("stop").status_code == 405 and running.get("stop").headers["allow"] == "POST"
        assert running.post("healthz").status_code == 405
        assert running.post("restart").status_code == 404
        stops = [running.post("stop"), running.post("stop")]  # idempotent
        assert [s.status_code for s in stops] == [200, 200] and stops[1].json()["killed"] == 0
        assert _health(running) == {"running": False, "generation": 2}
        time.sleep(1.5)  # stopped on purpose: the sidecar stays
        assert running.proc.poll() is None
        assert running.post("start?timeout=30").json()["generation"] == 3


def _kill_marked(marker: str) -> None:
    for pid in _with_marker(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _daemon_snippet(marker: str) -> str:
    """JavaScript for code-runner: a double fork (sh puts a Python sleeper in a new session, in the
    background, and exits at once), the marker in the sleeper's command line."""
    shell = f"setsid {sys.executable} -c 'import time; time.sleep(600)' {marker} >/dev/null 2>&1 &"
    return (
        'const { spawn } = require("child_process");\n'
        f'spawn("sh", ["-c", {json.dumps(shell)}], {{ stdio: "ignore" }});\n'
        'console.log("spawned");\n'
    )


@functools.cache
def _pid_namespaces() -> bool:
    probe = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
    return (
        shutil.which("unshare") is not None
        and subprocess.run(probe, check=False, capture_output=True).returncode == 0
    )


@pytest.mark.servers
@pytest.mark.parametrize(
    "mode",
    [
        "descendants",
        pytest.param(
            "pid1",
            marks=pytest.mark.skipif("not _pid_namespaces()", reason="unshare --pid needs privileges here"),
        ),
    ],
)
def test_stop_kills_what_a_snippet_left_running(tmp_path: Path, mode: str) -> None:
    """``descendants``: the sidecar outside a container, the subreaper of what its server detaches,
    walking its descendants; ``pid1``: PID 1 of its own PID namespace (``unshare``), as in its
    container, killing every other process there."""
    marker = f"atlas-daemon-{uuid.uuid4().hex}"
    data, scratch = tmp_path / "data", tmp_path / "scratch"
    env = _catalog_env("code-runner", data, scratch)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(_kill_marked, marker)  # should /stop fail to
        running = cleanup.enter_context(sidecar(tmp_path, _spec("code-runner"), env, pid1=mode == "pid1"))
        running.wait_ready()
        result = _call(running, "run-code", {"code": _daemon_snippet(marker), "languageId": "javascript"})
        assert "spawned" in json.dumps(result)
        deadline = time.monotonic() + 10
        while not (daemons := _with_marker(marker)):
            assert time.monotonic() < deadline, "the snippet's daemon never showed up"
            time.sleep(0.05)
        stat = Path(f"/proc/{daemons[0]}/stat").read_bytes().rsplit(b")", 1)[1].split()
        assert int(stat[3]) == daemons[0], "the daemon leads a session of its own"
        assert int(stat[1]) == running.pid(), "orphaned, it was reparented to the sidecar"
        if mode == "pid1":
            status = Path(f"/proc/{running.pid()}/status").read_text()
            nspid = next(line for line in status.splitlines() if line.startswith("NSpid:"))
            assert nspid.split()[-1] == "1", nspid  # PID 1 in its own namespace

        stop = running.post("stop")
        assert stop.status_code == 200, stop.text
        assert not _with_marker(marker), "the detached daemon outlived /stop"
        assert stop.json()["killed"] >= 2  # node, the daemon
        print(f"{mode}: stop {stop.json()['seconds']:.3f}s, killed {stop.json()['killed']}")
        assert not [p for p in scratch.iterdir() if p.name != ".atlas-path"]  # the snippet's tmp.js
        start = running.post("start?prestart=1")
        assert start.status_code == 200 and start.json()["generation"] == 2, start.text
        assert start.json()["prestarted"] is False  # no spare yet: it is started now, for the next
        # Generation 2 leaves a daemon too; generation 3, the spare, is up meanwhile.
        result = _call(running, "run-code", {"code": _daemon_snippet(marker), "languageId": "javascript"})
        assert "spawned" in json.dumps(result)
        assert _health(running) == {"running": True, "generation": 2}
        stop = running.post("stop")
        assert stop.status_code == 200 and not _with_marker(marker), "the daemon outlived /stop"
        spare = running.post("start?prestart=1")
        assert spare.status_code == 200 and spare.json()["prestarted"] is True, spare.text
        assert spare.json()["generation"] == 3
        print(
            f"{mode}: start from the spare {spare.json()['seconds']:.3f}s, cold {start.json()['seconds']:.3f}s"
        )
        two = _call(running, "run-code", {"code": "console.log(1+1)", "languageId": "javascript"})
        assert "2" in json.dumps(two["content"])


def _failing_spec(tmp_path: Path) -> dict[str, Any]:
    """The calculator behind a script that fails at once (exit 7, a line on stderr) while the data
    directory holds ``break-the-server``: a data reset can break a server's next start."""
    calculator = _server("calculator") / "bin" / context.server_build_args("calculator")["SERVER_BIN"]
    script = tmp_path / "server.sh"
    script.write_text(
        "#!/bin/sh\n"
        'if [ -e "$ATLAS_DATA_DIR/break-the-server" ]; then\n'
        "  echo 'calculator-wrapper: the data says no' >&2; exit 7\n"
        "fi\n"
        f"exec {calculator}\n"
    )
    script.chmod(0o755)
    return {"command": str(script), "args": []}


@pytest.mark.servers
def test_a_start_that_fails_is_a_503_and_the_sidecar_stays(tmp_path: Path) -> None:
    with sidecar(tmp_path, _failing_spec(tmp_path)) as running:
        running.wait_ready()
        (running.data / "break-the-server").touch()
        assert running.post("stop").status_code == 200
        started = time.monotonic()
        failed = running.post("start?timeout=20")
        print(f"failed start answered in {time.monotonic() - started:.2f}s")
        assert failed.status_code == 503, failed.text
        error = failed.json()["error"]
        assert "the server exited before it answered initialize (exit code 7)" in error
        assert "calculator-wrapper: the data says no" in error  # the server's own stderr
        assert 'File "' not in error  # a traceback, condensed to its messages
        assert len(error) < 500, error  # what the runner keeps of it
        assert failed.json()["generation"] == 2
        time.sleep(1.5)
        assert running.proc.poll() is None
        assert _health(running) == {"running": False, "generation": 1}  # the last that served
        (running.data / "break-the-server").unlink()
        again = running.post("start")
        assert again.status_code == 200 and again.json()["generation"] == 3, again.text

        # SIGTERM: the server goes at once (SIGKILL), the sidecar exits 0.
        server = _server_pid(running)
        tree = [server, *_children(server)]
        running.proc.send_signal(signal.SIGTERM)
        assert running.proc.wait(timeout=10) == 0
        assert {_state(p) for p in tree} == {"gone"}


@pytest.mark.servers
def test_the_sidecar_exits_when_its_server_dies_unasked(tmp_path: Path) -> None:
    """The server's death ends the sidecar (with its code), the kubelet restarts the container."""
    with sidecar(tmp_path, _failing_spec(tmp_path)) as running:
        running.wait_ready()
        os.kill(_server_pid(running), signal.SIGKILL)
        started = time.monotonic()
        code = running.proc.wait(timeout=5)
        print(f"sidecar exited {time.monotonic() - started:.2f}s after its server was killed")
        assert code == 128 + signal.SIGKILL
        assert "the server (generation 1) exited on its own with signal 9" in running.log.read_text()


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("0", "must be a TCP port (1-65535), got '0'"),
        ("65536", "must be a TCP port (1-65535), got '65536'"),
        ("control", "must be a TCP port (1-65535), got 'control'"),
        ("8000", "must differ from ATLAS_SERVER_PORT (8000)"),
    ],
)
def test_a_bad_control_port_fails_at_start(tmp_path: Path, value: str, complaint: str) -> None:
    (tmp_path / "server.json").write_text(
        json.dumps({"command": "/bin/true", "args": [], "cwd": str(tmp_path)})
    )
    env = {
        **os.environ,
        "ATLAS_SIDECAR_SPEC": str(tmp_path / "server.json"),
        "ATLAS_SERVER_PORT": "8000",
        "ATLAS_CONTROL_PORT": value,
    }
    done = subprocess.run(
        [sys.executable, str(SIDECAR)], env=env, capture_output=True, text=True, check=False, timeout=30
    )
    assert done.returncode == 2
    assert done.stderr == f"atlas-mcp-sidecar: ATLAS_CONTROL_PORT {complaint}\n"


def test_a_control_port_in_use_fails_at_start(tmp_path: Path) -> None:
    (tmp_path / "server.json").write_text(
        json.dumps({"command": "/bin/true", "args": [], "cwd": str(tmp_path)})
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **os.environ,
            "ATLAS_SIDECAR_SPEC": str(tmp_path / "server.json"),
            "ATLAS_CONTROL_PORT": str(port),
        }
        done = subprocess.run(
            [sys.executable, str(SIDECAR)], env=env, capture_output=True, text=True, check=False, timeout=30
        )
    assert done.returncode == 2
    assert f"ATLAS_CONTROL_PORT {port}: cannot listen on 127.0.0.1:{port}" in done.stderr
