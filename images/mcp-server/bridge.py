"""The sidecar's MCP endpoint: streamable HTTP at ``/mcp``, in front of the switchboard.

What MCP's streamable-HTTP transport asks of a server, the part a tool-calling client uses:

- ``POST /mcp`` with one JSON-RPC message. A request is answered with ``application/json`` (one
  response: the transport lets a server choose JSON over an event stream); ``initialize`` with
  the current server generation's own handshake result, everything else by that generation.
  A notification or a response is ``202 Accepted``.
- No session id is issued (the transport makes it optional), so a client opens no ``GET`` event
  stream; ``GET`` and ``DELETE`` are ``405``, as the transport allows.
- Malformed JSON is ``400`` with a JSON-RPC parse error, a batch or a non-JSON-RPC body ``400``
  with an invalid-request error, another path ``404``.

The answers are the server's own, passed through (only the id is the client's again): no
re-validation against a version of the MCP schema, so a tool's output reaches the runner as it
does from a local server. Standard library only, like the sidecar.
"""

from __future__ import annotations

import http.server
import json
import socket
import sys
import threading
import urllib.parse
from typing import Any

from control import JsonHandler, SidecarError
from generations import MAX_LINE, SERVER_ERROR, Switchboard, rpc_error

MCP_PATH = "/mcp"
PARSE_ERROR, INVALID_REQUEST = -32700, -32600


class McpHandler(JsonHandler):
    board: Switchboard  # set on the subclass made by serve_mcp
    protocol_version = "HTTP/1.1"  # keep-alive: the runner's client reuses its connection

    def do_POST(self) -> None:
        if urllib.parse.urlsplit(self.path).path != MCP_PATH:
            self._drain_body()
            self.answer(404, {"error": f"no endpoint {self.path}: MCP is at POST {MCP_PATH}"})
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self.answer(411, rpc_error(None, INVALID_REQUEST, "a POST needs a Content-Length"))
            return
        if int(length) > MAX_LINE:
            self.close_connection = True
            self.answer(413, rpc_error(None, INVALID_REQUEST, f"a message is at most {MAX_LINE} bytes"))
            return
        try:
            message = json.loads(self.rfile.read(int(length)))
        except ValueError as exc:
            self.answer(400, rpc_error(None, PARSE_ERROR, f"not JSON: {exc}"))
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            what = "a batch (not supported)" if isinstance(message, list) else "not a JSON-RPC 2.0 message"
            self.answer(400, rpc_error(None, INVALID_REQUEST, what))
            return
        if "method" not in message:
            self.answer(202, None)  # a response to a request of the server's: none is forwarded
        elif "id" not in message:
            self.board.notify(message)
            self.answer(202, None)
        elif message["method"] == "initialize":
            result = self.board.initialize_result()
            if result is None:
                self.answer(503, rpc_error(message["id"], SERVER_ERROR, "the server is stopped"))
            else:
                self.answer(200, {"jsonrpc": "2.0", "id": message["id"], "result": result})
        else:
            self.answer(200, self.board.call(message))

    def do_GET(self) -> None:
        self._not_here()

    do_DELETE = do_PUT = do_PATCH = do_GET

    def _not_here(self) -> None:
        self._drain_body()
        if urllib.parse.urlsplit(self.path).path != MCP_PATH:
            self.answer(404, {"error": f"no endpoint {self.path}: MCP is at POST {MCP_PATH}"})
        else:
            self.answer(
                405, {"error": f"{self.command} {MCP_PATH}: no event stream, use POST"}, {"Allow": "POST"}
            )

    def _drain_body(self) -> None:
        length = self.headers.get("Content-Length") or "0"
        if length.isdigit() and 0 < int(length) <= 1 << 20:
            self.rfile.read(int(length))
        elif length != "0":
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per tool call would drown the sidecar's own log


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client gone mid-answer: its loss
            super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


def serve_mcp(board: Switchboard, host: str, port: int) -> http.server.ThreadingHTTPServer:
    handler = type("BoundMcpHandler", (McpHandler,), {"board": board})
    server_class = _Server6 if ":" in host else _Server
    try:
        server = server_class((host, port), handler)
    except OSError as exc:
        raise SidecarError(
            f"ATLAS_SERVER_PORT {port}: cannot listen on {host}:{port}: {exc.strerror}"
        ) from exc
    threading.Thread(target=server.serve_forever, name="mcp-http", daemon=True).start()
    return server
