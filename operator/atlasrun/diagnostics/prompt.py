"""The diagnosis prompt (MCP-Atlas Appendix E.1), versioned and hashed, and how it is filled in."""

from __future__ import annotations

import hashlib
import json

from atlasrun.agent.transcript import Transcript
from atlasrun.diagnostics.signals import (
    Signal,
    calls_summary,
    canonical_arguments,
    enriched_trace,
    fit_to_budget,
    format_trace,
    shorten,
)
from atlasrun.diagnostics.taxonomy import definitions_text
from atlasrun.judge.base import ClaimVerdict
from atlasrun.tasks.model import Task

PROMPT_VERSION = "mcp-atlas-appendix-e/2"
# The judge sees whole tool outputs (up to CALL_OUTPUT_CHARS each) within a budget, first and last
# steps kept and the middle summarised, rather than every output cut short.
CHARS_PER_TOKEN = 4
TRACE_BUDGET_TOKENS = 30_000
REFERENCE_BUDGET_TOKENS = 8_000
CALL_OUTPUT_CHARS = 4_000

DIAGNOSIS_PROMPT = """You are diagnosing why a model failed on an MCP (Model Context Protocol) tool-use evaluation task.
The model was connected to live MCP tool servers in sandboxed environments and had to use tools to answer a multi-step question. Its final text response was scored against ground-truth claims.

TASK CONTEXT:
Task ID: {task_id}
Original Prompt: {prompt}
Coverage Score Achieved: {coverage_score:.2%}
{limit_context}=== STEP 1. ANCHOR ON WHAT SHOULD HAVE HAPPENED ===
EXPECTED BEHAVIOR (Ground Truth Trajectory):
{traj_text}{traj_suffix}
EXPECTED CLAIMS TO ADDRESS:
{gtfa_claims}

=== STEP 2. EXAMINE WHAT THE MODEL ACTUALLY DID ===
MODEL'S ACTUAL BEHAVIOR (Enriched Agent Trajectory):
Each turn shows: assistant reasoning, tool calls with parameters/status/errors/output summaries, parallel call detection, and final answer.
Examine the trajectory turn-by-turn and assess PROGRESSION:
- Is the agent making forward progress, or looping on the same call?
- Does it retry identically after a tool error, or adapt parameters?
- Does it switch tools unproductively when a single correct tool was available?
- Does it stop while required data is still missing?
{agent_trace}

MODEL'S FINAL TEXT RESPONSE (this is what was scored against the claims):
{final_response_text}

=== STEP 3. CONSIDER WHICH CLAIMS WERE MISSED AND WHY ===
MISSED OR PARTIAL CLAIMS (with scorer reasoning):
The scorer below has already evaluated each claim against the model's final text response. Use the scorer's reason for each missed/partial claim as direct evidence when picking the failure mode.
{missed_text}

=== STEP 4. MAP TO A FAILURE MODE ===
FAILURE MODE DEFINITIONS:
{mode_definitions}

JUDGE REASONING PROCESS (do this internally before selecting a mode):
(a) Locate the specific turn or sentence in the final response where the model went off-track.
(b) State what should have happened instead (using the ground-truth trajectory and claims as reference).
(c) Decide whether the failure is in tool interaction (Tool Call family) or reasoning/synthesis (Cognitive family).
(d) Pick the most specific mode from that family.

JUDGE RULES:
1. Pick the most specific mode that fits. Common tricky boundaries:
- response_misparsing vs faulty_synthesis: misparsing = read the wrong field/row from a tool output; faulty_synthesis = read everything right but combined/aggregated wrong.
- logical_error vs faulty_synthesis: logical_error = the multi-step reasoning chain itself was flawed (wrong conditional, wrong filter); faulty_synthesis = combined correct outputs incorrectly without a clear logic error.
- hallucinated_fact vs no_tool_use: hallucinated_fact = stated a fact not present in any tool output; no_tool_use = bypassed tools entirely for a fact that required a tool.
- malformed_call vs err_recovery: malformed_call = first incorrect parameter usage; err_recovery = same error reproduced repeatedly without adapting.
2. Identify the PRIMARY failure: the single mode that best explains the coverage gap.
3. Identify ALL failures in the trajectory (primary + contributing). Secondary failures use the same 11-mode vocabulary.
4. For each failure, mark is_root_cause=true only if it caused other failures downstream. If there is only one failure, mark it root cause.
5. faulty_synthesis should only be used when the error is NOT better explained by logical_error, response_misparsing, or hallucinated_fact.
6. Confidence calibration: 0.9-1.0 when the trajectory and scorer evidence both clearly point to one mode; 0.6-0.8 when the mode is the best fit but a secondary mode is close; below 0.6 when the trajectory is ambiguous.
7. Write a 1-2 sentence summary stating what the model did wrong and why a claim was missed. Cite the specific turn or final-response sentence.

IMPORTANT: This task scored below the pass threshold, meaning at least one claim was not satisfied. You MUST select a failure mode from the 11 listed above, using its exact id.

Answer with a JSON object only:
{{"primary_mode": "<mode id>", "failures": [{{"mode": "<mode id>", "is_root_cause": true, "evidence": "<the turn, call or sentence>"}}], "confidence": 0.0-1.0, "summary": "<1-2 sentences>"}}"""

