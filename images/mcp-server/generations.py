"""Server generations behind one long-lived mcp-proxy: the sidecar's relay mode (with a control port).

Between two work items of a pod the server must be a new process (tests/test_isolation_reuse.py:
state in a server's memory or in processes it started). Restarting mcp-proxy with it costs about a
second and most of it is mcp-proxy's own start-up, the same every time. So in relay mode mcp-proxy
runs ``sidecar.py --relay NAME`` as its stdio "server": a pipe to the sidecar through an abstract
unix socket, and the sidecar runs the real server itself, one *generation* after another:

    runner --HTTP--> mcp-proxy --stdio--> relay --socket--> Switchboard --stdio--> generation N

mcp-proxy initializes its server once, at start-up; the switchboard passes that ``initialize`` to
the first generation and keeps its parameters. A later generation gets the same handshake from the
sidecar itself (its answer is the sidecar's, never forwarded), and only then is switched in: from
mcp-proxy's side its server never changed. A *spare* generation (``/start?prestart=1``) is started
and handshaken ahead of need while an item runs, so the next ``/start`` is a switch, not a start.

Isolation: a generation is a child of the sidecar in a session of its own, its stdio pipes are the
sidecar's alone (a spare is not reachable from the network, unlike a second mcp-proxy would be), and
the socket takes one connection, from mcp-proxy's child. Standard library only, like sidecar.py.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any

from procs import StderrTail, drain, stat

HANDSHAKE_ID = "atlas-sidecar-initialize"  # the id of the sidecar's own initialize requests
MAX_LINE = 64 << 20  # one JSON-RPC message; a longer line is the server's error


class GenerationError(Exception):
    """A generation could not be started or did not answer its handshake."""


class Generation:
    """One process of the stdio server: its pipes, and lines it wrote while not switched in."""

    def __init__(self, command: list[str], cwd: str, env: dict[str, str], number: int) -> None:
        self.number = number
        self.tail = StderrTail()
        try:
            self.proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise GenerationError(f"cannot start the server ({command[0]}): {exc}") from exc
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.pending: queue.Queue[bytes] = queue.Queue()  # its lines before it is switched in
        self.drainer = threading.Thread(target=drain, args=(self.proc.stderr, self.tail), daemon=True)
        self.drainer.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: bytes) -> None:
        self.stdin.write(message)
        self.stdin.flush()

    def handshake(self, initialize: dict[str, Any], deadline: float) -> None:
        """MCP's handshake with mcp-proxy's own ``initialize`` parameters (its answer is ours)."""
        request = {"jsonrpc": "2.0", "id": HANDSHAKE_ID, "method": "initialize", "params": initialize}
        try:
            self.send(json.dumps(request).encode() + b"\n")
        except OSError:
            raise GenerationError(
                f"the server exited before it answered initialize ({self.ended()})"
            ) from None
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self.pending.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                raise GenerationError("the server did not answer initialize in time") from None
            if not line:
                raise GenerationError(f"the server exited before it answered initialize ({self.ended()})")
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not JSON-RPC: a server logging to stdout; mcp-proxy would skip it too
            if not isinstance(message, dict):
                continue
            if message.get("id") == HANDSHAKE_ID and "method" not in message:
                if "result" not in message:
                    raise GenerationError(f"the server refused initialize: {line[:300]!r}")
                self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
                return
            if "method" in message and "id" in message:  # a request to the client before it is in
                refusal = {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": -32601, "message": "not now"},
                }
                self.send(json.dumps(refusal).encode() + b"\n")

    def stderr_tail(self) -> str:
        """Its last stderr lines; once it has exited, all of them (the drain may lag the exit)."""
        if self.proc.poll() is not None:
            self.drainer.join(timeout=1)
        return self.tail.text()

    def ended(self) -> str:
        """Its exit status once it is gone (its stdout closes a moment before it is reaped)."""
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        return self.exit_status()

    def exit_status(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        return f"signal {-code}" if code < 0 else f"exit code {code}"


class Switchboard:
    """mcp-proxy's stdio (through the relay's socket) joined to the current generation."""

    def __init__(self, name: str, log: Any) -> None:
        self.name, self.log = name, log
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind("\0" + name)  # abstract: nothing on the file system, gone with us
        self.listener.listen(4)
        self.proxy_pid: int | None = None  # the mcp-proxy whose child may connect
        self.conn: socket.socket | None = None
        self.current: Generation | None = None
        self.initialize: dict[str, Any] | None = None  # mcp-proxy's initialize parameters
        self.initialized = threading.Event()
        self._send = threading.Lock()  # one writer to the relay at a time
        threading.Thread(target=self._accept, name="switchboard", daemon=True).start()

    # -- mcp-proxy's side

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            peer = int.from_bytes(creds[:4], sys.byteorder)
            parent = (stat(peer) or ("", None, None))[1]
            if self.conn is not None or self.proxy_pid is None or parent != self.proxy_pid:
                self.log(f"relay socket: refused a connection from pid {peer} (not mcp-proxy's relay)")
                conn.close()
                continue
            self.conn = conn
            threading.Thread(target=self._from_proxy, args=(conn,), name="from-proxy", daemon=True).start()

    def _from_proxy(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        for line in iter(lambda: reader.readline(MAX_LINE), b""):
            if self.initialize is None:
                try:
                    message = json.loads(line)
                    if isinstance(message, dict) and message.get("method") == "initialize":
                        self.initialize = message.get("params") or {}
                        self.initialized.set()
                except ValueError:
                    pass
            generation = self.current
            if generation is None:  # between two generations: nobody is asked anything now
                self.log(f"relay: dropped a message while no server runs: {line[:200]!r}")
                continue
            try:
                generation.send(line)
            except OSError:
                pass  # it died: the supervisor sees its exit
        conn.close()

    def to_proxy(self, generation: Generation) -> None:
        """Pump a generation's stdout: to mcp-proxy once it is current, to its queue before."""
        for line in iter(lambda: generation.stdout.readline(MAX_LINE), b""):
            with self._send:
                if self.current is generation and self.conn is not None:
                    try:
                        self.conn.sendall(line)
                    except OSError:
                        pass
                    continue
            generation.pending.put(line)
        generation.pending.put(b"")  # EOF: a handshake waiting on it fails at once

    def switch(self, generation: Generation | None) -> None:
        with self._send:
            self.current = generation
            if generation is not None:  # what it wrote after its handshake (logging, say) goes on
                while True:
                    try:
                        line = generation.pending.get_nowait()
                    except queue.Empty:
                        break
                    if line and self.conn is not None:
                        try:
                            self.conn.sendall(line)
                        except OSError:
                            pass

    def close(self) -> None:
        self.listener.close()
        if self.conn is not None:
            self.conn.close()


def relay(name: str) -> None:
    """``sidecar.py --relay NAME``: mcp-proxy's stdio server, piped to the sidecar's switchboard."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect("\0" + name)

    def upstream() -> None:
        for chunk in iter(lambda: os.read(0, 65536), b""):
            conn.sendall(chunk)
        conn.shutdown(socket.SHUT_WR)

    threading.Thread(target=upstream, daemon=True).start()
    out = sys.stdout.buffer
    for chunk in iter(lambda: conn.recv(65536), b""):
        out.write(chunk)
        out.flush()
    os._exit(0)  # the sidecar closed its side: the server is gone, mcp-proxy sees EOF
