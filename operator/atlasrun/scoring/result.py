"""The per-task result record (one line of results.jsonl; with the transcript, one task JSON)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from atlasrun.agent.transcript import Transcript
from atlasrun.judge.base import ClaimVerdict, JudgeInfo
from atlasrun.scoring.claims import Judgement
from atlasrun.tasks.model import Task

Status = Literal["scored", "excluded", "error"]


class TaskResult(BaseModel):
    task_id: str
    model: str
    repeat: int = 0
    status: Status
    reason: str | None = None
    coverage: float | None = None
    passed: bool | None = None
    passed_at: dict[str, bool] = Field(default_factory=dict)
    claims: list[ClaimVerdict] = Field(default_factory=list)
    judge: JudgeInfo | None = None
    # Verdicts of the run's other judges (cross-judge ranges, agreement); the primary decides status.
    secondary: list[Judgement] = Field(default_factory=list)
    tool_calls: int = 0
    tool_errors: int = 0
    turns: int = 0
    stop_reason: str | None = None
    wall_s: float = 0.0
    model_s: float = 0.0
    tool_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    domain: str | None = None
    category: str | None = None
    servers: list[str] = Field(default_factory=list)
    infra_errors: list[str] = Field(default_factory=list)
    # Only in the per-task JSON file, not in results.jsonl: the task as run, and what the agent did.
    task: Task | None = None
    transcript: Transcript | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.model, self.task_id, self.repeat)
