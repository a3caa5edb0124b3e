"""The ``atlas validate`` fuzz suite at a size that fits the test run (``make fuzz`` runs 6,000)."""

from __future__ import annotations

import pytest

from fuzz.fuzz_validate import FORMATS, fuzz


@pytest.mark.heavy
def test_500_mutated_task_and_run_files_give_clear_errors_only() -> None:
    report = fuzz(cases=500, seed=20261123)
    summary = "\n".join(report.lines())
    failures = "\n".join(
        f"case {c.index} ({c.fmt}) {o.kind}: {o.detail[-400:]}" for c, o in report.failures[:5]
    )
    assert report.ok, f"{summary}\n{failures}"
    assert report.cases == 500 and set(report.by_format) == set(FORMATS)
    # The mutations really are bad input: most cases are rejected, each with a clear error.
    assert report.kinds["rejected"] > 0.6 * report.cases
    assert report.row_level > 0 and report.kinds["accepted"] > 0
