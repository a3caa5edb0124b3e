"""Claims scoring: coverage = mean claim score; pass at coverage >= threshold.

If the judge failed on any claim the task is *not* scored (a partial mean
would be biased): it is reported as a judge error, counted, and rejudged on
resume from the saved transcript.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import BaseModel, Field

from atlasrun.judge.base import ClaimVerdict, Judge, JudgeInfo

REPORTED_THRESHOLDS = (0.5, 0.75, 0.9)


class ClaimsScore(BaseModel):
    coverage: float | None
    passed: bool | None
    passed_at: dict[str, bool] = {}
    judge_failures: int = 0


def score_claims(verdicts: list[ClaimVerdict], threshold: float = 0.75) -> ClaimsScore:
    failures = sum(1 for v in verdicts if v.score is None)
    if failures or not verdicts:
        return ClaimsScore(coverage=None, passed=None, judge_failures=failures)
    coverage = sum(v.score or 0.0 for v in verdicts) / len(verdicts)
    thresholds = sorted({*REPORTED_THRESHOLDS, threshold})
    return ClaimsScore(
        coverage=coverage,
        passed=coverage >= threshold - 1e-9,
        passed_at={f"{t:g}": coverage >= t - 1e-9 for t in thresholds},
    )


class Judgement(BaseModel):
    """One judge's verdicts on one task, with the score they give."""

    judge: JudgeInfo
    claims: list[ClaimVerdict] = Field(default_factory=list)
    coverage: float | None = None
    passed: bool | None = None
    passed_at: dict[str, bool] = Field(default_factory=dict)
    judge_failures: int = 0


async def judge_task(
    judges: Sequence[Judge], claims: list[str], answer: str, threshold: float = 0.75
) -> list[Judgement]:
    """Every judge labels every claim (one call per claim, all concurrently); first judge is primary."""

    async def one(judge: Judge) -> Judgement:
        verdicts = list(await asyncio.gather(*(judge.judge(claim, answer) for claim in claims)))
        score = score_claims(verdicts, threshold)
        return Judgement(
            judge=judge.info,
            claims=verdicts,
            coverage=score.coverage,
            passed=score.passed,
            passed_at=score.passed_at,
            judge_failures=score.judge_failures,
        )

    return list(await asyncio.gather(*(one(j) for j in judges)))
