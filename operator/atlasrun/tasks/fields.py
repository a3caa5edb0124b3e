"""Parsers for the encodings found in MCP-Atlas task rows.

Each parser raises ``FieldError`` with a message that says what is wrong; the
loader adds the row and field name.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from atlasrun import naming
from atlasrun.errors import format_validation
from atlasrun.tasks.model import RefCall, RefTurn


class FieldError(ValueError):
    pass


_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")


def _literal(text: str) -> Any:
    """JSON first, then a Python literal (MCP-Atlas claims use single quotes)."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise FieldError("nested too deeply") from exc
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except SyntaxError as exc:
        where = f" (line {exc.lineno}, column {exc.offset})" if exc.lineno else ""
        raise FieldError(f"not a JSON or Python list: {exc.msg}{where}") from exc
    except ValueError as exc:  # a bare word or an expression: literal_eval names an AST node
        raise FieldError("not a JSON or Python list: it holds unquoted text or an expression") from exc
    except (MemoryError, RecursionError) as exc:
        raise FieldError("not a JSON or Python list: nested too deeply") from exc


MIN_CLAIM_CHARS = 4  # MCP-Atlas drops claims of 3 characters or fewer (score_claims.extract_claims)
_SEPARATORS = (";", "||")  # after bullets, before plain lines, as the reference tries them
_log = logging.getLogger("atlasrun.tasks")


def parse_claims(value: Any, warn: Callable[[str], None] | None = None) -> list[str]:
    """Claims as a list, a JSON/Python list string (possibly nested once), bullet text, or text
    separated by ``;`` or ``||``. Like the MCP-Atlas scorer, empty claims and claims of 3
    characters or fewer are skipped with a warning (``warn``, else the ``atlasrun.tasks`` log);
    only a value with no usable claim at all is rejected."""
    skipped: list[str] = []
    claims = [c for c in _claim_items(value) if _keep(c, skipped)]
    if skipped:
        shown = f"{skipped[:5]}" + (" ..." if len(skipped) > 5 else "")
        message = f"skipped {len(skipped)} claim(s) of {MIN_CLAIM_CHARS - 1} characters or fewer: {shown}"
        (warn or _log.warning)(message)
    if not claims:
        raise FieldError("no claims" + (f" (only too-short ones: {skipped[:5]})" if skipped else ""))
    return claims


def _keep(claim: str, skipped: list[str]) -> bool:
    if len(claim) < MIN_CLAIM_CHARS:
        skipped.append(claim)
        return False
    return True


def _claim_items(value: Any) -> list[str]:
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise FieldError("no claims")
        if text.startswith("["):
            return _claim_items(_literal(text))
        lines = text.splitlines()
        if not any(_BULLET.match(line) for line in lines):
            for sep in _SEPARATORS:
                if sep in text:
                    return [part.strip() for part in text.split(sep)]
        return [_BULLET.sub("", line).strip() for line in lines if line.strip()]
    if isinstance(value, (list, tuple)) or _is_array(value):
        items = list(value)
        # The public split wraps the literal list in a one-element list.
        if len(items) == 1 and isinstance(items[0], str) and items[0].strip().startswith("["):
            return _claim_items(items[0])
        claims = []
        for i, item in enumerate(items):
            if item is None:
                item = ""
            if not isinstance(item, str):
                raise FieldError(f"claim {i} is not a string: {item!r}")
            claims.append(item.strip())
        return claims
    raise FieldError(f"expected a list of claims, got {type(value).__name__}")


def _is_array(value: Any) -> bool:
    # numpy/pyarrow arrays from Parquet
    return hasattr(value, "tolist") and not isinstance(value, (str, bytes))


