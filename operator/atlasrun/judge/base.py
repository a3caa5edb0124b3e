"""The judge extension point and the claim labels (one source of truth for their scores)."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel

Label = Literal["fulfilled", "partially_fulfilled", "not_fulfilled"]
LABEL_SCORES: dict[str, float] = {"fulfilled": 1.0, "partially_fulfilled": 0.5, "not_fulfilled": 0.0}


class ClaimVerdict(BaseModel):
    claim: str
    label: Label | None = None  # None: the judge failed on this claim (excluded, never 0)
    score: float | None = None
    reason: str = ""
    confidence: float | None = None
    error: str | None = None
    truncated_from: int | None = None  # the answer's length when it was cut before judging

    @classmethod
    def labelled(cls, claim: str, label: Label, reason: str, confidence: float | None = None) -> ClaimVerdict:
        return cls(claim=claim, label=label, score=LABEL_SCORES[label], reason=reason, confidence=confidence)

    @classmethod
    def failed(cls, claim: str, error: str) -> ClaimVerdict:
        return cls(claim=claim, error=error)


class JudgeInfo(BaseModel):
    """Recorded with every score so results say exactly who judged them."""

    name: str
    kind: Literal["deterministic", "llm"]
    model: str | None = None
    prompt_sha256: str | None = None
    version: str


class Judge(Protocol):
    info: JudgeInfo

    async def judge(self, claim: str, response: str) -> ClaimVerdict:
        """Label one claim against the final answer. Failures come back as ``ClaimVerdict.failed``."""
        ...
