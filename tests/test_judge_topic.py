"""What a claim is about and what it states (``judge.topic``): an answer that names only the claim's
subject covers none of its key details; one that gives every stated value without repeating the
subject's name covers them all. Also two classes read the same way on any text: a part and its whole
given the other way round ("8 of 3"), and an answer that calls its own figure an estimate."""

from __future__ import annotations

import asyncio

import pytest

from atlasrun.judge.deterministic import VERSION, DeterministicJudge
from atlasrun.judge.matching import tally_facts
from atlasrun.judge.reading import read
from atlasrun.judge.topic import in_topic, only_topic, unnamed_topic, verb_at

JUDGE = DeterministicJudge()


def test_version() -> None:
    assert (
        VERSION.startswith("deterministic/") and int(VERSION.split("/")[1]) >= 9
    )  # topic rules since /8, /9


@pytest.mark.parametrize(
    ("claim", "verb"),
    [
        ("Gate B12 closes at 18:40.", "closes"),
        ("Headcount at the end of Q2 FY2025 was 4,610.", "was"),
        ("The CEO of Helix Labs is Dana Ortiz.", "is"),
        ("Ajax beat PSV 3-2.", "beat"),
    ],
)
def test_the_verb_splits_topic_from_assertion(claim: str, verb: str) -> None:
    facts = read(claim, claim=True)
    at = verb_at(facts)
    assert at is not None and facts.text[at:].startswith(verb)


def test_facts_before_the_verb_are_the_topic() -> None:
    facts = read("The CEO of Helix Labs is Dana Ortiz.", claim=True)
    assert in_topic(facts, "Helix Labs") is True
    assert in_topic(facts, "Dana Ortiz") is False
    assert in_topic(facts, "Nowhere Inc") is None


@pytest.mark.parametrize(
    ("claim", "answer", "label"),
    [
        # only the subject: none of what the claim states
        ("Gate B12 closes at 18:40.", "Gate B12 is in Terminal 2, next to the lounge.", "not_fulfilled"),
        (
            "The CEO of Helix Labs is Dana Ortiz.",
            "I looked up Helix Labs in the company registry; it was founded in 2015 in Lisbon.",
            "not_fulfilled",
        ),
        (
            "The median build time last week was 7.5 minutes.",
            "You asked about the median build time last week. The CI dashboard tracks it per pipeline.",
            "not_fulfilled",
        ),
        # the subject and some of the statement's own words: partly covered
        (
            "Gate B12 closes at 18:40.",
            "Gate B12 closes before the evening departures; the board shows no time yet.",
            "partially_fulfilled",
        ),
        # every stated value without the subject's name: covered
        ("The Redis cache holds 2.4 GB of data.", "The cache holds 2.4 GB of data right now.", "fulfilled"),
        # the doer of an action is what the claim states, not its topic
        ("Alice Nguyen leads Project Falcon.", "Project Falcon is led by Bob Stone.", "not_fulfilled"),
    ],
)
def test_topic_and_assertion(claim: str, answer: str, label: str) -> None:
    assert JUDGE.judge_sync(claim, answer).label == label


def test_another_word_where_the_subject_is_not_named_is_uncertain() -> None:
    """A capitalised word where the claim's subject goes unnamed may be the subject's own name
    ("Jezero Crater" for Mars) or another subject ("Memcached" for Redis): neither a pass nor a fail."""
    verdict = JUDGE.judge_sync(
        "The Redis cache holds 2.4 GB of data.", "The Memcached cache holds 2.4 GB of data."
    )
    assert verdict.abstention is not None and verdict.abstention.kind == "name", verdict.reason


def test_the_rules_themselves() -> None:
    claim = read("Gate B12 closes at 18:40.", claim=True)
    answer = read("Gate B12 is in Terminal 2.")
    assert only_topic(claim, answer, tally_facts(claim, answer))
    claim = read("The Redis cache holds 2.4 GB of data.", claim=True)
    answer = read("The cache holds 2.4 GB.")
    assert unnamed_topic(claim, tally_facts(claim, answer))
    answer = read("Redis holds 2.4 GB.")
    assert not unnamed_topic(claim, tally_facts(claim, answer))  # nothing missing


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        ("The backfill job finished 8 of 3 shards.", "not_fulfilled"),
        ("The backfill job finished 3 of 8 shards.", "fulfilled"),
        ("The backfill job finished 3 out of 8 shards overnight.", "fulfilled"),
    ],
)
def test_a_part_and_its_whole_swapped(answer: str, label: str) -> None:
    assert JUDGE.judge_sync("The backfill job finished 3 of 8 shards.", answer).label == label


def test_a_spaced_score_is_the_score() -> None:
    verdict = JUDGE.judge_sync("Ajax beat PSV 3-2.", "Final score: Ajax 3 – 2 PSV, so Ajax beat PSV.")
    assert verdict.label == "fulfilled"


