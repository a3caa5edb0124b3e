"""The judge extension point and the claim labels (one source of truth for their scores)."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel

Label = Literal["fulfilled", "partially_fulfilled", "not_fulfilled"]
LABEL_SCORES: dict[str, float] = {"fulfilled": 1.0, "partially_fulfilled": 0.5, "not_fulfilled": 0.0}
UNCERTAIN = "uncertain"  # how an abstained claim is recorded and shown (it has no label)

# Why a judge abstained: its evidence for a verdict was not decisive.
AbstentionKind = Literal[
    "contradiction",  # the right value and another candidate for the same quantity
    "negation",  # a negation it cannot resolve
    "role",  # who did what to whom, not readable from the sentence
    "unit",  # a unit, currency or number format it cannot compare
    "time_zone",  # a time whose zone cannot be determined
    "name",  # a multi-word name given only in part
    "relation",  # the facts are there, but not said together with what the claim says of them
    "hedged",  # the value is given uncommitted
    "restated",  # the answer only restates the question or the claim
    "language",  # an answer (or claim) in a language it has no rules for
    "no_key_facts",  # a claim without key facts, and the wording alone is not decisive
]


class Abstention(BaseModel):
    kind: AbstentionKind
    reason: str


class ClaimVerdict(BaseModel):
    claim: str
    label: Label | None = None  # None: the judge failed on this claim (excluded, never 0)
    score: float | None = None
    reason: str = ""
    confidence: float | None = None
    error: str | None = None
    truncated_from: int | None = None  # the answer's length when it was cut before judging
    abstention: Abstention | None = None  # set: the judge abstained (no label; recorded as uncertain)
    judged_by: str | None = None  # the judge that labelled it, when a later judge of a chain did

    @property
    def uncertain(self) -> bool:
        return self.abstention is not None

    @classmethod
    def labelled(cls, claim: str, label: Label, reason: str, confidence: float | None = None) -> ClaimVerdict:
        return cls(claim=claim, label=label, score=LABEL_SCORES[label], reason=reason, confidence=confidence)

    @classmethod
    def failed(cls, claim: str, error: str) -> ClaimVerdict:
        return cls(claim=claim, error=error)

    @classmethod
    def abstained(cls, claim: str, kind: AbstentionKind, reason: str) -> ClaimVerdict:
        return cls(
            claim=claim,
            reason=f"{UNCERTAIN} ({kind}): {reason}",
            abstention=Abstention(kind=kind, reason=reason),
        )


class JudgeInfo(BaseModel):
    """Recorded with every score so results say exactly who judged them."""

    name: str
    kind: Literal["deterministic", "llm"]
    model: str | None = None
    prompt_sha256: str | None = None
    version: str


class Judge(Protocol):
    info: JudgeInfo
    can_abstain: bool  # True: it may return ``ClaimVerdict.abstained``; the run's next judge then decides

    async def judge(self, claim: str, response: str) -> ClaimVerdict:
        """Label one claim against the final answer. Failures come back as ``ClaimVerdict.failed``."""
        ...
