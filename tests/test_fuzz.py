"""The fuzz suite at a size that fits the test run (``make fuzz`` runs 6,000 cases): every file
format ``atlas validate`` reads, the hostile classes of issue 24 (special files, tagged YAML
values, invalid Unicode, huge integers, deep nesting) and damaged results directories."""

from __future__ import annotations

import pytest

from fuzz.fuzz_validate import CLASSES, GB, Report, fuzz

pytestmark = pytest.mark.heavy
CASES = 480  # 40 of each class


@pytest.fixture(scope="module")
def report() -> Report:
    return fuzz(cases=CASES, seed=20261123)


def _failures(report: Report, kinds: tuple[str, ...]) -> str:
    listed = [
        f"case {c.index} ({c.fmt}) {o.kind}: {o.detail[-400:]}" for c, o in report.failures if o.kind in kinds
    ]
    return "\n".join(report.lines() + listed[:5])


def test_480_cases_of_every_class_give_no_traceback_hang_or_miscount(report: Report) -> None:
    kinds = ("traceback", "hang", "unclear", "internal", "over_1gb", "miscounted")
    assert not any(report.kinds[k] for k in kinds), _failures(report, kinds)
    assert report.cases == CASES and all(report.by_format[c] == CASES // len(CLASSES) for c in CLASSES)
    assert 0 < report.peak_rss < GB, report.lines()  # measured per case, in its own process
    # The mutations really are bad input: most cases are rejected, each with a clear error, and
    # every damaged results directory was read by two commands without a failure.
    assert report.kinds["rejected"] > 0.6 * (report.cases - report.by_format["results"]), report.lines()
    assert report.kinds["handled"] == report.by_format["results"], _failures(report, ("control",))
    assert report.row_level > 0 and report.kinds["accepted"] > 0, report.lines()


def test_no_message_echoes_a_control_character_raw(report: Report) -> None:
    assert report.kinds["control"] == 0, _failures(report, ("control",))
