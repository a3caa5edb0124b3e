"""A live MCP server instance and the client session to it.

Each instance is owned by a *holder task* that enters the transport and session
contexts, reports ready, and waits to be stopped. anyio requires a context to be
exited by the task that entered it; the holder makes that true whether the
instance lives for one task (fresh, stateful servers) or for the whole run
(pooled, stateless servers), and lets many instances start concurrently.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import re
import shutil
import socket
import sys
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from atlasrun.naming import qualify
from atlasrun.servers.catalog import ServerSpec
from atlasrun.servers.install import install_dir
from atlasrun.servers.limits import GUARD_INTERVAL_S, Guard, remove_cgroup
from atlasrun.servers.mcp_sdk import (
    CONNECTION_CLOSED,
    ClientSession,
    MCPError,
    PaginatedRequestParams,
    StdioServerParameters,
    Tool,
    stdio_client,
)
from atlasrun.servers.sandbox import Dirs, Launch, Sandbox, SandboxError, permitted_secrets
from atlasrun.servers.scratch import DataCopy, TaskData, new_scratch


class ServerStartError(RuntimeError):
    """The server could not be started or did not complete the MCP handshake."""


class TransportError(RuntimeError):
    """The connection to a running server failed (crash, closed pipe, HTTP failure)."""


class ServerResourceError(TransportError):
    """The server's sandbox hit one of its resource limits and was killed (servers/limits.py)."""


