"""Failure diagnostics: taxonomy, trace signals, the LLM and deterministic diagnosers, aggregates, `atlas diagnose`.

No MCP servers: results directories are built from hand-made TaskResult records;
the LLM judge is a ScriptedProvider reached through litellm's real HTTP path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from atlasrun.agent.transcript import CallRecord, Transcript
from atlasrun.cli import main
from atlasrun.diagnostics import taxonomy
from atlasrun.diagnostics.aggregate import aggregate, format_report
from atlasrun.diagnostics.judge import DeterministicDiagnoser, Diagnosis, make_diagnoser, parse_diagnosis
from atlasrun.diagnostics.signals import detect, enriched_trace, format_trace, strongest_mode
from atlasrun.diagnostics.store import DiagnosesLog
from atlasrun.judge.base import ClaimVerdict, JudgeInfo
from atlasrun.judge.llm import JudgeOutputError
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.scoring.store import ResultsDir, task_record_name
from atlasrun.tasks.model import Task
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK

READ = "filesystem_read_text_file"
CALC = "calculator_calculate"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": READ,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def call(
    name: str, arguments: Any, result: str = "12\n30", kind: str | None = None, cid: str = ""
) -> CallRecord:
    return CallRecord(
        id=cid or f"c-{name}",
        name=name,
        arguments=arguments,
        result=result,
        is_error=kind is not None,
        error_kind=kind,
    )  # type: ignore[arg-type]


def transcript(
    turns: list[list[CallRecord]], answer: str = "The sum is 41.", stop: str = "answered"
) -> Transcript:
    """One assistant message per turn (its calls in parallel), tool results, then the final answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": SUM_TASK["prompt"]}]
    for i, calls in enumerate(turns):
        messages.append(
            {
                "role": "assistant",
                "content": f"thinking {i}",
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for c in calls
                ],
            }
        )
        messages += [{"role": "tool", "tool_call_id": c.id, "content": c.result} for c in calls]
    if stop == "answered":
        messages.append({"role": "assistant", "content": answer})
    return Transcript(
        agent="litellm",
        model="m",
        messages=messages,
        calls=[c for t in turns for c in t],
        final_answer=answer,
        stop_reason=stop,  # type: ignore[arg-type]
        turns=len(turns) + 1,
        tools=TOOLS,
    )


def result(
    trace: Transcript,
    model: str = "m",
    task_id: str = "sum-numbers",
    coverage: float = 0.0,
    status: str = "scored",
    repeat: int = 0,
) -> TaskResult:
    label = "fulfilled" if coverage == 1.0 else "partially_fulfilled" if coverage == 0.5 else "not_fulfilled"
    reason = "the response says 41, not 42"
    claims = [ClaimVerdict.labelled(SUM_TASK["claims"][0], label, reason)]  # type: ignore[arg-type]
    return TaskResult(
        task_id=task_id,
        model=model,
        repeat=repeat,
        status=status,  # type: ignore[arg-type]
        error_kind=None if status == "scored" else ErrorKind.PROVIDER,
        coverage=coverage if status == "scored" else None,
        passed=coverage >= 0.75 if status == "scored" else None,
        claims=claims,
        stop_reason=trace.stop_reason,
        task=Task.model_validate({**SUM_TASK, "id": task_id}),
        transcript=trace,
    )


NO_CALLS = transcript([])
REPEATED = transcript(
    [
        [call(READ, {"path": "/data/nope.txt", "encoding": "utf-8"}, "ENOENT", "tool_error", "r1")],
        [call(READ, {"encoding": "utf-8", "path": "/data/nope.txt"}, "ENOENT", "tool_error", "r2")],
        [call(READ, {"path": "/data/nope.txt", "encoding": "utf-8"}, "ENOENT", "tool_error", "r3")],
        [call(READ, {"path": "/data/other.txt"}, "ENOENT", "tool_error", "r4")],
    ]
)
UNAVAILABLE = transcript(
    [[call("filesystem_write_file", {"path": "/data/x"}, "Error: not available", "not_available")]]
)
OK_CALLS = transcript(
    [[call(READ, {"path": "/data/numbers.txt"})], [call(CALC, {"expression": "12+29"}, "41")]]
)


