"""Issue 20, fourth pass: a pass needs complete, located evidence in long answers (``judge.located``,
``judge.slots``, ``judge.compound``). One case per class, worded apart from the development sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atlasrun.cli import main
from judge_cases import Cases, check_case, each_case

DATA = Path(__file__).parent / "data"

CASES: Cases = {
    "the claim's subject holds another value (a decisive fail)": [
        (
            "The low in Lisbon on Sunday will be 19 °C.",
            "Sunday in Lisbon looks dry. The low will be 14 °C and the high 24 °C. Porto, further "
            "north, expects a low of 19 °C.",
            "not_fulfilled",
        ),
        (
            "The current release of the CLI was tagged on 2024-05-02.",
            "- **Current release:** 2.3.0, tagged on 2024-06-11 by Ines Duarte\n"
            "- **Downloads:** 41k\n\nThe release before it, 2.2.4, was tagged on 2024-05-02.",
            "not_fulfilled",
        ),
        (
            "The gateway's p95 latency was 230 ms.",
            "Over the last 24 hours the gateway served 3.1 million requests with a p50 of 95 ms and a "
            "p95 of 180 ms. The slowest route, /search, had a p95 of 230 ms.",
            "abstain:contradiction",  # not placed clearly enough for a fail: uncertain, never a pass
        ),
    ],
    "another value clearly of another subject: the pass stands": [
        (
            "The gateway's p95 latency was 180 ms.",
            "Over the last 24 hours the gateway served 3.1 million requests with a p50 of 95 ms and a "
            "p95 of 180 ms. The slowest route, /search, had a p95 of 230 ms.",
            "fulfilled",
        ),
    ],
    "a value said as a former one": [
        (
            "The project has 96 contributors.",
            "The project now lists 131 contributors (up from 96 a year ago) and 2,410 stars.",
            "not_fulfilled",
        ),
    ],
    "a rate's period and a change's sign must agree": [
        (
            "The support contract costs €9,600 per month.",
            "The renewal quote from the vendor confirms the support contract at €9,600 per year, "
            "billed annually in advance.",
            "not_fulfilled",
        ),
        (
            "The index closed up 2.4% on Friday.",
            "The index closed at 4,812 on Friday, down 2.4% on the day, its worst session since March.",
            "not_fulfilled",
        ),
    ],
    "a claim word said only in a sentence about something else": [
        (
            "The rollback was approved by Dana Kim.",
            "The original deploy was approved by Dana Kim at 09:12. The rollback at 11:40 was signed "
            "off by Victor Hale after the error rate spiked.",
            "abstain:relation",
        ),
    ],
    "a compound claim with one statement not met": [
        (
            "The outage started at 09:12 UTC and was caused by an expired certificate.",
            "The outage started at 09:12 UTC when the load balancer lost its health checks; service "
            "was back at 09:58 UTC. The root cause is still under investigation.",
            "partially_fulfilled",
        ),
    ],
    "a negated claim read against its subject's sentence": [
        (
            "The backup-verify job did not complete.",
            "Three of four jobs ran cleanly overnight; `backup-verify` failed at 03:20 with a checksum "
            "mismatch and will be retried tonight.",
            "fulfilled",
        ),
        (
            "The report-mailer job did not crash.",
            "Overnight, `report-mailer` crashed twice with a segmentation fault before the watchdog "
            "disabled it.",
            "not_fulfilled",
        ),
    ],
    "passive roles with a recipient": [
        (
            "Omar Said sent the signed contract to Julia Berg.",
            "The signed contract was sent to Omar Said by Julia Berg on 4 March, with the annex attached.",
            "not_fulfilled",
        ),
    ],
    "a revision to another name": [
        (
            "The release manager for 5.2 is Anna Novak.",
            "The release manager for 5.2 is Anna Novak. Correction: Anna handled 5.1; the release "
            "manager for 5.2 is Pedro Alves.",
            "not_fulfilled",
        ),
    ],
    "a zone named before the time in its sentence": [
        (
            "The call starts at 8 AM Chicago time.",
            "The call is set for 13:00 UTC. In Chicago (CDT) the call starts at 8:00 AM, and in Berlin "
            "(CEST) at 15:00.",
            "fulfilled",
        ),
    ],
    "a figure stated nowhere in an answer in another language": [
        (
            "The warehouse holds 4,800 pallets.",
            "Das Lager hat eine Kapazität von 3.200 Paletten und ist derzeit zu 85 % belegt. Die "
            "nächste Inventur ist für den 12. Mai geplant.",
            "not_fulfilled",
        ),
        (
            "The warehouse holds 3,200 pallets.",
            "Das Lager hat eine Kapazität von 3.200 Paletten und ist derzeit zu 85 % belegt. Die "
            "nächste Inventur ist für den 12. Mai geplant.",
            "abstain:language",
        ),
    ],
}


@each_case(CASES)
def test_each_class(claim: str, answer: str, expected: str) -> None:
    check_case(claim, answer, expected)


def test_dev3_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """The long-answer development set (tuned on, so not a held-out measure): no false pass worth
    speaking of, answered pairs mostly right; abstention is still above issue 20's 30% goal there."""
    assert (
        main(["judge-eval", str(DATA / "judge_labels_dev3.jsonl"), "--judge", "deterministic", "--json"]) == 0
    )
    body = json.loads(capsys.readouterr().out)
    assert body["n"] + body["abstained"] >= 200
    assert body["fulfilled_precision"] >= 0.95, body
    assert body["accuracy"] >= 0.90, body
    assert body["abstention_rate"] <= 0.36, body
