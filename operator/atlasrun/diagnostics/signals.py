"""Deterministic evidence from a transcript: failure signals, and the enriched trace the LLM judge reads.

Signals are facts the harness can establish without a judge. A *certain* signal
(no tool call at all) forces the primary mode; the others are candidates the
judge is shown. A budget stop (max tool calls, max turns, task timeout) is not
a mode, but it forbids ``early_termination``: the agent did not choose to stop.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from atlasrun.agent.transcript import CallRecord, Transcript

BUDGET_STOPS = frozenset({"max_tool_calls", "max_turns", "task_timeout"})
# Errors the harness produced, not the model's call: they say nothing about the model's tool use.
_NOT_MODEL_ERRORS = frozenset({"budget", "transport"})
# Server replies that mean "your arguments do not fit the schema" (MCP -32602, pydantic, zod, jsonschema).
_SCHEMA_ERROR = re.compile(
    r"-32602|invalid (?:params|arguments|input)|validation error|is a required property|missing required"
    r"|field required|required argument|unexpected keyword argument|invalid_type|is not of type"
    r"|expected \w+, received",
    re.IGNORECASE,
)
# Order of strength: the deterministic diagnoser's primary is the first mode present.
MODE_STRENGTH = ("no_tool_use", "err_recovery", "malformed_call", "wrong_tool")


class Signal(BaseModel):
    name: str  # what was detected, e.g. "repeated_failing_call"
    mode: str | None = None  # the taxonomy mode it points to (None: context only)
    certain: bool = False  # certain signals force the primary mode
    evidence: str = ""
    calls: list[int] = Field(default_factory=list)  # 1-based call numbers, as in the enriched trace
    forbids: list[str] = Field(default_factory=list)  # modes a diagnosis may not use when this applies


def canonical_arguments(arguments: Any) -> str:
    try:
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(arguments)


# A final answer that declines or reports it could not do the task.
_REFUSAL = re.compile(
    r"\b(?:I (?:can(?:no|')t|am unable to|am not able to|won't|will not)|I'm (?:unable|not able) to"
    r"|(?:cannot|can't) (?:help|assist|access|comply))\b",
    re.IGNORECASE,
)


def detect(transcript: Transcript, task_needs_tools: bool | None = None) -> list[Signal]:
    """Every signal that applies to this transcript, strongest first.

    ``task_needs_tools``: whether the task's reference trajectory calls any tool (None: unknown).
    No tool call at all is *certain* ``no_tool_use`` only when the task needed tools and the model
    did not refuse; otherwise the evidence is ambiguous and the signal only proposes the mode.
    """
    calls = transcript.calls
    signals: list[Signal] = []
    if not calls:
        refused = bool(_REFUSAL.search(transcript.final_answer or ""))
        ambiguous = task_needs_tools is False or refused
        why = (
            "the reference trajectory calls no tool either"
            if task_needs_tools is False
            else "the model refused or said it could not do the task"
            if refused
            else ""
        )
        signals.append(
            Signal(
                name="no_tool_calls",
                mode="no_tool_use",
                certain=not ambiguous,
                evidence="the agent made no tool call at all and answered directly"
                + (f"; ambiguous: {why}, so this is only a candidate" if ambiguous else ""),
                forbids=["malformed_call", "wrong_tool", "err_recovery", "response_misparsing"],
            )
        )
    signals += [
        s
        for s in (_repeated_failures(calls), _argument_errors(calls, transcript.tools), _unavailable(calls))
        if s is not None
    ]
    if transcript.stop_reason in BUDGET_STOPS:
        signals.append(
            Signal(
                name="budget_exhausted",
                certain=True,
                forbids=["early_termination"],
                evidence=f"the harness stopped the agent (stop_reason={transcript.stop_reason}) after "
                f"{len(calls)} tool call(s) and {transcript.turns} turn(s); it did not choose to stop",
            )
        )
    return signals


def strongest_mode(signals: Sequence[Signal]) -> str | None:
    """The primary mode signals alone support: a certain one, else the strongest candidate."""
    modes = {s.mode for s in signals if s.mode}
    for signal in signals:
        if signal.certain and signal.mode:
            return signal.mode
    return next((m for m in MODE_STRENGTH if m in modes), None)


def forbidden_modes(signals: Iterable[Signal]) -> set[str]:
    return {mode for s in signals for mode in s.forbids}


def _model_error(call: CallRecord) -> bool:
    return call.is_error and call.error_kind not in _NOT_MODEL_ERRORS


def _repeated_failures(calls: list[CallRecord]) -> Signal | None:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for number, call in enumerate(calls, 1):
        if _model_error(call):
            groups[(call.name, canonical_arguments(call.arguments))].append(number)
    repeats = {key: numbers for key, numbers in groups.items() if len(numbers) > 1}
    if not repeats:
        return None
    parts = [
        f"{name} failed {len(numbers)} times with identical arguments (calls "
        f"{', '.join(f'#{n}' for n in numbers)})"
        for (name, _), numbers in repeats.items()
    ]
    return Signal(
        name="repeated_failing_call",
        mode="err_recovery",
        evidence="; ".join(parts),
        calls=sorted(n for numbers in repeats.values() for n in numbers),
    )


def _schema_problem(call: CallRecord, schemas: dict[str, dict[str, Any]]) -> str | None:
    if call.error_kind == "invalid_arguments":
        return "arguments were not a JSON object"
    if call.error_kind != "tool_error":
        return None
    schema = schemas.get(call.name)
    if schema is not None and isinstance(call.arguments, dict):
        import jsonschema  # slow to import; only needed for failed calls

        try:
            cls = jsonschema.validators.validator_for(schema)
            error = jsonschema.exceptions.best_match(cls(schema).iter_errors(call.arguments))
        except (jsonschema.exceptions.SchemaError, TypeError, ValueError):
            error = None
        if error is not None:
            return f"arguments violate the tool's input schema: {error.message}"
    if _SCHEMA_ERROR.search(call.result):
        return "the server rejected the arguments"
    return None


def _argument_errors(calls: list[CallRecord], tools: list[dict[str, Any]]) -> Signal | None:
    schemas = {
        t["function"]["name"]: t["function"].get("parameters") or {}
        for t in tools
        if isinstance(t.get("function"), dict) and t["function"].get("name")
    }
    found = [(n, c.name, why) for n, c in enumerate(calls, 1) if (why := _schema_problem(c, schemas))]
    if not found:
        return None
    return Signal(
        name="argument_error",
        mode="malformed_call",
        calls=[n for n, _, _ in found],
        evidence="; ".join(f"call #{n} {name}: {why}" for n, name, why in found),
    )


def _unavailable(calls: list[CallRecord]) -> Signal | None:
    found = [(n, c.name) for n, c in enumerate(calls, 1) if c.error_kind == "not_available"]
    if not found:
        return None
    names = sorted({name for _, name in found})
    return Signal(
        name="unavailable_tool",
        mode="wrong_tool",
        calls=[n for n, _ in found],
        evidence=f"called tool(s) not in the task's tool set: {', '.join(names)}",
    )


# --- the enriched trace -------------------------------------------------------------------------


class TraceCall(BaseModel):
    number: int  # 1-based, in execution order
    name: str
    parameters: Any = None
    status: str  # "ok" or "error"
    error_kind: str | None = None
    summary: str = ""  # short output (ok) or error text (error)


class TraceTurn(BaseModel):
    number: int
    reasoning: str = ""
    calls: list[TraceCall] = Field(default_factory=list)

    @property
    def parallel(self) -> bool:
        return len(self.calls) > 1


def shorten(text: Any, limit: int) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else f"{flat[:limit]}... [{len(flat)} chars]"


def _trace_call(number: int, call: CallRecord, output_chars: int) -> TraceCall:
    return TraceCall(
        number=number,
        name=call.name,
        parameters=call.arguments,
        status="error" if call.is_error else "ok",
        error_kind=call.error_kind,
        summary=shorten(call.result, output_chars),
    )


def enriched_trace(transcript: Transcript, output_chars: int = 400) -> list[TraceTurn]:
    """Assistant turns with their calls (matched by id, in order), each call's status and short output."""
    pending: dict[str, deque[tuple[int, CallRecord]]] = defaultdict(deque)
    for number, call in enumerate(transcript.calls, 1):
        pending[call.id].append((number, call))
    turns: list[TraceTurn] = []
    for message in transcript.messages:
        if message.get("role") != "assistant":
            continue
        turn = TraceTurn(number=len(turns) + 1, reasoning=shorten(message.get("content"), 1000))
        for tool_call in message.get("tool_calls") or []:
            queue = pending.get(str(tool_call.get("id")))
            if queue:
                number, call = queue.popleft()
                turn.calls.append(_trace_call(number, call, output_chars))
        turn.calls.sort(key=lambda c: c.number)
        turns.append(turn)
    if turns and not turns[-1].calls and turns[-1].reasoning == shorten(transcript.final_answer, 1000):
        turns.pop()  # the final answer, shown on its own
    leftover = sorted((item for queue in pending.values() for item in queue), key=lambda item: item[0])
    for number, call in leftover:  # calls no message accounts for (e.g. a hand-built transcript)
        turns.append(TraceTurn(number=len(turns) + 1, calls=[_trace_call(number, call, output_chars)]))
    return turns


