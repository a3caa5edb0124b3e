"""The diagnosis record (one line of ``diagnoses.jsonl``). Light: no provider import, so readers stay fast."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from atlasrun.diagnostics import taxonomy
from atlasrun.diagnostics.signals import Signal
from atlasrun.judge.base import JudgeInfo
from atlasrun.scoring.records import VersionedRecord

DETERMINISTIC = "deterministic"  # the offline diagnoser's name (``atlas diagnose --judge deterministic``)
Status = Literal["diagnosed", "failed"]
Key = tuple[str, str, int]


class Failure(BaseModel):
    mode: str
    root_cause: bool = False
    evidence: str = ""

    @field_validator("mode")
    @classmethod
    def _known(cls, value: str) -> str:
        taxonomy.get(value)  # ValueError names the valid ids
        return value


class Diagnosis(VersionedRecord):
    """One line of ``diagnoses.jsonl``: why (model, task, repeat) failed, and who said so."""

    RECORD = "diagnosis"

    model: str
    task_id: str
    repeat: int = 0
    coverage: float | None = None
    status: Status
    primary_mode: str | None = None  # a taxonomy id, or "unclassified" (deterministic only); None if failed
    family: taxonomy.Family | None = None
    failures: list[Failure] = Field(default_factory=list)
    confidence: float | None = None
    summary: str = ""
    signals: list[Signal] = Field(default_factory=list)
    forced: str | None = None  # set when a certain signal overrode the judge's primary mode
    judge: JudgeInfo
    error: str | None = None
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @model_validator(mode="after")
    def _consistent(self) -> Diagnosis:
        if self.status == "failed":
            self.primary_mode, self.family = None, None
            return self
        if self.primary_mode == taxonomy.UNCLASSIFIED:
            self.family = None
        elif self.primary_mode is not None:
            self.family = taxonomy.get(self.primary_mode).family
        else:
            raise ValueError("a diagnosed failure needs a primary_mode")
        return self

    @property
    def key(self) -> Key:
        return (self.model, self.task_id, self.repeat)
