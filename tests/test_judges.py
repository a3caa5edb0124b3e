"""Judges and claims scoring."""

from __future__ import annotations

import pytest

from atlasrun.judge.base import ClaimVerdict
from atlasrun.judge.deterministic import DeterministicJudge
from atlasrun.judge.llm import JudgeOutputError, parse_judge_output
from atlasrun.scoring.claims import score_claims

judge = DeterministicJudge()


@pytest.mark.parametrize(
    "claim,response,label",
    [
        # numbers: within 5%, outside 5%
        (
            "Total revenue in Q1 was 1,250,000 dollars",
            "Q1 revenue came to $1.23 million in total.",
            "fulfilled",
        ),
        (
            "Total revenue in Q1 was 1,250,000 dollars",
            "Q1 revenue came to $1.1 million in total.",
            "not_fulfilled",
        ),
        # percentages: within 1 point; 0.5 == 50%
        ("The return rate is 12.5%", "the return rate works out at 13.4 percent", "fulfilled"),
        ("The return rate is 12.5%", "the return rate is 14%", "not_fulfilled"),
        (
            "Half of the orders shipped late, a share of 50%",
            "A share of 0.5 of orders shipped late",
            "fulfilled",
        ),
        # years and small counts are exact
        ("The repository was created in 2021", "The repository dates from 2022.", "not_fulfilled"),
        ("There are 3 open issues", "There are 3 open issues right now.", "fulfilled"),
        ("There are 3 open issues", "There are 4 open issues right now.", "not_fulfilled"),
        # entities, quoted names, identifiers, markdown
        (
            "The component with the fewest lines is AspectRatio",
            "**AspectRatio** has the fewest lines.",
            "fulfilled",
        ),
        ('The dependency version is "^1.0.3"', "It requires version ^1.0.3", "fulfilled"),
        ("Alice Nguyen leads Project Falcon", "Project Falcon is led by Alice Nguyen.", "fulfilled"),
        # another name where the claim's should be: contradicted, never partially right
        ("Alice Nguyen leads Project Falcon", "Project Falcon is led by Bob Stone.", "not_fulfilled"),
        ("The latest commit is 3f2a9c1 by Dana Ito", "Nothing relevant here.", "not_fulfilled"),
        ("The report was filed on 2026-03-02", "Filed 2026-03-02.", "fulfilled"),
        # possessives are not quotes; commit hashes are exact identifiers, not numbers
        (
            "Marcus Webb's latest commit is 'Fix bug'",
            "The latest commit by Marcus Webb is 'Fix bug'",
            "fulfilled",
        ),
        ("The latest commit is 17306a2", "The latest commit is 17999a2", "not_fulfilled"),
        ("The latest commit is 17306a2", "The latest commit is 17306a2.", "fulfilled"),
    ],
)
def test_deterministic_labels(claim: str, response: str, label: str) -> None:
    verdict = judge.judge_sync(claim, response)
    assert verdict.label == label, verdict.reason


def test_coverage_pass_and_reported_thresholds() -> None:
    verdicts = [
        ClaimVerdict.labelled("a", "fulfilled", ""),
        ClaimVerdict.labelled("b", "partially_fulfilled", ""),
        ClaimVerdict.labelled("c", "fulfilled", ""),
        ClaimVerdict.labelled("d", "not_fulfilled", ""),
    ]
    score = score_claims(verdicts)
    assert score.coverage == pytest.approx(0.625) and score.passed is False
    assert score.passed_at == {"0.5": True, "0.75": False, "0.9": False}
    assert score_claims(verdicts[:3]).passed is True  # 2.5 / 3 = 0.83


def test_judge_failure_is_excluded_never_zero() -> None:
    verdicts = [ClaimVerdict.labelled("a", "fulfilled", ""), ClaimVerdict.failed("b", "garbage")]
    score = score_claims(verdicts)
    assert score.coverage is None and score.passed is None and score.judge_failures == 1


def test_judge_output_parsing() -> None:
    text = '```json\n{"coverage_outcome": "Partially Fulfilled", "justification": "x", "confidence": 2}\n```'
    assert parse_judge_output(text) == ("partially_fulfilled", "x", 1.0)
    for garbage in ("I think it is fulfilled", '{"coverage_outcome": "maybe"}', "{not json}"):
        with pytest.raises(JudgeOutputError):
            parse_judge_output(garbage)
