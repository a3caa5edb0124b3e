"""The sidecar's control endpoint on 127.0.0.1 (images/mcp-server/sidecar.py documents the protocol).

Standard library only, like the sidecar.
"""

from __future__ import annotations

import http.server
import json
import math
import sys
import threading
import urllib.parse
from typing import Any, NoReturn, Protocol

DEFAULT_START_TIMEOUT_S = 60.0
MAX_START_TIMEOUT_S = 3600.0


class SidecarError(Exception):
    """What went wrong, for the user: exit 2 at start-up, an error answer on the control endpoint."""


def fail(message: str) -> NoReturn:
    print(f"atlas-mcp-sidecar: {message}", file=sys.stderr)
    sys.exit(2)


def log(message: str) -> None:
    print(f"atlas-mcp-sidecar: {message}", file=sys.stderr, flush=True)


class Controlled(Protocol):
    """What the endpoint drives (sidecar.Sidecar)."""

    control: threading.Lock
    terminating: bool

    def stop(self) -> dict[str, Any]: ...
    def start(self, timeout_s: float, prestart: bool = False) -> tuple[int, dict[str, Any]]: ...
    def respawn(self, timeout_s: float, prestart: bool = False) -> tuple[int, dict[str, Any]]: ...
    def health(self) -> dict[str, Any]: ...


ROUTES = {"/stop": "POST", "/start": "POST", "/respawn": "POST", "/healthz": "GET"}
QUERY = {"/start": {"timeout", "prestart"}, "/respawn": {"timeout", "prestart"}}


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


def _flag(name: str, values: list[str]) -> bool:
    if values[-1] not in ("0", "1"):
        raise _BadRequest(f"query parameter {name} must be 0 or 1, got {values[-1]!r}")
    return values[-1] == "1"


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """Answers with a JSON body (the control endpoint's, and the MCP bridge's in bridge.py)."""

    def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD" and data:
            self.wfile.write(data)


class ControlHandler(JsonHandler):
    sidecar: Controlled  # set on the subclass made by serve_control

    def _answer(self, status: int, body: dict[str, Any], allow: str = "") -> None:
        self.answer(status, body, {"Allow": allow} if allow else None)

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
            prestart = _flag("prestart", query.get("prestart", ["0"]))
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
                    status, body = sidecar.start(timeout_s, prestart)
                else:
                    status, body = sidecar.respawn(timeout_s, prestart)
        except SidecarError as exc:
            status, body = 500, {"error": str(exc)}
        log(f"{self.command} {self.path}: {status} {json.dumps(body)[:300]}")
        self._answer(status, body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _route

    def log_message(self, format: str, *args: Any) -> None:
        pass  # _route logs what matters (control requests), not every health probe


def serve_control(sidecar: Controlled, port: int) -> http.server.ThreadingHTTPServer:
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