# --- taxonomy -----------------------------------------------------------------------------------


def test_taxonomy_has_exactly_11_modes_4_tool_call_and_7_cognitive() -> None:
    assert len(taxonomy.MODES) == 11 and len(set(taxonomy.MODE_IDS)) == 11
    assert [m.id for m in taxonomy.modes_of("tool_call")] == [
        "malformed_call",
        "wrong_tool",
        "no_tool_use",
        "err_recovery",
    ]
    assert [m.id for m in taxonomy.modes_of("cognitive")] == [
        "task_misunderstanding",
        "faulty_synthesis",
        "response_misparsing",
        "early_termination",
        "hallucinated_fact",
        "logical_error",
        "constraint_violation",
    ]
    text = taxonomy.definitions_text()
    assert all(f"- {m.id}: {m.description}" in text for m in taxonomy.MODES)
    assert taxonomy.UNCLASSIFIED not in taxonomy.MODE_IDS
    assert taxonomy.normalize(" Early-Termination ") == "early_termination"
    with pytest.raises(ValueError, match="unknown failure mode 'nope'"):
        taxonomy.get("nope")


# --- signals ------------------------------------------------------------------------------------


def test_no_tool_call_at_all_is_certain_no_tool_use() -> None:
    (signal,) = detect(NO_CALLS)
    assert (signal.name, signal.mode, signal.certain) == ("no_tool_calls", "no_tool_use", True)
    assert strongest_mode([signal]) == "no_tool_use"
    assert "(no tool calls were made)" in format_trace(enriched_trace(NO_CALLS), NO_CALLS.final_answer)


def test_no_tool_call_only_proposes_when_the_evidence_is_ambiguous() -> None:
    # The task needed no tool (its reference trajectory calls none): a candidate, not a verdict.
    (signal,) = detect(NO_CALLS, task_needs_tools=False)
    assert (signal.mode, signal.certain) == ("no_tool_use", False)
    assert "the reference trajectory calls no tool either" in signal.evidence
    # The model refused: also only a candidate.
    refusal = transcript([], answer="I'm unable to access the file system, so I cannot help with this.")
    (signal,) = detect(refusal, task_needs_tools=True)
    assert not signal.certain and "refused" in signal.evidence
    # A task that needed tools and a model that just answered: certain.
    assert detect(NO_CALLS, task_needs_tools=True)[0].certain


@pytest.mark.heavy
async def test_ambiguous_no_tool_call_does_not_force_the_judge() -> None:
    record = result(transcript([], answer="I cannot access the data, so I can't help."))
    with scripted(judge_reply("early_termination")) as p:
        diagnosis = await diagnose(p, record)
    assert diagnosis.primary_mode == "early_termination" and not diagnosis.forced
    assert "candidate no_tool_use" in p.requests[0]["messages"][0]["content"]


def test_same_failing_call_repeated_is_an_error_recovery_candidate() -> None:
    signals = {s.name: s for s in detect(REPEATED)}
    repeated = signals["repeated_failing_call"]
    assert repeated.mode == "err_recovery" and not repeated.certain
    assert repeated.calls == [1, 2, 3]  # argument key order does not matter; the one-off #4 is not a repeat
    assert "failed 3 times with identical arguments" in repeated.evidence
    assert "argument_error" not in signals  # ENOENT is not a schema problem
    assert strongest_mode(list(signals.values())) == "err_recovery"
    # successful identical calls, or a call that failed once, are not a repeat
    assert not any(
        s.name == "repeated_failing_call" for s in detect(transcript([[call(READ, {"path": "a"})]] * 2))
    )


