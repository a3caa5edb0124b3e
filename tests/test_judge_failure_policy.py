"""``spec.scoring``: what a judge failure does to a task's score, and coverage rounding.

Real runs: a scripted model answers, a scripted LLM judge (litellm's real HTTP path) labels one
claim and returns garbage for the other. No MCP server is needed: the task's one tool belongs to
a server the run does not enable, so it is hidden and the model answers directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atlasrun.errors import InputError
from atlasrun.judge.base import ClaimVerdict
from atlasrun.runner.local import RunOutcome, run_local
from atlasrun.runspec.run import ScoringSpec, load_run_spec
from atlasrun.scoring.claims import ZEROED_REASON, score_claims
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import write_run, write_tasks

GOOD_CLAIM = "The capital of France is Paris"
GARBLED_CLAIM = "The capital of Spain is Madrid"
TASK: dict[str, Any] = {
    "id": "capitals",
    "prompt": "Name the capitals of France and Spain.",
    "enabled_tools": ["filesystem_read_text_file"],
    "claims": [GOOD_CLAIM, GARBLED_CLAIM],
}
JUDGE_RETRIES = 1


def claim_of(body: dict[str, Any]) -> str:
    prompt = str(body["messages"][0]["content"])
    return prompt.split("CLAIM TO EVALUATE:")[1].split("MODEL RESPONSE TO ANALYZE:")[0].strip()


def judge_script(body: dict[str, Any]) -> Reply:
    if claim_of(body) == GARBLED_CLAIM:
        return Reply(content="I think it is probably fine?")
    return Reply(content=json.dumps({"coverage_outcome": "fulfilled", "justification": "Paris is named"}))


def run(tmp_path: Path, out: Path, judge_calls: list[str], scoring: dict[str, Any] | None) -> RunOutcome:
    def recording_judge(body: dict[str, Any]) -> Reply:
        judge_calls.append(claim_of(body))
        return judge_script(body)

    with (
        ScriptedProvider(lambda body: Reply(content="Paris and Madrid.")) as model,
        ScriptedProvider(recording_judge) as judge,
    ):
        spec: dict[str, Any] = {
            "servers": {"enabled": []},
            "limits": {"retryBackoffSeconds": 0, "judgeRetries": JUDGE_RETRIES},
            "judges": [{"name": "judge", "model": "openai/judge", "apiBase": judge.api_base}],
        }
        if scoring is not None:
            spec["scoring"] = scoring
        run_file = write_run(
            tmp_path / "run.yaml",
            write_tasks(tmp_path / "tasks.yaml", [TASK]),
            [{"name": "m", "model": "openai/m", "apiBase": model.api_base}],
            **spec,
        )
        return run_local(load_run_spec(run_file), out, tmp_path / "data", progress=False)


def stored(out: Path) -> TaskResult:
    (line,) = (out / "results.jsonl").read_text().splitlines()
    return TaskResult.model_validate_json(line)


def test_default_excludes_the_task_as_a_judge_error(tmp_path: Path) -> None:
    calls: list[str] = []
    outcome = run(tmp_path, tmp_path / "out", calls, scoring=None)
    (result,) = outcome.results
    assert (result.status, result.error_kind, result.coverage, result.passed) == (
        "error",
        ErrorKind.JUDGE,
        None,
        None,
    )
    assert result.reason == "judge failed on 1/2 claims" and result.zeroed_error_kind is None
    garbled = next(c for c in result.claims if c.claim == GARBLED_CLAIM)
    assert garbled.label is None and garbled.score is None and "unusable" in (garbled.error or "")
    assert calls.count(GARBLED_CLAIM) == JUDGE_RETRIES + 1 and calls.count(GOOD_CLAIM) == 1
    totals = outcome.summary["models"]["m"]
    assert (totals["scored"], totals["errored"], totals["errors_by_kind"]) == (0, 1, {"judge": 1})
    assert (totals["judge_failures_zeroed"], totals["judge_failed_claims_zeroed"]) == (0, 0)


def test_zero_scores_the_failed_claim_not_fulfilled_and_counts_it(tmp_path: Path) -> None:
    calls: list[str] = []
    out = tmp_path / "out"
    outcome = run(tmp_path, out, calls, scoring={"judgeFailure": "zero"})
    (result,) = outcome.results
    assert (result.status, result.error_kind, result.coverage, result.passed) == ("scored", None, 0.5, False)
    assert result.zeroed_error_kind == ErrorKind.JUDGE
    good, garbled = sorted(result.claims, key=lambda c: c.claim != GOOD_CLAIM)
    assert (good.label, good.score, good.error) == ("fulfilled", 1.0, None)
    assert (garbled.label, garbled.score, garbled.reason) == ("not_fulfilled", 0.0, ZEROED_REASON)
    assert "unusable" in (garbled.error or "")  # the judge's failure stays on the verdict
    assert calls.count(GARBLED_CLAIM) == JUDGE_RETRIES + 1
    assert result.passed_at == {"0.5": True, "0.75": False, "0.9": False}
    totals = outcome.summary["models"]["m"]
    assert (totals["scored"], totals["errored"], totals["mean_coverage"]) == (1, 0, 0.5)
    assert (totals["judge_failures_zeroed"], totals["judge_failed_claims_zeroed"]) == (1, 1)
    # What is on disk says the same (results.jsonl and summary.json).
    assert stored(out).zeroed_error_kind == ErrorKind.JUDGE
    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"]["m"]["judge_failures_zeroed"] == 1

    # A resume with the same policy keeps the zeroed item as scored: nothing is judged again.
    again: list[str] = []
    outcome = run(tmp_path, out, again, scoring={"judgeFailure": "zero"})
    assert again == [] and outcome.summary["models"]["m"]["judge_failures_zeroed"] == 1

    # Another policy is another run (runner.fingerprint): resuming into these results is refused.
    for other in (None, {"judgeFailure": "zero", "coverageDecimals": 3}):
        with pytest.raises(InputError, match=r"spec\.scoring changed"):
            run(tmp_path, out, again, scoring=other)
    assert again == []


def test_coverage_decimals_decide_a_borderline_task_as_mcp_atlas_does() -> None:
    # Two of three claims: 0.6666..., which fails 0.667 unrounded and passes once rounded to 0.667
    # (MCP-Atlas: coverage_score = round(total_score / len(claims), 3), then compared).
    verdicts = [
        ClaimVerdict.labelled("a", "fulfilled", ""),
        ClaimVerdict.labelled("b", "fulfilled", ""),
        ClaimVerdict.labelled("c", "not_fulfilled", ""),
    ]
    raw = score_claims(verdicts, threshold=0.667)
    rounded = score_claims(verdicts, threshold=0.667, scoring=ScoringSpec(coverage_decimals=3))
    assert raw.coverage == pytest.approx(2 / 3) and raw.passed is False
    assert rounded.coverage == 0.667 and rounded.passed is True
    # Rounding is Python's, as in MCP-Atlas: 5/8 = 0.625 rounds half to even at 2 decimals.
    five_eighths = [
        ClaimVerdict.labelled(str(i), "fulfilled" if i < 5 else "not_fulfilled", "") for i in range(8)
    ]
    assert score_claims(five_eighths, scoring=ScoringSpec(coverage_decimals=2)).coverage == 0.62


def test_scoring_settings_are_checked_where_they_are_written(tmp_path: Path) -> None:
    for bad, field in (
        ({"judgeFailure": "skip"}, "judgeFailure"),
        ({"coverageDecimals": -1}, "coverageDecimals"),
    ):
        run_file = write_run(
            tmp_path / "bad.yaml", tmp_path / "tasks.yaml", [{"name": "replay"}], scoring=bad
        )
        with pytest.raises(InputError, match=rf"spec\.scoring\.{field}") as caught:
            load_run_spec(run_file)
        assert caught.value.where == str(run_file)
