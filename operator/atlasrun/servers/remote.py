"""MCP-Atlas's agent-environment as the run's server backend (``spec.servers.backend: mcp-atlas-env``).

EvalScope's ``mcp_atlas`` adapter and MCP-Atlas's own harness do not start servers: they talk to a
running agent-environment (``services/agent-environment``: FastAPI, default port 1984) over
``GET /enabled-servers``, ``POST /list-tools`` (every tool, already named ``{server}_{tool}``) and
``POST /call-tool`` (``{"tool_name": ..., "tool_args": {...}}``). This backend does the same, so a
number can be reproduced exactly as MCP-Atlas's stack produces it. What the model sees is what the
harness (``agent-harness/.../sandbox-client.ts``) gives it:

- a 2xx answer: the content blocks' texts joined with "\\n" (as ``ServerInstance.call`` joins them),
  or "success" when no text block has any text;
- any other answer: the response body verbatim as a tool error (for a failed tool, FastAPI's
  ``{"detail":"Failed to call tool '<name>': ..."}``);
- no answer within the per-call timeout: a tool timeout, fed back to the model as with local
  servers (the harness too returns it to the model, "Tool call timed out after Ns").

The environment's own transport failing (connection refused or reset, a connect timeout, a
502/503/504 from a proxy in front, a 2xx body that is not a content list) raises
``TransportError``: the task is an infrastructure error, never a model failure. The environment's
state is shared by every task and every concurrent item: there is no fresh state per task.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from atlasrun.errors import InputError
from atlasrun.naming import SERVER_NAME, qualify
from atlasrun.servers.catalog import ServerSpec
from atlasrun.servers.instance import ServerInstance, ServerStartError, TransportError, as_mcp_atlas
from atlasrun.servers.mcp_sdk import Tool
from atlasrun.servers.sandbox import Sandbox

CONNECT_TIMEOUT_S = 10.0  # establishing a connection (and writing a request): longer is a failure
LIST_TIMEOUT_S = 120.0  # POST /list-tools asks every server of the environment
RELIST_AFTER_S = 5.0  # after a failed listing, the next acquire this much later asks again
GATEWAY_STATUSES = frozenset({502, 503, 504})  # a proxy in front answering for an unreachable upstream
DATA_ROOT = "/data"  # the environment's servers see its data root here; paths are passed as is
ONLINE = "OK"  # /enabled-servers status of a server whose tools the environment lists


def _failure(exc: httpx.HTTPError) -> str:
    """``ReadError: [Errno 104] Connection reset by peer``: httpx's own message is often empty, the
    cause's (the socket's error) is the one that says what happened."""
    cause: BaseException | None = exc
    for _ in range(5):  # httpx -> httpcore -> the socket's OSError
        if cause is None or str(cause):
            break
        cause = cause.__cause__ or cause.__context__
    return f"{type(exc).__name__}: {cause}" if cause is not None and str(cause) else type(exc).__name__


@dataclass(frozen=True)
class EnvironmentServers:
    """What ``GET /enabled-servers`` says: each configured server's status, or why it was not asked."""

    url: str
    statuses: dict[str, str] = field(default_factory=dict)  # server -> "OK" | "ERROR_NOT_ONLINE"
    unreachable: str | None = None  # the transport failure, when the environment did not answer

    @property
    def online(self) -> list[str]:
        """The servers whose tools the environment serves."""
        return sorted(name for name, status in self.statuses.items() if status == ONLINE)

    def why_not(self, server: str) -> str:
        """A server a task needs that is not enabled, with why, for the exclusion's reason."""
        status = self.statuses.get(server)
        if self.unreachable:  # what it serves is unknown: only spec.servers.enabled left it out
            return f"{server} (not in spec.servers.enabled)"
        if status is None:
            return f"{server} (not served by the agent-environment at {self.url})"
        if status == ONLINE:
            return f"{server} (served by the agent-environment at {self.url}; not in spec.servers.enabled)"
        return f"{server} (configured in the agent-environment at {self.url}, status {status})"


