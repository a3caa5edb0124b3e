"""The deterministic judge abstains when its evidence is not decisive (issue 20, section 1).

Per class: a contradiction anywhere beats a match, negation both ways, roles from the sentence's
structure, zoned times, full names, locale-aware numbers and units, commit-hash prefixes,
restated questions, hedges, other languages, claims without key facts. Then the run: alone, an
abstained claim is recorded ``uncertain`` and the task is a judge error (never scored); followed by
an LLM judge, exactly the abstained claims go to it (the scripted provider's request log says so).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atlasrun.errors import ErrorKind
from atlasrun.judge.base import UNCERTAIN, Abstention
from atlasrun.judge.deterministic import DeterministicJudge
from atlasrun.judge.llm import LLMJudge
from atlasrun.judge.prompt import CLAIM_JUDGE_PROMPT
from atlasrun.runner.local import run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.scoring.claims import judge_chain, score_claims
from atlasrun.scoring.result import TaskResult
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import write_run, write_tasks

judge = DeterministicJudge()

CASES = [
    # a contradiction anywhere beats a match: self-corrections, another candidate for the same quantity
    (
        "The export job processed 1,240 records.",
        "The job processed 1,240 records in its first pass. Actually, after the retry pass the final count was 1,310 records.",
        "not_fulfilled",
    ),
    (
        "The export job processed 1,310 records.",
        "The job processed 1,240 records in its first pass. Actually, after the retry pass the final count was 1,310 records.",
        "fulfilled",
    ),
    (
        "The average response time was 230 ms.",
        "The average response time was 230 ms over the last day. The average response time was 310 ms according to the second panel.",
        "abstain:contradiction",
    ),
    (
        "The deployment took 14 minutes.",
        "The deployment took 14 minutes end to end; the previous release took 22 minutes last week.",
        "fulfilled",
    ),
    (
        "Alice Chen approved pull request #214.",
        "Pull request #214 was opened by Alice Chen on Monday. Bob Martins approved it on Tuesday.",
        "abstain:role",
    ),
    # negation, both ways
    (
        "The staging database is not publicly accessible.",
        "Its security group allows 0.0.0.0/0, so the staging database is publicly accessible.",
        "not_fulfilled",
    ),
    (
        "The staging database is not publicly accessible.",
        "The staging database is not publicly accessible; only the bastion host can reach it.",
        "fulfilled",
    ),
    (
        "The nightly build did not fail last night.",
        "The nightly run stopped at the packaging step.",
        "abstain:negation",
    ),
    ("The user account jdoe is active.", "The user jdoe is not active.", "not_fulfilled"),
    # roles from the sentence's structure
    ("Sofia Rinaldi manages Tomas Berg.", "Sofia Rinaldi is managed by Tomas Berg.", "not_fulfilled"),
    ("Sofia Rinaldi manages Tomas Berg.", "Tomas Berg is managed by Sofia Rinaldi.", "fulfilled"),
    ("Sofia Rinaldi manages Tomas Berg.", "Tomas Berg reports to Sofia Rinaldi.", "fulfilled"),
    ("Sofia Rinaldi manages Tomas Berg.", "Sofia Rinaldi reports to Tomas Berg.", "not_fulfilled"),
    (
        "Lena Okafor, Priya Natarajan and Diego Alvarez are on the on-call rotation.",
        "The on-call rotation is Diego Alvarez, Lena Okafor and Priya Natarajan.",
        "fulfilled",
    ),
    (
        "The service checkout-api calls the service payments-api.",
        "payments-api is called by checkout-api on every order.",
        "fulfilled",
    ),
    # times with zones
    (
        "The maintenance window starts at 22:00 UTC.",
        "The maintenance window starts at 22:00 CET.",
        "not_fulfilled",
    ),
    (
        "The maintenance window starts at 22:00 UTC.",
        "The maintenance window starts at 23:00 CET.",
        "fulfilled",
    ),
    ("The standup is at 9:30 AM PST.", "The standup is at 17:30 UTC every weekday.", "fulfilled"),
    ("The incident began at 14:05 UTC.", "The first alert fired at 14:05 local time.", "abstain:time_zone"),
    ("The call is at 15:00 ET.", "The call is at 20:00 UTC.", "abstain:time_zone"),
    # full multi-word names
    (
        "The contract was signed by John Peterson.",
        "The contract was signed by Jane Peterson.",
        "not_fulfilled",
    ),
    ("The author of the novel is Elena Ferrante.", "Its author is Ferrante.", "abstain:name"),
    ("The author of the novel is Elena Ferrante.", "The novel's author is E. Ferrante.", "fulfilled"),
    # locale-aware numbers, units, commit hashes
    ("The measured distance is 3.5 km.", "The measured distance is 3,5 km.", "fulfilled"),
    ("The total revenue was 1,234,567.89 EUR.", "Total revenue: 1.234.567,89 EUR.", "fulfilled"),
    ("The price is 1,250 CHF.", "The listed price is CHF 1'250.", "fulfilled"),
    ("The measured distance is 3.5 km.", "The measured distance is 3.5.", "abstain:unit"),
    ("The measured distance is 3.5 km.", "The measured distance in km is 3.5.", "fulfilled"),
    ("The monthly cost is $1,200.", "The monthly cost is €1,200.", "not_fulfilled"),
    (
        "The fix was made in commit 3e1f9a7c2b4d5e6f708192a3b4c5d6e7f8091a2b.",
        "The fix landed in commit 3e1f9a7.",
        "fulfilled",
    ),
    (
        "The fix was made in commit 3e1f9a7.",
        "The fix landed in commit 3e1f9a7c2b4d5e6f708192a3b4c5d6e7f8091a2b.",
        "fulfilled",
    ),
    ("The fix was made in commit 3e1f9a7.", "The fix landed in commit 8c0d2e1.", "not_fulfilled"),
    # values of something else: another table row, another clause's entity, a count of other things
    (
        "West's Q3 revenue was 155,400.",
        "| Region | Q3 revenue |\n|---|---|\n| South | 155,400 |\n| West | 220,800 |",
        "not_fulfilled",
    ),
    (
        "Invoice INV-1042 totals €4,310.00.",
        "Invoice INV-1042 (March) totals €4,310.00 and invoice INV-1057 (April) totals €3,985.50.",
        "fulfilled",
    ),
    (
        "1,209 orders were cancelled.",
        "Of 18,432 orders, 1,209 are still pending, 16,870 are completed and 353 orders were cancelled.",
        "not_fulfilled",  # 353 were cancelled: the claim's subject holds another value
    ),
    (
        "Marcus Webb is based in Berlin.",
        "Priya Natarajan works in Berlin and Marcus Webb works in Austin.",
        "not_fulfilled",
    ),
    (
        "The weekly sync is on Tuesday.",
        "The weekly sync was moved from Tuesday to Wednesday.",
        "not_fulfilled",
    ),
    ("The webinar runs from 14:00 to 15:30.", "The webinar runs from 2 PM to 3:30 PM.", "fulfilled"),
    (
        "250 miles is about 402 km.",
        "250 miles is about 402 km; at 80 km/h the drive takes 5 hours.",
        "fulfilled",
    ),
    ("Unit tests had no failures.", "Unit tests: 982 passed, 4 skipped, 0 failed.", "fulfilled"),
    # restated questions, hedges, other languages
    (
        "The cache hit ratio is 92%.",
        "Is the cache hit ratio 92%? I could not reach the metrics endpoint.",
        "not_fulfilled",  # the question alone states nothing
    ),
    (
        "The cache hit ratio is 92%.",
        "Is the cache hit ratio 92%? Yes, as far as the dashboard shows.",
        "abstain:restated",
    ),
    # the right value uncommitted: partially fulfilled (tests/data/JUDGE_LABELS.md)
    (
        "The latest stable version is 4.2.1.",
        "The latest stable version might be 4.2.1.",
        "partially_fulfilled",
    ),
    (
        "The total is 42 items.",
        "Die Gesamtzahl beträgt 42 Artikel, die alle im Lager sind und nicht reserviert wurden.",
        "abstain:language",
    ),
    # a claim without key facts passes only on a decisive sentence
    (
        "The backup job completed successfully.",
        "The backup job completed successfully at 02:40.",
        "fulfilled",
    ),
    (
        "The backup job completed successfully.",
        "The backup finished and the verification step passed.",
        "abstain:no_key_facts",
    ),
    ("The login page uses HTTPS.", "The weather in the region is mild this week.", "not_fulfilled"),
]


@pytest.mark.parametrize("claim,answer,expected", CASES)
def test_each_class(claim: str, answer: str, expected: str) -> None:
    verdict = judge.judge_sync(claim, answer)
    if expected.startswith("abstain:"):
        assert verdict.abstention is not None, verdict.reason
        assert (verdict.label, verdict.score) == (None, None)  # no label, and nothing to score
        assert verdict.abstention.kind == expected.split(":")[1], verdict.reason
        assert verdict.reason.startswith(f"{UNCERTAIN} ({verdict.abstention.kind}): ")
    else:
        assert verdict.abstention is None and verdict.label == expected, verdict.reason


def test_an_abstention_is_typed_and_never_scored() -> None:
    verdict = judge.judge_sync(
        "The latest stable version is 4.2.1.", "Die neueste stabile Version ist nicht 4.2.1 laut der Seite."
    )
    assert isinstance(verdict.abstention, Abstention) and verdict.uncertain and verdict.error is None
    labelled = judge.judge_sync("The latest stable version is 4.2.1.", "The latest stable version is 4.2.1.")
    score = score_claims([labelled, verdict])
    assert (score.coverage, score.passed, score.judge_failures, score.uncertain) == (None, None, 1, 1)
    assert judge_chain([judge, judge]) == 2 and judge.can_abstain


TASK = {
    "id": "sum-numbers",
    "prompt": "What is the sum of the numbers in /data/numbers.txt, and is the file empty?",
    "enabled_tools": ["calculator_calculate"],
    # the replay agent answers with the reference answer: the first claim is matched, the second
    # (negated, and not negated by the answer) is not decidable by the deterministic judge
    "claims": ["The sum of the numbers is 42", "The file numbers.txt is not empty"],
    "reference_answer": "The sum of the numbers is 42.",
}
LLM_VERDICT = json.dumps({"coverage_outcome": "fulfilled", "justification": "the file has numbers"})


def _run(tmp_path: Path, judges: list[dict[str, Any]]) -> tuple[TaskResult, dict[str, Any]]:
    tasks = write_tasks(tmp_path / "tasks.yaml", [TASK])
    run_file = write_run(
        tmp_path / "run.yaml",
        tasks,
        [{"name": "replay"}],
        judges=judges,
        servers={"enabled": []},  # no server: the reference answer needs none
        limits={"judgeRetries": 0, "retryBackoffSeconds": 0},
    )
    outcome = run_local(load_run_spec(run_file), tmp_path / "out", tmp_path / "data", progress=False)
    (result,) = outcome.results
    return result, json.loads((tmp_path / "out" / "summary.json").read_text())


def test_deterministic_alone_records_uncertain_and_excludes_the_task(tmp_path: Path) -> None:
    result, summary = _run(tmp_path, [{"name": "deterministic"}])
    matched, abstained = result.claims
    assert matched.label == "fulfilled" and matched.abstention is None
    assert abstained.label is None and abstained.score is None
    assert abstained.abstention is not None and abstained.abstention.kind == "negation"
    assert result.status == "error" and result.error_kind == ErrorKind.JUDGE
    assert result.coverage is None and result.passed is None
    row = summary["models"]["replay"]
    assert (row["scored"], row["errored"], row["errors_by_kind"]) == (0, 1, {"judge": 1})
    assert row["pass_rate"] is None


def test_the_task_reason_names_the_abstention(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, [{"name": "deterministic"}])
    reason = result.reason or ""
    assert reason.startswith(f"{UNCERTAIN}: the judge abstained on 1/2 claims (negation: "), reason


def test_deterministic_then_llm_sends_exactly_the_abstained_claims(tmp_path: Path) -> None:
    with ScriptedProvider(lambda body: Reply(content=LLM_VERDICT)) as provider:
        llm = {"name": "llm", "model": "openai/judge", "apiBase": provider.api_base}
        result, summary = _run(tmp_path, [{"name": "deterministic"}, llm])
    (request,) = provider.requests  # one claim abstained, one call
    # the LLM judge's one prompt is for the abstained claim (the answer is quoted in every prompt)
    assert request["messages"][0]["content"] == CLAIM_JUDGE_PROMPT.format(
        claim="The file numbers.txt is not empty", response=TASK["reference_answer"]
    )
    matched, handed_on = result.claims
    assert matched.label == "fulfilled" and matched.judged_by is None
    assert handed_on.label == "fulfilled" and handed_on.judged_by == "llm" and handed_on.abstention is None
    assert result.status == "scored" and result.coverage == 1.0
    assert result.judge is not None and result.judge.name == "deterministic" and result.secondary == []
    assert summary["models"]["replay"]["scored"] == 1


async def test_an_llm_judge_after_the_chain_still_labels_every_claim() -> None:
    """[llm, deterministic]: the LLM judge is primary and cannot abstain, so the chain ends there and
    the deterministic judge is a secondary judge; [deterministic, llm] with nothing abstained calls
    the LLM judge for nothing."""
    from atlasrun.provider import Endpoint
    from atlasrun.scoring.claims import judge_task

    claims = ["The sum of the numbers is 42", "The file numbers.txt is not empty"]
    with ScriptedProvider(lambda body: Reply(content=LLM_VERDICT)) as provider:
        llm = LLMJudge(
            "llm", Endpoint("openai/judge", provider.api_base, None, ()), retries=0, backoff_base_s=0
        )
        assert judge_chain([llm, judge]) == 1
        primary, secondary = await judge_task([llm, judge], claims, "The sum of the numbers is 42.")
        assert len(provider.requests) == 2 and primary.coverage == 1.0
        assert secondary.judge.name == "deterministic" and secondary.uncertain == 1
        assert secondary.coverage is None  # the secondary judge abstained on a claim: no figure
        (alone,) = await judge_task([judge, llm], claims[:1], "The sum of the numbers is 42.")
        assert len(provider.requests) == 2 and alone.coverage == 1.0 and alone.chain == []