def test_unavailable_tools_and_argument_errors() -> None:
    (wrong,) = detect(UNAVAILABLE)
    assert (wrong.name, wrong.mode, wrong.calls) == ("unavailable_tool", "wrong_tool", [1])
    trace = transcript(
        [
            [call(READ, "not json", "Error: must be a JSON object", "invalid_arguments", "a")],
            [call(READ, {"file": "/data/x"}, "boom", "tool_error", "b")],  # violates the schema
            [call(CALC, {"expr": "1"}, "MCP error -32602: Invalid params", "tool_error", "c")],
            [call(CALC, {"expression": "1/0"}, "division by zero", "tool_error", "d")],
        ]
    )
    (malformed,) = [s for s in detect(trace) if s.name == "argument_error"]
    assert malformed.mode == "malformed_call" and malformed.calls == [1, 2, 3]
    assert "'path' is a required property" in malformed.evidence
    assert "the server rejected the arguments" in malformed.evidence


@pytest.mark.parametrize("stop", ["max_tool_calls", "max_turns", "task_timeout"])
async def test_budget_exhaustion_is_never_early_termination(stop: str) -> None:
    trace = transcript([[call(READ, {"path": "/data/numbers.txt"})]], answer="", stop=stop)
    signals = detect(trace)
    (budget,) = [s for s in signals if s.name == "budget_exhausted"]
    assert budget.mode is None and budget.forbids == ["early_termination"]
    diagnosis = await DeterministicDiagnoser().diagnose(result(trace))
    assert diagnosis.primary_mode == taxonomy.UNCLASSIFIED and diagnosis.family is None
    reply = '{"primary_mode": "early_termination", "failures": [], "confidence": 0.9, "summary": "stopped"}'
    with pytest.raises(JudgeOutputError, match="early_termination are ruled out"):
        parse_diagnosis(reply, signals)
    secondary = (
        '{"primary_mode": "err_recovery", "failures": [{"mode": "early_termination", '
        '"is_root_cause": false, "evidence": "x"}], "confidence": 0.5, "summary": "s"}'
    )
    with pytest.raises(JudgeOutputError, match="ruled out"):
        parse_diagnosis(secondary, signals)
    assert parse_diagnosis(reply, [])[0].primary_mode == "early_termination"  # fine without a budget stop


def test_enriched_trace_matches_calls_to_turns_with_status_and_short_output() -> None:
    long_output = "row " * 500
    trace = transcript(
        [
            [call(READ, {"path": "/a"}, long_output, cid="x"), call(CALC, {"expression": "1"}, "1")],
            [call(READ, {"path": "/a"}, "ENOENT", "tool_error", cid="x")],
        ]
    )  # the id is reused
    turns = enriched_trace(trace, output_chars=50)
    assert [len(t.calls) for t in turns] == [2, 1] and turns[0].parallel and not turns[1].parallel
    assert [c.number for t in turns for c in t.calls] == [1, 2, 3]
    assert turns[1].calls[0].status == "error" and turns[1].calls[0].error_kind == "tool_error"
    assert turns[0].calls[0].summary.endswith("[1999 chars]") and len(turns[0].calls[0].summary) < 80
    text = format_trace(turns, trace.final_answer, trace.stop_reason)
    assert "Turn 1 (2 parallel calls):" in text and "status: ERROR (tool_error)" in text
    assert (
        'call #3: filesystem_read_text_file({"path": "/a"})' in text
        and "Final answer: The sum is 41." in text
    )


# --- the LLM diagnoser ----------------------------------------------------------------------------


def judge_reply(primary: str, failures: list[tuple[str, bool]] | None = None, **extra: Any) -> str:
    body = {
        "primary_mode": primary,
        "confidence": 0.85,
        "summary": "Turn 2 added the wrong numbers.",
        "failures": [
            {"mode": m, "is_root_cause": root, "evidence": f"about {m}"}
            for m, root in (failures or [(primary, True)])
        ],
        **extra,
    }
    return "```json\n" + json.dumps(body) + "\n```"


def scripted(*replies: str) -> ScriptedProvider:
    """Answers with ``replies`` in order, repeating the last one."""
    queue = list(replies)

    def script(body: dict[str, Any]) -> Reply:
        return Reply(content=queue.pop(0) if len(queue) > 1 else queue[0])

    return ScriptedProvider(script)