def probe_environment(url: str, where: str) -> EnvironmentServers:
    """Ask the environment at ``url`` which servers it serves (for planning, before the run).

    A transport failure is not fatal: it is returned (``unreachable``) and every item of the run then
    ends as an infrastructure error, retried by a resume. An answer that is not the environment's
    (another service at that URL) is bad input, reported at ``where``."""
    endpoint = f"{url.rstrip('/')}/enabled-servers"
    try:
        # it lists every server's tools to answer: as slow as POST /list-tools
        response = httpx.get(endpoint, timeout=httpx.Timeout(LIST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))
    except httpx.HTTPError as exc:
        return EnvironmentServers(url, unreachable=f"GET {endpoint}: {_failure(exc)}")
    if response.status_code in GATEWAY_STATUSES:
        return EnvironmentServers(url, unreachable=f"GET {endpoint}: HTTP {response.status_code}")
    try:
        response.raise_for_status()
        statuses = {str(name): str(status) for name, status in response.json()["servers"]}
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"spec.servers.url: {url} does not answer as an MCP-Atlas agent-environment: GET /enabled-servers "
            f"gave HTTP {response.status_code} {' '.join(response.text.split())[:160]!r} ({type(exc).__name__})",
            where=where,
        ) from exc
    return EnvironmentServers(url, statuses)


