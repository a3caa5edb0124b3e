"""Bounds on a task's text, so that one task runs in bounded time and memory.

A run holds several copies of a task's text (the task, the transcript, the per-task record, the
results line: one 50 MB argument took the harness alone to ~570 MB), and the deterministic judge
reads every claim and, under the replay agent, the reference answer in time that grows faster than
their length. Real tasks are far below these bounds (MCP-Atlas's public sample: claims under 200
characters, prompts under 600, a whole trajectory under 30 KB).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from atlasrun.tasks.model import Task

ID_LIMIT = 256  # characters in a task id: it names result files and object keys, and is printed
TEXT_LIMIT = 1_000_000  # characters in any one text of a task: prompt, call arguments, outputs
ANSWER_LIMIT = 100_000  # characters in the reference answer (the judge reads it under replay)
CLAIM_LIMIT = 10_000  # characters in one claim: one checkable statement

# A native field's name in MCP-Atlas's columns, for messages about an MCP-Atlas row.
ATLAS_NAMES = {
    "id": "TASK",
    "prompt": "PROMPT",
    "enabled_tools": "ENABLED_TOOLS",
    "claims": "GTFA_CLAIMS",
    "reference_trajectory": "TRAJECTORY",
}


def _texts(task: Task) -> Iterator[tuple[str, str, int, int]]:
    """(field, what, length, limit) of each text of ``task``."""
    yield "id", "the id", len(task.id), TEXT_LIMIT
    yield "prompt", "the prompt", len(task.prompt), TEXT_LIMIT
    yield "domain", "the domain", len(task.domain or ""), TEXT_LIMIT
    yield "reference_answer", "the reference answer", len(task.reference_answer or ""), ANSWER_LIMIT
    for i, claim in enumerate(task.claims, start=1):
        yield "claims", f"claim {i}", len(claim), CLAIM_LIMIT
    for name in ("enabled_tools", "distractors"):
        for i, tool in enumerate(getattr(task, name), start=1):
            yield name, f"tool {i}", len(tool), TEXT_LIMIT
    for t, turn in enumerate(task.reference_trajectory, start=1):
        yield "reference_trajectory", f"turn {t}'s text", len(turn.text), TEXT_LIMIT
        for c, call in enumerate(turn.calls, start=1):
            what = f"turn {t}, call {c}"
            yield "reference_trajectory", f"{what}'s tool name", len(call.name), TEXT_LIMIT
            yield (
                "reference_trajectory",
                f"{what}'s arguments (as JSON)",
                _json_length(call.arguments),
                TEXT_LIMIT,
            )
            yield "reference_trajectory", f"{what}'s recorded output", len(call.output or ""), TEXT_LIMIT


def _json_length(value: object) -> int:
    try:
        return len(json.dumps(value, default=str))
    except (RecursionError, ValueError):  # nested too deep to write: a parser gap, not a size
        return 0


def oversized(task: Task, atlas_row: bool) -> tuple[str, str] | None:
    """(field, message) for the first text of ``task`` over its bound, or None. ``atlas_row``:
    the field is named by its MCP-Atlas column."""
    for name, what, length, limit in _texts(task):
        if length > limit:
            shown = ATLAS_NAMES.get(name, name) if atlas_row else name
            return shown, f"{what} is {length:,} characters long; at most {limit:,} are accepted"
    return None


def check_unicode(data: object) -> None:
    """ValueError if a value holds text that is not valid Unicode (a lone surrogate, in a key or a
    string): it could be read from JSON but never written as UTF-8 (a result, a record key)."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"text that is not valid Unicode (a lone surrogate {exc.object[exc.start]!a})"
        ) from None


def id_problem(task_id: str) -> str | None:
    """What a task id cannot be (every later stage names files and keys by it), or None."""
    if len(task_id) > ID_LIMIT:
        return f"the id is {len(task_id):,} characters long; at most {ID_LIMIT} are accepted"
    bad = next((c for c in task_id if not c.isprintable()), None)
    if bad is not None:
        return f"the id holds a character that is not printable ({bad!a}): control, format and lone surrogate characters are refused"
    return None


def unwritable(task: Task, atlas_row: bool) -> tuple[str, str] | None:
    """(field, message) for the first field of ``task`` a run could not write into its records
    (invalid Unicode, or a value that is not JSON, e.g. YAML ``!!binary`` bytes), or None."""
    for name in Task.model_fields:
        try:
            task.model_dump_json(include={name}).encode("utf-8")
        except ValueError as exc:  # pydantic's PydanticSerializationError is a ValueError
            cause = str(exc)
            if "surrogate" in cause:
                match = re.search(r"character '(\\ud[89a-f][0-9a-f]{2})'", cause)
                what = f" '{match.group(1)}'" if match else ""
                message = f"text that is not valid Unicode (a lone surrogate{what})"
            else:
                message = f"a value that cannot be written as JSON ({cause.split(':')[-1].strip()[:80]})"
            return (ATLAS_NAMES.get(name, name) if atlas_row else name), message
    return None
