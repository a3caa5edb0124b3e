"""The local engine end to end: real MCP servers, litellm's real HTTP path, a scripted provider."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from atlasrun.runner.local import RunOutcome, run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.store import task_record_name
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider, tool_call
from conftest import SUM_TASK, child_pids, kill_children, write_run, write_tasks

pytestmark = pytest.mark.servers


def tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]


def solver(body: dict[str, Any]) -> Reply:
    """Reads the file, adds the numbers with the calculator, answers with the real result."""
    results = tool_results(body)
    if not results:
        return Reply(tool_calls=[tool_call("filesystem_read_text_file", {"path": "/data/numbers.txt"}, "c1")])
    if len(results) == 1:
        numbers = [n for n in results[0].split() if n.isdigit()]
        return Reply(tool_calls=[tool_call("calculator_calculate", {"expression": "+".join(numbers)}, "c2")])
    return Reply(content=f"The sum of the numbers is {results[-1].strip()}.")


def run(
    tmp_path: Path,
    data_dir: Path,
    provider: ScriptedProvider | None,
    tasks: list[dict[str, Any]],
    models: list[str],
    judges: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> RunOutcome:
    model_specs = [
        {"name": m, "model": f"openai/{m}", "apiBase": provider.api_base}
        if provider and m != "replay"
        else {"name": m}
        for m in models
    ]
    extra: dict[str, Any] = {"limits": {"retryBackoffSeconds": 0}, **spec}
    if judges:
        extra["judges"] = judges
    run_file = write_run(
        tmp_path / "run.yaml", write_tasks(tmp_path / "tasks.yaml", tasks), model_specs, **extra
    )
    return run_local(load_run_spec(run_file), tmp_path / "out", data_dir, progress=False)


def test_scripted_model_solves_a_task_with_real_servers(tmp_path: Path, data_dir: Path) -> None:
    with ScriptedProvider(solver) as provider:
        outcome = run(tmp_path, data_dir, provider, [SUM_TASK], ["solver", "replay"])
    by_model = {r.model: r for r in outcome.results}
    for model in ("solver", "replay"):
        result = by_model[model]
        assert result.status == "scored" and result.passed and result.coverage == 1.0, result
        assert result.tool_calls == 2 and result.tool_errors == 0
    solved = by_model["solver"]
    assert solved.prompt_tokens == 30 and solved.completion_tokens == 15 and solved.turns == 3
    # the tools the model saw: only the task's surface, named server_tool
    tools = {t["function"]["name"] for t in provider.requests[0]["tools"]}
    assert tools == set(SUM_TASK["enabled_tools"])
    full = (tmp_path / "out" / task_record_name("solver", "sum-numbers", 0)).read_text()
    assert '"calculator_calculate"' in full and '"42"' in full  # transcript with real tool output
    summary = outcome.summary["models"]["solver"]
    assert (summary["scored"], summary["passed"], summary["pass_rate"]) == (1, 1, 1.0)


def test_tool_outside_the_surface_gets_a_clear_error_result(tmp_path: Path, data_dir: Path) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return Reply(
                tool_calls=[tool_call("filesystem_write_file", {"path": "/data/x", "content": "y"}, "w1")]
            )
        return Reply(content="I could not write the file.")

    with ScriptedProvider(script) as provider:
        outcome = run(tmp_path, data_dir, provider, [SUM_TASK], ["rogue"])
    (result,) = outcome.results
    assert result.status == "scored" and not result.passed  # a model failure, not a crash
    full = (tmp_path / "out" / task_record_name("rogue", "sum-numbers", 0)).read_text()
    assert "not_available" in full and "is not available" in full
    record = TaskResult.model_validate_json(full)
    assert record.transcript is not None
    (call,) = record.transcript.calls
    assert (call.name, call.error_kind, call.is_error) == ("filesystem_write_file", "not_available", True)
    assert not (data_dir / "x").exists()


def test_repeated_failing_call_is_fed_back_and_recorded(tmp_path: Path, data_dir: Path) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if len(tool_results(body)) < 3:
            return Reply(
                tool_calls=[
                    tool_call(
                        "filesystem_read_text_file", {"path": "/data/nope.txt"}, f"r{len(tool_results(body))}"
                    )
                ]
            )
        return Reply(content="The file does not exist.")

    with ScriptedProvider(script) as provider:
        outcome = run(tmp_path, data_dir, provider, [SUM_TASK], ["stubborn"])
    (result,) = outcome.results
    assert result.status == "scored" and result.passed is False and result.coverage == 0.0
    assert (result.tool_calls, result.tool_errors) == (3, 3)
    # the server's own error text went back to the model each time
    errors = [m["content"] for m in provider.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(errors) == 3 and all("nope.txt" in e or "ENOENT" in e for e in errors), errors


def test_provider_429_is_retried_honouring_retry_after(tmp_path: Path, data_dir: Path) -> None:
    seen: list[float] = []

    def script(body: dict[str, Any]) -> Reply:
        seen.append(time.monotonic())
        if len(seen) == 1:
            return Reply(
                status=429,
                headers={"Retry-After": "1"},
                raw_body='{"error": {"message": "rate limited", "type": "rate_limit"}}',
            )
        return solver(body)

    with ScriptedProvider(script) as provider:
        outcome = run(tmp_path, data_dir, provider, [SUM_TASK], ["limited"])
    (result,) = outcome.results
    assert result.status == "scored" and result.passed
    assert len(seen) == 4  # one 429, then the three turns
    assert seen[1] - seen[0] >= 0.95  # waited as told (backoff base is 0 in this run)
    record = (tmp_path / "out" / task_record_name("limited", "sum-numbers", 0)).read_text()
    assert '"retries": 1' in record


def test_provider_that_keeps_failing_is_an_error_not_a_score(tmp_path: Path, data_dir: Path) -> None:
    def script(body: dict[str, Any]) -> Reply:
        return Reply(status=503, raw_body='{"error": {"message": "overloaded"}}')

    with ScriptedProvider(script) as provider:
        outcome = run(
            tmp_path,
            data_dir,
            provider,
            [SUM_TASK],
            ["down"],
            limits={"retryBackoffSeconds": 0, "providerRetries": 2},
        )
    (result,) = outcome.results
    assert result.status == "error" and result.reason and result.reason.startswith("provider:")
    assert len(provider.requests) == 3
    assert outcome.summary["models"]["down"]["errored"] == 1


def test_judge_garbage_is_excluded_counted_then_rejudged_on_resume(tmp_path: Path, data_dir: Path) -> None:
    garbage = {"calls": 0}

    def bad_judge(body: dict[str, Any]) -> Reply:
        garbage["calls"] += 1
        return Reply(content="Looks fine to me!")

    def good_judge(body: dict[str, Any]) -> Reply:
        return Reply(
            content='{"coverage_outcome": "fulfilled", "justification": "42 is stated", "confidence": 0.9}'
        )

    with ScriptedProvider(bad_judge) as judge:
        outcome = run(
            tmp_path,
            data_dir,
            None,
            [SUM_TASK],
            ["replay"],
            judges=[{"name": "bad", "model": "openai/bad", "apiBase": judge.api_base}],
        )
    (result,) = outcome.results
    assert result.status == "error" and result.reason == "judge failed on 1/1 claims"
    assert result.coverage is None and garbage["calls"] == 4  # 1 + 3 retries, never scored as 0
    assert outcome.summary["models"]["replay"]["errored"] == 1

    with ScriptedProvider(good_judge) as judge:
        outcome = run(
            tmp_path,
            data_dir,
            None,
            [SUM_TASK],
            ["replay"],
            judges=[{"name": "good", "model": "openai/good", "apiBase": judge.api_base}],
        )
    (result,) = outcome.results
    assert result.status == "scored" and result.passed and result.judge and result.judge.name == "good"
    assert result.judge.prompt_sha256 and len(judge.requests) == 1


def test_server_killed_mid_task_is_an_infrastructure_error(tmp_path: Path, data_dir: Path) -> None:
    task = dict(
        SUM_TASK,
        id="memory-task",
        enabled_tools=["memory_read_graph", "memory_create_entities"],
        distractors=[],
        claims=["The graph is empty"],
        reference_trajectory=[{"calls": [{"name": "memory_read_graph", "arguments": {}}]}],
    )
    killed = {"n": 0}

    def script(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if len(results) == 1:
            killed["n"] = kill_children("mcp-server-memory")
        if len(results) < 3:
            return Reply(tool_calls=[tool_call("memory_read_graph", {}, f"m{len(results)}")])
        return Reply(content="The graph is empty.")

    with ScriptedProvider(script) as provider:
        outcome = run(tmp_path, data_dir, provider, [task], ["victim"])
    assert killed["n"] == 1
    (result,) = outcome.results
    assert result.status == "error" and result.reason and result.reason.startswith("infra:")
    assert result.stop_reason == "infra_error" and result.coverage is None
    summary = outcome.summary["models"]["victim"]
    assert summary["scored"] == 0 and summary["errored"] == 1 and summary["pass_rate"] is None


def test_tasks_needing_disabled_servers_are_excluded_with_reason(tmp_path: Path, data_dir: Path) -> None:
    outcome = run(tmp_path, data_dir, None, [SUM_TASK], ["replay"], servers={"enabled": ["filesystem"]})
    (result,) = outcome.results
    assert result.status == "excluded" and result.reason == "needs server(s) not enabled: calculator"
    assert outcome.summary["excluded_tasks"] == [{"task": "sum-numbers", "reason": result.reason}]


def test_replay_without_a_reference_answer_is_excluded_not_scored(tmp_path: Path, data_dir: Path) -> None:
    """A public-format MCP-Atlas task has no reference answer: replaying its narration would score 0."""
    public = dict(SUM_TASK, id="public", reference_answer=None)
    outcome = run(tmp_path, data_dir, None, [public, SUM_TASK], ["replay"])
    by_id = {r.task_id: r for r in outcome.results}
    assert by_id["public"].status == "excluded" and by_id["public"].coverage is None
    assert by_id["public"].reason == "no reference answer to replay"
    assert by_id["sum-numbers"].status == "scored" and by_id["sum-numbers"].passed
    assert outcome.summary["models"]["replay"]["scored"] == 1


def test_fresh_state_per_task(tmp_path: Path, data_dir: Path) -> None:
    """A write in one task is invisible to the next: stateful servers get a fresh process and data copy."""
    writer = dict(
        SUM_TASK,
        id="write",
        enabled_tools=["filesystem_write_file", "filesystem_read_text_file"],
        distractors=[],
        claims=["written"],
        reference_answer="written",
        reference_trajectory=[
            {
                "calls": [
                    {
                        "name": "filesystem_write_file",
                        "arguments": {"path": "/data/numbers.txt", "content": "1"},
                    }
                ]
            }
        ],
    )
    reader = dict(
        SUM_TASK,
        id="read",
        enabled_tools=["filesystem_read_text_file"],
        distractors=[],
        claims=["The file holds 12 and 30"],
        reference_answer="The file holds 12 and 30.",
        reference_trajectory=[
            {"calls": [{"name": "filesystem_read_text_file", "arguments": {"path": "/data/numbers.txt"}}]}
        ],
    )
    outcome = run(tmp_path, data_dir, None, [writer, reader], ["replay"], parallelism=1)
    assert [r.task_id for r in outcome.results] == ["read", "write"]
    record = TaskResult.model_validate_json(
        (tmp_path / "out" / task_record_name("replay", "read", 0)).read_text()
    )
    assert record.transcript and record.transcript.calls[0].result == "12\n30\n"
    written = TaskResult.model_validate_json(
        (tmp_path / "out" / task_record_name("replay", "write", 0)).read_text()
    )
    assert written.transcript and not written.transcript.calls[0].is_error
    assert (data_dir / "numbers.txt").read_text() == "12\n30\n"


def test_secrets_never_reach_results(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("ATLAS_TEST_KEY", secret)

    def leaky(body: dict[str, Any]) -> Reply:  # a provider that echoes the key back in its answer
        return Reply(content=f"my key is {secret}")

    with ScriptedProvider(leaky) as provider:
        run_file = write_run(
            tmp_path / "run.yaml",
            write_tasks(tmp_path / "tasks.yaml", [SUM_TASK]),
            [
                {
                    "name": "leaky",
                    "model": "openai/leaky",
                    "apiBase": provider.api_base,
                    "apiKeyEnv": "ATLAS_TEST_KEY",
                }
            ],
        )
        run_local(load_run_spec(run_file), tmp_path / "out", data_dir, progress=False)
    headers_seen = provider.requests  # bodies only; the key travelled in the Authorization header
    assert all(secret not in str(b) for b in headers_seen)
    written = [p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert written and not any(secret in text for text in written)
    assert any("[REDACTED]" in text for text in written)


def test_tool_call_budget_ends_the_task_as_a_model_outcome(tmp_path: Path, data_dir: Path) -> None:
    def looper(body: dict[str, Any]) -> Reply:
        n = len(tool_results(body))
        return Reply(
            content=f"still looking ({n})",
            tool_calls=[tool_call("calculator_calculate", {"expression": f"{n}+1"}, f"l{n}")],
        )

    task = dict(SUM_TASK, limits={"max_tool_calls": 4})
    with ScriptedProvider(looper) as provider:
        outcome = run(tmp_path, data_dir, provider, [task], ["looper"])
    (result,) = outcome.results
    assert result.status == "scored" and result.stop_reason == "max_tool_calls" and result.tool_calls == 4
    assert len(provider.requests) == 4 and result.passed is False


def test_streamable_http_transport(tmp_path: Path, data_dir: Path) -> None:
    """The same task over streamable HTTP (the calculator behind mcp-proxy)."""
    task = dict(
        SUM_TASK,
        enabled_tools=["filesystem_read_text_file", "calculator-http_calculate"],
        distractors=[],
        reference_trajectory=[
            {"calls": [{"name": "filesystem_read_text_file", "arguments": {"path": "/data/numbers.txt"}}]},
            {"calls": [{"name": "calculator-http_calculate", "arguments": {"expression": "12+30"}}]},
        ],
    )
    outcome = run(tmp_path, data_dir, None, [task], ["replay"])
    (result,) = outcome.results
    record = TaskResult.model_validate_json(
        (tmp_path / "out" / task_record_name("replay", "sum-numbers", 0)).read_text()
    )
    assert record.transcript and [c.result for c in record.transcript.calls] == ["12\n30\n", "42"]
    assert result.status == "scored"


def test_pooled_server_crash_is_restarted_and_the_call_retried(tmp_path: Path, data_dir: Path) -> None:
    """A stateless server that dies is replaced; its calls are safe to retry, so no task is lost."""
    tasks = [
        dict(SUM_TASK, id="first", prompt="[first] add"),
        dict(SUM_TASK, id="second", prompt="[second] add"),
    ]

    killed: list[int] = []

    def script(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"].startswith("[first]") and len(tool_results(body)) == 1:
            killed.append(kill_children("mcp-server-calculator"))
        return solver(body)

    with ScriptedProvider(script) as provider:
        outcome = run(tmp_path, data_dir, provider, tasks, ["m"], parallelism=1)
    assert killed == [1]
    assert all(r.status == "scored" and r.passed for r in outcome.results), outcome.results
    for task_id in ("first", "second"):
        record = TaskResult.model_validate_json(
            (tmp_path / "out" / task_record_name("m", task_id, 0)).read_text()
        )
        assert record.transcript and record.transcript.calls[-1].result == "42"
    assert not child_pids("mcp-server-calculator")  # the replacement was stopped at the end too


def test_several_judges_primary_decides_others_recorded(tmp_path: Path, data_dir: Path) -> None:
    def strict(body: dict[str, Any]) -> Reply:
        return Reply(
            content='{"coverage_outcome": "not_fulfilled", "justification": "no", "confidence": 0.7}'
        )

    with ScriptedProvider(strict) as judge:
        outcome = run(
            tmp_path,
            data_dir,
            None,
            [SUM_TASK],
            ["replay"],
            judges=[
                {"name": "deterministic"},
                # the judge after the deterministic one labels only what it abstained on (a chain);
                # the ones after that label every claim: "strict" is secondary
                {"name": "fallback", "model": "openai/fallback", "apiBase": judge.api_base},
                {"name": "strict", "model": "openai/strict", "apiBase": judge.api_base},
            ],
        )
    (result,) = outcome.results
    assert (
        result.status == "scored" and result.passed and result.judge and result.judge.name == "deterministic"
    )
    (other,) = result.secondary
    assert other.judge.name == "strict" and other.coverage == 0.0 and other.passed is False
    assert [v.label for v in other.claims] == ["not_fulfilled"]
