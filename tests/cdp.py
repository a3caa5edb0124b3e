"""A headless Chromium driven over the Chrome DevTools Protocol, for tests that watch a page live.

``open_chromium`` starts ``/usr/bin/chromium --headless=new`` (in its own process group) on one
page, connects to that page's WebSocket (``websocket-client``, in the venv as a
dependency of ``kubernetes``) and, at exit, stops the browser's whole process tree (it forks a
zygote, renderers, utility and crashpad processes) and waits until none of it is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import websocket

CHROMIUM = Path("/usr/bin/chromium")
START_TIMEOUT_S = 30.0
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37  # prctl(2)


class CdpError(RuntimeError):
    """Chromium answered a command with an error, or a page script threw."""


class Page:
    """One page target: commands by id over its WebSocket (events in between are skipped)."""

    def __init__(self, ws: websocket.WebSocket) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    def send(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        self._ws.settimeout(timeout)
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") != ident:
                continue  # an event, or a reply to nobody
            if "error" in message:
                raise CdpError(f"{method}: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (a promise is awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise CdpError(f"{expression[:80]!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str, timeout: float = 30.0) -> None:
        """Go to ``url`` and return once its document has loaded (its scripts ran)."""
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate("document.readyState === 'complete' && location.href") == url:
                return
            time.sleep(0.05)
        raise TimeoutError(f"{url} did not load in {timeout:.0f}s")


def _debugging_port(profile: Path, proc: subprocess.Popen[bytes]) -> int:
    """The port Chromium picked (``--remote-debugging-port=0``), from the file it writes then."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CdpError(f"chromium exited with {proc.returncode} before listening")
        try:
            first = marker.read_text().split("\n", 1)[0]
        except OSError:
            first = ""
        if first.isdigit():
            return int(first)
        time.sleep(0.05)
    raise TimeoutError(f"chromium wrote no {marker} in {START_TIMEOUT_S:.0f}s")


def _page_socket_url(port: int) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            targets = json.load(response)
        pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
        if pages:
            url: str = pages[0]["webSocketDebuggerUrl"]
            return url
        time.sleep(0.05)
    raise TimeoutError("chromium listed no page target")


def _processes(where: Callable[[Path], bool]) -> list[int]:
    """The pids of the processes whose /proc entry passes ``where`` (vanished ones skipped)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):  # gone meanwhile
            if entry.name.isdigit() and where(entry):
                found.append(int(entry.name))
    return found


def _naming(root: Path) -> list[int]:
    return _processes(lambda p: str(root).encode() in (p / "cmdline").read_bytes())


@contextmanager
def _adopting_orphans() -> Iterator[None]:
    """This process as the child subreaper meanwhile: the processes Chromium orphans (its crashpad
    handlers double-fork into sessions of their own; a renderer outlives its zygote) become its
    children, so the test can wait on them rather than leave them to the machine's init."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = ctypes.c_int(0)
    if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_GET_CHILD_SUBREAPER)")
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, before.value, 0, 0, 0)


def _reap(pid: int, deadline: float) -> None:
    """Wait for ``pid``: as its parent once it is this process's (adopted), else until it is gone."""
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:  # another's child (a Chromium process reaps it), or gone
            if not Path(f"/proc/{pid}").exists():
                return
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline + 10:
                raise AssertionError(f"chromium process {pid} outlived SIGKILL by 10 s")
        time.sleep(0.02)


def _stop_tree(proc: subprocess.Popen[bytes], root: Path) -> None:
    """SIGTERM every process of the browser (its group, and the crashpad handlers outside it: all
    name ``root``), wait on the browser (SIGKILL to the group after 10 s), then on each of the
    others (SIGKILL to a straggler after 10 s)."""
    tree = set(_naming(root)) - {proc.pid}
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)  # start_new_session: the group's id is the leader's pid
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    for pid in tree:
        _reap(pid, deadline)
    assert not _naming(root), f"chromium processes left: {_naming(root)}"


@contextmanager
def open_chromium(root: Path, url: str = "about:blank") -> Iterator[Page]:
    """Headless Chromium on ``url``, its page connected; the whole process tree stopped at exit.

    ``root`` (a new folder) holds its profile and its config (crash reports too): nothing is
    written under ~/.config."""
    profile = root / "profile"
    root.mkdir(parents=True)
    with _adopting_orphans():
        yield from _browser(root, profile, url)


def _browser(root: Path, profile: Path, url: str) -> Iterator[Page]:
    proc = subprocess.Popen(
        [
            str(CHROMIUM),
            "--headless=new",
            "--no-sandbox",  # tests run as root
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            # a page in a hidden headless window must keep its timers (the view polls on one)
            "--disable-background-timer-throttling",
            "--disable-renderer-backgrounding",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: killed whole at exit
        env={**os.environ, "XDG_CONFIG_HOME": str(root / "config")},
    )
    try:
        port = _debugging_port(profile, proc)
        ws = websocket.create_connection(_page_socket_url(port), timeout=30, suppress_origin=True)
        try:
            page = Page(ws)
            page.send("Page.enable")
            yield page
        finally:
            ws.close()
    finally:
        _stop_tree(proc, root)
