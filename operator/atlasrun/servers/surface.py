"""The tool surface of one task: the only door between an agent and the servers.

It shows the model just the task's enabled tools, answers calls outside them with
a clear "tool not available" error result, enforces the tool-call budget, the
per-call timeout and the output cap, short-circuits a server after a transport
failure (marking the task as infrastructure-affected), and records every call.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from atlasrun import naming
from atlasrun.agent.transcript import CallRecord
from atlasrun.servers.instance import ServerInstance, TransportError


class ToolSurface:
    def __init__(self, enabled_tools: list[str], instances: dict[str, ServerInstance], *,
                 max_tool_calls: int = 100, tool_timeout_s: float = 60.0, output_cap: int = 20_000) -> None:
        self.instances = instances
        self.max_tool_calls = max_tool_calls
        self.tool_timeout_s = tool_timeout_s
        self.output_cap = output_cap
        self.calls: list[CallRecord] = []
        self.infra_errors: list[str] = []
        self.started = time.perf_counter()
        self._ids = itertools.count(1)
        self._tools: dict[str, Any] = {}
        self.missing: list[str] = []  # enabled tools that no live server offers
        offered = {naming.qualify(name, tool.name): tool for name, inst in instances.items() for tool in inst.tools}
        for qualified in enabled_tools:
            if qualified in offered:
                self._tools[qualified] = offered[qualified]
            else:
                self.missing.append(qualified)

    @property
    def tool_names(self) -> list[str]:
        return list(self._tools)

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
            specs.append({"type": "function", "function": {
                "name": qualified, "description": tool.description or "", "parameters": schema}})
        return specs

    @property
    def budget_left(self) -> int:
        return self.max_tool_calls - sum(1 for c in self.calls if c.error_kind != "budget")

    async def call(self, name: str, arguments: Any, call_id: str | None = None) -> CallRecord:
        """Run one tool call; never raises for tool-level problems (they become error results)."""
        record = CallRecord(id=call_id or f"call_{next(self._ids)}", name=name, arguments=arguments,
                            started_s=time.perf_counter() - self.started)
        text, kind = self._precheck(name, arguments)
        if kind is None:
            server, tool = naming.split(name)
            began = time.perf_counter()
            try:
                text, is_error = await self.instances[server].call(tool, arguments, self.tool_timeout_s)
                kind = "tool_error" if is_error else None
            except asyncio.TimeoutError:
                text, kind = f"Error: tool {name!r} timed out after {self.tool_timeout_s:g}s", "timeout"
            except TransportError as exc:
                text, kind = f"Error: server {server!r} is unavailable (transport failure)", "transport"
                self.infra_errors.append(str(exc))
            record.elapsed_s = time.perf_counter() - began
        if len(text) > self.output_cap:
            text = text[: self.output_cap] + f"\n[output truncated at {self.output_cap} characters]"
            record.truncated = True
        record.result, record.error_kind, record.is_error = text, kind, kind is not None
        self.calls.append(record)
        return record

    def _precheck(self, name: str, arguments: Any) -> tuple[str, Any]:
        if self.budget_left <= 0:
            return f"Error: tool-call budget of {self.max_tool_calls} calls is exhausted", "budget"
        if name not in self._tools:
            return (f"Error: tool {name!r} is not available. Available tools: {', '.join(self._tools)}",
                    "not_available")
        if not isinstance(arguments, dict):
            return f"Error: arguments for {name!r} must be a JSON object, got {json.dumps(arguments)[:200]}", \
                "invalid_arguments"
        server = naming.server_of(name)
        broken = self.instances[server].broken
        if broken:
            return f"Error: server {server!r} is unavailable (transport failure)", "transport"
        return "", None
