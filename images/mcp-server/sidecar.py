"""Entrypoint of an AtlasRun MCP server sidecar image (see images/mcp-server/Dockerfile).

Serves the image's stdio MCP server over streamable HTTP at ``/mcp`` (and SSE at ``/sse``)
through mcp-proxy, listening on ``0.0.0.0:$ATLAS_SERVER_PORT`` (default 8000): the pod's
tcpSocket probes reach it on the pod IP, the runner at ``127.0.0.1:<port>``.

The server's command, default arguments and working directory were fixed at build time in
``/opt/server/server.json`` from the catalog entry; arguments given to the container
(Kubernetes ``args``) replace the default arguments. Catalog placeholders are filled in
at each start, so one image works for any ``dataMount``:

- ``{install_dir}`` -> ``/opt/server``
- ``{data_dir}``    -> ``$ATLAS_DATA_DIR`` (default ``/data``)
- ``{scratch_dir}`` -> ``$TMPDIR`` (default ``/tmp``)
- ``{port}``        -> ``$ATLAS_SERVER_PORT``

The entry's ``path_aliases`` (``{"python": "python3"}``: commands the server runs under another
name) become links in ``$TMPDIR/.atlas-path``, put first on the server's PATH.

mcp-proxy runs as a supervised child in a session of its own. When it exits on its own, the
sidecar exits with its code (128 + N for signal N) and the kubelet restarts the container;
SIGTERM/SIGINT stop it (TERM, KILL after 3 s) and the sidecar exits 0. As PID 1 the sidecar
reaps orphans; elsewhere it makes itself their subreaper, so daemons a server started stay its
descendants.

With ``ATLAS_CONTROL_PORT`` set, a control endpoint on ``127.0.0.1`` (other containers of the
pod only) gives fresh server state between a pod's work items (atlasrun/cluster/pod/fresh.py):

- ``POST /stop``: SIGKILL the server's whole process tree (as PID 1: every other process of the
  container), wait until it is gone, empty ``$TMPDIR`` except ``.atlas-path``.
  200 ``{"stopped": true, "killed": n, "seconds": s}``; stopping a stopped server is a 200 too.
- ``POST /start[?timeout=60]``: a new generation of mcp-proxy, ready once the server answers an
  ``initialize`` at ``/mcp``. 200 ``{"ready": true, "seconds": s, "generation": n}``; 409 if it
  runs; 503 ``{"error": ...}`` (exit code and stderr tail) if it does not come up: the sidecar
  stays alive with the server stopped.
- ``POST /respawn[?timeout=60]``: both, one answer with ``stop_seconds`` and ``start_seconds``.
- ``GET /healthz``: ``{"running": bool, "generation": n, "cpu_s": s}``: the CPU-seconds the
  container has spent (its cgroup with ``ATLAS_CPU_SOURCE=cgroup``, as in a pod; else the
  sidecar and its process tree). The runner adds them to its own for the pod's figure.

Other paths are 404, other methods 405, bad query parameters 400, each ``{"error": ...}``.
Control requests run one at a time. While stopped on purpose, the child's absence is no exit.

``ATLAS_SIDECAR_SPEC`` and ``ATLAS_MCP_PROXY`` move the spec and mcp-proxy (for tests outside
the image). The whole container environment is passed to the server (``--pass-environment``): the pod
spec carries the catalog entry's ``env`` and the server's secrets. Nothing is written
outside ``/tmp`` and the data directory, so the root filesystem can be read-only.
Standard library only: the image's Python is mcp-proxy's, without atlasrun.
"""

from __future__ import annotations

import collections
import ctypes
import http.client
import http.server
import json
import math
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import IO, Any, NoReturn

