"""Results of the MCP-Atlas harness (``mcp_completion_script.py`` / ``mcp_evals_scores.py``) <-> AtlasRun.

Import accepts a CSV (or JSONL / Parquet with the same keys), one row per task attempt.
Column names match exactly first, then case-insensitively:

* task id: ``task_id`` | ``TASK`` | ``task`` | ``id``
* conversation: ``raw_conversation_history`` | ``conversation`` | ``messages`` - a JSON list of
  OpenAI-format messages (system / user / assistant with ``tool_calls`` / tool results); a tool
  result's content is a string or a list of ``{"type": "text", "text", "isError"?}`` parts
* final answer: ``response`` | ``script_model_response`` | ``model_response`` | ``final_answer``
  (empty: the conversation's last assistant text)
* optional: ``repeat`` (else the n-th row of a task id is repeat n-1), ``trajectory_time`` (seconds)
* optional scores, on the row or in a separate scored file (matched by task id, then order):
  ``coverage_score`` | ``coverage`` | ``score`` (0..1; empty or NaN = not scored), and per claim
  ``coverage_details_json`` (the MCP-Atlas scorer's ``{"per_claim": [{claim, score, reason}]}``),
  ``claim_scores`` or ``per_claim``: a JSON list, in claim order, of numbers (1 / 0.5 / 0) or
  objects with ``score`` or ``coverage_outcome`` / ``label`` / ``outcome`` and ``reason`` /
  ``justification``. Per-claim scores decide when given. ``pass`` is recomputed from the threshold.
  The MCP-Atlas scorer records a failed judge call as ``not_fulfilled`` with the reason
  ``Evaluation failed: ...``; it is imported as a judge failure (an error, never a 0).

A harness failure row (``response`` starting ``ERROR:``, e.g. ``ERROR: HTTP 502``) imports as an
infrastructure error whatever its score; a tool result whose text starts with ``Error:`` counts as
a tool error; a row the scorer crashed on (``{"coverage_score": null, "explanation": "Failed: ..."}``)
imports unscored.

Everything else is ignored. A row without a score imports as an error ``not yet judged``, which
``atlas rescore`` judges; a row without any conversation or answer (the harness got no agent
output) as a ``provider:`` error, which stays one. Bad rows are rejected by row and column; the
rest still import. Export writes ``task_id, raw_conversation_history, response`` (plus ``repeat``
when there are repeats, and ``coverage_score, pass, judge`` when anything is scored); a result whose
transcript is gone is left out (and named), never written as an empty answer with a score.
Imported scores are recorded as who produced them: the row's ``judge`` column when an AtlasRun
export wrote one, else the MCP-Atlas scorer (judge model from ``--judge-model``).
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atlasrun.agent.litellm_agent import last_text, parse_arguments
from atlasrun.agent.transcript import Transcript
from atlasrun.judge.base import LABEL_SCORES, ClaimVerdict, JudgeInfo, Label
from atlasrun.scoring.claims import REPORTED_THRESHOLDS, score_claims
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.servers.calls import CallRecord
from atlasrun.tasks.fields import tool_text
from atlasrun.tasks.loader import Rejection, Unreadable, read_rows, row_task_id
from atlasrun.tasks.model import Task

NOT_JUDGED = "not yet judged"
# Results whose answer was judged (or was to be): exported only with their transcript.
JUDGED_KINDS = (ErrorKind.JUDGE, ErrorKind.UNJUDGED)
NO_OUTPUT = "provider: the MCP-Atlas harness recorded no conversation or answer"
# run_eval.py writes ``response: "ERROR: HTTP 502: ..."`` / ``"ERROR: timeout after 600s"`` when the
# harness itself failed: an infrastructure error (the reason prefix the engine uses), never a 0.
HARNESS_ERROR_PREFIX = "ERROR:"
HARNESS_ERROR = "infra: MCP-Atlas harness error"
TOOL_ERROR_PREFIX = "Error:"  # MCP tools report failures as text starting with "Error:"
ID = ("task_id", "TASK", "task", "id")
CONVERSATION = ("raw_conversation_history", "conversation", "messages")
RESPONSE = ("response", "script_model_response", "model_response", "final_answer")
COVERAGE = ("coverage_score", "coverage", "score")
JUDGE = ("judge",)  # written by export-atlas: who produced coverage_score and pass
IMPORTED_VERSION = "imported"  # the JudgeInfo.version of scores named by a judge column
PER_CLAIM = ("coverage_details_json", "claim_scores", "per_claim")
EXPORT_COLUMNS = ["task_id", "raw_conversation_history", "response"]
SCORE_BY_VALUE = {score: label for label, score in LABEL_SCORES.items()}


class RowError(ValueError):
    def __init__(self, column: str, message: str) -> None:
        super().__init__(message)
        self.column = column


@dataclass
class Imported:
    results: list[TaskResult] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


def _column(row: dict[str, Any], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` the row has (exact, then case-insensitive)."""
    for name in names:
        if name in row:
            return name
    lowered = {key.lower(): key for key in row}
    return next((lowered[n.lower()] for n in names if n.lower() in lowered), None)