def parse_tool_list(value: Any) -> list[str]:
    """ENABLED_TOOLS: JSON list of names or of objects with ``name``."""
    items = _literal(value) if isinstance(value, str) else value
    if _is_array(items):
        items = items.tolist()
    if not isinstance(items, list) or not items:
        raise FieldError("expected a non-empty list of tool names")
    names = []
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str):
            raise FieldError(f"item {i} has no tool name: {item!r}")
        name = naming.canonical(name)
        check_tool_name(name)
        names.append(name)
    return names


def check_tool_name(name: str) -> None:
    try:
        naming.split(name)
    except ValueError as exc:
        raise FieldError(str(exc)) from exc


def tool_text(content: Any) -> tuple[str, bool]:
    """Tool message content: a string, or a list of {type:'text', text, isError?} parts."""
    if content is None:
        return "", False
    if isinstance(content, str):
        return content, False
    if isinstance(content, list):
        texts, is_error = [], False
        for part in content:
            if isinstance(part, dict):
                if part.get("type", "text") == "text":
                    texts.append(str(part.get("text", "")))
                is_error = is_error or bool(part.get("isError") or part.get("is_error"))
            else:
                texts.append(str(part))
        return "\n".join(texts), is_error
    return str(content), False


def parse_openai_trajectory(value: Any) -> list[RefTurn]:
    """TRAJECTORY: OpenAI-format assistant/tool messages -> reference turns."""
    try:
        return _openai_trajectory(value)
    except ValidationError as exc:
        raise FieldError(format_validation(exc)) from exc


def _openai_trajectory(value: Any) -> list[RefTurn]:
    messages = _literal(value) if isinstance(value, str) else value
    if _is_array(messages):
        messages = messages.tolist()
    if not isinstance(messages, list):
        raise FieldError("expected a JSON list of messages")
    turns: list[RefTurn] = []
    by_id: dict[str, RefCall] = {}
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise FieldError(f"message {i} is not an object")
        role = msg.get("role")
        if role == "assistant":
            calls = []
            listed = msg.get("tool_calls") or []
            if not isinstance(listed, list):
                raise FieldError(f"message {i}: tool_calls must be a list, got {type(listed).__name__}")
            for j, tc in enumerate(listed):
                fn = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise FieldError(f"message {i} tool_call {j} has no function name")
                name = naming.canonical(fn["name"])
                check_tool_name(name)
                raw = fn.get("arguments") or "{}"
                try:
                    args = json.loads(raw) if isinstance(raw, str) else raw
                except ValueError as exc:
                    raise FieldError(f"message {i} tool_call {j}: arguments are not JSON ({exc})") from exc
                if not isinstance(args, dict):
                    raise FieldError(f"message {i} tool_call {j}: arguments must be an object")
                call = RefCall(name=name, arguments=args, id=tc.get("id"))
                calls.append(call)
                if call.id:
                    by_id[call.id] = call
            text = msg.get("content") if isinstance(msg.get("content"), str) else ""
            turns.append(RefTurn(text=text or "", calls=calls))
        elif role == "tool":
            answered = by_id.get(str(msg.get("tool_call_id")))
            if answered is None:
                raise FieldError(
                    f"message {i}: tool result for unknown tool_call_id {msg.get('tool_call_id')!r}"
                )
            answered.output, answered.is_error = tool_text(msg.get("content"))
        elif role in ("user", "system"):
            continue
        else:
            raise FieldError(f"message {i} has unknown role {role!r}")
    return turns


def parse_native_trajectory(value: Any) -> list[RefTurn]:
    """Native trajectory: a list of turns ``{text?, calls: [...]}`` or of single calls."""
    if not isinstance(value, list):
        raise FieldError("expected a list of turns")
    turns = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise FieldError(f"turn {i} is not an object")
        try:
            turn = RefTurn.model_validate(item if "calls" in item else {"calls": [item]})
        except ValidationError as exc:
            raise FieldError(f"turn {i}: {format_validation(exc)}") from exc
        for call in turn.calls:
            check_tool_name(call.name)
        turns.append(turn)
    return turns