SPEC = os.environ.get("ATLAS_SIDECAR_SPEC", "/opt/server/server.json")
PROXY = os.environ.get("ATLAS_MCP_PROXY", "/opt/mcp-proxy/bin/mcp-proxy")
_PLACEHOLDER = re.compile(r"\{(install_dir|data_dir|scratch_dir|port)\}")
ALIAS_DIR = ".atlas-path"  # kept when the scratch directory is emptied
TERM_GRACE_S = 3.0  # SIGTERM to the sidecar: the child gets this long before SIGKILL
KILL_WAIT_S = 10.0  # /stop: how long SIGKILLed processes may take to disappear
DEFAULT_START_TIMEOUT_S = 60.0
MAX_START_TIMEOUT_S = 3600.0
STDERR_TAIL_LINES = 12  # the runner keeps 500 characters of an error
PR_SET_CHILD_SUBREAPER = 36  # prctl option (linux/prctl.h)
# No HTTP(S)_PROXY from the environment: the readiness probe goes to loopback only.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "atlas-mcp-sidecar", "version": "0"},
    },
}


class SidecarError(Exception):
    """What went wrong, for the user: exit 2 at start-up, an error answer on the control endpoint."""


def fail(message: str) -> NoReturn:
    print(f"atlas-mcp-sidecar: {message}", file=sys.stderr)
    sys.exit(2)


def log(message: str) -> None:
    print(f"atlas-mcp-sidecar: {message}", file=sys.stderr, flush=True)


def _alias_dir(aliases: dict[str, str], scratch: str) -> str:
    """A directory of links ``alias -> the command found on PATH`` (the server's ``path_aliases``)."""
    directory = os.path.join(scratch, ALIAS_DIR)
    os.makedirs(directory, exist_ok=True)
    for alias, command in aliases.items():
        found = shutil.which(command)
        if found is None:
            raise SidecarError(f"path alias {alias} -> {command}: no {command} on PATH")
        link = os.path.join(directory, alias)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(found, link)
    return directory


def _port(variable: str, default: str) -> int | None:
    text = os.environ.get(variable, default).strip() or default
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise SidecarError(f"{variable} must be a TCP port (1-65535), got {text!r}")
    return int(text)


class Config:
    # A plain class, not a dataclass: tests load this file without registering it in sys.modules.
    def __init__(
        self,
        spec: dict[str, Any],
        argv: list[str],
        server_port: int,
        control_port: int | None,
        scratch: str,
        data_dir: str,
    ) -> None:
        self.spec, self.argv, self.scratch, self.data_dir = spec, argv, scratch, data_dir
        self.server_port, self.control_port = server_port, control_port

    def proxy_command(self) -> tuple[list[str], dict[str, str]]:
        """mcp-proxy's command line and environment, placeholders filled now (checked again at
        every start: the runner may have replaced the data directory meanwhile)."""
        values = {
            "install_dir": self.spec.get("install_dir", "/opt/server"),
            "data_dir": self.data_dir,
            "scratch_dir": self.scratch,
            "port": str(self.server_port),
        }

        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)

        command = fill(self.spec["command"])
        args = [fill(a) for a in (self.argv or self.spec.get("args", []))]
        cwd = fill(self.spec.get("cwd") or "{data_dir}")
        if not os.path.isdir(cwd):
            raise SidecarError(
                f"the server's working directory {cwd} does not exist (mount the data volume there "
                "or set ATLAS_DATA_DIR)"
            )
        env = dict(os.environ)
        aliases = self.spec.get("path_aliases") or {}
        if aliases:
            env["PATH"] = _alias_dir(aliases, self.scratch) + os.pathsep + env.get("PATH", "")
        host = os.environ.get("ATLAS_SERVER_HOST", "0.0.0.0")
        log_level = os.environ.get("ATLAS_PROXY_LOG_LEVEL", "WARNING")
        proxy = [PROXY, "--host", host, "--port", str(self.server_port), "--log-level", log_level]
        return [*proxy, "--pass-environment", "--cwd", cwd, "--", command, *args], env


def load_config(argv: list[str]) -> Config:
    try:
        with open(SPEC, encoding="utf-8") as fh:
            spec = json.load(fh)
    except (OSError, ValueError) as exc:
        raise SidecarError(f"cannot read the server spec {SPEC}: {exc}") from exc
    server_port = _port("ATLAS_SERVER_PORT", "8000")
    assert server_port is not None
    control_port = _port("ATLAS_CONTROL_PORT", "")
    if control_port == server_port:
        raise SidecarError(f"ATLAS_CONTROL_PORT must differ from ATLAS_SERVER_PORT ({server_port})")
    config = Config(
        spec=spec,
        argv=argv,
        server_port=server_port,
        control_port=control_port,
        scratch=os.environ.get("TMPDIR") or "/tmp",
        data_dir=os.environ.get("ATLAS_DATA_DIR") or "/data",
    )
    config.proxy_command()  # a missing working directory or alias target fails now, not later
    return config