def _value(row: dict[str, Any], names: tuple[str, ...]) -> tuple[str, Any]:
    column = _column(row, names)
    if column is None:
        return names[0], None
    value = row[column]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return column, None
    if isinstance(value, str) and (not value.strip() or value.strip().lower() in ("nan", "none", "null")):
        return column, None
    return column, value


def _json(column: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value.tolist() if hasattr(value, "tolist") else value
    try:
        return json.loads(value)
    except ValueError as exc:
        raise RowError(column, f"not valid JSON: {exc}") from exc


def transcript_from_messages(messages: list[Any], model: str, answer: str | None) -> Transcript:
    """Rebuild a transcript (calls paired with their results) from OpenAI-format messages."""
    transcript = Transcript(agent="mcp-atlas", model=model, messages=messages)
    pending: dict[str, CallRecord] = {}
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"message {i} is not an object")
        role = message.get("role")
        if role == "assistant":
            transcript.turns += 1
            for j, tool_call in enumerate(message.get("tool_calls") or []):
                if not isinstance(tool_call, dict):
                    raise ValueError(f"message {i} tool_call {j} is not an object")
                function = tool_call.get("function")
                function = function if isinstance(function, dict) else {}
                call = CallRecord(
                    id=str(tool_call.get("id") or f"call_{i}_{j}"),
                    name=str(function.get("name") or ""),
                    arguments=parse_arguments(function.get("arguments")),
                )
                transcript.calls.append(call)
                pending[call.id] = call
        elif role == "tool":
            result = pending.pop(str(message.get("tool_call_id")), None)
            if result is None:
                transcript.notes.append(
                    f"message {i}: tool result for unknown call {message.get('tool_call_id')!r}"
                )
                continue
            result.result, result.is_error = tool_text(message.get("content"))
            result.is_error = result.is_error or result.result.lstrip().startswith(TOOL_ERROR_PREFIX)
            result.error_kind = "tool_error" if result.is_error else None
    transcript.final_answer = answer.strip() if answer and answer.strip() else last_text(messages)
    return transcript


def _label(column: str, index: int, item: Any) -> tuple[Label, str, float | None]:
    score, reason, confidence, text = item, "", None, None
    if isinstance(item, dict):
        score = item.get("score")
        text = item.get("coverage_outcome") or item.get("label") or item.get("outcome")
        reason = str(item.get("reason") or item.get("justification") or "")
        raw = item.get("confidence_level", item.get("confidence"))
        confidence = float(raw) if isinstance(raw, (int, float)) else None
    if isinstance(text, str) and text.strip().lower().replace(" ", "_") in LABEL_SCORES:
        return text.strip().lower().replace(" ", "_"), reason, confidence  # type: ignore[return-value]
    if isinstance(score, (int, float, str)):
        try:
            return SCORE_BY_VALUE[float(score)], reason, confidence  # type: ignore[return-value]
        except (KeyError, ValueError):
            pass
    raise RowError(
        column, f"claim {index}: no score of 1, 0.5 or 0 and no coverage outcome: {str(item)[:80]}"
    )


