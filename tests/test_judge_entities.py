"""Answers that report several entities' values at once (the starter suite's answers are of this
kind): another value is no rival of the claim's when it visibly belongs to something else, a
capitalised compass word names a region, a definite description continues the sentence before,
and a figure signed against the claim's direction is a contradiction. Each class in wordings of
its own; the starter suite's reference answers themselves must all be fulfilled (``make demo``'s
replay agent)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from atlasrun.judge.deterministic import DeterministicJudge

JUDGE = DeterministicJudge()
STARTER = Path(__file__).resolve().parents[1] / "examples" / "starter" / "tasks.yaml"

CASES = [
    # another entity's value in its own clause (a name, an id, a year)
    (
        "Total revenue for 2024 was 1,350,900.",
        "Total revenue was 1,204,300 in 2023 and 1,350,900 in 2024, an increase of 146,600.",
        "fulfilled",
    ),
    (
        "Total Q2 spend across all teams was 96,400.",
        "Total Q2 spend across the four teams was 96,400 (Data 31,000, Web 24,900, Mobile 22,500, Ops 18,000). "
        "Data spent the most at 31,000.",
        "fulfilled",
    ),
    (
        "config/prod.yaml has 37 keys.",
        "config/dev.yaml has 41 keys and config/prod.yaml has 37.",
        "fulfilled",
    ),
    # a count of another thing, a total where the claim is one part
    (
        "The average salary in Support is 61,200.",
        "The Support team has 9 people. Their average salary is 61,200.",
        "fulfilled",
    ),
    (
        "The billing service logged 312 errors.",
        "The billing service logged 312 errors and the search service 88; together 400 errors in total.",
        "fulfilled",
    ),
    # ... while a rival with the claim's own words and no other entity still stops a pass
    (
        "The events table has 48 million rows.",
        "The sessions table has 48 million rows; the events table has 31 million rows.",
        "not_fulfilled",  # the events table has 31 million
    ),
    # regions named by compass words are names, not directions; a sign against the claim is not
    (
        "North grew by 12,300 and West by 4,100.",
        "Change by region: North +12,300, South +2,050, West +4,100 and East -900.",
        "fulfilled",
    ),
    (
        "The regions with growth were North and West.",
        "Growth by region: North +3%, South +1%, West -2%.",
        "abstain:contradiction",
    ),
    # a definite description continues the sentence before
    (
        "Maya Singh is the on-call engineer for the payments service.",
        "The payments service had two incidents this week. The on-call engineer is Maya Singh.",
        "fulfilled",
    ),
]


@pytest.mark.parametrize(("claim", "answer", "expected"), CASES)
def test_values_of_other_entities(claim: str, answer: str, expected: str) -> None:
    verdict = JUDGE.judge_sync(claim, answer)
    if expected.startswith("abstain:"):
        assert verdict.abstention is not None and verdict.abstention.kind == expected.split(":")[1], (
            verdict.reason
        )
    else:
        assert verdict.abstention is None and verdict.label == expected, verdict.reason


def test_every_starter_reference_answer_fulfils_its_claims() -> None:
    tasks = yaml.safe_load(STARTER.read_text())["tasks"]
    wrong = [
        f"{t['id']}: {claim!r}: {verdict.reason}"
        for t in tasks
        for claim in t["claims"]
        if (verdict := JUDGE.judge_sync(claim, t["reference_answer"])).label != "fulfilled"
    ]
    assert not wrong, "\n".join(wrong)
