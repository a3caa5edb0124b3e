"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1.

The LLM provider is the one component that cannot be real offline. This server
lets tests and benchmarks drive the agent and judge through litellm's real HTTP
path: a *script* (a Python callable) maps each request body to a reply, which
may be an assistant message, a tool call, an HTTP error with headers (429 +
Retry-After), garbage, or no answer at all (``Reply(hang=True)``: the request is
held open until the server closes, like a provider that hangs).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the server answers: an assistant message, or an HTTP error."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: str | None = None  # sent verbatim (error bodies, garbage)
    hang: bool = False  # never answer: hold the connection until the server is closed
    prompt_tokens: int = 10
    completion_tokens: int = 5


Script = Callable[[dict[str, Any]], Reply]


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": call_id or f"call_{abs(hash((name, args))) % 10**8}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_calls else "stop"}
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        owner = self.server.owner
        with owner.lock:
            owner.requests.append(body)
        try:
            reply = owner.script(body)
        except Exception as exc:
            reply = Reply(status=500, raw_body=json.dumps({"error": {"message": f"script error: {exc!r}"}}))
        if reply.hang:
            owner.closing.wait()
            return
        payload = (
            reply.raw_body
            if reply.raw_body is not None
            else json.dumps(_completion(reply, str(body.get("model", "scripted"))))
        )
        data = payload.encode()
        self.send_response(reply.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedProvider


class ScriptedProvider:
    """``with ScriptedProvider(script) as p:`` then use ``p.api_base`` with model ``openai/<name>``."""

    def __init__(self, script: Script, port: int = 0, host: str = "127.0.0.1") -> None:
        """``host``: the address to listen on (a real node's pods reach the host at its bridge IP)."""
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.closing = threading.Event()  # releases requests held by ``Reply(hang=True)``
        self._server = _Server((host, port), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            # A short poll: ``shutdown()`` waits for the next one (0.5 s by default, per provider).
            target=self._server.serve_forever,
            args=(0.02,),
            name="scripted-provider",
            daemon=True,
        )

    @property
    def api_base(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server: (host, port)
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ScriptedProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def one_tool_call(body: dict[str, Any]) -> Reply:
    """The benchmark model: one calculator call, then an answer quoting its result."""
    results = [m for m in body.get("messages", []) if m.get("role") == "tool"]
    if not results:
        return Reply(tool_calls=[tool_call("calculator_calculate", {"expression": "2+3"}, "call_1")])
    return Reply(content=f"The result is {results[-1].get('content')}.")


def main() -> None:
    """``python -m atlasrun.testing.scripted_provider``: serve ``one_tool_call``; print the api_base."""
    import sys

    with ScriptedProvider(one_tool_call) as provider:
        print(provider.api_base, flush=True)
        sys.stdin.read()  # serve until stdin closes


if __name__ == "__main__":
    main()