def _verdicts(column: str, value: Any, claims: list[str]) -> list[ClaimVerdict]:
    data = _json(column, value)
    if isinstance(data, dict):
        if "per_claim" not in data and "claims" not in data:
            return []  # the scorer crashed on this row ({"coverage_score": null, "explanation": "Failed: ..."})
        data = data.get("per_claim", data.get("claims"))
    if not isinstance(data, list):
        raise RowError(column, "expected a list of per-claim scores (or an object with per_claim)")
    verdicts: list[ClaimVerdict] = []
    for i, item in enumerate(data):
        claim = claims[i] if i < len(claims) else ""
        if isinstance(item, dict):
            claim = str(item.get("claim") or item.get("claim_text") or claim)
        reason = str(item.get("reason") or item.get("justification") or "") if isinstance(item, dict) else ""
        if reason.startswith("Evaluation failed"):
            verdicts.append(ClaimVerdict.failed(claim, reason))
            continue
        label, reason, confidence = _label(column, i, item)
        verdicts.append(ClaimVerdict.labelled(claim, label, reason, confidence))
    return verdicts


def _score(
    result: TaskResult, rows: list[dict[str, Any]], task: Task, threshold: float, judge: JudgeInfo
) -> None:
    """Apply the scores found in ``rows`` (scores file row first, then the results row), recording
    who produced them: the row's ``judge`` column (an AtlasRun export names its judge), else
    ``judge`` (the MCP-Atlas scorer)."""
    for row in rows:
        by = _row_judge(row) or judge
        column, value = _value(row, PER_CLAIM)
        verdicts = _verdicts(column, value, task.claims) if value is not None else []
        if verdicts:  # an empty list says nothing: fall back to the coverage column
            score = score_claims(verdicts, threshold)
            result.claims, result.judge = verdicts, by
            if score.judge_failures:
                result.error_kind = ErrorKind.JUDGE
                result.reason = (
                    f"judge failed on {score.judge_failures}/{len(verdicts)} claims (MCP-Atlas scorer)"
                )
                return
            result.error_kind, result.reason = None, None
            result.status, result.coverage, result.passed, result.passed_at = (
                "scored",
                score.coverage,
                score.passed,
                score.passed_at,
            )
            return
        column, value = _value(row, COVERAGE)
        if value is not None:
            try:
                coverage = float(value)
            except ValueError as exc:
                raise RowError(column, f"not a number: {value!r}") from exc
            if math.isnan(coverage):
                continue
            if not 0.0 <= coverage <= 1.0:
                raise RowError(column, f"coverage {coverage} is not between 0 and 1")
            thresholds = sorted({*REPORTED_THRESHOLDS, threshold})
            result.status, result.error_kind, result.coverage, result.judge = "scored", None, coverage, by
            result.reason = None
            result.passed = coverage >= threshold - 1e-9
            result.passed_at = {f"{t:g}": coverage >= t - 1e-9 for t in thresholds}
            return


def _row_judge(row: dict[str, Any]) -> JudgeInfo | None:
    """The judge an AtlasRun export named in its ``judge`` column (None when there is none)."""
    name = str(_value(row, JUDGE)[1] or "").strip()
    if not name:
        return None
    deterministic = name == "deterministic"
    return JudgeInfo(
        name=name,
        kind="deterministic" if deterministic else "llm",
        model=None if deterministic else name,
        version=IMPORTED_VERSION,
    )


def _row_result(
    row: dict[str, Any],
    task: Task,
    model: str,
    repeat: int,
    score_rows: list[dict[str, Any]],
    threshold: float,
    judge: JudgeInfo,
) -> TaskResult:
    result = TaskResult(
        task_id=task.id,
        model=model,
        repeat=repeat,
        status="error",
        error_kind=ErrorKind.UNJUDGED,
        reason=NOT_JUDGED,
        domain=task.domain,
        category=task.category,
        servers=task.required_servers,
        task=task,
    )
    conversation_column, conversation = _value(row, CONVERSATION)
    response = _value(row, RESPONSE)[1]
    if conversation is None and response is None:
        result.error_kind, result.reason = ErrorKind.PROVIDER, NO_OUTPUT
        return result
    if str(response or "").lstrip().startswith(HARNESS_ERROR_PREFIX):
        result.reason = f"{HARNESS_ERROR}: {str(response).strip()[:300]}"
        result.stop_reason = "infra_error"
        return result
    messages = _json(conversation_column, conversation) if conversation is not None else []
    if not isinstance(messages, list):
        raise RowError(
            conversation_column, f"expected a JSON list of messages, got {type(messages).__name__}"
        )
    try:
        transcript = transcript_from_messages(messages, model, None if response is None else str(response))
    except ValueError as exc:
        raise RowError(conversation_column, str(exc)) from exc
    seconds = _value(row, ("trajectory_time", "wall_s"))[1]
    try:
        transcript.wall_s = float(seconds) if seconds is not None else 0.0
    except ValueError:
        transcript.wall_s = 0.0
    result.transcript, result.turns, result.wall_s = transcript, transcript.turns, transcript.wall_s
    result.tool_calls, result.tool_errors = (
        len(transcript.calls),
        sum(1 for c in transcript.calls if c.is_error),
    )
    result.stop_reason = transcript.stop_reason
    _score(result, [*score_rows, row], task, threshold, judge)
    return result


