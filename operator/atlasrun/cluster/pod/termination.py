"""The pod's termination message: one ``wire.records.TaskSummary`` in at most 4 KiB.

A pod that ran one item writes that item's summary; one that ran several (``itemsPerPod``) writes a
``batch`` summary whose ``items`` are theirs (``TaskSummary.for_batch``: what the operator counts).
Fitting the limit cuts the longest strings of a single summary; for a batch, reasons are cut
first, then the items' usage dropped, and if it still does not fit the items are left out (the
operator then reads the stored results).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from atlasrun.cluster.wire.contract import (
    EXIT_INPUT,
    EXIT_OK,
    EXIT_RETRY,
    EXIT_STORE,
    TERMINATION_LIMIT,
)
from atlasrun.cluster.wire.records import TaskSummary


def compact(data: dict[str, Any], limit: int = TERMINATION_LIMIT) -> str:
    """JSON of at most ``limit`` bytes: the longest strings are cut until it fits."""
    data = json.loads(json.dumps(data))
    text = json.dumps(data, separators=(",", ":"))
    while len(text.encode()) > limit:
        strings = [k for k, v in data.items() if isinstance(v, str)]
        if not strings:
            return json.dumps(
                {
                    "schema_version": data.get("schema_version"),
                    "status": data.get("status"),
                    "exit_code": data.get("exit_code"),
                    "cpu_s": data.get("cpu_s"),
                    "truncated": True,
                }
            )
        longest = max(strings, key=lambda k: len(data[k]))
        value = data[longest]
        data[longest] = value[: len(value) // 2] + "...[truncated]" if len(value) > 32 else ""
        if not data[longest]:
            del data[longest]
        text = json.dumps(data, separators=(",", ":"))
    return text


def batch_exit(codes: list[int]) -> int:
    """The pod's exit code: bad input only if every item's input was bad; a storage failure or
    any other failure retries the pod (its stored items are kept, not run again); else 0."""
    if codes and all(c == EXIT_INPUT for c in codes):
        return EXIT_INPUT
    if EXIT_STORE in codes:
        return EXIT_STORE
    return EXIT_RETRY if any(c not in (EXIT_OK, EXIT_INPUT) for c in codes) else EXIT_OK


def compact_batch(
    summaries: Sequence[TaskSummary], code: int, cpu_s: float | None = None, limit: int = TERMINATION_LIMIT
) -> str:
    """The ``batch`` summary of ``summaries`` in at most ``limit`` bytes (see the module docstring);
    ``cpu_s``: the pod's CPU-seconds."""
    for cut in (200, 80, 20, 0):
        items = [s.for_batch(reason_chars=cut, usage=cut >= 80) for s in summaries]
        batch = TaskSummary(status="batch", exit_code=code, items=items, cpu_s=cpu_s)
        text = json.dumps(batch.model_dump(mode="json", exclude_none=True), separators=(",", ":"))
        if len(text.encode()) <= limit:
            return text
    cut_short = TaskSummary(status="batch", exit_code=code, items=[], truncated=True, cpu_s=cpu_s)
    return json.dumps(cut_short.model_dump(mode="json", exclude_none=True), separators=(",", ":"))


def write_termination(path: Path, text: str, warn: Callable[[str], None]) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        warn(f"warning: cannot write the termination message to {path}: {exc.strerror or exc}")
