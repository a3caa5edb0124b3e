"""The outcome of one work item's last attempt, as the operator counts it: typed, frozen, small.

``observe`` turns each finished index's termination message (a ``wire.records.TaskSummary``; a
batch pod's message lists one per item) or, when the pod is gone or said too little, the stored
result into one ``Outcome`` per item; ``decide`` folds each exactly once into the status, and
``act`` hands the newly counted ones to the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from atlasrun.cluster.wire import usage
from atlasrun.cluster.wire.records import TaskSummary
from atlasrun.scoring.result import ErrorKind

MAX_REASON = 200  # characters of a reason kept (Events, status messages)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A counted item: scored (``passed``, ``coverage``), excluded, or an error of ``error_kind``."""

    status: Literal["scored", "excluded", "error"]
    model: str
    passed: bool | None = None
    coverage: float | None = None
    wall_s: float | None = None
    error_kind: str | None = None  # an ErrorKind value, for status "error" and "excluded"
    reason: str | None = None
    usage: usage.ItemUsage = field(default_factory=usage.ItemUsage)

    @property
    def error(self) -> str | None:
        """The error kind the usage totals count it under, or None if it is not an error."""
        return None if self.status != "error" else (self.error_kind or ErrorKind.OTHER.value)


def outcome_of(summary: TaskSummary | None, model: str, failed: bool, failure: str | None = None) -> Outcome:
    """The outcome of an item's last attempt: its termination summary, or, without one, an error
    (``job_failed``) when the attempt failed; a success without a summary is an error too. A
    summary whose status is not an item's (``batch`` where one item was expected) is an error."""
    if summary is not None and summary.status != "batch":
        return Outcome(
            status=summary.status,
            model=model,
            passed=summary.passed,
            coverage=summary.coverage,
            wall_s=summary.wall_s,
            error_kind=summary.error_kind if summary.status != "scored" else None,
            reason=short(summary.reason),
            usage=usage.from_summary(summary),
        )
    reason = f"job failed: {failure or 'no termination message'}" if failed else "no result reported"
    return Outcome(status="error", model=model, error_kind=ErrorKind.JOB_FAILED.value, reason=short(reason))


def short(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."
