"""The transcript: everything an agent did on one task (persisted in every result)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from atlasrun.errors import ErrorKind
from atlasrun.servers.calls import CallErrorKind as CallErrorKind  # re-exported: part of the transcript
from atlasrun.servers.calls import CallRecord as CallRecord

StopReason = Literal[
    "answered",  # the model gave a final answer
    "max_turns",
    "max_tool_calls",
    "task_timeout",
    "provider_error",  # provider kept failing after retries
    "provider_timeout",  # provider did not answer in time (per call after retries, or the task's budget)
    "infra_error",  # a server failed at transport level
    "replayed",  # replay agent finished the reference trajectory
]


class ModelCallRecord(BaseModel):
    started_s: float = 0.0
    elapsed_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    priced: bool = True  # False: no known price for the model (its cost is unknown, not 0)
    retries: int = 0
    rate_limited: int = 0  # attempts answered with HTTP 429 (rate limited), retried or not
    error: str | None = None
    error_kind: ErrorKind | None = None  # set with ``error``: provider, provider_auth, ...


class Transcript(BaseModel):
    agent: str
    model: str
    messages: list[dict[str, Any]] = Field(default_factory=list)
    calls: list[CallRecord] = Field(default_factory=list)
    model_calls: list[ModelCallRecord] = Field(default_factory=list)
    final_answer: str = ""
    stop_reason: StopReason = "answered"
    turns: int = 0
    wall_s: float = 0.0
    infra_errors: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    # The tool surface the agent was shown (OpenAI function specs with input schemas).
    tools: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        return sum(m.prompt_tokens for m in self.model_calls)

    @property
    def completion_tokens(self) -> int:
        return sum(m.completion_tokens for m in self.model_calls)

    @property
    def cost_usd(self) -> float:
        return sum(m.cost_usd for m in self.model_calls)

    @property
    def cost_known(self) -> bool:
        return all(m.priced for m in self.model_calls)

    @property
    def provider_error_kind(self) -> ErrorKind:
        """The kind of the provider failure that stopped the agent (``provider`` if untyped)."""
        kinds = [m.error_kind for m in self.model_calls if m.error_kind]
        return kinds[-1] if kinds else ErrorKind.PROVIDER

    @property
    def model_s(self) -> float:
        return sum(m.elapsed_s for m in self.model_calls)

    @property
    def tool_s(self) -> float:
        return sum(c.elapsed_s for c in self.calls)
