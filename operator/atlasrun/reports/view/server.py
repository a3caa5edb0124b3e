"""The HTTP side of ``atlas view``: a standard-library server on 127.0.0.1 with a fixed set of routes.

  /                 the runs: live cards (progress, pass rate with interval, errors by kind, cost)
  /api/runs         their status as JSON (what that page polls)
  /run/ID           one run: its card and the report's task drill-down
  /api/run/ID       its status as JSON
  /run/ID/tasks     the drill-down alone (the fragment the run page re-fetches)
  /run/ID/report    the full report, rendered in memory

Anything else is a 404. No part of a URL ever becomes a file path: a run is looked up by the id
``status.discover`` gave it. Requests naming another host are refused (a web page elsewhere cannot
reach this server by rebinding a name to 127.0.0.1), and every page carries a Content-Security-Policy
that runs only the page's own script.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from atlasrun.errors import AtlasError, InputError
from atlasrun.redact import scrub
from atlasrun.reports.data import ReportData, build_data
from atlasrun.reports.view.pages import (
    index_page,
    problem_fragment,
    report_page,
    run_page,
    runs_json,
    tasks_fragment,
)
from atlasrun.reports.view.status import RunStatus, change_key, discover, read_status

HOST = "127.0.0.1"
HTML, JSON, TEXT = "text/html; charset=utf-8", "application/json", "text/plain; charset=utf-8"
RUN_ROUTE = re.compile(r"/(api/)?run/([A-Za-z0-9._-]+)(/tasks|/report)?")
NOT_FOUND = "not found: atlas view serves only its own pages (/ and /run/ID)"
CSP = (
    "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

log = logging.getLogger("atlasrun.view")
T = TypeVar("T")


class LiveView:
    """The watched folders, and what was last read of each run (read again only when it changed)."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = list(roots)
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[tuple[Any, ...], Any]] = {}

    def runs(self) -> dict[str, Path]:
        return discover(self.roots)

    def _cached(self, kind: str, run_dir: Path, build: Callable[[Path], T]) -> T:
        key = (kind, str(run_dir))
        changed = change_key(run_dir)  # taken before reading: a change during the read shows next time
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] == changed:
            value: T = hit[1]
            return value
        value = build(run_dir)
        with self._lock:
            self._cache[key] = (changed, value)
        return value

    def status(self, run_dir: Path) -> RunStatus:
        return self._cached("status", run_dir, read_status)

    def report_data(self, run_dir: Path) -> ReportData:
        """The report's numbers and rows (``AtlasError`` when the directory cannot be read)."""
        return self._cached("report", run_dir, build_data)

    def statuses(self) -> list[RunStatus]:
        return [self.status(run_dir) for run_dir in self.runs().values()]


class ViewServer(ThreadingHTTPServer):
    daemon_threads = True  # a slow reader never delays Ctrl-C

    def __init__(self, port: int, view: LiveView) -> None:
        self.view = view
        super().__init__((HOST, port), ViewHandler)
        self.port = int(self.server_address[1])
        self.url = f"http://{HOST}:{self.port}/"
        self.hosts = {f"{HOST}:{self.port}", f"localhost:{self.port}"}

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)


class ViewHandler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "atlas-view"
    sys_version = ""

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def _answer(self, head: bool) -> None:
        if self.headers.get("Host", "") not in self.server.hosts:
            self._send(HTTPStatus.FORBIDDEN, TEXT, f"atlas view answers only at {self.server.url}", head)
            return
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        nonce = secrets.token_urlsafe(16)
        try:
            code, kind, body = self._route(path, nonce)
        except Exception as exc:  # a bug must not end the server; the reader gets a 500
            log.exception("GET %s failed", path)
            code, kind, body = HTTPStatus.INTERNAL_SERVER_ERROR, TEXT, f"internal error: {type(exc).__name__}"
        self._send(code, kind, body, head, nonce)

    def _route(self, path: str, nonce: str) -> tuple[HTTPStatus, str, str]:
        view = self.server.view
        if path == "/":
            return HTTPStatus.OK, HTML, index_page(view.statuses(), view.roots, nonce)
        if path == "/api/runs":
            return HTTPStatus.OK, JSON, json.dumps(runs_json(view.statuses()), ensure_ascii=False)
        match = RUN_ROUTE.fullmatch(path)
        run_dir = view.runs().get(match.group(2)) if match else None
        if match is None or run_dir is None or (match.group(1) and match.group(3)):
            return HTTPStatus.NOT_FOUND, TEXT, NOT_FOUND
        api, part = match.group(1), match.group(3)
        if api:
            return HTTPStatus.OK, JSON, json.dumps(runs_json([view.status(run_dir)]), ensure_ascii=False)
        try:
            data = view.report_data(run_dir)
        except AtlasError as exc:
            if part == "/report":
                return HTTPStatus.OK, HTML, problem_fragment(str(exc))
            tasks = problem_fragment(str(exc))
        else:
            if part == "/report":
                return HTTPStatus.OK, HTML, report_page(data, nonce)
            tasks = tasks_fragment(data)
        if part == "/tasks":
            return HTTPStatus.OK, HTML, tasks
        return HTTPStatus.OK, HTML, run_page(view.status(run_dir), tasks, nonce)

    def _send(self, code: HTTPStatus, kind: str, body: str, head: bool, nonce: str = "") -> None:
        data = scrub(body).encode("utf-8")  # what AtlasRun writes is masked; so is what it serves
        try:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            if kind == HTML:
                self.send_header("Content-Security-Policy", CSP.format(nonce=nonce or "none"))
            self.end_headers()
            if not head:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the reader left
            pass


def make_server(roots: Sequence[Path], port: int) -> ViewServer:
    """A server for ``roots`` on 127.0.0.1:``port`` (0: a free port), not yet serving."""
    if not 0 <= port <= 65535:
        raise InputError(
            f"{port} is not a port: give 1-65535, or leave it out for a free one", where="--port"
        )
    try:
        return ViewServer(port, LiveView(roots))
    except OSError as exc:
        raise InputError(
            f"cannot listen on {HOST}:{port}: {exc.strerror or exc}; pick another --port or leave it out "
            "(a free port)",
            where="--port",
        ) from exc
