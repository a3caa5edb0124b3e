"""Claims scoring: coverage = mean claim score; pass at coverage >= threshold.

By default (``spec.scoring.judgeFailure: exclude``), if the judge failed on any
claim the task is *not* scored (a partial mean would be biased): it is reported
as a judge error, counted, and rejudged on resume from the saved transcript.
With ``judgeFailure: zero`` a failed claim is scored not_fulfilled (0), as
MCP-Atlas's scorer does; the verdict keeps the judge's error, so zeroed claims
stay countable. ``coverageDecimals`` rounds coverage before the threshold test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import BaseModel, Field

from atlasrun.judge.base import UNCERTAIN, ClaimVerdict, Judge, JudgeInfo
from atlasrun.runspec.run import JudgeFailurePolicy, ScoringSpec

REPORTED_THRESHOLDS = (0.5, 0.75, 0.9)
ZEROED_REASON = (
    "the judge failed on this claim after its retries: scored not_fulfilled (0) (scoring.judgeFailure: zero)"
)


class ClaimsScore(BaseModel):
    coverage: float | None
    passed: bool | None
    passed_at: dict[str, bool] = {}
    judge_failures: int = 0  # claims without a label, abstentions included
    judge_failures_zeroed: int = 0
    uncertain: int = 0  # claims the judge(s) abstained on: never scored, whatever the policy


def is_zeroed(verdict: ClaimVerdict) -> bool:
    """A claim the judge failed on that was scored 0 anyway: it has both a score and an error."""
    return verdict.error is not None and verdict.score is not None


def apply_judge_failure_policy(
    verdicts: list[ClaimVerdict], policy: JudgeFailurePolicy
) -> list[ClaimVerdict]:
    """``zero``: each failed verdict becomes not_fulfilled (0), its error kept; ``exclude``: unchanged.
    An abstention is no failure: it stays unscored (uncertain) under either policy."""
    if policy == "exclude":
        return verdicts
    return [
        v
        if v.score is not None or v.uncertain
        else v.model_copy(update={"label": "not_fulfilled", "score": 0.0, "reason": ZEROED_REASON})
        for v in verdicts
    ]


def score_claims(
    verdicts: list[ClaimVerdict], threshold: float = 0.75, scoring: ScoringSpec | None = None
) -> ClaimsScore:
    """Coverage and pass/fail of ``verdicts`` (already passed through ``apply_judge_failure_policy``)."""
    failures = sum(1 for v in verdicts if v.score is None)
    if failures or not verdicts:
        uncertain = sum(1 for v in verdicts if v.uncertain)
        return ClaimsScore(coverage=None, passed=None, judge_failures=failures, uncertain=uncertain)
    coverage = sum(v.score or 0.0 for v in verdicts) / len(verdicts)
    decimals = scoring.coverage_decimals if scoring else None
    if decimals is not None:
        coverage = round(coverage, decimals)  # the builtin, as MCP-Atlas's scorer rounds
    thresholds = sorted({*REPORTED_THRESHOLDS, threshold})
    return ClaimsScore(
        coverage=coverage,
        passed=coverage >= threshold - 1e-9,
        passed_at={f"{t:g}": coverage >= t - 1e-9 for t in thresholds},
        judge_failures_zeroed=sum(1 for v in verdicts if is_zeroed(v)),
    )


class Judgement(BaseModel):
    """One judge's verdicts on one task, with the score they give."""

    judge: JudgeInfo
    claims: list[ClaimVerdict] = Field(default_factory=list)
    coverage: float | None = None
    passed: bool | None = None
    passed_at: dict[str, bool] = Field(default_factory=dict)
    judge_failures: int = 0
    judge_failures_zeroed: int = 0  # failed claims scored 0 under scoring.judgeFailure: zero
    uncertain: int = 0  # claims every judge of the chain abstained on
    chain: list[JudgeInfo] = Field(default_factory=list)  # later judges that labelled abstained claims

    @property
    def failure_reason(self) -> str | None:
        """Why this judgement gives no score; abstentions are named with the judge's reasons."""
        if self.coverage is not None or not self.claims:
            return None
        abstained = [(v.claim, v.abstention) for v in self.claims if v.abstention is not None]
        if abstained:
            why = "; ".join(f"{a.kind}: {a.reason}" for _, a in abstained)
            return f"{UNCERTAIN}: the judge abstained on {len(abstained)}/{len(self.claims)} claims ({why})"
        return f"judge failed on {self.judge_failures}/{len(self.claims)} claims"


def judge_chain(judges: Sequence[Judge]) -> int:
    """How many leading judges form the primary chain: a judge that can abstain hands the claims it
    abstained on to the next judge of the run, which thereby joins the chain."""
    length = 1
    while length < len(judges) and judges[length - 1].can_abstain:
        length += 1
    return min(length, len(judges))


async def judge_task(
    judges: Sequence[Judge],
    claims: list[str],
    answer: str,
    threshold: float = 0.75,
    scoring: ScoringSpec | None = None,
) -> list[Judgement]:
    """The primary judgement comes from the chain of leading judges (``judge_chain``): the first
    labels every claim, each next one exactly the claims still abstained on. Every judge after the
    chain labels every claim (secondary: cross-judge ranges and agreement). One call per claim, all
    concurrently. Each judgement is scored under the run's ``scoring`` policy."""
    policy = scoring or ScoringSpec()

    async def one(chain: Sequence[Judge]) -> Judgement:
        verdicts = list(await asyncio.gather(*(chain[0].judge(claim, answer) for claim in claims)))
        used: list[JudgeInfo] = []
        for judge in chain[1:]:
            pending = [i for i, v in enumerate(verdicts) if v.uncertain]
            if not pending:
                break
            used.append(judge.info)
            again = await asyncio.gather(*(judge.judge(claims[i], answer) for i in pending))
            for i, verdict in zip(pending, again, strict=True):
                verdicts[i] = verdict.model_copy(update={"judged_by": judge.info.name})
        verdicts = apply_judge_failure_policy(verdicts, policy.judge_failure)
        score = score_claims(verdicts, threshold, policy)
        return Judgement(
            judge=chain[0].info,
            claims=verdicts,
            coverage=score.coverage,
            passed=score.passed,
            passed_at=score.passed_at,
            judge_failures=score.judge_failures,
            judge_failures_zeroed=score.judge_failures_zeroed,
            uncertain=score.uncertain,
            chain=used,
        )

    length = judge_chain(judges)
    return list(await asyncio.gather(one(judges[:length]), *(one([j]) for j in judges[length:])))