async def diagnose(provider: ScriptedProvider, record: TaskResult) -> Diagnosis:
    return await make_diagnoser("openai/diag", provider.api_base, backoff_base_s=0).diagnose(record)


async def test_llm_diagnosis_valid_reply() -> None:
    with scripted(
        judge_reply("faulty_synthesis", [("faulty_synthesis", True), ("hallucinated_fact", False)])
    ) as p:
        diagnosis = await diagnose(p, result(OK_CALLS))
    assert diagnosis.status == "diagnosed" and diagnosis.attempts == 1 and diagnosis.error is None
    assert (diagnosis.primary_mode, diagnosis.family, diagnosis.confidence) == (
        "faulty_synthesis",
        "cognitive",
        0.85,
    )
    assert [(f.mode, f.root_cause) for f in diagnosis.failures] == [
        ("faulty_synthesis", True),
        ("hallucinated_fact", False),
    ]
    assert diagnosis.summary == "Turn 2 added the wrong numbers." and diagnosis.forced is None
    assert diagnosis.judge.model == "openai/diag" and len(diagnosis.judge.prompt_sha256 or "") == 64
    (request,) = p.requests
    assert request["temperature"] == 0  # the diagnosis judge runs at temperature 0 by default
    prompt = request["messages"][0]["content"]
    for expected in (
        "Task ID: sum-numbers",
        "Coverage Score Achieved: 0.00%",
        "1. The sum of the numbers is 42",
        "scorer reason: the response says 41, not 42",
        'call #2: calculator_calculate({"expression": "12+29"})',
        "Reference answer: The sum of the numbers is 42.",
        "- err_recovery: A tool returned",
        "MODEL'S FINAL TEXT RESPONSE (this is what was scored against the claims):\nThe sum is 41.",
    ):
        assert expected in prompt, expected
    assert request["response_format"] == {"type": "json_object"}


async def test_llm_garbage_is_retried_then_a_failed_diagnosis_counted_in_aggregates() -> None:
    with scripted("I think the model did badly.") as p:
        diagnosis = await diagnose(p, result(OK_CALLS))
    assert diagnosis.status == "failed" and diagnosis.primary_mode is None and diagnosis.family is None
    assert diagnosis.attempts == 4 and len(p.requests) == 4
    assert diagnosis.error and "unusable after 4 attempts: no JSON object" in diagnosis.error
    retry = p.requests[1]["messages"]  # the reason is fed back, the original prompt kept
    assert [m["role"] for m in retry] == ["user", "assistant", "user"] and "no JSON object" in retry[2][
        "content"
    ]
    report = aggregate([diagnosis.key], {diagnosis.key: diagnosis})
    (row,) = report.models
    assert (row.failing, row.diagnosed, row.failed, row.undiagnosed, row.shares) == (1, 0, 1, 0, {})


async def test_llm_invalid_mode_id_is_never_recorded() -> None:
    with scripted(judge_reply("tool_confusion")) as p:
        diagnosis = await diagnose(p, result(OK_CALLS))
    assert diagnosis.status == "failed" and diagnosis.primary_mode is None and diagnosis.failures == []
    assert diagnosis.error and "unknown failure mode 'tool_confusion'" in diagnosis.error
    with scripted(judge_reply("faulty_synthesis", [("made_up", True)])) as p:
        assert (await diagnose(p, result(OK_CALLS))).status == "failed"
    with scripted(judge_reply("nonsense"), judge_reply("Logical Error")) as p:  # a fixed retry is accepted
        diagnosis = await diagnose(p, result(OK_CALLS))
    assert (diagnosis.status, diagnosis.primary_mode, diagnosis.attempts) == ("diagnosed", "logical_error", 2)


