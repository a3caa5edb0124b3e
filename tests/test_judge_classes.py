"""The deterministic judge on issue 20's failure classes, each in wordings of its own: a verdict only
on decisive evidence, an abstention (typed) where a rule reading of the text is not decisive, and
never a pass for a wrong answer. A hedged right value and a compound claim met in part are
partially fulfilled. The dev set ``judge_dev_classes.jsonl`` was tuned on (it guards
against regressions); the held-out measure is ``judge_labels_blind.jsonl``, run by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atlasrun.cli import main
from atlasrun.scoring.judge_eval import load_labels
from judge_cases import Cases, check_case, each_case

DATA = Path(__file__).parent / "data"

# (claim, answer, expected): a label, or "abstain:<kind>"
CASES: Cases = {
    "a correction anywhere beats a match": [
        (
            "The nightly ETL loaded 58,200 rows into the warehouse.",
            "The nightly ETL loaded 58,200 rows into the warehouse per the first log line. Hmm, that "
            "line is from the staging load; the warehouse step reports 61,940 rows loaded.",
            "not_fulfilled",
        ),
        (
            "The review is booked in Orion 3.",
            "The review is booked in Orion 3. Update: the booking was moved, the review is now in Vega 1.",
            "not_fulfilled",
        ),
        (
            "The report lists 9 open risks.",
            "The report listed 7 open risks. Correction: 9 risks are open; 2 were reopened this week.",
            "fulfilled",
        ),
        (
            "The container image is 412 MB.",
            "The listing shows 412 MB. Correction: the final image is 530 MB; the 412 MB figure is the "
            "compressed size.",
            "not_fulfilled",  # the final image is 530 MB: 412 MB is said of the compressed size
        ),
    ],
    "negation both ways": [
        (
            "The cron job ran successfully on Friday.",
            "On Friday the cron job did not run at all because the node was drained.",
            "abstain:negation",
        ),
        (
            "The bucket is public.",
            "The bucket used to be public; it is private now.",
            "abstain:contradiction",
        ),
        (
            "The build pipeline does not use caching.",
            "The build pipeline does not use caching; every run downloads all dependencies.",
            "fulfilled",
        ),
        (
            "The backup job completed successfully on Monday.",
            "The backup job finished without errors on Monday.",
            "fulfilled",
        ),
    ],
    "roles from the sentence's structure": [
        (
            "Priya Nair approved the pull request opened by Tom Becker.",
            "Pull request #882 was opened by Priya Nair on Tuesday and approved by Tom Becker.",
            "not_fulfilled",  # Tom Becker approved it, in the sentence that names Priya Nair too
        ),
        (
            "Laura Kim interviewed Daniel Osei.",
            "Daniel Osei was interviewed by Laura Kim on 3 May.",
            "fulfilled",
        ),
        (
            "Laura Kim interviewed Daniel Osei.",
            "Laura Kim was interviewed by Daniel Osei on 3 May.",
            "not_fulfilled",
        ),
        (
            "The on-call engineers are Ana Ruiz, Ben Cole and Chen Wei.",
            "On call: Chen Wei (primary), Ana Ruiz (secondary) and Ben Cole (shadow).",
            "fulfilled",
        ),
        ("Marta Silva manages Jonas Berg.", "Jonas Berg reports to Marta Silva.", "fulfilled"),
    ],
    "times compared after conversion": [
        (
            "The window starts at 22:00 UTC.",
            "The window starts at 23:00 CET and lasts two hours.",
            "fulfilled",
        ),
        (
            "The window starts at 22:00 UTC.",
            "The window starts at 22:00 CET and lasts two hours.",
            "not_fulfilled",
        ),
        ("The release is at 16:00 CEST.", "The release goes out at 16:00.", "abstain:time_zone"),
        ("The standup is at 9:30 AM Eastern.", "The standup is at 6:30 AM Pacific.", "abstain:time_zone"),
    ],
    "full names": [
        (
            "The incident commander was Grace Okafor.",
            "Daniel Okafor was incident commander.",
            "not_fulfilled",
        ),
        ("The ticket was closed by Maria Lopez.", "The ticket was closed by Lopez.", "abstain:name"),
    ],
    "locale-aware numbers, units, commit prefixes": [
        (
            "The measured latency was 3.5 ms.",
            "The probe measured 3,5 ms at p50 and 9,8 ms at p99.",
            "fulfilled",
        ),
        ("The population is 1.2 million.", "The district had 1.198.400 inhabitants.", "fulfilled"),
        ("The contract value is CHF 1,250,000.", "The contract value is CHF 1'250'000.", "fulfilled"),
        ("The stock is 12,500 units.", "Stock: 12.500 units on hand.", "abstain:unit"),
        ("The budget is €1,500,000.", "The budget is 1,5 Mio. €.", "fulfilled"),
        ("The backup is 40 GB.", "The archive size is 40.", "abstain:unit"),
        ("The run took 45 minutes.", "The run took 45 seconds.", "not_fulfilled"),
        ("The job took 90 minutes.", "The job took 1h 30m from start to finish.", "fulfilled"),
        ("The fix was merged in commit 4f9c2a1e7b3d.", "The fix landed in 4f9c2a1 on main.", "fulfilled"),
        ("The fix was merged in commit 4f9c2a1e7b3d.", "The fix landed in 4f9c2b8 on main.", "not_fulfilled"),
        ("The meeting is on 3 April 2025.", "The meeting is on 04/03/2025.", "abstain:unit"),
    ],
    "restated questions, hedges, other languages": [
        (
            "The export job processed 1,240 records.",
            "You asked whether the export job processed 1,240 records. I'll check the logs.",
            "not_fulfilled",
        ),
        (
            "The server runs Ubuntu 22.04.",
            "My best guess is that the server runs Ubuntu 22.04.",
            "partially_fulfilled",
        ),
        (
            "The dataset contains 3,400 images.",
            "Based on the folder sizes the dataset likely contains about 3,400 images.",
            "partially_fulfilled",
        ),
        (
            "The order contains 3 items.",
            "El pedido contiene 3 artículos y se enviará mañana desde el almacén.",
            "abstain:language",
        ),
    ],
    "facts said together, of the claim's relation": [
        (
            "Sofia Marin is the project lead for Atlas.",
            "The Atlas project page lists Omar Haddad as project lead. Sofia Marin is a contributor.",
            "abstain:relation",
        ),
        (
            "The invoice was issued on 2024-02-01 for $4,500.",
            "| Invoice | Date | Amount |\n|---|---|---|\n| INV-88 | 2024-02-01 | $4,750 |\n"
            "| INV-89 | 2024-03-01 | $4,500 |",
            "not_fulfilled",  # the row of the claim's date holds another amount
        ),
        (
            "The invoice was issued on 2024-02-01 for $4,500.",
            "| Invoice | Date | Amount |\n|---|---|---|\n| INV-88 | 2024-02-01 | $4,500 |\n"
            "| INV-89 | 2024-03-01 | $4,750 |",
            "fulfilled",
        ),
        (
            "The largest table is events with 48 million rows.",
            "The largest table is sessions with 48 million rows; events is second with 31 million.",
            "abstain:contradiction",  # "events" is said with 31 million, not where 48 million is
        ),
        (
            "The cluster has 12 nodes and runs Kubernetes 1.29.",
            "The cluster has 12 nodes. I could not retrieve the Kubernetes version: the API timed out.",
            "partially_fulfilled",
        ),
    ],
    "expectations, targets and plans are not findings": [
        (
            "The nightly backup wrote 310 GB.",
            "The runbook says the nightly backup is expected to write 310 GB, but last night's job log "
            "shows 268 GB written before it finished.",
            "not_fulfilled",
        ),
        (
            "The queue holds 5,000 messages.",
            "If the producer keeps its current rate, the queue would hold 5,000 messages by noon.",
            "abstain:hedged",
        ),
        (
            "The upgrade to Redis 7 was completed.",
            "The upgrade to Redis 7 is planned for the next maintenance window; production still runs Redis 6.",
            "not_fulfilled",
        ),
    ],
    "a value changed away from the claim's": [
        (
            "The worker pool has 8 workers.",
            "The autoscaler scaled the worker pool from 8 workers to 14 at 09:12 and it has stayed there.",
            "not_fulfilled",
        ),
        (
            "The retention period is 30 days.",
            "The retention period was 30 days until the policy change in May. It is 90 days now.",
            "abstain:contradiction",
        ),
    ],
    "compound claims: parts right, parts wrong or missing": [
        (
            "The library is licensed under Apache-2.0 and has 3,100 stars.",
            "The library is licensed under Apache-2.0. The GitHub page shows 2,450 stars and 310 forks.",
            "partially_fulfilled",
        ),
        (
            "The train leaves at 07:40 and arrives at 10:05.",
            "The timetable shows the train leaving at 07:40. The arrival time was not listed on the page.",
            "partially_fulfilled",
        ),
        (
            "The newest release is 5.1 and it was published in 2023.",
            "The newest release is 5.1. I wasn't able to find when it was published.",
            "partially_fulfilled",
        ),
        (
            "The biggest customer is Northwind, with 120 seats.",
            "The biggest customer is Contoso, with 120 seats.",
            "not_fulfilled",
        ),
        (
            "The latest stable version is 4.2.",
            "The latest stable version might be 4.2.",
            "partially_fulfilled",
        ),
    ],
    "sections, item labels and neighbouring sentences": [
        (
            "The cache service runs 2 replicas.",
            "Current deployments:\n\n### web\n- replicas: 6\n- image: web@sha256:aa11\n\n### cache\n"
            "- replicas: 2\n- image: cache@sha256:bb22",
            "fulfilled",
        ),
        (
            "The web service runs 2 replicas.",
            "Current deployments:\n\n### web\n- replicas: 6\n- image: web@sha256:aa11\n\n### cache\n"
            "- replicas: 2\n- image: cache@sha256:bb22",
            "not_fulfilled",
        ),
        (
            "Omar Haddad owns the ledger repository.",
            "Repository owners:\n- ledger: Julia Brandt\n- payments: Omar Haddad",
            "not_fulfilled",
        ),
        (
            "The newest object in the logs bucket was written on 2024-09-03.",
            "I listed the logs bucket sorted by modification time. The newest object was written on "
            "2024-09-03 at 23:58 UTC; the bucket holds 14,220 objects in all.",
            "fulfilled",
        ),
        (
            "The invoice was issued on 2024-02-01.",
            "I looked up the customer's invoices. Which one do you mean? The invoice I found was issued on 2024-02-01.",
            "fulfilled",
        ),
    ],
    "a table states the claim's figure in the claim's row and column": [
        (
            "The Porto office has 42 employees.",
            "Headcount by office:\n\n| Office | Employees | Opened |\n|---|---|---|\n| Lisbon | 42 | 2019 |\n"
            "| Porto | 17 | 2021 |",
            "not_fulfilled",
        ),
        (
            "The Porto office has 17 employees.",
            "Headcount by office:\n\n| Office | Employees | Opened |\n|---|---|---|\n| Lisbon | 42 | 2019 |\n"
            "| Porto | 17 | 2021 |",
            "fulfilled",
        ),
        (
            "The payment on 2024-04-10 was €1,200.",
            "Payments received:\n\n| Ref | Date | Sum |\n|---|---|---|\n| P-1 | 2024-04-10 | €1,350 |\n"
            "| P-2 | 2024-05-10 | €1,200 |",
            "not_fulfilled",
        ),
    ],
    "paths by file name, failures of something else": [
        (
            "The file /srv/app/settings.toml sets debug to false.",
            "In /srv/app the settings.toml file sets debug to false and log_level to info.",
            "fulfilled",
        ),
        (
            "The file /srv/app/settings.toml sets debug to false.",
            "In /srv/app the file /srv/old/settings.toml sets debug to false.",
            "not_fulfilled",  # the file name in another folder: another file
        ),
        (
            "The deploy failed because the image was missing.",
            "The deploy failed because the image was missing from the registry, so the kubelet could not pull it.",
            "fulfilled",
        ),
        (
            "The repository has 40 stars.",
            "I could not reach the GitHub API, so I cannot tell the star count.",
            "not_fulfilled",
        ),
    ],
    "versions, binary units, coarse dates": [
        ("The nodes run Kubernetes 1.30.", "All nodes report Kubernetes version v1.30.2.", "fulfilled"),
        (
            "The pod's memory limit is 256 MiB.",
            "The pod sets a memory request of 256 MiB and a memory limit of 512 MiB.",
            "not_fulfilled",  # the limit is 512 MiB; 256 MiB is the request
        ),
        (
            "The certificate expires on 2025-01-15 and covers 3 domains.",
            "The certificate covers 3 domains and expires in January 2025; the exact day was cut off.",
            "partially_fulfilled",
        ),
    ],
}


@each_case(CASES)
def test_each_class(claim: str, answer: str, expected: str) -> None:
    check_case(claim, answer, expected)


def _eval_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["judge-eval", str(path), "--judge", "deterministic", "--json"]) == 0
    body: dict[str, Any] = json.loads(capsys.readouterr().out)
    return body


def test_dev_set_no_false_pass_regression(capsys: pytest.CaptureFixture[str]) -> None:
    """The class dev set (tuned on): precision and accuracy at the goal; its abstention is above the
    goal's 30% because every pair is a hard case by design (the bound guards against regressions)."""
    path = DATA / "judge_dev_classes.jsonl"
    body = _eval_json(path, capsys)
    assert body["n"] + body["abstained"] + body["failed"] == len(load_labels(path)) >= 230
    assert body["fulfilled_precision"] >= 0.95, body
    assert body["accuracy"] >= 0.93, body
    assert body["abstention_rate"] <= 0.36, body
    categories = {p.category for p in load_labels(path)}
    assert {"correction", "negation", "roles", "timezone", "names", "numbers_locale", "units"} <= categories
    assert {"commit", "restated", "hedged", "language", "relation", "no_key_facts", "lists"} <= categories
    assert {
        "expected",
        "from_to",
        "compound_wrong",
        "compound_missing",
        "heading_list",
        "neighbour",
    } <= categories
