"""The native tool-calling agent, for any provider litellm speaks to.

Loop: ask the model (with the task's tools), run the tool calls it makes through
the surface, feed results (errors included) back as tool messages, until it
answers without calling a tool or a budget runs out. The final answer is the
last assistant message with text.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from atlasrun.agent.transcript import ModelCallRecord, Transcript
from atlasrun.provider import Endpoint, ProviderError, complete
from atlasrun.runspec.run import Limits
from atlasrun.servers.surface import ToolSurface
from atlasrun.tasks.model import Task

PROVIDER_NOTE = "provider failed:"
PROVIDER_TIMEOUT_NOTE = "provider timed out:"


class LiteLLMAgent:
    def __init__(self, name: str, endpoint: Endpoint, system_prompt: str | None = None) -> None:
        self.name = name
        self.endpoint = endpoint
        self.system_prompt = system_prompt

    async def run(self, task: Task, surface: ToolSurface, limits: Limits) -> Transcript:
        started = time.perf_counter()
        transcript = Transcript(agent="litellm", model=self.endpoint.model)
        if self.system_prompt:
            transcript.messages.append({"role": "system", "content": self.system_prompt})
        transcript.messages.append({"role": "user", "content": task.prompt})
        waiting = [False]  # set while a provider call is in flight
        try:
            async with asyncio.timeout(limits.task_timeout_s):
                await self._loop(transcript, surface, limits, started, waiting)
        except TimeoutError:
            if waiting[0]:
                # The budget ran out inside a provider call: the provider hung, not the model failed.
                transcript.stop_reason = "provider_timeout"
                transcript.notes.append(
                    f"{PROVIDER_TIMEOUT_NOTE} no response within the task timeout ({limits.task_timeout_s:g} s)"
                )
            else:
                transcript.stop_reason = "task_timeout"
        transcript.calls = list(surface.calls)
        transcript.infra_errors = list(surface.infra_errors)
        transcript.final_answer = last_text(transcript.messages)
        transcript.wall_s = time.perf_counter() - started
        return transcript

    async def _loop(
        self,
        transcript: Transcript,
        surface: ToolSurface,
        limits: Limits,
        started: float,
        waiting: list[bool],
    ) -> None:
        tools = surface.openai_tools()
        for _ in range(limits.max_turns):
            record = ModelCallRecord(started_s=time.perf_counter() - started)
            transcript.model_calls.append(record)
            waiting[0] = True
            try:
                completion = await complete(
                    self.endpoint,
                    transcript.messages,
                    retries=limits.provider_retries,
                    backoff_base_s=limits.retry_backoff_s,
                    timeout_s=limits.provider_timeout_s,
                    **({"tools": tools} if tools else {}),
                )
            except ProviderError as exc:
                waiting[0] = False
                record.error, record.retries, record.error_kind = str(exc), exc.retries, exc.kind
                record.rate_limited = exc.rate_limited
                transcript.stop_reason = "provider_timeout" if exc.timed_out else "provider_error"
                transcript.notes.append(f"{PROVIDER_TIMEOUT_NOTE if exc.timed_out else PROVIDER_NOTE} {exc}")
                return
            waiting[0] = False  # (left set when the task's timeout cancels the call)
            record.elapsed_s, record.retries = completion.elapsed_s, completion.retries
            record.rate_limited = completion.rate_limited
            record.prompt_tokens, record.completion_tokens = (
                completion.prompt_tokens,
                completion.completion_tokens,
            )
            record.cost_usd, record.priced = completion.cost_usd, completion.priced
            transcript.turns += 1
            message = _assistant_message(completion.message)
            transcript.messages.append(message)
            tool_calls = message.get("tool_calls") or []
            if not tool_calls:
                transcript.stop_reason = "answered"
                return
            records = await asyncio.gather(
                *(
                    surface.call(
                        tc["function"]["name"], parse_arguments(tc["function"].get("arguments")), tc["id"]
                    )
                    for tc in tool_calls
                )
            )
            transcript.messages.extend(
                {"role": "tool", "tool_call_id": r.id, "content": r.result} for r in records
            )
            if surface.infra_errors:
                transcript.stop_reason = "infra_error"
                return
            if surface.budget_left <= 0:
                transcript.stop_reason = "max_tool_calls"
                return
        transcript.stop_reason = "max_turns"


def _assistant_message(raw: dict[str, Any]) -> dict[str, Any]:
    """Keep only what goes back to the provider: role, content, tool_calls (with ids)."""
    message: dict[str, Any] = {"role": "assistant", "content": raw.get("content")}
    calls = []
    for i, tc in enumerate(raw.get("tool_calls") or []):
        fn = tc.get("function") or {}
        calls.append(
            {
                "id": tc.get("id") or f"call_{i}",
                "type": "function",
                "function": {"name": fn.get("name") or "", "arguments": fn.get("arguments") or "{}"},
            }
        )
    if calls:
        message["tool_calls"] = calls
    return message


def parse_arguments(raw: Any) -> Any:
    """JSON arguments -> object; anything unparseable is passed on as-is (the surface rejects it)."""
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


def last_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, str) and content.strip():
            return content.strip()
    return ""
