"""Statistics over task results: intervals, breakdowns, pass@k, paired tests.

Pure functions over lists of :class:`TaskResult`. Only ``status == "scored"``
results count toward rates. Functions that estimate one model's numbers expect
one model's results (group with :func:`by_model`).

One interval method for a rate, used by summary.json, the table, the report and the operator's
metrics (docs/statistics.md says why): the 95% Wilson score interval with ``n`` = the number of
tasks scored (:func:`task_interval`, :func:`wilson`). Repeats of a task are one unit, not ``n``
more items. Mean coverage uses the same interval (coverage is a mean in [0, 1] too). Paired
differences (``atlas compare``, the report's matrix) use a paired bootstrap that resamples tasks;
McNemar's test is exact binomial at every size.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.summary import Interval, ModelSummary, summarize, summarize_models

RESAMPLES = 2000
SEED = 0
LEVEL = 0.95
Z95 = 1.959963984540054  # the standard normal's 97.5th percentile (two-sided 95%)
INTERVAL_METHOD = "wilson"
INTERVAL_TEXT = "95% Wilson score interval, n = tasks (a task's repeats count once)"
MCNEMAR_METHOD = "exact binomial, two-sided"


class Estimate(BaseModel):
    """A point estimate with a 95% interval over ``n`` tasks (Wilson for rates and means,
    paired bootstrap for differences)."""

    point: float
    low: float
    high: float
    n: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def scored(results: Iterable[TaskResult]) -> list[TaskResult]:
    """The results that count toward rates: scored, with a coverage and a pass/fail."""
    return [r for r in results if r.status == "scored" and r.coverage is not None and r.passed is not None]


def by_model(results: Iterable[TaskResult]) -> dict[str, list[TaskResult]]:
    out: dict[str, list[TaskResult]] = {}
    for result in results:
        out.setdefault(result.model, []).append(result)
    return out


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (numpy's default method)."""
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def bootstrap_mean(
    groups: Sequence[Sequence[float]], resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL
) -> Estimate | None:
    """Pooled mean of per-task value groups, with a percentile bootstrap CI resampling the groups.

    With one value per task this is the ordinary bootstrap of a mean. Empty groups are ignored;
    None if no values.
    """
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    sums = [math.fsum(g) for g in groups if g]
    counts = [len(g) for g in groups if g]
    if not counts:
        return None
    point = math.fsum(sums) / sum(counts)
    rng = random.Random(seed)
    m = len(counts)
    stats: list[float] = []
    for _ in range(resamples):
        picks = rng.choices(range(m), k=m)
        stats.append(math.fsum(sums[i] for i in picks) / sum(counts[i] for i in picks))
    stats.sort()
    alpha = (1 - level) / 2
    return Estimate(point=point, low=_quantile(stats, alpha), high=_quantile(stats, 1 - alpha), n=m)