def test_an_estimate_is_uncommitted() -> None:
    verdict = JUDGE.judge_sync(
        "The channel has 480 members.",
        "The channel has about 490 members (the member list was cut off, so this is an estimate).",
    )
    assert verdict.label == "partially_fulfilled"


@pytest.mark.parametrize(
    ("claim", "answer", "label"),
    [
        # what the answer says it could not find is missing, not denied: partly covered
        (
            "The invoice INV-3301 is for 4 licences at Norrland Data AB.",
            "Invoice INV-3301 covers 4 licences. The PDF I opened doesn't show the customer's name.",
            "partially_fulfilled",
        ),
        (
            "The deploy created 5 pods using 2.5 GB of memory.",
            "The deploy created five pods; the metrics endpoint didn't return memory figures, so I don't know the total.",
            "partially_fulfilled",
        ),
        # ... but the claim's own verb negated is a denial
        (
            "The release notes include the CVE fix.",
            "The release notes don't include the CVE fix.",
            "not_fulfilled",
        ),
        # ... and so is a sentence about the claim's own facts
        (
            "The ferry from Split to Hvar takes 1 h 5 min.",
            "The fastest ferry I found goes from Split to Brač in 1 h 5 min. The timetable didn't return any Split–Hvar sailings.",
            "not_fulfilled",
        ),
        # a refusal for the rest, once what the claim states of its subject is given: partly covered
        (
            "The oldest open ticket is OPS-118, opened on 3 May 2024.",
            "The oldest open ticket is OPS-118. I couldn't load its history, so I can't give the opening date.",
            "partially_fulfilled",
        ),
        # a refusal with only the subject: nothing of the claim
        (
            "The sum of the values in totals.csv is 908.",
            "I could not open totals.csv, so I cannot compute the sum.",
            "not_fulfilled",
        ),
    ],
)
def test_not_saying_is_not_denying(claim: str, answer: str, label: str) -> None:
    assert JUDGE.judge_sync(claim, answer).label == label, JUDGE.judge_sync(claim, answer).reason


@pytest.mark.parametrize(
    ("claim", "answer", "label"),
    [
        # a speed in mph is a speed: 24 km/h is 14.9 mph
        (
            "The wind in Reno is 15 mph.",
            "Reno right now: 61°F and clear, wind from the south at 24 km/h.",
            "fulfilled",
        ),
        (
            "The wind in Reno is 15 mph.",
            "Reno right now: 61°F and clear, wind from the south at 40 km/h.",
            "not_fulfilled",
        ),
        # a temperature converted and rounded to a whole degree on either scale
        ("The overnight low in Boise was 28°F.", "Boise bottomed out at -2°C overnight.", "fulfilled"),
        ("The overnight low in Boise was 28°F.", "Boise bottomed out at -6°C overnight.", "not_fulfilled"),
        # a street written out
        ("The office is at 40 Harbour St.", "The office is at 40 Harbour Street, second floor.", "fulfilled"),
        # a compass letter is contradicted by another letter, not by a word
        ("The depot is at 47.61° N, 122.33° W.", "The depot is at 47.61° N, 122.33° E.", "not_fulfilled"),
    ],
)
def test_units_and_letters(claim: str, answer: str, label: str) -> None:
    verdict = JUDGE.judge_sync(claim, answer)
    assert verdict.label == label, verdict.reason


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        ("Heads-up: the museum does not open on Mondays, so plan the visit for Tuesday.", "fulfilled"),
        ("The museum is open on Mondays from 10:00.", "not_fulfilled"),
        ("The museum is not closed on Mondays.", "not_fulfilled"),
    ],
)
def test_a_negated_opposite_affirms(answer: str, label: str) -> None:
    verdict = JUDGE.judge_sync("The museum is closed on Mondays.", answer)
    assert verdict.label == label, verdict.reason


def test_a_rival_figure_right_after_a_comma() -> None:
    """A figure's span opens with the space before it; after ", " that space is in no clause (this
    raised StopIteration inside the rules, found by blind set 7)."""
    verdict = JUDGE.judge_sync(
        "The events table holds 48 million rows.",
        "The events table holds 48 million rows, 31 million events are archived.",
    )
    assert verdict.label == "fulfilled", verdict.reason


def test_a_fault_in_the_rules_is_a_failed_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(claim: str, response: str) -> None:
        raise StopIteration

    judge = DeterministicJudge()
    monkeypatch.setattr(judge, "judge_sync", broken)
    verdict = asyncio.run(judge.judge("The job took 4 minutes.", "4 minutes."))
    assert verdict.label is None and verdict.error is not None
    assert "deterministic judge fault: StopIteration" in verdict.error
