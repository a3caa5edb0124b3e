"""Server generations and the switchboard that routes the bridge's calls to the current one.

Between two work items of a pod the server must be a new process (tests/test_isolation_reuse.py:
state in a server's memory or in processes it started), while the HTTP endpoint the runner talks
to stays (bridge.py). So the sidecar runs the stdio server itself, one *generation* after another:

    runner --HTTP--> bridge (sidecar) --Switchboard--> stdio of generation N

Each generation gets MCP's handshake from the sidecar when it starts (the parameters the runner's
own MCP client sends a local server, ``HANDSHAKE``), and is switched in only after it answered: a
client's ``initialize`` is answered with the current generation's own result, so from the
client's side the server never changes. A *spare* generation (``/start?prestart=1``) is started
and handshaken ahead of need while an item runs, so the next ``/start`` is a switch, not a start.

Requests get ids of the switchboard's own (clients' ids may collide) and their answers are
passed through as the server wrote them, id restored. What a server asks of its client (it
declared no capabilities, so at most ``ping``) is answered here; its notifications (logging,
progress) have no stream to go to (bridge.py answers with JSON) and are dropped.

Isolation: a generation is a child of the sidecar in a session of its own, and its stdio pipes
are the sidecar's alone (a spare is not reachable from the network). Standard library only.
"""

from __future__ import annotations

import itertools
import json
import queue
import subprocess
import threading
import time
from typing import IO, Any

from procs import StderrTail, drain

HANDSHAKE_ID = "atlas-sidecar-initialize"  # the id of the sidecar's own initialize requests
# What the runner's MCP client (mcp 2.x ClientSession, no callbacks) sends a local stdio server:
# a server behind a sidecar negotiates as it would in a local run (tests/test_sidecar_bridge.py).
HANDSHAKE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "mcp", "version": "0.1.0"},
}
MAX_LINE = 64 << 20  # one JSON-RPC message; a longer line is the server's error
SERVER_ERROR = -32000  # JSON-RPC: implementation-defined server error
METHOD_NOT_FOUND = -32601


class GenerationError(Exception):
    """A generation could not be started or did not answer its handshake."""