def wilson(mean: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a mean in [0, 1] over ``n`` independent units (95% by default).

    For a pass rate over ``n`` tasks this is the textbook interval. When a unit's value is itself a
    mean in [0, 1] (a task's share of passed repeats, a coverage), its variance is at most
    mean * (1 - mean), the binomial's, so the interval is conservative, never too narrow.
    Unlike a bootstrap it is not degenerate at small n: 3 of 3 gives [0.44, 1]."""
    if n <= 0:
        return 0.0, 1.0
    p = min(1.0, max(0.0, mean))
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def wilson_estimate(point: float, n: int) -> Estimate:
    low, high = wilson(point, n)
    return Estimate(point=point, low=low, high=high, n=n)


def task_interval(groups: Sequence[Sequence[float]]) -> Estimate | None:
    """Pooled mean of per-task value groups (one group per task: its repeats) with the Wilson
    interval over n = the number of tasks; None if no values. The pooled mean equals the average
    of the tasks' own means whenever every task has the same number of values."""
    sums = [math.fsum(g) for g in groups if g]
    count = sum(len(g) for g in groups)
    if not count:
        return None
    return wilson_estimate(math.fsum(sums) / count, len(sums))


def _per_task(results: Iterable[TaskResult], value: Callable[[TaskResult], float]) -> list[list[float]]:
    groups: dict[str, list[float]] = {}
    for r in scored(results):
        groups.setdefault(r.task_id, []).append(value(r))
    return _sorted_groups(groups)


def _sorted_groups(groups: dict[str, list[float]]) -> list[list[float]]:
    """Groups in task-id order, so the bootstrap draws the same tasks whatever the order of the
    lines in results.jsonl (the same results always give the same CI)."""
    return [groups[key] for key in sorted(groups)]


def pass_rate_ci(results: Iterable[TaskResult]) -> Estimate | None:
    """Pass rate (primary judge, run threshold) with its 95% interval (:func:`task_interval`);
    None if nothing scored."""
    return task_interval(_per_task(results, lambda r: float(bool(r.passed))))


def coverage_ci(results: Iterable[TaskResult]) -> Estimate | None:
    """Mean coverage with its 95% interval (:func:`task_interval`); None if nothing scored."""
    return task_interval(_per_task(results, lambda r: float(r.coverage or 0.0)))


BreakdownKey = Literal["domain", "category", "server"]


def breakdown(results: Iterable[TaskResult], by: BreakdownKey) -> dict[str, dict[str, Any]]:
    """One model's results grouped by domain, interaction category or server (a task counts for each
    of its servers), each group with the per-model totals of :func:`scoring.summary.summarize`
    (tasks, scored, excluded, errored, passed, pass_rate, mean_coverage, pass_rate_at, ...).
    Missing domain/category/servers group under ``"(none)"``."""
    relabelled: list[TaskResult] = []
    for r in results:
        keys = (r.servers or ["(none)"]) if by == "server" else [getattr(r, by) or "(none)"]
        relabelled.extend(r.model_copy(update={"model": key}) for key in keys)
    return dict(sorted(summarize(relabelled).items()))


class PassAtK(BaseModel):
    k: int
    pass_at_k: float  # P(at least one of k repeats passes), unbiased estimator, mean over tasks
    pass_hat_k: float  # P(all k repeats pass) (pass^k), mean over tasks


class RepeatStats(BaseModel):
    tasks: int
    repeats_min: int
    repeats_max: int
    by_k: list[PassAtK]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task with ``c`` passes in ``n`` scored repeats: 1 - C(n-c,k)/C(n,k)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one task: C(c,k)/C(n,k), the chance that k repeats drawn without replacement all pass."""
    return math.comb(c, k) / math.comb(n, k)


def repeat_stats(results: Iterable[TaskResult]) -> RepeatStats | None:
    """pass@k and pass^k for k = 1..n over one model's repeats, averaged over tasks.

    ``n`` is the smallest number of scored repeats of any task, so every k averages the same tasks
    (a task with more repeats uses all of them in its estimate). None if nothing scored.
    """
    counts: dict[str, tuple[int, int]] = {}
    for r in scored(results):
        n, c = counts.get(r.task_id, (0, 0))
        counts[r.task_id] = (n + 1, c + int(bool(r.passed)))
    if not counts:
        return None
    ns = [n for n, _ in counts.values()]
    by_k = [
        PassAtK(
            k=k,
            pass_at_k=math.fsum(pass_at_k(n, c, k) for n, c in counts.values()) / len(counts),
            pass_hat_k=math.fsum(pass_hat_k(n, c, k) for n, c in counts.values()) / len(counts),
        )
        for k in range(1, min(ns) + 1)
    ]
    return RepeatStats(tasks=len(counts), repeats_min=min(ns), repeats_max=max(ns), by_k=by_k)


class McNemar(BaseModel):
    b: int  # A passed, B failed
    c: int  # A failed, B passed
    method: str = MCNEMAR_METHOD
    p_value: float


def mcnemar(b: int, c: int) -> McNemar:
    """McNemar's test on the discordant pairs, exact at every size: two-sided binomial test of
    min(b, c) successes in b + c trials at 1/2 (no chi-square approximation, whose error at
    small counts is what made a second method necessary)."""
    n = b + c
    term, tail = 1, 0  # C(n, i), exact integers
    for i in range(min(b, c) + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    return McNemar(b=b, c=c, p_value=min(1.0, 2 * tail / 2**n))


DropReason = Literal["error", "excluded", "missing", "other repeats"]
Side = Literal["a", "b"]


class DroppedTask(BaseModel):
    """A task one side scored and the other did not, so it is not in the paired comparison."""

    task: str
    unscored_by: Side
    reason: DropReason  # the unscored side's record: an error, an exclusion, none, or scored repeats
    # that do not match the other side's


def _drop_reason(statuses: set[str]) -> DropReason:
    if "error" in statuses:
        return "error"
    if "excluded" in statuses:
        return "excluded"
    return "other repeats" if statuses else "missing"


def paired_tasks(a: Iterable[TaskResult], b: Iterable[TaskResult]) -> set[str]:
    """Tasks with at least one (task, repeat) pair scored by both sides."""
    b_keys = {(r.task_id, r.repeat) for r in scored(b)}
    return {r.task_id for r in scored(a) if (r.task_id, r.repeat) in b_keys}


def count_dropped(dropped: Iterable[DroppedTask]) -> dict[str, dict[str, int]]:
    """{"a"|"b": {reason: tasks}}: tasks the side did not score, by why."""
    out: dict[str, dict[str, int]] = {}
    for d in dropped:
        side = out.setdefault(d.unscored_by, {})
        side[d.reason] = side.get(d.reason, 0) + 1
    return out


def dropped_tasks(a: Iterable[TaskResult], b: Iterable[TaskResult]) -> list[DroppedTask]:
    """Tasks scored by one side only (none of their (task, repeat) pairs scored by both), in
    task-id order, each with why the other side has no score."""
    rows: dict[Side, list[TaskResult]] = {"a": list(a), "b": list(b)}
    keys = {side: {(r.task_id, r.repeat) for r in scored(found)} for side, found in rows.items()}
    paired = paired_tasks(rows["a"], rows["b"])
    out: list[DroppedTask] = []
    sides: tuple[tuple[Side, Side], ...] = (("a", "b"), ("b", "a"))
    for side, other in sides:
        statuses: dict[str, set[str]] = {}
        for r in rows[side]:
            statuses.setdefault(r.task_id, set()).add(r.status)
        for task in {t for t, _ in keys[other]} - paired:
            out.append(
                DroppedTask(task=task, unscored_by=side, reason=_drop_reason(statuses.get(task, set())))
            )
    return sorted(out, key=lambda d: (d.task, d.unscored_by))


class Unpaired(BaseModel):
    """One model's own figures on every task it scored (secondary: task sets differ by model)."""

    tasks: int
    pass_rate: float


MCNEMAR_UNIT = (
    "tasks (each task's repeats aggregated first: it counts for the model that passed more of them)"
)


class PairedComparison(BaseModel):
    pairs: int  # (task, repeat) pairs scored for both models
    tasks: int  # distinct tasks among them (the bootstrap resampling unit and McNemar's pairs)
    dropped: list[DroppedTask] = Field(default_factory=list)  # tasks scored by one side only
    pass_rate_a: float
    pass_rate_b: float
    coverage_a: float
    coverage_b: float
    pass_rate_diff: Estimate  # A - B
    coverage_diff: Estimate  # A - B
    mcnemar: McNemar  # on tasks, see MCNEMAR_UNIT
    mcnemar_unit: str = MCNEMAR_UNIT
    unpaired_a: Unpaired | None = None
    unpaired_b: Unpaired | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def dropped_by_reason(self) -> dict[str, dict[str, int]]:
        return count_dropped(self.dropped)


def paired_comparison(
    a: Iterable[TaskResult], b: Iterable[TaskResult], resamples: int = RESAMPLES, seed: int = SEED
) -> PairedComparison | None:
    """Model A vs model B on the (task, repeat) pairs both scored; None if there are none.

    Differences are A - B with a paired bootstrap CI (tasks resampled, both models' results for a
    task kept together). McNemar's test is on tasks, not on (task, repeat) pairs: repeats of one
    task are not independent, so each task's repeats are aggregated first (A's and B's passes
    compared; a tie is concordant). With one repeat this is the ordinary McNemar test. Each
    model's unpaired pass rate over all the tasks it scored is kept as a secondary figure.
    """
    a_all, b_all = list(a), list(b)
    a_rows, b_rows = scored(a_all), scored(b_all)
    index_b = {(r.task_id, r.repeat): r for r in b_rows}
    pairs = [(ra, index_b[(ra.task_id, ra.repeat)]) for ra in a_rows if (ra.task_id, ra.repeat) in index_b]
    if not pairs:
        return None
    pass_diff: dict[str, list[float]] = {}
    cov_diff: dict[str, list[float]] = {}
    for ra, rb in pairs:
        pass_diff.setdefault(ra.task_id, []).append(float(bool(ra.passed)) - float(bool(rb.passed)))
        cov_diff.setdefault(ra.task_id, []).append((ra.coverage or 0.0) - (rb.coverage or 0.0))
    pass_ci = bootstrap_mean(_sorted_groups(pass_diff), resamples, seed)
    cov_ci = bootstrap_mean(_sorted_groups(cov_diff), resamples, seed)
    assert pass_ci is not None and cov_ci is not None  # pairs is non-empty
    n = len(pairs)
    # Per task, the sum of (A passed - B passed) over its paired repeats: > 0 when A passed more.
    task_sign = [math.fsum(d) for d in pass_diff.values()]
    return PairedComparison(
        pairs=n,
        tasks=len(pass_diff),
        pass_rate_a=sum(bool(ra.passed) for ra, _ in pairs) / n,
        pass_rate_b=sum(bool(rb.passed) for _, rb in pairs) / n,
        coverage_a=math.fsum(ra.coverage or 0.0 for ra, _ in pairs) / n,
        coverage_b=math.fsum(rb.coverage or 0.0 for _, rb in pairs) / n,
        dropped=dropped_tasks(a_all, b_all),
        pass_rate_diff=pass_ci,
        coverage_diff=cov_ci,
        mcnemar=mcnemar(sum(1 for d in task_sign if d > 0), sum(1 for d in task_sign if d < 0)),
        unpaired_a=_unpaired(a_rows),
        unpaired_b=_unpaired(b_rows),
    )


def _unpaired(rows: list[TaskResult]) -> Unpaired:
    return Unpaired(
        tasks=len({r.task_id for r in rows}), pass_rate=sum(bool(r.passed) for r in rows) / len(rows)
    )


def common_tasks(results: Iterable[TaskResult]) -> set[str]:
    """Task ids scored for every model present in ``results`` (the tasks models are compared on)."""
    sets = [{r.task_id for r in rows} for rows in by_model(scored(results)).values()]
    return set.intersection(*sets) if sets else set()


def as_interval(estimate: Estimate | None) -> Interval | None:
    """An estimate as summary.json keeps it (with its n and this module's method)."""
    if estimate is None:
        return None
    return Interval(
        low=estimate.low,
        high=estimate.high,
        half_width=estimate.half_width,
        tasks=estimate.n,
        method=INTERVAL_METHOD,
    )


def model_summaries(
    results: Sequence[TaskResult], models: list[str] | None = None
) -> dict[str, ModelSummary]:
    """Per-model totals of ``results`` with their 95% intervals: summary.json's ``models`` and the
    table of one command's own selection (runner.gates) are this one computation."""
    table = summarize_models(results, models)
    grouped = by_model(results)
    for name, row in table.items():
        row.pass_rate_ci = as_interval(pass_rate_ci(grouped.get(name, [])))
        row.mean_coverage_ci = as_interval(coverage_ci(grouped.get(name, [])))
    return table
