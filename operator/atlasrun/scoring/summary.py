"""Per-model totals from task results (the numbers in summary.json and the CLI table)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from atlasrun.scoring.claims import REPORTED_THRESHOLDS
from atlasrun.scoring.result import TaskResult


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(results: Iterable[TaskResult], models: list[str] | None = None) -> dict[str, Any]:
    by_model: dict[str, list[TaskResult]] = {name: [] for name in (models or [])}
    for result in results:
        by_model.setdefault(result.model, []).append(result)
    out: dict[str, Any] = {}
    for model, rows in by_model.items():
        scored = [r for r in rows if r.status == "scored"]
        excluded = [r for r in rows if r.status == "excluded"]
        errored = [r for r in rows if r.status == "error"]
        passed = sum(1 for r in scored if r.passed)
        coverages = [r.coverage for r in scored if r.coverage is not None]
        out[model] = {
            "tasks": len(rows),
            "scored": len(scored),
            "excluded": len(excluded),
            "excluded_reasons": dict(Counter(r.reason or "" for r in excluded)),
            "errored": len(errored),
            "error_reasons": dict(Counter(r.reason or "" for r in errored)),
            "passed": passed,
            "pass_rate": passed / len(scored) if scored else None,
            "mean_coverage": _mean(coverages),
            "pass_rate_at": {
                f"{t:g}": (sum(1 for c in coverages if c >= t - 1e-9) / len(coverages) if coverages else None)
                for t in REPORTED_THRESHOLDS
            },
            "mean_tool_calls": _mean([float(r.tool_calls) for r in scored]),
            "mean_wall_s": _mean([r.wall_s for r in scored]),
            "tokens": sum(r.prompt_tokens + r.completion_tokens for r in rows),
            "cost_usd": sum(r.cost_usd for r in rows),
        }
    return out