def _by_id(path: Path) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, row in read_rows(path):
        if isinstance(row, Unreadable):
            continue
        task_id = _value(row, ID)[1]
        if task_id is not None:
            rows[str(task_id).strip()].append(row)
    return rows


def import_results(
    path: Path,
    tasks: dict[str, Task],
    model: str,
    *,
    scores: Iterable[Path] = (),
    threshold: float = 0.75,
    judge_model: str | None = None,
) -> Imported:
    judge = JudgeInfo(name="mcp-atlas", kind="llm", model=judge_model, version="mcp-atlas-scorer")
    score_files = [_by_id(p) for p in scores]
    seen: dict[str, int] = defaultdict(int)
    imported = Imported()
    for location, row in read_rows(path):
        where = f"{path.name} {location}"
        row_id = None if isinstance(row, Unreadable) else row_task_id(_value(row, ID)[1])
        try:
            if isinstance(row, Unreadable):
                raise RowError(row.field, row.message)
            id_column, raw_id = _value(row, ID)
            if raw_id is None:
                raise RowError(id_column, "no task id")
            task_id = str(raw_id).strip()
            task = tasks.get(task_id)
            if task is None:
                raise RowError(id_column, f"task {task_id!r} is not in the tasks file")
            repeat_value = _value(row, ("repeat",))[1]
            repeat = int(repeat_value) if repeat_value is not None else seen[task_id]
            seen[task_id] = max(seen[task_id], repeat + 1)
            score_rows = [f[task_id][repeat] for f in score_files if len(f.get(task_id, [])) > repeat]
            imported.results.append(_row_result(row, task, model, repeat, score_rows, threshold, judge))
        except RowError as exc:
            imported.rejected.append(Rejection(where, exc.column, str(exc), row_id))
        except ValueError as exc:  # e.g. a repeat that is not an integer
            imported.rejected.append(Rejection(where, "repeat", str(exc), row_id))
    return imported


def _export_messages(transcript: Transcript) -> list[dict[str, Any]]:
    """The conversation, with failed tool results as MCP parts carrying ``isError`` (so they re-import as errors)."""
    errors = {c.id for c in transcript.calls if c.is_error}
    messages = []
    for message in transcript.messages:
        if (
            message.get("role") == "tool"
            and message.get("tool_call_id") in errors
            and isinstance(message.get("content"), str)
        ):
            message = {**message, "content": [{"type": "text", "text": message["content"], "isError": True}]}
        messages.append(message)
    return messages


def export_rows(results: list[TaskResult]) -> tuple[list[str], list[dict[str, str]], list[TaskResult]]:
    """MCP-Atlas columns for full records (task + transcript), and the results left out: excluded
    ones, and any without its transcript (no row with an empty answer carries a score)."""
    chosen = sorted((r for r in results if r.status != "excluded"), key=lambda r: (r.task_id, r.repeat))
    missing = [r for r in chosen if r.transcript is None and r.error_kind in (None, *JUDGED_KINDS)]
    chosen = [r for r in chosen if r not in missing]
    columns = list(EXPORT_COLUMNS)
    if any(r.repeat for r in chosen):
        columns.append("repeat")
    if any(r.status == "scored" for r in chosen):
        columns += ["coverage_score", "pass", "judge"]
    rows = []
    for result in chosen:
        transcript = result.transcript
        row = {
            "task_id": result.task_id,
            "raw_conversation_history": json.dumps(_export_messages(transcript)) if transcript else "",
            "response": transcript.final_answer if transcript else "",
            "repeat": str(result.repeat),
        }
        scored = result.status == "scored" and result.coverage is not None and transcript is not None
        row["coverage_score"] = repr(result.coverage) if scored else ""
        row["pass"] = str(bool(result.passed)) if scored else ""
        row["judge"] = result.judge.name if scored and result.judge else ""
        rows.append({c: row[c] for c in columns})
    return columns, rows, missing


def write_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
