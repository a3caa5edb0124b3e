"""The tool surface of one task: the only door between an agent and the servers.

It shows the model just the task's enabled tools, answers calls outside them with
a clear "tool not available" error result, enforces the tool-call budget, the
per-call timeout and the output cap, and records every call. A call past its timeout
is an error result the model sees (``tool_timeout``), not an infrastructure failure; the
server is restarted before its next call (servers/instance.py). After a transport
failure a stateless (pooled) server is replaced and the call retried once; a
stateful one is short-circuited for the rest of the task, which is then marked
as infrastructure-affected.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from atlasrun import naming
from atlasrun.servers.calls import CallErrorKind, CallRecord
from atlasrun.servers.instance import ServerInstance, TransportError


class ToolSurface:
    def __init__(
        self,
        enabled_tools: list[str],
        instances: dict[str, ServerInstance],
        *,
        max_tool_calls: int = 100,
        tool_timeout_s: float = 60.0,
        output_cap: int = 20_000,
        reacquire: Callable[[str], Awaitable[ServerInstance]] | None = None,
    ) -> None:
        self.instances = dict(instances)
        self._reacquire = reacquire
        self._infra_servers: set[str] = set()
        self.max_tool_calls = max_tool_calls
        self.tool_timeout_s = tool_timeout_s
        self.output_cap = output_cap
        self.calls: list[CallRecord] = []
        self.infra_errors: list[str] = []
        self.started = time.perf_counter()
        self._ids = itertools.count(1)
        self._tools: dict[str, Any] = {}
        self.missing: list[str] = []  # enabled tools that no live server offers
        offered = {
            naming.qualify(name, tool.name): tool for name, inst in instances.items() for tool in inst.tools
        }
        for qualified in enabled_tools:
            if qualified in offered:
                self._tools[qualified] = offered[qualified]
            else:
                self.missing.append(qualified)

    def input_schema(self, qualified: str) -> dict[str, Any] | None:
        tool = self._tools.get(qualified)
        return dict(tool.input_schema) if tool is not None else None

    def openai_tools(self) -> list[dict[str, Any]]:
        """The surface as OpenAI/litellm function-tool definitions."""
        specs = []
        for qualified, tool in self._tools.items():
            schema = dict(tool.input_schema or {"type": "object", "properties": {}})
            schema.setdefault("type", "object")
            schema.setdefault("properties", {})
            specs.append(
                {
                    "type": "function",
                    "function": {
                        "name": qualified,
                        "description": tool.description or "",
                        "parameters": schema,
                    },
                }
            )
        return specs

    @property
    def budget_left(self) -> int:
        return self.max_tool_calls - sum(1 for c in self.calls if c.error_kind != "budget")

    async def call(self, name: str, arguments: Any, call_id: str | None = None) -> CallRecord:
        """Run one tool call; never raises for tool-level problems (they become error results)."""
        record = CallRecord(
            id=call_id or f"call_{next(self._ids)}",
            name=name,
            arguments=arguments,
            started_s=time.perf_counter() - self.started,
        )
        text, kind = self._precheck(name, arguments)
        if kind is None:
            server, tool = naming.split(name)
            began = time.perf_counter()
            text, kind = await self._invoke(server, tool, arguments)
            record.elapsed_s = time.perf_counter() - began
        if len(text) > self.output_cap:
            text = text[: self.output_cap] + f"\n[output truncated at {self.output_cap} characters]"
            record.truncated = True
        record.result, record.error_kind, record.is_error = text, kind, kind is not None
        self.calls.append(record)
        return record

    async def _invoke(
        self, server: str, tool: str, arguments: dict[str, Any]
    ) -> tuple[str, CallErrorKind | None]:
        """Call the server; a broken *stateless* server is replaced and the call retried once."""
        instance = self.instances[server]
        for attempt in (0, 1):
            failure = instance.broken
            if failure is None:
                try:
                    text, is_error = await instance.call(tool, arguments, self.tool_timeout_s)
                    return text, ("tool_error" if is_error else None)
                except TimeoutError:
                    return (
                        f"Error: tool {server}_{tool!s} timed out after {self.tool_timeout_s:g}s",
                        "tool_timeout",
                    )
                except TransportError as exc:
                    failure = str(exc)
            if attempt == 0 and not instance.spec.stateful and self._reacquire is not None:
                try:
                    instance = self.instances[server] = await self._reacquire(server)
                    continue
                except Exception as exc:
                    failure = f"{failure}; restart failed: {exc}"
            break
        if server not in self._infra_servers:
            self._infra_servers.add(server)
            self.infra_errors.append(failure or f"server {server!r} failed")
        return f"Error: server {server!r} is unavailable (transport failure)", "transport"

    def _precheck(self, name: str, arguments: Any) -> tuple[str, CallErrorKind | None]:
        if self.budget_left <= 0:
            return f"Error: tool-call budget of {self.max_tool_calls} calls is exhausted", "budget"
        if name not in self._tools:
            return (
                f"Error: tool {name!r} is not available. Available tools: {', '.join(self._tools)}",
                "not_available",
            )
        if not isinstance(arguments, dict):
            return (
                f"Error: arguments for {name!r} must be a JSON object, got {json.dumps(arguments)[:200]}",
                "invalid_arguments",
            )
        return "", None
