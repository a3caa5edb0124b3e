"""The per-task result record (one line of results.jsonl; with the transcript, one task JSON)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, model_validator

from atlasrun.agent.transcript import Transcript
from atlasrun.errors import ErrorKind as ErrorKind
from atlasrun.judge.base import ClaimVerdict, JudgeInfo
from atlasrun.scoring.claims import Judgement
from atlasrun.scoring.records import VersionedRecord
from atlasrun.tasks.model import Task

Status = Literal["scored", "excluded", "error"]
# Strict: a results line is read back from a file anyone can edit, so "yes" is not a bool, "0.5"
# not a coverage, and counts and times are never negative (a strict float still takes an int).
Coverage = Annotated[float, Field(strict=True, ge=0.0, le=1.0)]
Count = Annotated[int, Field(strict=True, ge=0)]
Amount = Annotated[float, Field(strict=True, ge=0.0, allow_inf_nan=False)]
Id = Annotated[str, Field(strict=True, min_length=1)]
MAX_REPEATS = 100_000  # far above any run; a larger repeat index is a damaged line


# Version 1 records had only ``reason``; these prefixes were how kinds were told apart then.
# Used by ``TaskResult.upgrade_v1`` alone: new records carry ``error_kind``.
_V1_REASON_PREFIXES = (
    ("provider:", ErrorKind.PROVIDER),
    ("infra:", ErrorKind.SERVER_TRANSPORT),
    ("judge failed", ErrorKind.JUDGE),
    ("not yet judged", ErrorKind.UNJUDGED),
    ("storage:", ErrorKind.STORAGE),
    ("input:", ErrorKind.INPUT),
    ("rescore:", ErrorKind.INPUT),
    ("needs server(s) not enabled", ErrorKind.SERVER_NOT_ENABLED),
    ("server drift:", ErrorKind.SERVER_DRIFT),
    ("job failed:", ErrorKind.JOB_FAILED),
    ("harness error:", ErrorKind.HARNESS),
)


class TaskResult(VersionedRecord):
    RECORD = "task result"
    task_id: Id
    model: Id
    repeat: Annotated[int, Field(strict=True, ge=0, lt=MAX_REPEATS)] = 0
    status: Status
    error_kind: ErrorKind | None = None  # set exactly when status is "error" or "excluded"
    # Set only on a scored result that, under spec.scoring.judgeFailure: zero, was scored despite
    # what would otherwise have made it an error of this kind (judge): its claims with both a
    # label and an error are the ones scored 0 (scoring.claims.is_zeroed).
    zeroed_error_kind: ErrorKind | None = None
    reason: str | None = None
    coverage: Coverage | None = None
    passed: StrictBool | None = None
    passed_at: dict[str, StrictBool] = Field(default_factory=dict)
    claims: list[ClaimVerdict] = Field(default_factory=list)
    judge: JudgeInfo | None = None
    # Verdicts of the run's other judges (cross-judge ranges, agreement); the primary decides status.
    secondary: list[Judgement] = Field(default_factory=list)
    tool_calls: Count = 0
    tool_errors: Count = 0
    turns: Count = 0
    stop_reason: str | None = None
    wall_s: Amount = 0.0
    model_s: Amount = 0.0
    tool_s: Amount = 0.0
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    cost_usd: Amount = 0.0
    cost_known: StrictBool = True  # False: some model call had no known price (cost_usd undercounts)
    domain: str | None = None
    category: str | None = None
    servers: list[str] = Field(default_factory=list)
    infra_errors: list[str] = Field(default_factory=list)
    # Only in the per-task JSON file, not in results.jsonl: the task as run, and what the agent did.
    task: Task | None = None
    transcript: Transcript | None = None

    @model_validator(mode="after")
    def _kind_matches_status(self) -> TaskResult:
        if (self.status == "scored") != (self.error_kind is None):
            raise ValueError(
                f"a {self.status} result {'has no' if self.status == 'scored' else 'needs an'} error_kind"
            )
        if self.status == "scored" and (self.coverage is None or self.passed is None):
            raise ValueError("a scored result needs its coverage and passed")
        return self

    def as_error(self, kind: ErrorKind, reason: str) -> TaskResult:
        """This result as an error of ``kind``: what it spent and did is kept, no verdict claimed.
        The one way a finished result becomes an error (``model_copy`` does not validate)."""
        return self.model_copy(
            update={
                "status": "error",
                "error_kind": kind,
                "zeroed_error_kind": None,
                "coverage": None,
                "passed": None,
                "passed_at": {},
                "reason": reason,
            }
        )

    @classmethod
    def upgrade_v1(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Version 1 -> 2: the error kind, read from the reason text (the one place it is parsed)."""
        if data.get("status") in ("error", "excluded") and not data.get("error_kind"):
            reason = str(data.get("reason") or "").lower()
            kinds = [kind for prefix, kind in _V1_REASON_PREFIXES if reason.startswith(prefix)]
            data["error_kind"] = kinds[0] if kinds else ErrorKind.OTHER
        return data

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.model, self.task_id, self.repeat)
