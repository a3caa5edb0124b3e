"""Claims scoring: coverage = mean claim score; pass at coverage >= threshold.

If the judge failed on any claim the task is *not* scored (a partial mean
would be biased): it is reported as a judge error, counted, and rejudged on
resume from the saved transcript.
"""

from __future__ import annotations

from pydantic import BaseModel

from atlasrun.judge.base import ClaimVerdict

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
    return ClaimsScore(coverage=coverage, passed=coverage >= threshold - 1e-9,
                       passed_at={f"{t:g}": coverage >= t - 1e-9 for t in thresholds})
