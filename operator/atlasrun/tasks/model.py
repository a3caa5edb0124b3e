"""The task: what the agent is asked, what it may use, and how it is scored.

One pydantic model for both input formats (MCP-Atlas rows and native YAML/JSON);
the loaders normalise into it. Derived facts (required servers, interaction
category) are computed from the reference trajectory, never stored twice.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from atlasrun import naming

Family = Literal["single_server", "multi_server"]
CallPattern = Literal["single_call", "parallel", "sequential"]


class RefCall(BaseModel):
    """One tool call of the reference trajectory, with the output it returned when recorded."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None
    output: str | None = None
    is_error: bool = False


class RefTurn(BaseModel):
    """One assistant turn: optional text, then the calls it made (several = parallel)."""

    model_config = ConfigDict(extra="forbid")
    text: str = ""
    calls: list[RefCall] = Field(default_factory=list)


class TaskLimits(BaseModel):
    """Per-task overrides of the run's budgets."""

    model_config = ConfigDict(extra="forbid")
    max_turns: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = Field(default=None, ge=1)
    tool_timeout_s: float | None = Field(default=None, gt=0)
    task_timeout_s: float | None = Field(default=None, gt=0)


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    prompt: str
    enabled_tools: list[str]
    claims: list[str]
    reference_trajectory: list[RefTurn] = Field(default_factory=list)
    reference_answer: str | None = None
    domain: str | None = None
    distractors: list[str] = Field(default_factory=list)
    limits: TaskLimits = Field(default_factory=TaskLimits)
    # Where the task came from, e.g. "tasks.csv row 7" (for messages).
    source: str = ""

    def reference_calls(self) -> list[RefCall]:
        return [call for turn in self.reference_trajectory for call in turn.calls]

    @property
    def required_servers(self) -> list[str]:
        """Servers the reference solution uses, in first-use order."""
        seen: dict[str, None] = {}
        for call in self.reference_calls():
            seen.setdefault(naming.server_of(call.name))
        return list(seen)

    @property
    def category(self) -> str:
        """MCP-AgentBench interaction category, e.g. ``multi_server/sequential``."""
        family: Family = "multi_server" if len(self.required_servers) > 1 else "single_server"
        turns = [t for t in self.reference_trajectory if t.calls]
        pattern: CallPattern
        if sum(len(t.calls) for t in turns) <= 1:
            pattern = "single_call"
        elif len(turns) == 1:
            pattern = "parallel"
        else:
            pattern = "sequential"
        return f"{family}/{pattern}"