def rpc_error(message_id: Any, code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": text}}


class Generation:
    """One process of the stdio server: its pipes and its answer to the handshake."""

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
        self.handshake_reply: queue.Queue[dict[str, Any] | None] = queue.Queue()  # None: it ended
        self.initialize_result: dict[str, Any] | None = None
        self.closed = False  # its stdout ended (set by the switchboard's pump)
        self._write = threading.Lock()  # HTTP threads and the pump write to its stdin
        self.drainer = threading.Thread(target=drain, args=(self.proc.stderr, self.tail), daemon=True)
        self.drainer.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._write:
            self.stdin.write(data)
            self.stdin.flush()

    def handshake(self, deadline: float) -> None:
        """MCP's handshake (``HANDSHAKE``); its result is what clients' ``initialize`` gets."""
        request = {"jsonrpc": "2.0", "id": HANDSHAKE_ID, "method": "initialize", "params": HANDSHAKE}
        try:
            self.send(request)
        except OSError:
            raise GenerationError(
                f"the server exited before it answered initialize ({self.ended()})"
            ) from None
        try:
            reply = self.handshake_reply.get(timeout=max(deadline - time.monotonic(), 0.001))
        except queue.Empty:
            raise GenerationError("the server did not answer initialize in time") from None
        if reply is None:
            raise GenerationError(f"the server exited before it answered initialize ({self.ended()})")
        if not isinstance(reply.get("result"), dict):
            raise GenerationError(f"the server refused initialize: {json.dumps(reply)[:300]}")
        self.initialize_result = reply["result"]
        try:
            self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except OSError:
            raise GenerationError(f"the server exited right after initialize ({self.ended()})") from None

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


class _Call:
    """A client's request in flight: where it went, and its answer once there is one."""

    def __init__(self, client_id: Any, generation: Generation) -> None:
        self.client_id, self.generation = client_id, generation
        self.answered = threading.Event()
        self.reply: dict[str, Any] | None = None


class Switchboard:
    """The bridge's requests to the current generation, and its answers back."""

    def __init__(self) -> None:
        self.current: Generation | None = None
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def attach(self, generation: Generation) -> None:
        """Pump a new generation's stdout (before its handshake: the answer comes through here)."""
        threading.Thread(
            target=self._pump, args=(generation,), name=f"pump-{generation.number}", daemon=True
        ).start()

    def switch(self, generation: Generation | None) -> None:
        with self._lock:
            self.current = generation

    # -- the bridge's side

    def initialize_result(self) -> dict[str, Any] | None:
        current = self.current
        return None if current is None else current.initialize_result

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send a client's request to the current generation; its answer, the client's id restored."""
        client_id = request["id"]
        with self._lock:
            generation = self.current
            if generation is None:
                return rpc_error(client_id, SERVER_ERROR, "the server is stopped (between two work items)")
            if generation.closed:
                return rpc_error(
                    client_id, SERVER_ERROR, f"the server (generation {generation.number}) stopped"
                )
            own_id = next(self._ids)
            call = self._calls[own_id] = _Call(client_id, generation)
        try:
            generation.send({**request, "id": own_id})
        except OSError:
            pass  # it died: its pump ends the call
        call.answered.wait()
        with self._lock:
            self._calls.pop(own_id, None)
        assert call.reply is not None
        return call.reply

    def notify(self, notification: dict[str, Any]) -> None:
        """A client's notification; a cancellation names the request by the switchboard's id."""
        if notification.get("method") == "notifications/initialized":
            return  # each generation had its own
        params = notification.get("params")
        with self._lock:
            generation = self.current
            if notification.get("method") == "notifications/cancelled" and isinstance(params, dict):
                ours = [i for i, c in self._calls.items() if c.client_id == params.get("requestId")]
                if len(ours) != 1:
                    return  # answered already, or ambiguous between clients: the answer is dropped
                generation = self._calls[ours[0]].generation
                notification = {**notification, "params": {**params, "requestId": ours[0]}}
        if generation is not None:
            try:
                generation.send(notification)
            except OSError:
                pass

    # -- the server's side

    def _pump(self, generation: Generation) -> None:
        for line in iter(lambda: generation.stdout.readline(MAX_LINE), b""):
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not JSON-RPC: a server logging to stdout
            if isinstance(message, dict):
                self._route(generation, message)
        generation.handshake_reply.put(None)
        with self._lock:  # its calls in flight will never be answered
            generation.closed = True
            ended = [(i, c) for i, c in self._calls.items() if c.generation is generation]
        for _, call in ended:
            text = f"the server (generation {generation.number}) stopped before it answered"
            self._answer(call, rpc_error(call.client_id, SERVER_ERROR, text))

    def _route(self, generation: Generation, message: dict[str, Any]) -> None:
        message_id = message.get("id")
        if "method" in message:
            if message_id is None:
                return  # a notification: nowhere to go
            answer = (
                {"jsonrpc": "2.0", "id": message_id, "result": {}}
                if message["method"] == "ping"
                else rpc_error(message_id, METHOD_NOT_FOUND, "the client declared no such capability")
            )
            try:
                generation.send(answer)
            except OSError:
                pass
            return
        if message_id == HANDSHAKE_ID:
            generation.handshake_reply.put(message)
            return
        with self._lock:
            call = self._calls.get(message_id) if isinstance(message_id, int) else None
        if call is not None and call.generation is generation:
            self._answer(call, {**message, "id": call.client_id})

    @staticmethod
    def _answer(call: _Call, reply: dict[str, Any]) -> None:
        if not call.answered.is_set():
            call.reply = reply
            call.answered.set()