PROMPT_SHA256 = hashlib.sha256(f"{DIAGNOSIS_PROMPT}\n{definitions_text()}".encode()).hexdigest()

RETRY_PROMPT = (
    "That reply was not usable: {error}. Answer again with the JSON object only, using exact mode ids."
)


def reference_text(
    task: Task,
    output_chars: int = CALL_OUTPUT_CHARS,
    budget_chars: int | None = REFERENCE_BUDGET_TOKENS * CHARS_PER_TOKEN,
) -> tuple[str, str]:
    """(trajectory steps, suffix) for STEP 1, within the budget (first and last steps kept)."""
    calls = task.reference_calls()
    blocks = []
    for number, call in enumerate(calls, 1):
        line = f"{number}. {call.name}({shorten(canonical_arguments(call.arguments), 300)})"
        if call.output:
            line += f"\n   returned: {shorten(call.output, output_chars)}"
        blocks.append(line)

    def summarize(i: int, j: int) -> str:
        left_out = [(c.name, c.is_error) for c in calls[i : j + 1]]
        return f"... steps {i + 1}-{j + 1} summarised to fit the budget: {calls_summary(left_out)} ..."

    suffix = f"\nReference answer: {shorten(task.reference_answer, 2000)}" if task.reference_answer else ""
    return fit_to_budget(blocks, budget_chars, summarize) or "(no reference trajectory recorded)", suffix


def limit_context(signals: list[Signal]) -> str:
    """Harness facts for the judge: budget stops and deterministic signals, with the modes they exclude."""
    if not signals:
        return ""
    lines = ["HARNESS-DETECTED SIGNALS (facts established from the trace, not opinions):"]
    for signal in signals:
        line = f"- {signal.name}: {signal.evidence}"
        if signal.mode:
            line += f" -> {'this IS' if signal.certain else 'candidate'} {signal.mode}"
        if signal.forbids:
            line += f" (do not use: {', '.join(signal.forbids)})"
        lines.append(line)
    return "\n".join(lines) + "\n\n"


def missed_claims_text(verdicts: list[ClaimVerdict]) -> str:
    lines = [
        f"- [{v.label}] {v.claim}\n  scorer reason: {v.reason or '(none given)'}"
        for v in verdicts
        if v.score is not None and v.score < 1.0
    ]
    return "\n".join(lines) or "(the scorer marked no individual claim as missed)"


def build_prompt(
    task: Task, transcript: Transcript, claims: list[ClaimVerdict], coverage: float, signals: list[Signal]
) -> str:
    traj_text, traj_suffix = reference_text(task)
    trace = format_trace(
        enriched_trace(transcript, CALL_OUTPUT_CHARS),
        transcript.final_answer,
        transcript.stop_reason,
        budget_chars=TRACE_BUDGET_TOKENS * CHARS_PER_TOKEN,
    )
    return DIAGNOSIS_PROMPT.format(
        task_id=task.id,
        prompt=task.prompt,
        coverage_score=coverage,
        limit_context=limit_context(signals),
        traj_text=traj_text,
        traj_suffix=traj_suffix,
        gtfa_claims="\n".join(f"{i}. {c}" for i, c in enumerate(task.claims, 1)),
        agent_trace=trace,
        final_response_text=transcript.final_answer or "(empty response)",
        missed_text=missed_claims_text(claims),
        mode_definitions=definitions_text(),
    )


def retry_prompt(error: str) -> str:
    return RETRY_PROMPT.format(error=json.dumps(error)[1:-1])