# ---------------------------------------------------------------- processes, from /proc


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, process group) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # the command name may hold spaces and ")"
    return fields[0].decode(), int(fields[1]), int(fields[2])


def _processes() -> dict[int, tuple[str, int, int]]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(int(name))) is not None:
            table[int(name)] = stat
    return table


def _cpu_of(pid: int) -> float:
    """CPU-seconds of a live process and of its children it reaped (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        fields = data[data.rindex(b")") + 2 :].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
    except (OSError, ValueError, IndexError):
        return 0.0


def _cgroup_cpu() -> float | None:
    """CPU-seconds of this container's cgroup (v2 cpu.stat, else v1 cpuacct.usage); None if none.
    (The runner's copy: atlasrun/cluster/pod/cpu.py; this file imports nothing of atlasrun.)"""
    try:
        with open("/sys/fs/cgroup/cpu.stat", encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
    except (OSError, ValueError):
        pass
    for name in ("cpuacct/cpuacct.usage", "cpu,cpuacct/cpuacct.usage", "cpuacct.usage"):
        try:
            with open(f"/sys/fs/cgroup/{name}", encoding="ascii") as fh:
                return int(fh.read().strip()) / 1e9
        except (OSError, ValueError):
            continue
    return None


def _alive(pid: int, state: str) -> bool:
    """Not dead yet: a zombie thread-group leader still has threads running until they exit."""
    if state not in "ZX":
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


class StderrTail:
    """The child's last stderr lines, Python tracebacks condensed to their messages: the server's
    own complaint, printed before mcp-proxy's long traceback, stays in the few lines kept."""

    _FRAME = re.compile(r"^\s*(File \"|Traceback \(|Exception Group Traceback|[\^~]+$|[+-]+[-+ \d]*$)")

    def __init__(self, lines: int = STDERR_TAIL_LINES) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=lines)
        self._source_line_next = False  # the line after a ``File "..."`` line is its source code

    def add(self, raw: bytes) -> None:
        line = raw[:2000].decode("utf-8", "replace").rstrip()
        text = line.lstrip(" |+")  # exception groups indent with "|" and "+"
        source_line, self._source_line_next = self._source_line_next, text.startswith('File "')
        if source_line or not text or self._FRAME.match(text):
            return
        if not self.lines or self.lines[-1] != text:
            self.lines.append(text)

    def text(self) -> str:
        return "\n".join(self.lines) or "(nothing)"


def _drain(stream: IO[bytes], tail: StderrTail) -> None:
    """Echo the child's stderr to ours (the container log) and keep its last lines for errors."""
    out = sys.stderr.buffer
    for line in iter(lambda: stream.readline(65536), b""):
        tail.add(line)
        try:
            out.write(line)
            out.flush()
        except (OSError, ValueError):
            pass
    stream.close()


def _exit_status(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"


def _mcp_answers(url: str, timeout_s: float) -> None:
    """One ``initialize`` POST; returns once it has a result (its session closed), raises otherwise."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=json.dumps(INITIALIZE).encode(), headers=headers)
    with _LOOPBACK.open(request, timeout=timeout_s) as response:
        body = response.read().decode("utf-8", "replace")
        session = response.headers.get("mcp-session-id")
    lines = [ln[5:] for ln in body.splitlines() if ln.startswith("data:")] or [body]
    reply = json.loads(lines[0])
    if "result" not in reply:
        raise ValueError(f"initialize answered {body[:300]!r}")
    if session:  # mcp-proxy shares one server among sessions: leave none behind
        close = urllib.request.Request(url, method="DELETE", headers={"mcp-session-id": session})
        try:
            _LOOPBACK.open(close, timeout=5).close()
        except (OSError, http.client.HTTPException):
            pass


# ---------------------------------------------------------------- the supervisor


class Sidecar:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.pid1 = os.getpid() == 1
        self.control = threading.Lock()  # one control request at a time
        self.state = threading.Lock()  # the child, its generation, and reaping
        self.proc: subprocess.Popen[bytes] | None = None
        self.drainer: threading.Thread | None = None
        self.tail = StderrTail()
        self.generation = 0
        self.down_on_purpose = False  # stopped (or being stopped or started) by a control request
        self.terminating = False

    # -- the child

    def spawn(self) -> None:
        command, env = self.config.proxy_command()
        tail = StderrTail()
        with self.state:  # the reaper must never see the new child's pid as an orphan's
            try:
                proc = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
                )
            except OSError as exc:
                raise SidecarError(f"cannot start mcp-proxy ({PROXY}): {exc}") from exc
            self.proc, self.tail = proc, tail
            self.generation += 1
        assert proc.stderr is not None
        self.drainer = threading.Thread(target=_drain, args=(proc.stderr, tail), daemon=True)
        self.drainer.start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and not self.down_on_purpose

    def stderr_tail(self) -> str:
        if self.drainer is not None:
            self.drainer.join(timeout=1)  # the last lines of an exited child
        return self.tail.text()

    def reap_orphans(self) -> None:
        """Collect exited processes that are not the child (orphans reparented to us), leaving
        the child's exit status to its Popen."""
        with self.state:
            child = self.proc.pid if self.proc is not None and self.proc.returncode is None else None
            while True:
                try:
                    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    return
                if info is None or info.si_pid == child:
                    return
                try:
                    os.waitpid(info.si_pid, 0)
                except ChildProcessError:
                    pass

    def unexpected_exit(self) -> int | None:
        with self.state:
            if self.proc is None or self.down_on_purpose:
                return None
            code = self.proc.poll()
        return None if code is None else code

    def _tree(self) -> set[int]:
        """The live processes of the server: as PID 1 every other one; else the child's process
        group and the sidecar's descendants (orphans come back to it: it is their subreaper)."""
        table = _processes()
        if self.pid1:
            found = {pid for pid in table if pid != 1}
        else:
            children: dict[int, list[int]] = collections.defaultdict(list)
            for pid, (_, ppid, _) in table.items():
                children[ppid].append(pid)
            found = set()
            stack = [os.getpid()]
            while stack:
                for pid in children[stack.pop()]:
                    if pid not in found:
                        found.add(pid)
                        stack.append(pid)
            if self.proc is not None:  # its group: pgid = its pid (a session of its own)
                found |= {pid for pid, (_, _, pgrp) in table.items() if pgrp == self.proc.pid}
        return {pid for pid in found if _alive(pid, table[pid][0])}

    def kill_tree(self) -> int:
        """SIGKILL the server's processes until none is left; how many were killed."""
        killed: set[int] = set()
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            self.reap_orphans()
            alive = self._tree()
            if not alive:
                break
            if time.monotonic() > deadline:
                raise SidecarError(f"processes {sorted(alive)} outlived SIGKILL for {KILL_WAIT_S:g} s")
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired as exc:
                raise SidecarError(f"mcp-proxy (pid {self.proc.pid}) outlived SIGKILL") from exc
        self.reap_orphans()  # those the child's zombie hid (waitid shows the first zombie only)
        return len(killed)

    def wipe_scratch(self) -> None:
        scratch = self.config.scratch
        if os.path.realpath(scratch) == "/":
            raise SidecarError("TMPDIR is / : refusing to empty it")
        errors = []
        try:
            names = os.listdir(scratch)
        except FileNotFoundError:
            return
        for name in names:
            path = os.path.join(scratch, name)
            if name == ALIAS_DIR:
                continue
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                errors.append(f"{exc.filename or path}: {exc.strerror}")
        if errors:
            raise SidecarError(f"cannot empty the scratch directory {scratch}: {'; '.join(errors[:5])}")

    # -- control requests (the caller holds self.control)

    def stop(self) -> dict[str, Any]:
        started = time.monotonic()
        with self.state:
            self.down_on_purpose = True
        killed = self.kill_tree()
        self.wipe_scratch()
        return {"stopped": True, "killed": killed, "seconds": round(time.monotonic() - started, 3)}

    def start(self, timeout_s: float) -> tuple[int, dict[str, Any]]:
        if self.running():
            return 409, {
                "error": f"the server is already running (generation {self.generation}): "
                "POST /stop first, or POST /respawn"
            }
        started = time.monotonic()
        with self.state:
            self.down_on_purpose = True  # until it answers: a crash now is this request's failure
        try:
            self.spawn()
            self._wait_ready(started + timeout_s, timeout_s)
        except SidecarError as exc:
            log(f"start of generation {self.generation} failed: {exc}")
            try:
                self.kill_tree()
            except SidecarError as kill_error:
                exc = SidecarError(f"{exc}; {kill_error}")
            return 503, {"error": str(exc), "generation": self.generation}
        with self.state:
            self.down_on_purpose = False
        return 200, {
            "ready": True,
            "seconds": round(time.monotonic() - started, 3),
            "generation": self.generation,
        }

    def _wait_ready(self, deadline: float, timeout_s: float) -> None:
        host = os.environ.get("ATLAS_SERVER_HOST", "0.0.0.0")
        if host in ("", "0.0.0.0", "::"):  # every address: ask on loopback
            host = "127.0.0.1"
        url = f"http://{host}:{self.config.server_port}/mcp"
        last = "no answer yet"
        assert self.proc is not None
        while True:
            code = self.proc.poll()
            if code is not None:
                raise SidecarError(
                    f"mcp-proxy exited with {_exit_status(code)} before the server answered initialize "
                    f"at {url}; its stderr ends with:\n{self.stderr_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SidecarError(
                    f"the server did not answer initialize at {url} within {timeout_s:g} s ({last}); "
                    f"mcp-proxy's stderr ends with:\n{self.stderr_tail()}"
                )
            try:
                _mcp_answers(url, min(remaining, 10.0))
                return
            except (OSError, ValueError, http.client.HTTPException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.05)

    def respawn(self, timeout_s: float) -> tuple[int, dict[str, Any]]:
        stopped = self.stop()
        status, started = self.start(timeout_s)
        body = {
            **started,
            "stopped": True,
            "killed": stopped["killed"],
            "stop_seconds": stopped["seconds"],
        }
        if status == 200:
            body["start_seconds"] = started["seconds"]
            body["seconds"] = round(stopped["seconds"] + started["seconds"], 3)
        return status, body

    def health(self) -> dict[str, Any]:
        return {
            "running": self.running(),
            "generation": self.generation,
            "cpu_s": round(self.cpu_seconds(), 3),
        }

    def cpu_seconds(self) -> float:
        """What the container has spent: its cgroup's account in a pod (ATLAS_CPU_SOURCE=cgroup);
        elsewhere the sidecar, the children it reaped and its live descendants."""
        if os.environ.get("ATLAS_CPU_SOURCE") == "cgroup" and (seconds := _cgroup_cpu()) is not None:
            return seconds
        me, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        own = me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime
        return own + sum(_cpu_of(pid) for pid in self._tree())

    # -- the container's life

    def shutdown(self) -> None:
        """SIGTERM to the child's group (as PID 1: to everyone), SIGKILL what is left after the grace."""
        with self.state:
            self.down_on_purpose = True
        targets = self._tree() if self.pid1 else set()
        for pid in targets:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                log(f"mcp-proxy ignored SIGTERM for {TERM_GRACE_S:g} s: SIGKILL")
        try:
            self.kill_tree()
        except SidecarError as exc:
            log(str(exc))

    def supervise(self, wakeup: int) -> int:
        """Wait for signals (woken by ``wakeup``, or every second to reap); the sidecar's exit code."""
        while True:
            readable, _, _ = select.select([wakeup], [], [], 1.0)
            if readable:
                try:
                    os.read(wakeup, 512)
                except BlockingIOError:
                    pass
            if self.terminating:
                self.shutdown()
                return 0
            self.reap_orphans()
            code = self.unexpected_exit()
            if code is not None:
                log(f"mcp-proxy exited on its own with {_exit_status(code)}")
                try:
                    self.kill_tree()  # what it left behind (outside a container nothing else would)
                except SidecarError as exc:
                    log(str(exc))
                return 128 - code if code < 0 else code


# ---------------------------------------------------------------- the control endpoint

ROUTES = {"/stop": "POST", "/start": "POST", "/respawn": "POST", "/healthz": "GET"}
QUERY = {"/start": {"timeout"}, "/respawn": {"timeout"}}


class _BadRequest(Exception):
    pass


def _timeout(values: list[str]) -> float:
    text = values[-1]
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_START_TIMEOUT_S):
        raise _BadRequest(
            f"query parameter timeout must be a number of seconds, > 0 and at most "
            f"{MAX_START_TIMEOUT_S:g}, got {text!r}"
        )
    return seconds


class ControlHandler(http.server.BaseHTTPRequestHandler):
    sidecar: Sidecar  # set on the subclass made by serve_control

    def _answer(self, status: int, body: dict[str, Any], allow: str = "") -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if allow:
            self.send_header("Allow", allow)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _route(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        method = ROUTES.get(url.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > 0:
            self.rfile.read(min(length, 1 << 20))
        if method is None:
            endpoints = ", ".join(f"{m} {p}" for p, m in ROUTES.items())
            self._answer(404, {"error": f"no endpoint {url.path}: the endpoints are {endpoints}"})
            return
        if self.command != method:
            self._answer(405, {"error": f"{self.command} {url.path}: use {method}"}, allow=method)
            return
        try:
            query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            known = QUERY.get(url.path, set())
            for name in query:
                if name not in known:
                    raise _BadRequest(
                        f"unknown query parameter {name!r} for {url.path} (known: {', '.join(sorted(known)) or 'none'})"
                    )
            timeout_s = _timeout(query["timeout"]) if "timeout" in query else DEFAULT_START_TIMEOUT_S
        except _BadRequest as exc:
            self._answer(400, {"error": str(exc)})
            return
        sidecar = self.sidecar
        if url.path == "/healthz":
            self._answer(200, sidecar.health())
            return
        if sidecar.terminating:
            self._answer(503, {"error": "the sidecar is shutting down (SIGTERM)"})
            return
        try:
            with sidecar.control:
                if url.path == "/stop":
                    status, body = 200, sidecar.stop()
                elif url.path == "/start":
                    status, body = sidecar.start(timeout_s)
                else:
                    status, body = sidecar.respawn(timeout_s)
        except SidecarError as exc:
            status, body = 500, {"error": str(exc)}
        log(f"{self.command} {self.path}: {status} {json.dumps(body)[:300]}")
        self._answer(status, body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _route

    def log_message(self, format: str, *args: Any) -> None:
        pass  # _route logs what matters (control requests), not every health probe


def serve_control(sidecar: Sidecar, port: int) -> http.server.ThreadingHTTPServer:
    handler = type("BoundControlHandler", (ControlHandler,), {"sidecar": sidecar})
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise SidecarError(
            f"ATLAS_CONTROL_PORT {port}: cannot listen on 127.0.0.1:{port}: {exc.strerror}"
        ) from exc
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="control", daemon=True).start()
    return server


def _become_subreaper() -> None:
    """Orphaned descendants (double-forked daemons) get reparented to us instead of to init."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # best effort: then /stop only finds the descendants that kept their parent


def main(argv: list[str]) -> None:
    try:
        config = load_config(argv)
    except SidecarError as exc:
        fail(str(exc))
    sidecar = Sidecar(config)
    if not sidecar.pid1:
        _become_subreaper()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)

    def terminate(signum: int, frame: object) -> None:
        sidecar.terminating = True

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # only to wake the loop up: reap
    try:
        if config.control_port is not None:
            serve_control(sidecar, config.control_port)
        sidecar.spawn()
    except SidecarError as exc:
        fail(str(exc))
    sys.exit(sidecar.supervise(wake_read))


if __name__ == "__main__":
    main(sys.argv[1:])