@dataclass(frozen=True)
class PathMap:
    """Maps the data root the model sees (e.g. ``/data``) to this instance's real directory.

    Paths are mapped wherever they start a path inside a string argument (so
    ``wc -l /data/a.csv`` works too), never inside a longer path or URL.
    """

    virtual: str
    real: str

    def _pattern(self) -> re.Pattern[str]:
        return re.compile(r"(?<![\w./:-])" + re.escape(self.virtual.rstrip("/")) + r"(?=/|\b|$)")

    def to_real(self, value: Any) -> Any:
        if isinstance(value, str):
            if self.real == self.virtual:
                return value
            return self._pattern().sub(lambda _: self.real, value)
        if isinstance(value, dict):
            return {k: self.to_real(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.to_real(v) for v in value]
        return value

    def to_virtual(self, text: str) -> str:
        return text.replace(self.real, self.virtual.rstrip("/") or "/") if self.real != self.virtual else text


def as_mcp_atlas(name: str, parts: list[str], text: str, is_error: bool) -> str:
    """A result as MCP-Atlas's stack hands it to the model: its agent-environment answers a tool
    error with HTTP 500 and FastAPI's body (fastmcp raises the error's first text block as
    ToolError; main.call_tool wraps it), which its harness passes on verbatim; an empty success
    becomes "success" (sandbox-client.ts)."""
    if is_error:
        detail = f"Failed to call tool '{name}': {parts[0] if parts else 'Unknown error'}"
        return json.dumps({"detail": detail}, ensure_ascii=False, separators=(",", ":"))
    return text if any(p.strip() for p in parts) else "success"


_SECRET_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def with_secrets(spec: ServerSpec, texts: list[str]) -> list[str]:
    """``${NAME}`` replaced by the value of the declared secret NAME the host grants the entry
    ("" when unset, as envsubst does); any other name is left as written."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        return os.environ.get(name, "") if name in granted else match.group(0)

    granted = set(permitted_secrets(spec))  # what the host lets the entry have (sandbox.py)
    return [_SECRET_REF.sub(value, text) for text in texts]


_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=4096)
_HANDED_OUT_LOCK = threading.Lock()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for servers this process starts), below the kernel's
    ephemeral range: a port the kernel hands out as free is also the next source port of any
    outgoing connection, which can take it before the server binds it. A port is not handed out
    twice in a row of 4096: two servers started at once (a pod's sidecars, threads) would
    otherwise both get a port the first has not bound yet, and one would reach the other."""
    low = _ephemeral_low()
    with _HANDED_OUT_LOCK:
        for _ in range(50):
            port = random.randrange(max(1024, low - 12000), low)
            if port in _HANDED_OUT:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _HANDED_OUT.append(port)
            return port
    with socket.socket() as sock:  # a crowded low range: the kernel's pick, race and all
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


class ServerInstance:
    """One running server. ``start()`` returns once the MCP handshake completed.

    A call that times out leaves the server busy or stuck: the instance is restarted in
    place (same scratch and data directory, so a task's files survive) before its next
    call, whoever makes it.
    """

    def __init__(
        self,
        spec: ServerSpec,
        data_dir: Path,
        data_mount: str,
        start_timeout_s: float = 60.0,
        stderr_dir: Path | None = None,
        sandbox: Sandbox | None = None,
        task_data: TaskData | None = None,
    ) -> None:
        self.spec = spec
        self._task_data = task_data  # the task's shared data copy (data_scope: task), held while up
        if task_data is not None:
            task_data.hold()
        self.name = spec.name
        self._source_data = data_dir
        self._data_mount = data_mount
        self._start_timeout_s = start_timeout_s
        self._stderr_dir = stderr_dir
        self._sandbox = sandbox or Sandbox()
        self._scratch = new_scratch(spec.name)
        self._data: Path | None = None  # prepared once, kept across restarts
        self._copy: DataCopy | None = None  # the private data copy (isolate_data)
        self.tools: list[Tool] = []
        self.path_map = PathMap(data_mount, str(data_dir))
        self.startup_s = 0.0
        self.pid: int | None = None
        self._session: ClientSession | None = None
        self._ready: asyncio.Future[None] | None = None
        self._stop = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None
        self._broken: str | None = None
        self._generation = 0  # bumped per launch: failures of an old session do not mark the new one
        self._stale: str | None = None  # why a restart is due before the next call
        self._restart_lock = asyncio.Lock()
        self.exhausted: str | None = None  # the resource limit its sandbox hit (then it was killed)

    @property
    def broken(self) -> str | None:
        """Why the instance is unusable; None while up or while a due restart is pending."""
        return self.exhausted or (None if self._stale else self._broken)

    def _failure(self, message: str) -> TransportError:
        """The error of a failed call: ``ServerResourceError`` once the sandbox hit a limit."""
        if self.exhausted:
            return ServerResourceError(
                self.exhausted if message == self.exhausted else f"{self.exhausted} ({message})"
            )
        return TransportError(message)

    async def start(self) -> ServerInstance:
        started = time.perf_counter()
        try:
            self._sandbox.check(self.spec)
            await self._launch()
        except SandboxError as exc:
            await self.stop()
            raise ServerStartError(str(exc)) from exc
        except BaseException:
            await self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    async def _launch(self) -> None:
        self._generation += 1
        self._broken = None
        self._stop = asyncio.Event()
        self._ready = asyncio.get_running_loop().create_future()
        self._holder = asyncio.create_task(self._hold(), name=f"server:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self._start_timeout_s)
        except TimeoutError as exc:
            raise ServerStartError(
                f"server {self.name!r} did not start within {self._start_timeout_s:.0f}s"
            ) from exc

    async def _restart(self) -> None:
        async with self._restart_lock:
            if self._stale is None:
                return  # another caller restarted it while this one waited
            try:
                await self._halt()
                await self._launch()
            except Exception as exc:
                await self._halt()
                self._broken = f"server {self.name!r} could not be restarted after {self._stale}: {exc}"
                raise TransportError(self._broken) from exc
            finally:
                self._stale = None

    def _prepare_data(self) -> Path:
        if self._task_data is not None:
            return self._task_data.path
        if not self.spec.isolate_data:
            return self._source_data
        shared = self.spec.shared_data if self._mounted else []
        self._copy = DataCopy(self._source_data, self._scratch / "data", self._scratch / _CLOCK, shared)
        self._copy.create()
        return self._copy.target

    @property
    def _mounted(self) -> bool:
        """The data root is mounted where the model sees it (``mount_data``, sandboxed)."""
        return self.spec.mount_data and self._sandbox.unavailable is None

    def _inner_data(self, data_dir: Path) -> Path:
        """The data root's path as the server sees it."""
        return Path(self._data_mount) if self._mounted else data_dir

    @property
    def reusable(self) -> bool:
        """Up, not due a restart, and on a private data copy (may serve another task after refresh)."""
        return (
            self._session is not None
            and self._stale is None
            and self._broken is None
            and self.exhausted is None
            and self._copy is not None
        )

    @property
    def data_copied(self) -> int:
        """Entries copied from the source data into this instance's private copy so far."""
        return self._copy.copied if self._copy is not None else 0

    async def refresh_data(self) -> list[str]:
        """Make the private data copy equal a fresh copy again (for the next task).

        Only what the task changed is copied again (``DataCopy.refresh``); the directory itself
        stays (the sandbox binds it and the server holds its path). Scratch files other than the
        data copy and the stderr log are removed too. Returns the paths copied from the source.
        """
        return await asyncio.to_thread(self._refill)

    def _refill(self) -> list[str]:
        assert self._copy is not None
        _empty(self._scratch, keep=(self._copy.target.name, _CLOCK, f"{self.name}.stderr.log"))
        return self._copy.refresh()

    def _rendered(self, data_dir: Path) -> ServerSpec:
        values = {"data_dir": str(data_dir), "scratch_dir": str(self._scratch), "port": str(free_port())}
        if self.spec.package is not None:
            values["install_dir"] = str(install_dir(self.spec))
        return self.spec.render(values)

    def _launch_for(self, spec: ServerSpec, data_dir: Path) -> Launch:
        assert spec.command
        install = install_dir(spec) if spec.package is not None else None
        mount = self._inner_data(data_dir) if self._mounted else None
        shared = tuple(
            (self._source_data / rel, Path(self._data_mount) / rel)
            for rel in (spec.shared_data if mount else [])
            if (self._source_data / rel).exists()
        )
        writable = spec.isolate_data or self._task_data is not None
        dirs = Dirs(self._scratch, data_dir, writable, install=install, mount=mount, shared=shared)
        args, env = (
            with_secrets(spec, spec.args),
            {k: with_secrets(spec, [v])[0] for k, v in spec.env.items()},
        )
        return self._sandbox.confine(spec, Launch(spec.command, args, env, spec.cwd), dirs)

    async def _hold(self) -> None:
        assert self._ready is not None
        guard: Guard | None = None
        try:
            async with AsyncExitStack() as stack:
                if self._data is None:
                    self._data = await asyncio.to_thread(self._prepare_data)
                self.path_map = PathMap(self._data_mount, str(self._inner_data(self._data)))
                spec = self._rendered(self._inner_data(self._data))
                errlog = stack.enter_context(self._errlog())
                if spec.transport == "stdio":
                    launch = self._launch_for(spec, self._data)
                    guard = launch.guard
                    params = StdioServerParameters(
                        command=launch.command, args=launch.args, env=launch.env, cwd=launch.cwd
                    )
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                else:
                    assert spec.url
                    # Imported by the first HTTP server only (mcp_sdk, imported above, came first).
                    from mcp.client.streamable_http import streamable_http_client

                    if spec.command:
                        launch = self._launch_for(spec, self._data)
                        guard = launch.guard
                        await self._spawn_http(stack, launch, spec.url, errlog)
                    read, write = await stack.enter_async_context(streamable_http_client(spec.url))
                session = await stack.enter_async_context(ClientSession(read, write))
                if guard is not None:
                    guard.attach()
                    watch = asyncio.create_task(self._watch(guard), name=f"guard:{self.name}")
                    stack.callback(watch.cancel)
                await session.initialize()
                self.tools = await self._list_all_tools(session)
                await self._start_calls(session)
                self._session = session
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(ServerStartError(f"server {self.name!r} failed to start: {exc!r}"))
            else:
                self._broken = self._broken or f"server {self.name!r} connection ended: {exc!r}"
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._session = None
            self._broken = self._broken or f"server {self.name!r} stopped"
            if guard is not None and guard.cgroup is not None:
                await asyncio.to_thread(remove_cgroup, guard.cgroup)

    async def _watch(self, guard: Guard) -> None:
        """Poll the sandbox's resources; the first limit hit kills the whole sandbox."""
        while (reason := guard.exceeded()) is None:
            await asyncio.sleep(GUARD_INTERVAL_S)
        self.exhausted = f"server {self.name!r} hit its {reason} and was stopped"
        guard.kill()

    def _errlog(self) -> Any:
        directory = self._stderr_dir or self._scratch
        return open(directory / f"{self.name}.stderr.log", "a", encoding="utf-8")

    async def _spawn_http(self, stack: AsyncExitStack, launch: Launch, endpoint: str, errlog: Any) -> None:
        """Start a local HTTP server process and wait until its port accepts connections."""
        proc = await asyncio.create_subprocess_exec(
            launch.command,
            *launch.args,
            env=launch.env,
            cwd=launch.cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=errlog,
            stderr=errlog,
            start_new_session=True,
        )
        self.pid = proc.pid

        async def _terminate() -> None:
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 5)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()

        stack.push_async_callback(_terminate)
        url = urlsplit(endpoint)
        port = url.port or (443 if url.scheme == "https" else 80)
        while True:
            if proc.returncode is not None:
                raise ServerStartError(
                    f"server {self.name!r} exited with code {proc.returncode} before listening"
                )
            try:
                _, writer = await asyncio.open_connection(url.hostname, port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.02)

    async def _start_calls(self, session: ClientSession) -> None:
        """The entry's ``start_calls``, in order; a failed one fails the start."""
        for call in self.spec.start_calls:
            tool, arguments = str(call.get("tool")), call.get("arguments")
            arguments = self.path_map.to_real(arguments if isinstance(arguments, dict) else {})
            result = await session.call_tool(tool, arguments)
            if getattr(result, "is_error", False):
                content = getattr(result, "content", None) or []
                text = " ".join(str(getattr(b, "text", "")) for b in content)
                raise ServerStartError(f"server {self.name!r}: start call {tool!r} failed: {text[:300]}")

    @staticmethod
    async def _list_all_tools(session: ClientSession) -> list[Tool]:
        tools: list[Tool] = []
        result = await session.list_tools()
        tools.extend(result.tools)
        while result.next_cursor:
            result = await session.list_tools(params=PaginatedRequestParams(cursor=result.next_cursor))
            tools.extend(result.tools)
        return tools

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> tuple[str, bool]:
        """Call ``tool``; returns (text, is_error). Raises TransportError or TimeoutError."""
        if self._stale:
            await self._restart()
        if self.broken or self._session is None:
            raise self._failure(self.broken or f"server {self.name!r} is not running")
        session, generation = self._session, self._generation
        if self.spec.results == "mcp-atlas" and (invalid := self._invalid(tool, arguments)):
            return as_mcp_atlas(qualify(self.name, tool), [invalid], invalid, True), True
        try:
            result = await asyncio.wait_for(
                session.call_tool(tool, self.path_map.to_real(arguments)), timeout_s
            )
        except TimeoutError as exc:
            # Checked before OSError (its base class): a slow tool is the model's outcome, not a
            # transport failure. The server may still be busy with it: replace it before next use.
            if self.exhausted:  # unless its sandbox was killed at a limit meanwhile
                raise self._failure(self.exhausted) from exc
            if generation == self._generation:
                self._stale = f"{tool!r} timed out after {timeout_s:g}s"
            raise
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise self._failure(
                    self._mark_broken(generation, f"server {self.name!r} connection closed during {tool!r}")
                ) from exc
            if self.spec.results == "mcp-atlas":
                return as_mcp_atlas(qualify(self.name, tool), [exc.message], exc.message, True), True
            return f"MCP error {exc.code}: {exc.message}", True
        except _transport_errors() as exc:
            message = f"server {self.name!r} transport failed during {tool!r}: {exc!r}"
            raise self._failure(self._mark_broken(generation, message)) from exc
        content = getattr(result, "content", None) or []
        parts = []
        for block in content:
            text = getattr(block, "text", None)
            parts.append(text if text is not None else f"[{getattr(block, 'type', 'content')} content]")
        text, is_error = self.path_map.to_virtual("\n".join(parts)), bool(getattr(result, "is_error", False))
        if self.spec.results == "mcp-atlas":
            return as_mcp_atlas(qualify(self.name, tool), parts, text, is_error), is_error
        return text, is_error

    def _invalid(self, tool: str, arguments: dict[str, Any]) -> str | None:
        """MCP-Atlas's stack checks arguments against the tool's input schema before calling it
        (its fastmcp proxy's low-level server: ``jsonschema.validate``); the same message here."""
        import jsonschema

        schema = next((t.input_schema for t in self.tools if t.name == tool), None)
        if not isinstance(schema, dict):
            return None
        try:
            jsonschema.validate(instance=arguments, schema=schema)
        except jsonschema.ValidationError as exc:
            return f"Input validation error: {exc.message}"
        except jsonschema.SchemaError:
            return None
        return None

    def _mark_broken(self, generation: int, message: str) -> str:
        """Record a failure of the session of ``generation`` (ignored once it was replaced)."""
        if generation == self._generation:
            self._broken = message
        return message

    async def _halt(self) -> None:
        self._stop.set()
        if self._holder is not None:
            try:
                await self._holder
            except BaseException:
                pass
            self._holder = None

    async def stop(self) -> None:
        await self._halt()
        await asyncio.to_thread(shutil.rmtree, self._scratch, True)
        if self._task_data is not None:
            task_data, self._task_data = self._task_data, None
            await asyncio.to_thread(task_data.release)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a failed connection raises: OS and pipe errors, closed streams, and the errors of
    the HTTP clients an HTTP transport uses (looked up only if imported: no HTTP server, no
    HTTP client in the process)."""
    errors: tuple[type[BaseException], ...] = (
        OSError,
        EOFError,
        anyio.ClosedResourceError,
        anyio.BrokenResourceError,
    )
    for client in ("httpx", "httpx2"):  # the SDK's streamable-HTTP transport uses httpx2
        module = sys.modules.get(client)
        error = getattr(module, "HTTPError", None)
        if isinstance(error, type) and issubclass(error, Exception):
            errors += (error,)
    return errors


_CLOCK = ".clock"  # a file in the scratch directory whose times read the filesystem's clock


def _empty(directory: Path, keep: tuple[str, ...] = ()) -> None:
    for entry in directory.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
