"""Entrypoint of an AtlasRun MCP server sidecar image (see images/mcp-server/Dockerfile).

Serves the image's stdio MCP server over streamable HTTP at ``/mcp`` on
``0.0.0.0:$ATLAS_SERVER_PORT`` (default 8000; bridge.py): the pod's tcpSocket probes reach it on
the pod IP once the server answered MCP's handshake, the runner at ``127.0.0.1:<port>``. The
sidecar runs the server itself (generations.py) and passes its answers through unchanged.

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

The server runs as a supervised child in a session of its own. When it exits on its own, the
sidecar exits with its code (128 + N for signal N) and the kubelet restarts the container;
SIGTERM/SIGINT stop it (SIGKILL to every process of the server: nothing of its state outlives the
container) and the sidecar exits 0. As PID 1 the sidecar reaps orphans; elsewhere it makes itself
their subreaper, so daemons a server started stay its descendants.

With ``ATLAS_CONTROL_PORT`` set, a control endpoint on ``127.0.0.1`` (other containers of the
pod only) gives fresh server state between a pod's work items (atlasrun/cluster/pod/fresh.py):
the MCP endpoint stays for the container's life and the server behind it is replaced, one
*generation* after another:

- ``POST /stop``: SIGKILL the server's whole process tree (as PID 1: every process of the
  container but a spare), wait until it is gone, empty ``$TMPDIR`` except ``.atlas-path``. 200
  ``{"stopped": true, "killed": n, "seconds": s}``; stopping a stopped server is a 200 too.
- ``POST /start[?timeout=60][&prestart=1]``: a new generation, switched in once it answered the
  MCP handshake; with ``prestart=1`` the next one is started and handshaken right after, while the
  item runs, and the next ``/start`` switches it in (``"prestarted": true``). 200 ``{"ready":
  true, "seconds": s, "generation": n, "prestarted": bool}``; 409 if it runs; 503 ``{"error":
  ...}`` (exit code and stderr tail) if it does not come up: the sidecar stays alive with the
  server stopped. A spare starts while the previous item runs and shares its ``$TMPDIR`` and data:
  a server that reads them at start-up declares ``fresh: respawn``, not ``prestart``.
- ``POST /respawn[?timeout=60][&prestart=1]``: both, one answer with ``stop_seconds`` and
  ``start_seconds``.
- ``GET /healthz``: ``{"running": bool, "generation": n, "cpu_s": s}``: the CPU-seconds the
  container has spent (its cgroup with ``ATLAS_CPU_SOURCE=cgroup``, as in a pod; else the
  sidecar and its process tree). The runner adds them to its own for the pod's figure.

Other paths are 404, other methods 405, bad query parameters 400, each ``{"error": ...}``.
Control requests run one at a time. While stopped on purpose, the server's absence is no exit,
and an MCP request is answered with a JSON-RPC error.

``ATLAS_SIDECAR_SPEC`` moves the spec (for tests outside the image). The whole container
environment is passed to the server: the pod spec carries the catalog entry's ``env`` and the
server's secrets. Nothing is written outside ``/tmp`` and the data directory, so the root
filesystem can be read-only. Standard library only: the image's Python has no atlasrun.
"""

from __future__ import annotations

import collections
import ctypes
import http.server
import json
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
from typing import Any

from bridge import serve_mcp
from control import MAX_START_TIMEOUT_S, SidecarError, fail, log, serve_control
from generations import Generation, GenerationError, Switchboard
from procs import alive, cgroup_cpu, cpu_of, processes

SPEC = os.environ.get("ATLAS_SIDECAR_SPEC", "/opt/server/server.json")
_PLACEHOLDER = re.compile(r"\{(install_dir|data_dir|scratch_dir|port)\}")
ALIAS_DIR = ".atlas-path"  # kept when the scratch directory is emptied
KILL_WAIT_S = 10.0  # /stop: how long SIGKILLed processes may take to disappear
FIRST_START_TIMEOUT_S = 300.0  # the container's first server: an npm server on a busy node is slow
PR_SET_CHILD_SUBREAPER = 36  # prctl option (linux/prctl.h)


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

    def server_command(self) -> tuple[list[str], str, dict[str, str]]:
        """The stdio server's command line, working directory and environment."""
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
        return [command, *args], cwd, env


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
    config.server_command()  # a missing working directory or alias target fails now, not later
    return config


# ---------------------------------------------------------------- the supervisor


