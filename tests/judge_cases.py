"""Class cases for the deterministic judge: ``{class name: [(claim, answer, expected), ...]}``,
where ``expected`` is a label or ``abstain:<kind>``; one parametrized test per case."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from atlasrun.judge.deterministic import DeterministicJudge

Cases = dict[str, list[tuple[str, str, str]]]
JUDGE = DeterministicJudge()


def each_case(cases: Cases) -> Callable[[Callable[..., Any]], Any]:
    """``@each_case(CASES)`` on ``def test(claim, answer, expected)``: ids ``<class>-<i>``."""
    return pytest.mark.parametrize(
        ("claim", "answer", "expected"),
        [case for group in cases.values() for case in group],
        ids=[f"{name}-{i}" for name, group in cases.items() for i in range(len(group))],
    )


def check_case(claim: str, answer: str, expected: str) -> None:
    """The judge's verdict is ``expected``: that label, or an abstention of that kind."""
    verdict = JUDGE.judge_sync(claim, answer)
    if expected.startswith("abstain:"):
        assert verdict.abstention is not None and verdict.label is None, verdict.reason
        assert verdict.abstention.kind == expected.split(":")[1], verdict.reason
    else:
        assert verdict.abstention is None and verdict.label == expected, verdict.reason
