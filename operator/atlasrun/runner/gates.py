"""What ``atlas run`` exits with, for CI: item errors, then a ``--fail-under`` pass-rate bar.

The verdict, the ``--junit`` file and the printed table cover the same items: the ones this
command selected (its tasks, models and repeats, resumed ones included). A results directory may
hold more (earlier invocations with other ``--task``/``--limit``/``--model`` filters): summary.json
and the report cover all of it, and ``atlas run`` then prints that table too, named as such.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from atlasrun.errors import EXIT_FAIL_UNDER, EXIT_ITEM_ERRORS, EXIT_OK, InputError
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.stats import model_summaries


def parse_rate(text: str) -> float:
    """``0.8`` or ``80%`` -> 0.8; anything outside [0, 1] is bad input."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise InputError(f"not a rate: {text!r} (write 0.8 or 80%)", where="--fail-under") from None
    if not 0.0 <= value <= 1.0:
        raise InputError(f"a rate is between 0 and 1 (or 0% and 100%), not {text!r}", where="--fail-under")
    return value


def run_verdict(
    summary: dict[str, Any], fail_under: float | None = None, models: list[str] | None = None
) -> tuple[int, list[str]]:
    """(exit code, one line per reason) from a summary.json, over ``models`` (default: all):
    EXIT_ITEM_ERRORS when any item ended as an error after its retries, else EXIT_FAIL_UNDER when
    a model's pass rate is below ``fail_under`` (no scored item counts as 0), else EXIT_OK."""
    rows: dict[str, dict[str, Any]] = {
        name: row for name, row in summary.get("models", {}).items() if models is None or name in models
    }
    errored = {name: row["errored"] for name, row in rows.items() if row.get("errored")}
    if errored:
        listed = ", ".join(f"{name} {count}" for name, count in errored.items())
        return EXIT_ITEM_ERRORS, [f"item errors after retries: {listed} (see errors by kind above)"]
    if fail_under is not None:
        below = [
            f"{name}: pass rate {100 * (row.get('pass_rate') or 0.0):.1f}% < --fail-under {100 * fail_under:g}%"
            for name, row in rows.items()
            if (row.get("pass_rate") or 0.0) < fail_under
        ]
        if below:
            return EXIT_FAIL_UNDER, below
    return EXIT_OK, []


def selection_summary(results: Sequence[TaskResult], models: list[str]) -> dict[str, Any]:
    """Per-model totals of ``results`` alone, shaped like summary.json's ``models`` (the table
    and ``run_verdict`` read it)."""
    table = model_summaries(results, models)
    return {"models": {name: row.model_dump(mode="json") for name, row in table.items()}}


def item_count(summary: dict[str, Any]) -> int:
    """Items (task x repeat) a summary covers, over its models."""
    return sum(int(row.get("items", row.get("tasks", 0))) for row in summary.get("models", {}).values())