def format_turn(turn: TraceTurn, param_chars: int = 400) -> str:
    head = f"Turn {turn.number}"
    if turn.parallel:
        head += f" ({len(turn.calls)} parallel calls)"
    lines = [head + ":"]
    if turn.reasoning:
        lines.append(f"  reasoning: {turn.reasoning}")
    for call in turn.calls:
        status = "ok" if call.status == "ok" else f"ERROR ({call.error_kind or 'error'})"
        arguments = shorten(canonical_arguments(call.parameters), param_chars)
        lines.append(f"  call #{call.number}: {call.name}({arguments})")
        lines.append(f"    status: {status}")
        lines.append(f"    {'output' if call.status == 'ok' else 'error'}: {call.summary or '(empty)'}")
    return "\n".join(lines)


def calls_summary(names: Iterable[tuple[str, bool]]) -> str:
    """'read_file x3 (1 error), search x1' for (tool name, failed) pairs, most used first."""
    counts: dict[str, list[int]] = {}
    for name, failed in names:
        entry = counts.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += int(failed)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return ", ".join(
        f"{name} x{n}" + (f" ({e} error{'s' if e > 1 else ''})" if e else "") for name, (n, e) in ranked
    )


def fit_to_budget(blocks: list[str], budget_chars: int | None, summarize: Callable[[int, int], str]) -> str:
    """The blocks joined by newlines; over ``budget_chars``, the first and last blocks are kept
    (taken alternately from both ends while they fit) and the blocks in between are replaced by
    ``summarize(first_left_out, last_left_out)``. First and last are always kept (cut if huge)."""
    if budget_chars is None or sum(len(b) + 1 for b in blocks) <= budget_chars or len(blocks) < 3:
        return "\n".join(blocks)
    room = budget_chars - 300  # the summary line
    head = [blocks[0][: room // 2]]
    tail = [blocks[-1][: room // 2]]
    used = len(head[0]) + len(tail[0])
    i, j = 1, len(blocks) - 2
    from_head = True
    while i <= j:
        block = blocks[i] if from_head else blocks[j]
        if used + len(block) + 1 > room:
            break
        used += len(block) + 1
        if from_head:
            head.append(block)
            i += 1
        else:
            tail.insert(0, block)
            j -= 1
        from_head = not from_head
    middle = [summarize(i, j)] if i <= j else []
    return "\n".join([*head, *middle, *tail])


def format_trace(
    turns: list[TraceTurn],
    final_answer: str = "",
    stop_reason: str | None = None,
    param_chars: int = 400,
    budget_chars: int | None = None,
) -> str:
    """The enriched trace as text; within ``budget_chars`` the middle turns are summarised."""

    def summarize(i: int, j: int) -> str:
        left_out = turns[i : j + 1]
        calls = [(c.name, c.status != "ok") for t in left_out for c in t.calls]
        return (
            f"... turns {left_out[0].number}-{left_out[-1].number} summarised to fit the budget: "
            f"{len(left_out)} turn(s), {len(calls)} call(s): {calls_summary(calls) or 'no calls'} ..."
        )

    lines = [fit_to_budget([format_turn(t, param_chars) for t in turns], budget_chars, summarize)]
    if not any(turn.calls for turn in turns):
        lines.append("(no tool calls were made)")
    if stop_reason:
        lines.append(f"Stop reason: {stop_reason}")
    lines.append(f"Final answer: {shorten(final_answer, 2000) or '(empty)'}")
    return "\n".join(line for line in lines if line)
