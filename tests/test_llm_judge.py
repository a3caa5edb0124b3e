"""The LLM claims judge as MCP-Atlas runs it, through litellm's real HTTP path to the scripted provider."""

from __future__ import annotations

import json
from typing import Any

from atlasrun.judge.llm import MAX_ANSWER_CHARS, TRUNCATION_NOTE, extract_json_object, parse_judge_output
from atlasrun.runner.engine import make_judge
from atlasrun.runspec.run import JudgeSpec
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider

VERDICT = json.dumps({"coverage_outcome": "fulfilled", "justification": "42 is stated", "confidence": 0.9})


def _judge(provider: ScriptedProvider, **spec: Any) -> Any:
    body = {"name": "llm", "model": "openai/judge", "apiBase": provider.api_base, **spec}
    return make_judge(JudgeSpec.model_validate(body), retries=0, backoff_s=0.0)


async def test_temperature_zero_by_default_and_the_prompt_keeps_plus_minus() -> None:
    with ScriptedProvider(lambda body: Reply(content=VERDICT)) as p:
        verdict = await _judge(p).judge("The sum is 42", "The sum of the numbers is 42.")
    assert verdict.label == "fulfilled" and verdict.truncated_from is None
    (request,) = p.requests
    assert request["temperature"] == 0
    prompt = request["messages"][0]["content"]
    assert "For percentages, \u00b11 percentage points is acceptable" in prompt
    assert "The sum is 42" in prompt and "The sum of the numbers is 42." in prompt


async def test_temperature_is_settable_per_judge_in_the_run_file() -> None:
    with ScriptedProvider(lambda body: Reply(content=VERDICT)) as p:
        await _judge(p, temperature=0.3).judge("The sum is 42", "42")
    assert p.requests[0]["temperature"] == 0.3


async def test_empty_answer_scores_zero_without_a_judge_call() -> None:
    with ScriptedProvider(lambda body: Reply(content=VERDICT)) as p:
        judge = _judge(p)
        verdicts = [await judge.judge("The sum is 42", answer) for answer in ("", "  \n ")]
    assert p.requests == []
    assert [(v.label, v.score) for v in verdicts] == [("not_fulfilled", 0.0)] * 2
    assert "without a judge call" in verdicts[0].reason


async def test_long_answer_truncated_at_the_harness_limit_and_recorded() -> None:
    answer = "x" * (MAX_ANSWER_CHARS - 2) + "TAIL-BEYOND-THE-LIMIT" + "y" * 100_000
    with ScriptedProvider(lambda body: Reply(content=VERDICT)) as p:
        verdict = await _judge(p).judge("The sum is 42", answer)
    assert verdict.truncated_from == len(answer)
    prompt = p.requests[0]["messages"][0]["content"]
    assert "x" * (MAX_ANSWER_CHARS - 2) + "TA" + TRUNCATION_NOTE in prompt
    assert "TAIL-BEYOND" not in prompt and "y" * 10 not in prompt


async def test_object_followed_by_trailing_text_and_braces_is_accepted() -> None:
    reply = VERDICT + "\n\nLet me know if you need more. }}"
    with ScriptedProvider(lambda body: Reply(content=reply)) as p:
        verdict = await _judge(p).judge("The sum is 42", "42")
    assert verdict.label == "fulfilled" and len(p.requests) == 1


def test_json_extraction_cases() -> None:
    assert extract_json_object('```json\n{"a": {"b": 1}}\n```')["a"] == {"b": 1}
    assert extract_json_object('note {not json} then {"coverage_outcome": "not_fulfilled"} }')[
        "coverage_outcome"
    ]
    label, _, _ = parse_judge_output('{"coverage_outcome": "partially fulfilled"} {"coverage_outcome": "x"}')
    assert label == "partially_fulfilled"