class RemoteServer(ServerInstance):
    """One server of the environment, as the engine and the tool surface use a server instance
    (``name``, ``tools``, ``call``, ``broken``). Nothing runs here: every call is an HTTP request on
    the backend's shared client. Stateful, so the surface never retries a call after a transport
    failure (the environment's servers are shared and may have acted on it)."""

    def __init__(
        self, name: str, tools: list[Tool], client: httpx.AsyncClient, url: str, sandbox: Sandbox
    ) -> None:
        spec = ServerSpec(
            name=name,
            transport="http",
            url=url,
            description=f"served by the MCP-Atlas agent-environment at {url}",
        )
        super().__init__(spec, Path(DATA_ROOT), DATA_ROOT, sandbox=sandbox)
        self.tools = tools
        self._client = client
        self._url = url

    async def start(self) -> ServerInstance:
        return self  # the environment runs it

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> tuple[str, bool]:
        """POST /call-tool; (text, is_error) as MCP-Atlas's harness gives them to the model.
        Raises TimeoutError (no answer in ``timeout_s``) or TransportError."""
        name = qualify(self.name, tool)
        where = f"agent-environment at {self._url} during {name!r}"
        # Waiting for a free pooled connection (pool=None) is the run's own concurrency, not a failure.
        timeout = httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S, write=CONNECT_TIMEOUT_S, pool=None)
        try:
            response = await self._client.post(
                "/call-tool", json={"tool_name": name, "tool_args": arguments}, timeout=timeout
            )
        except httpx.ReadTimeout as exc:  # the request went through: the tool is slow (the model's outcome)
            raise TimeoutError(f"{name} gave no answer within {timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"{where}: {_failure(exc)}") from exc
        if response.status_code in GATEWAY_STATUSES:
            raise TransportError(f"{where}: HTTP {response.status_code} {response.text[:200]!r}")
        if not response.is_success:
            return response.text, True
        try:
            blocks = response.json()
            parts = [_block_text(block) for block in blocks]
        except (ValueError, TypeError, AttributeError) as exc:
            raise TransportError(f"{where}: not a list of content blocks: {response.text[:200]!r}") from exc
        texts = [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]
        return as_mcp_atlas(name, texts, "\n".join(parts), False), False


def _block_text(block: dict[str, Any]) -> str:
    """A content block as ``ServerInstance.call`` renders one: its text, else ``[image content]``."""
    text = block.get("text")
    return text if isinstance(text, str) else f"[{block.get('type', 'content')} content]"


class RemoteBackend:
    """The run's servers when they are an agent-environment's: a ``ServerBackend`` (servers/manager.py).

    The tool listing is fetched once, on the first ``acquire`` that finds the environment up; each
    server the environment serves is one ``RemoteServer`` shared by every task. An environment that
    cannot be reached fails that acquire (``ServerStartError``: the item is an infrastructure error)
    and is asked again by the next one."""

    def __init__(self, url: str, sandbox: Sandbox | None = None) -> None:
        self.url = url.rstrip("/")
        self._sandbox = sandbox or Sandbox()
        self._client = httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(LIST_TIMEOUT_S))
        self._servers: dict[str, RemoteServer] | None = None
        self._listing = asyncio.Lock()
        self._failed: tuple[float, str] | None = None  # (when, why) of the last failed listing

    def preflight(self, names: list[str]) -> None:
        """Nothing runs on this machine: nothing to check."""

    async def _served(self) -> dict[str, RemoteServer]:
        async with self._listing:
            if self._servers is not None:
                return self._servers
            # Items queued behind a failed listing fail with it: an environment that does not answer
            # costs each of them no connect timeout of its own.
            if self._failed and time.monotonic() - self._failed[0] < RELIST_AFTER_S:
                raise ServerStartError(self._failed[1])
            try:
                self._servers = self._group(await self._list_tools())
            except ServerStartError as exc:
                self._failed = (time.monotonic(), str(exc))
                raise
            return self._servers

    async def _list_tools(self) -> list[dict[str, Any]]:
        where = f"the agent-environment at {self.url}"
        try:
            response = await self._client.post("/list-tools")
        except httpx.HTTPError as exc:
            raise ServerStartError(f"{where} is unreachable: POST /list-tools: {_failure(exc)}") from exc
        if not response.is_success:
            raise ServerStartError(
                f"{where}: POST /list-tools gave HTTP {response.status_code} {response.text[:300]!r}"
            )
        try:
            listed = response.json()
            if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
                raise ValueError("not a list of tools")
        except ValueError as exc:
            raise ServerStartError(f"{where}: POST /list-tools: {exc}: {response.text[:200]!r}") from exc
        return listed

    def _group(self, listed: Iterable[dict[str, Any]]) -> dict[str, RemoteServer]:
        """Tools by server (the first ``_`` splits ``{server}_{tool}``, as the environment splits it)."""
        tools: dict[str, list[Tool]] = {}
        for item in listed:
            server, sep, tool = str(item.get("name", "")).partition("_")
            if not sep or not SERVER_NAME.match(server):
                continue  # no task can name it: tool names are {server}_{tool} (atlasrun.naming)
            try:
                tools.setdefault(server, []).append(Tool.model_validate({**item, "name": tool}))
            except ValidationError as exc:
                raise ServerStartError(
                    f"agent-environment at {self.url}: tool {item.get('name')!r}: {exc}"
                ) from exc
        return {
            name: RemoteServer(name, found, self._client, self.url, self._sandbox)
            for name, found in tools.items()
        }

    async def acquire(self, names: list[str]) -> dict[str, ServerInstance]:
        """The environment's instances of ``names`` (a name it does not serve fails the acquire)."""
        served = await self._served()
        missing = [n for n in names if n not in served]
        if missing:
            raise ServerStartError(
                f"the agent-environment at {self.url} lists no tools of {', '.join(missing)} "
                f"(it serves {', '.join(sorted(served)) or 'none'})"
            )
        return {n: served[n] for n in names}

    async def reacquire(self, name: str) -> ServerInstance:
        return (await self.acquire([name]))[name]

    def release(self, instances: dict[str, ServerInstance]) -> None:
        """Nothing to stop or reset: the environment's state is shared by all tasks."""

    async def close(self) -> None:
        servers, self._servers = list((self._servers or {}).values()), None
        await asyncio.gather(*(s.stop() for s in servers))
        await self._client.aclose()