async def test_certain_no_tool_use_forces_the_primary_mode() -> None:
    reply = judge_reply("hallucinated_fact", [("hallucinated_fact", True), ("wrong_tool", False)])
    with scripted(reply) as p:
        diagnosis = await diagnose(p, result(NO_CALLS))
    assert (diagnosis.primary_mode, diagnosis.family) == ("no_tool_use", "tool_call")
    assert [(f.mode, f.root_cause) for f in diagnosis.failures] == [
        ("no_tool_use", True),
        ("hallucinated_fact", False),
    ]
    assert (
        diagnosis.forced
        and "judge said hallucinated_fact" in diagnosis.forced
        and "wrong_tool" in diagnosis.forced
    )
    assert "no_tool_calls: the agent made no tool call at all" in p.requests[0]["messages"][0]["content"]


async def test_budget_stop_rejects_early_termination_then_accepts_a_valid_mode() -> None:
    trace = transcript(
        [[call(READ, {"path": "/data/nope.txt"}, "ENOENT", "tool_error", "r")]] * 3,
        answer="",
        stop="max_tool_calls",
    )
    with scripted(judge_reply("early_termination"), judge_reply("err_recovery")) as p:
        diagnosis = await diagnose(p, result(trace))
    assert (diagnosis.status, diagnosis.primary_mode, diagnosis.attempts) == ("diagnosed", "err_recovery", 2)
    assert "(do not use: early_termination)" in p.requests[0]["messages"][0]["content"]
    assert "ruled out by the harness signals" in p.requests[1]["messages"][2]["content"]
    assert {s.name for s in diagnosis.signals} == {"repeated_failing_call", "budget_exhausted"}


# --- aggregates ---------------------------------------------------------------------------------


def made(model: str, task: str, mode: str | None) -> Diagnosis:
    info = JudgeInfo(name="j", kind="llm", version="v")
    if mode is None:
        return Diagnosis(model=model, task_id=task, status="failed", judge=info, error="garbage")
    return Diagnosis(model=model, task_id=task, status="diagnosed", primary_mode=mode, judge=info)


def test_aggregate_shares_like_tables_3_and_4() -> None:
    modes = {
        ("a", "t1"): "no_tool_use",
        ("a", "t2"): "no_tool_use",
        ("a", "t3"): "early_termination",
        ("a", "t4"): "faulty_synthesis",
        ("a", "t5"): "malformed_call",
        ("a", "t6"): None,
        ("b", "t1"): "early_termination",
    }
    diagnoses = {(m, t, 0): made(m, t, mode) for (m, t), mode in modes.items()}
    diagnoses[("a", "stale", 0)] = made("a", "stale", "wrong_tool")  # no longer failing: ignored
    failing = [*[k for k in diagnoses if k[1] != "stale"], ("a", "t7", 0)]  # t7 has no diagnosis yet
    report = aggregate(failing, diagnoses)
    a, b = report.models
    assert (a.failing, a.diagnosed, a.failed, a.undiagnosed) == (7, 5, 1, 1)
    assert a.shares["no_tool_use"] == pytest.approx(2 / 5) and a.shares["malformed_call"] == pytest.approx(
        1 / 5
    )
    assert a.shares["wrong_tool"] == 0 and sum(a.shares.values()) == pytest.approx(1)
    assert a.family_shares == pytest.approx({"tool_call": 3 / 5, "cognitive": 2 / 5})
    assert a.top_modes == ["no_tool_use", "malformed_call", "faulty_synthesis"]  # ties in taxonomy order
    assert b.family_shares == {"tool_call": 0, "cognitive": 1} and b.top_modes == ["early_termination"]
    overall = report.overall
    assert (overall.failing, overall.diagnosed, overall.failed) == (8, 6, 1)
    assert overall.shares["early_termination"] == pytest.approx(2 / 6)
    text = format_report(report)
    assert "Tool%" in text and "Cog%" in text and "Early Term." in text and "no_tool_use 40.0%" in text


# --- atlas diagnose, end to end -----------------------------------------------------------------


def atlas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args], capture_output=True, text=True, timeout=300
    )


