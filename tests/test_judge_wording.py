"""Issue 20, fifth pass: false passes found on other graders' wording (judge_labels_dev5/_dev6,
formerly blind sets), fixed as classes. One group per class, worded apart from the sets; each
group also holds the plain pass the rule must leave alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atlasrun.cli import main
from judge_cases import Cases, check_case, each_case

DATA = Path(__file__).parent / "data"

CASES: Cases = {
    "a figure with the claim's digits in another order is another figure": [
        (
            "The winning jump was 7.48 m.",
            "The long jump was won at 7.84 m in the third round.",
            "not_fulfilled",
        ),
        ("The winning jump was 7.48 m.", "The long jump was won at 7.48 m in the third round.", "fulfilled"),
        # whole figures keep MCP-Atlas's 5% tolerance
        ("The invoice total is 3,650 dollars.", "The invoice total is $3,560.", "fulfilled"),
        ("The race was won in 1:58:13.", "The winner crossed the line in 1:58:31.", "not_fulfilled"),
    ],
    "one answer figure never stands for two claim figures": [
        ("Signups rose from 5.2% to 5.6%.", "Signups are currently at 5.6%.", "partially_fulfilled"),
        ("Signups rose from 5.2% to 5.6%.", "Signups rose from 5.2% to 5.6% this quarter.", "fulfilled"),
    ],
    "a rate or amount said per another period": [
        (
            "The service allows 300 uploads per hour.",
            "The service allows 300 uploads per second.",
            "not_fulfilled",
        ),
        ("The weekly fee is $45.", "The fee is $45, charged annually.", "not_fulfilled"),
        ("The weekly fee is $45.", "You pay $45 every week.", "fulfilled"),
    ],
    "items written as tickers or codes are key facts": [
        (
            "The two biggest positions are TSLA and AMD.",
            "The two biggest positions are TSLA and INTC.",
            "partially_fulfilled",
        ),
        (
            "The two biggest positions are TSLA and AMD.",
            "The two biggest positions are ORCL and INTC.",
            "not_fulfilled",
        ),
        (
            "The two biggest positions are TSLA and AMD.",
            "Your two biggest positions are TSLA and AMD.",
            "fulfilled",
        ),
    ],
    "an acronym is part of the name it leads": [
        (
            "The project is licensed under the BSD License.",
            "The project is licensed under the GPL License.",
            "abstain:name",
        ),
        (
            "The project is licensed under the BSD License.",
            "It is released under the BSD License.",
            "fulfilled",
        ),
    ],
    "a matched count that counts something else": [
        (
            "The table has 512 rows and 7 columns.",
            "The table has 7 rows and 512 columns.",
            "abstain:relation",
        ),
        ("The table has 512 rows and 7 columns.", "The table has 512 rows and 7 columns.", "fulfilled"),
        ("The log shows 64 failed logins.", "The log shows 64 successful logins.", "abstain:relation"),
        ("The log shows 64 failed logins.", "The log shows 64 failed logins since Monday.", "fulfilled"),
    ],
    "a rough figure does not confirm a precise claim": [
        ("The town has 48,217 residents.", "The town has about 48,000 residents.", "abstain:hedged"),
        ("The town has 48,217 residents.", "The town has 48,217 residents.", "fulfilled"),
    ],
}


@each_case(CASES)
def test_each_class(claim: str, answer: str, expected: str) -> None:
    check_case(claim, answer, expected)


@pytest.mark.parametrize(
    ("name", "precision", "accuracy", "abstention"),
    # dev5's abstention 0.28 -> 0.29 with deterministic/8: a capitalised word where the claim's subject
    # goes unnamed is no longer a decisive fail (its accuracy 0.693 -> 0.735); dev6's 0.32 -> 0.33 with
    # deterministic/10: wrong fails on misread figures became abstentions (its accuracy 0.718 -> 0.750)
    [("judge_labels_dev5.jsonl", 0.90, 0.78, 0.29), ("judge_labels_dev6.jsonl", 0.80, 0.74, 0.33)],
)
def test_formerly_blind_figures(
    name: str, precision: float, accuracy: float, abstention: float, capsys: pytest.CaptureFixture[str]
) -> None:
    """The two formerly blind sets tuned on from session 14: floors at the figures reached, far from
    issue 20's goal (precision 0.95, accuracy 0.90), so that no change loses what was won."""
    assert main(["judge-eval", str(DATA / name), "--judge", "deterministic", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["fulfilled_precision"] >= precision, body
    assert body["accuracy"] >= accuracy, body
    assert body["abstention_rate"] <= abstention, body