def _exit_status(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"


class Sidecar:
    """The server's generations (generations.py) behind the MCP endpoint (bridge.py)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.pid1 = os.getpid() == 1
        self.control = threading.Lock()  # one control request at a time
        self.state = threading.Lock()  # the generations, and reaping
        self.generation = 0  # server processes started
        self.serving = 0  # the generation switched in last
        self.down_on_purpose = False  # stopped (or being stopped or started) by a control request
        self.terminating = False
        self.board = Switchboard()
        self.endpoint: http.server.ThreadingHTTPServer | None = None
        self.server: Generation | None = None  # the current generation
        self.spare: Generation | None = None  # started ahead of need (/start?prestart=1)
        self.spare_done = threading.Event()  # its start and handshake are over (well or not)
        self.spare_error = ""
        self.started: list[Generation] = []  # every generation not yet reaped (by its Popen)

    # -- the server

    def spawn(self) -> None:
        """The first generation, handshaken and switched in; then the MCP endpoint opens (so a
        probe of its port passes once the server answers)."""
        deadline = time.monotonic() + FIRST_START_TIMEOUT_S
        self.server = self._handshaken(self._generation(), deadline)
        self.board.switch(self.server)
        self.serving = self.server.number
        host = os.environ.get("ATLAS_SERVER_HOST", "0.0.0.0")
        self.endpoint = serve_mcp(self.board, host, self.config.server_port)

    def _generation(self) -> Generation:
        """A new process of the server, its stdout pumped by the switchboard."""
        command, cwd, env = self.config.server_command()
        with self.state:  # the reaper must never see the new child's pid as an orphan's
            self.generation += 1
            try:
                made = Generation(command, cwd, env, self.generation)
            except GenerationError as exc:
                raise SidecarError(str(exc)) from exc
            self.started = [g for g in self.started if g.proc.returncode is None] + [made]
        self.board.attach(made)
        return made

    @staticmethod
    def _handshaken(generation: Generation, deadline: float) -> Generation:
        try:
            generation.handshake(deadline)
        except GenerationError as exc:
            raise SidecarError(
                f"generation {generation.number}: {exc}; its stderr ends with:\n{generation.stderr_tail()}"
            ) from exc
        return generation

    def running(self) -> bool:
        if self.server is None or self.down_on_purpose:
            return False
        return self.server.proc.poll() is None

    def reap_orphans(self) -> None:
        """Collect exited processes that are not a child we wait for (orphans reparented to us),
        leaving the generations' exit statuses to their Popen."""
        with self.state:
            ours = {p.pid for p in self._children() if p.returncode is None}
            while True:
                try:
                    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    return
                if info is None or info.si_pid in ours:
                    return
                try:
                    os.waitpid(info.si_pid, 0)
                except ChildProcessError:
                    pass

    def _children(self) -> list[subprocess.Popen[bytes]]:
        return [g.proc for g in self.started]

    def unexpected_exit(self) -> int | None:
        with self.state:
            if self.server is None or self.down_on_purpose:
                return None
            return self.server.proc.poll()

    def _tree(self, keep: set[int] | None = None) -> set[int]:
        """The live processes of the server: as PID 1 every other one; else the child's process
        group and the sidecar's descendants (orphans come back to it: it is their subreaper).
        ``keep``: processes left out with their descendants (the spare)."""
        table = processes()
        children: dict[int, list[int]] = collections.defaultdict(list)
        for pid, (_, ppid, _) in table.items():
            children[ppid].append(pid)

        def descendants(roots: set[int]) -> set[int]:
            found, stack = set(roots), list(roots)
            while stack:
                for pid in children[stack.pop()]:
                    if pid not in found:
                        found.add(pid)
                        stack.append(pid)
            return found

        if self.pid1:
            found = {pid for pid in table if pid != 1}
        else:
            found = descendants({os.getpid()}) - {os.getpid()}
            if self.server is not None:  # its group: pgid = its pid (a session of its own)
                found |= {pid for pid, (_, _, pgrp) in table.items() if pgrp == self.server.pid}
        if keep:
            found -= descendants(keep & set(table))
        return {pid for pid in found if alive(pid, table[pid][0])}

    def _keep(self) -> set[int]:
        """What a /stop spares: the spare generation."""
        return {self.spare.pid} if self.spare is not None else set()

    def kill_tree(self, keep: set[int] | None = None) -> int:
        """SIGKILL the server's processes until none is left; how many were killed."""
        killed: set[int] = set()
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            self.reap_orphans()
            alive_now = self._tree(keep)
            if not alive_now:
                break
            if time.monotonic() > deadline:
                raise SidecarError(f"processes {sorted(alive_now)} outlived SIGKILL for {KILL_WAIT_S:g} s")
            for pid in alive_now:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        for child in self._children():
            if keep is not None and child.pid in keep:
                continue
            try:
                child.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired as exc:
                raise SidecarError(f"process {child.pid} outlived SIGKILL") from exc
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
        self.board.switch(None)
        killed = self.kill_tree(self._keep())
        self.server = None
        self.wipe_scratch()
        return {"stopped": True, "killed": killed, "seconds": round(time.monotonic() - started, 3)}

    def start(self, timeout_s: float, prestart: bool = False) -> tuple[int, dict[str, Any]]:
        if self.running():
            return 409, {
                "error": f"the server is already running (generation {self.serving}): "
                "POST /stop first, or POST /respawn"
            }
        started = time.monotonic()
        with self.state:
            self.down_on_purpose = True  # until it answers: a crash now is this request's failure
        try:
            spare = self._switch_in(started + timeout_s)
        except SidecarError as exc:
            log(f"start of generation {self.generation} failed: {exc}")
            try:
                self.kill_tree(self._keep())
            except SidecarError as kill_error:
                exc = SidecarError(f"{exc}; {kill_error}")
            self.server = None
            return 503, {"error": str(exc), "generation": self.generation}
        with self.state:
            self.down_on_purpose = False
        if prestart:
            self._prestart()
        return 200, {
            "ready": True,
            "seconds": round(time.monotonic() - started, 3),
            "generation": self.serving,
            "prestarted": spare,
        }

    def _switch_in(self, deadline: float) -> bool:
        """The spare if it came up, else a new generation, handshaken and switched in. True if it
        was the spare."""
        spare, self.spare = self.spare, None
        if spare is not None:
            self.spare_done.wait(timeout=max(deadline - time.monotonic(), 0))
            if self.spare_done.is_set() and not self.spare_error and spare.proc.poll() is None:
                self.server, self.serving = spare, spare.number
                self.board.switch(spare)
                return True
            log(
                f"the spare generation {spare.number} is not usable ({self.spare_error or 'not ready'}): starting one now"
            )
            self.server = spare  # killed below as the current one, then replaced
            self.kill_tree(self._keep())
        self.server = self._handshaken(self._generation(), deadline)
        self.board.switch(self.server)
        self.serving = self.server.number
        return False

    def _prestart(self) -> None:
        """Start the next generation now, while the item runs; its handshake in the background."""
        self.spare_done.clear()
        self.spare_error = ""
        try:
            spare = self.spare = self._generation()
        except SidecarError as exc:
            self.spare_error = str(exc)
            self.spare_done.set()
            return

        def handshake() -> None:
            try:
                spare.handshake(time.monotonic() + MAX_START_TIMEOUT_S)
            except GenerationError as exc:
                self.spare_error = str(exc)
            self.spare_done.set()

        threading.Thread(target=handshake, name="spare", daemon=True).start()

    def respawn(self, timeout_s: float, prestart: bool = False) -> tuple[int, dict[str, Any]]:
        stopped = self.stop()
        status, started = self.start(timeout_s, prestart)
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
            "generation": self.serving,
            "cpu_s": round(self.cpu_seconds(), 3),
        }

    def cpu_seconds(self) -> float:
        """What the container has spent: its cgroup's account in a pod (ATLAS_CPU_SOURCE=cgroup);
        elsewhere the sidecar, the children it reaped and its live descendants."""
        if os.environ.get("ATLAS_CPU_SOURCE") == "cgroup" and (seconds := cgroup_cpu()) is not None:
            return seconds
        me, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        own = me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime
        return own + sum(cpu_of(pid) for pid in self._tree())

    # -- the container's life

    def shutdown(self) -> None:
        """SIGKILL the whole tree at once: a server's state ends with its container (the data it
        wrote is the pod's, results are the runner's), so nothing is worth a grace period, and the
        kubelet stops a pod's sidecars one after another once its runner is done."""
        with self.state:
            self.down_on_purpose = True
        try:
            self.kill_tree()
        except SidecarError as exc:
            log(str(exc))
        if self.endpoint is not None:
            self.endpoint.server_close()

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
                number = self.server.number if self.server is not None else 0
                log(f"the server (generation {number}) exited on its own with {_exit_status(code)}")
                try:
                    self.kill_tree()  # what it left behind (outside a container nothing else would)
                except SidecarError as exc:
                    log(str(exc))
                return 128 - code if code < 0 else code


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
