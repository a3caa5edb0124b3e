"""Cross-judge numbers: each model's pass rate under every judge (MCP-Atlas Appendix F) and
Cohen's kappa between judges on claim labels (MCP-AgentBench Appendix D).

The primary judge's verdicts are ``TaskResult.judge/claims/passed``; the run's other judges are
in ``TaskResult.secondary``. Judges are identified by ``JudgeInfo.name``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations

from pydantic import BaseModel

from atlasrun.judge.base import LABEL_SCORES, ClaimVerdict
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.stats import by_model, scored

LABELS: tuple[str, ...] = tuple(LABEL_SCORES)  # fulfilled, partially_fulfilled, not_fulfilled


def _verdicts(result: TaskResult) -> dict[str, tuple[list[ClaimVerdict], bool | None]]:
    """Judge name -> (claim verdicts, task passed) for the primary and every secondary judge."""
    out: dict[str, tuple[list[ClaimVerdict], bool | None]] = {}
    if result.judge is not None:
        out[result.judge.name] = (result.claims, result.passed)
    for judgement in result.secondary:
        out.setdefault(judgement.judge.name, (judgement.claims, judgement.passed))
    return out


class JudgeRates(BaseModel):
    """One model's pass rate under each judge, on the tasks every judge scored."""

    tasks: int  # scored results every judge gave a pass/fail for
    dropped: int  # scored results some judge failed on (left out so all rates share tasks)
    primary: str | None
    pass_rate: dict[str, float]  # judge name -> pass rate
    range: float | None  # max - min over judges


def cross_judge_rates(results: Iterable[TaskResult]) -> dict[str, JudgeRates]:
    """Per model: pass rate under each judge and the range across judges (primary-scored results)."""
    out: dict[str, JudgeRates] = {}
    for model, rows in sorted(by_model(scored(results)).items()):
        judges: list[str] = []
        for r in rows:
            judges.extend(name for name in _verdicts(r) if name not in judges)
        common = [
            v
            for v in (_verdicts(r) for r in rows)
            if all(name in v and v[name][1] is not None for name in judges)
        ]
        rates = (
            {name: sum(1 for v in common if v[name][1]) / len(common) for name in judges} if common else {}
        )
        primary = next((r.judge.name for r in rows if r.judge is not None), None)
        out[model] = JudgeRates(
            tasks=len(common),
            dropped=len(rows) - len(common),
            primary=primary,
            pass_rate=rates,
            range=(max(rates.values()) - min(rates.values())) if rates else None,
        )
    return out


def cohens_kappa(pairs: Sequence[tuple[str, str]], categories: Sequence[str] = LABELS) -> float | None:
    """Cohen's kappa (p_o - p_e) / (1 - p_e) for two raters' labels on the same items.

    None when undefined: no items, or chance agreement p_e == 1 (both raters used one same label).
    """
    n = len(pairs)
    if not n:
        return None
    observed = sum(1 for x, y in pairs if x == y) / n
    chance = sum(
        (sum(1 for x, _ in pairs if x == cat) / n) * (sum(1 for _, y in pairs if y == cat) / n)
        for cat in categories
    )
    if chance >= 1.0:
        return None
    return (observed - chance) / (1 - chance)


class JudgeAgreement(BaseModel):
    judge_a: str
    judge_b: str
    claims: int  # claims both judges labelled
    skipped: int  # claims either judge failed on (label None) or that did not line up
    agreement: float | None  # observed proportion of identical labels
    kappa: float | None


def claim_agreement(results: Iterable[TaskResult]) -> list[JudgeAgreement]:
    """Cohen's kappa on 3-way claim labels for each pair of judges, over all results with claims
    (any status: a task left unscored by a primary-judge failure still has usable labels)."""
    labels: dict[tuple[str, str], list[tuple[str, str]]] = {}
    skipped: dict[tuple[str, str], int] = {}
    for r in results:
        verdicts = _verdicts(r)
        for a, b in combinations(sorted(verdicts), 2):
            labels.setdefault((a, b), [])
            skipped.setdefault((a, b), 0)
            claims_a, claims_b = verdicts[a][0], verdicts[b][0]
            for i in range(max(len(claims_a), len(claims_b))):
                va = claims_a[i] if i < len(claims_a) else None
                vb = claims_b[i] if i < len(claims_b) else None
                if va is None or vb is None or va.label is None or vb.label is None or va.claim != vb.claim:
                    skipped[(a, b)] += 1
                else:
                    labels[(a, b)].append((va.label, vb.label))
    return [
        JudgeAgreement(
            judge_a=a,
            judge_b=b,
            claims=len(pairs),
            skipped=skipped[(a, b)],
            agreement=(sum(1 for x, y in pairs if x == y) / len(pairs)) if pairs else None,
            kappa=cohens_kappa(pairs),
        )
        for (a, b), pairs in sorted(labels.items())
    ]