def build_results(root: Path) -> Path:
    results = ResultsDir(root)
    for record in (
        result(NO_CALLS, "alpha", "t1"),
        result(REPEATED, "alpha", "t2"),
        result(UNAVAILABLE, "alpha", "t3", coverage=0.5),
        result(OK_CALLS, "alpha", "t4", coverage=0.5),  # no signal: unclassified
        result(OK_CALLS, "alpha", "t5", coverage=1.0),  # passed: not diagnosed
        result(NO_CALLS, "alpha", "t6", status="error"),  # not scored: not diagnosed
        result(NO_CALLS, "beta", "t1"),
        result(NO_CALLS, "beta", "t1", repeat=1),
    ):
        results.append(record)
    return root


def test_atlas_diagnose_deterministic_end_to_end_and_resume(tmp_path: Path) -> None:
    out = build_results(tmp_path / "out")
    proc = atlas("diagnose", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = (out / "diagnoses.jsonl").read_text().splitlines()
    diagnoses = {(d.model, d.task_id, d.repeat): d for d in map(Diagnosis.model_validate_json, lines)}
    assert set(diagnoses) == {
        ("alpha", "t1", 0),
        ("alpha", "t2", 0),
        ("alpha", "t3", 0),
        ("alpha", "t4", 0),
        ("beta", "t1", 0),
        ("beta", "t1", 1),
    }
    assert {k: d.primary_mode for k, d in diagnoses.items() if k[0] == "alpha"} == {
        ("alpha", "t1", 0): "no_tool_use",
        ("alpha", "t2", 0): "err_recovery",
        ("alpha", "t3", 0): "wrong_tool",
        ("alpha", "t4", 0): "unclassified",
    }
    summary = json.loads((out / "diagnosis_summary.json").read_text())
    alpha, beta = summary["models"]
    # alpha: 4 diagnosed; 3 tool-call modes at 1/4 each, one unclassified -> Tool% 75, Cog% 0
    assert alpha["shares"]["no_tool_use"] == 0.25 and alpha["shares"]["unclassified"] == 0.25
    assert alpha["family_shares"] == {"tool_call": 0.75, "cognitive": 0.0}
    assert beta["shares"]["no_tool_use"] == 1.0 and beta["failing"] == 2
    assert summary["overall"]["shares"]["no_tool_use"] == pytest.approx(3 / 6)
    assert "75.0" in proc.stdout and "no_tool_use 100.0%" in proc.stdout
    assert "6 failing task(s) below coverage 0.75: 6 diagnosed now" in proc.stderr

    again = atlas("diagnose", str(out))
    assert (
        again.returncode == 0 and "0 diagnosed now, 0 failed diagnosis, 6 already diagnosed" in again.stderr
    )
    assert (out / "diagnoses.jsonl").read_text().splitlines() == lines
    forced = atlas("diagnose", str(out), "--force", "--threshold", "0.4")  # t3 and t4 (0.5) now pass
    assert "4 failing task(s) below coverage 0.4: 4 diagnosed now" in forced.stderr
    assert len((out / "diagnoses.jsonl").read_text().splitlines()) == 6  # one line per key, still
    assert json.loads((out / "diagnosis_summary.json").read_text())["models"][0]["failing"] == 2
    as_json = atlas("diagnose", str(out), "--json", "--threshold", "0.4")  # stdout: the summary alone
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == json.loads(
        (out / "diagnosis_summary.json").read_text()
    )
    assert "4 failing task(s) below coverage 0.4" in as_json.stderr


@pytest.mark.heavy
def test_atlas_diagnose_with_an_llm_judge_resumes_failed_diagnoses(tmp_path: Path) -> None:
    out = build_results(tmp_path / "out")
    with scripted("not json") as bad:
        proc = atlas(
            "diagnose", str(out), "--judge", "openai/diag", "--judge-api-base", bad.api_base, "--retries", "0"
        )
    assert proc.returncode == 0, proc.stderr
    assert "0 diagnosed now, 6 failed diagnosis" in proc.stderr and len(bad.requests) == 6
    assert all(d.status == "failed" for d in DiagnosesLog(out).load().values())
    with scripted(judge_reply("faulty_synthesis")) as good:
        proc = atlas("diagnose", str(out), "--judge", "openai/diag", "--judge-api-base", good.api_base)
    assert "6 diagnosed now" in proc.stderr, proc.stderr
    loaded = DiagnosesLog(out).load()
    # the three no-call transcripts are forced to no_tool_use; the judge's answer stands for the others
    assert (
        sorted(d.primary_mode or "" for d in loaded.values())
        == ["faulty_synthesis"] * 3 + ["no_tool_use"] * 3
    )
    assert all(d.judge.name == "openai/diag" and d.judge.kind == "llm" for d in loaded.values())
    assert "diagnosed by: openai/diag" in proc.stdout


def test_atlas_diagnose_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def diagnose_cli(*args: str) -> tuple[int, str]:  # in-process: the same main() the `atlas` script runs
        code = main(["diagnose", *args])
        return code, capsys.readouterr().err

    code, err = diagnose_cli(str(tmp_path / "nope"))
    assert code == 2 and "nope: results directory not found" in err
    code, err = diagnose_cli(str(tmp_path))
    assert code == 2 and "no results.jsonl here" in err
    out = build_results(tmp_path / "out")
    code, err = diagnose_cli(str(out), "--threshold", "2")
    assert code == 2 and "--threshold: must be in (0, 1]" in err
    code, err = diagnose_cli(str(out), "--judge", "openai/x", "--judge-api-key-env", "ATLAS_TEST_UNSET_KEY")
    assert code == 2 and "ATLAS_TEST_UNSET_KEY is not set" in err
    (out / task_record_name("alpha", "t2", 0)).unlink()  # a missing per-task record is reported, not fatal
    code, err = diagnose_cli(str(out))
    assert code == 0 and "not diagnosed: alpha / t2 (repeat 0): per-task record" in err
    assert "1 without a record" in err


# --- the judge's inputs within a budget ---------------------------------------------------------


def test_long_trace_keeps_first_and_last_steps_whole_and_summarises_the_middle() -> None:
    from atlasrun.diagnostics.prompt import CHARS_PER_TOKEN, TRACE_BUDGET_TOKENS, build_prompt, reference_text

    output = "row " * 750  # 3,000 characters: more than the old 300-character cut
    turns = [
        [call(READ if i % 2 else CALC, {"i": i}, f"{output}#{i}", "tool_error" if i == 7 else None, f"c{i}")]
        for i in range(80)
    ]
    trace = transcript(turns)
    record = result(trace)
    assert record.task is not None
    prompt = build_prompt(record.task, trace, record.claims, 0.0, [])
    assert " ".join(f"{output}#0".split()) in prompt and " ".join(f"{output}#79".split()) in prompt
    assert "Turn 1:" in prompt and "Turn 80:" in prompt
    summary = next(line for line in prompt.splitlines() if "summarised to fit the budget" in line)
    # 80 turns of ~3,100 characters against a 120,000-character budget: about 38 fit, the rest are
    # summarised with their call counts (the turns left out alternate between the tools).
    assert "calculator_calculate x" in summary and "filesystem_read_text_file x" in summary
    assert len(prompt) < TRACE_BUDGET_TOKENS * CHARS_PER_TOKEN + 20_000
    # A short trace is shown whole.
    short = build_prompt(record.task, transcript(turns[:3]), record.claims, 0.0, [])
    assert "summarised" not in short and "Turn 3:" in short

    # The reference trajectory: every step when it fits (no 40-step cut) ...
    steps = [
        {"calls": [{"name": CALC, "arguments": {"expression": f"{i}+1"}, "output": str(i + 1)}]}
        for i in range(50)
    ]
    task = record.task.model_copy(
        update={
            "reference_trajectory": Task.model_validate(
                {**SUM_TASK, "reference_trajectory": steps}
            ).reference_trajectory
        }
    )
    text, _ = reference_text(task)
    assert "50. calculator_calculate" in text and "summarised" not in text
    # ... and first/last steps with the middle summarised when it does not.
    text, _ = reference_text(task, budget_chars=1_000)
    assert text.startswith("1. calculator_calculate") and "50. calculator_calculate" in text
    assert "summarised to fit the budget: calculator_calculate x" in text
