"""Per-model totals from task results (the numbers in summary.json and the CLI table)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from atlasrun.judge.base import JudgeInfo
from atlasrun.scoring.claims import REPORTED_THRESHOLDS, is_zeroed
from atlasrun.scoring.records import VersionedRecord
from atlasrun.scoring.result import ErrorKind, TaskResult

SUMMARY_FILE = "summary.json"


class Interval(BaseModel):
    """A 95% interval as summary.json keeps it (scoring.stats.task_interval computes it)."""

    low: float
    high: float
    half_width: float
    tasks: int | None = None  # its n: the tasks scored (a task's repeats are one unit)
    method: str | None = None  # "wilson" (older summaries: a bootstrap, not recorded)


class ModelSummary(BaseModel):
    """One model's totals. Excluded and errored results are counted by their ``error_kind``.

    ``tasks`` counts distinct tasks; ``items`` counts task x repeat items, and ``scored``,
    ``excluded``, ``errored`` and ``passed`` count items too (with one repeat, items = tasks)."""

    tasks: int = 0
    items: int = 0
    scored_tasks: int = 0  # tasks with at least one scored item: the n of the intervals
    scored: int = 0
    excluded: int = 0
    excluded_by_kind: dict[ErrorKind, int] = Field(default_factory=dict)
    excluded_reasons: dict[str, int] = Field(default_factory=dict)
    errored: int = 0
    errors_by_kind: dict[ErrorKind, int] = Field(default_factory=dict)
    error_reasons: dict[str, int] = Field(default_factory=dict)
    # Scored results with claims the judge failed on, scored 0 (spec.scoring.judgeFailure: zero),
    # and how many such claims; under the default (exclude) those results are judge errors instead.
    judge_failures_zeroed: int = 0
    judge_failed_claims_zeroed: int = 0
    passed: int = 0
    pass_rate: float | None = None
    mean_coverage: float | None = None
    pass_rate_at: dict[str, float | None] = Field(default_factory=dict)
    mean_tool_calls: float | None = None
    mean_wall_s: float | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True  # False: some call had no known price: show cost as n/a
    pass_rate_ci: Interval | None = None  # set in summary.json (runner.local.write_summary)
    mean_coverage_ci: Interval | None = None


class ExcludedTask(BaseModel):
    task: str
    reason: str | None = None


class RunSummary(VersionedRecord):
    """``summary.json``: the run's per-model totals and what was left out."""

    RECORD = "run summary"
    run: str
    judge: JudgeInfo | None = None
    judges: list[JudgeInfo] = Field(default_factory=list)
    pass_threshold: float
    models: dict[str, ModelSummary] = Field(default_factory=dict)
    rejected_rows: list[str] = Field(default_factory=list)
    excluded_tasks: list[ExcludedTask] = Field(default_factory=list)
    rescored_from: str | None = None
    # results.jsonl lines not counted: damaged, tampered with, or outside the run (scoring.store)
    skipped_lines: int = 0

    @classmethod
    def upgrade_v1(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Version 1 had no counts by kind; they are left empty (the results lines have them)."""
        return data


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _kinds(rows: list[TaskResult]) -> dict[ErrorKind, int]:
    return dict(Counter(r.error_kind or ErrorKind.OTHER for r in rows))


def summarize_models(
    results: Iterable[TaskResult], models: list[str] | None = None
) -> dict[str, ModelSummary]:
    by_model: dict[str, list[TaskResult]] = {name: [] for name in (models or [])}
    for result in results:
        by_model.setdefault(result.model, []).append(result)
    out: dict[str, ModelSummary] = {}
    for model, rows in by_model.items():
        scored = [r for r in rows if r.status == "scored"]
        excluded = [r for r in rows if r.status == "excluded"]
        errored = [r for r in rows if r.status == "error"]
        passed = sum(1 for r in scored if r.passed)
        coverages = [r.coverage for r in scored if r.coverage is not None]
        out[model] = ModelSummary(
            tasks=len({r.task_id for r in rows}),
            items=len(rows),
            scored_tasks=len({r.task_id for r in scored}),
            scored=len(scored),
            excluded=len(excluded),
            excluded_by_kind=_kinds(excluded),
            excluded_reasons=dict(Counter(r.reason or "" for r in excluded)),
            errored=len(errored),
            errors_by_kind=_kinds(errored),
            error_reasons=dict(Counter(r.reason or "" for r in errored)),
            judge_failures_zeroed=sum(1 for r in scored if r.zeroed_error_kind == ErrorKind.JUDGE),
            judge_failed_claims_zeroed=sum(1 for r in scored for c in r.claims if is_zeroed(c)),
            passed=passed,
            pass_rate=passed / len(scored) if scored else None,
            mean_coverage=_mean(coverages),
            pass_rate_at={
                f"{t:g}": (sum(1 for c in coverages if c >= t - 1e-9) / len(coverages) if coverages else None)
                for t in REPORTED_THRESHOLDS
            },
            mean_tool_calls=_mean([float(r.tool_calls) for r in scored]),
            mean_wall_s=_mean([r.wall_s for r in scored]),
            tokens=sum(r.prompt_tokens + r.completion_tokens for r in rows),
            cost_usd=sum(r.cost_usd for r in rows),
            cost_known=all(r.cost_known for r in rows),
        )
    return out


def summarize(results: Iterable[TaskResult], models: list[str] | None = None) -> dict[str, Any]:
    """The per-model totals as plain data (the shape of ``summary.json``'s ``models``)."""
    return {
        name: row.model_dump(mode="json", exclude={"pass_rate_ci", "mean_coverage_ci"})
        for name, row in summarize_models(results, models).items()
    }
