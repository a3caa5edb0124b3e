"""Load tasks from MCP-Atlas files (CSV / JSONL / Parquet) or native YAML/JSON.

A bad row never stops the file: it becomes a ``Rejection`` naming the row and
field, and every good row still loads.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from atlasrun.errors import InputError, format_validation
from atlasrun.tasks.fields import (
    FieldError,
    parse_claims,
    parse_native_trajectory,
    parse_openai_trajectory,
    parse_tool_list,
)
from atlasrun.tasks.model import Task

ATLAS_COLUMNS = ("TASK", "PROMPT", "ENABLED_TOOLS", "GTFA_CLAIMS", "TRAJECTORY")


@dataclass(frozen=True)
class Rejection:
    where: str  # e.g. "tasks.csv row 3"
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: field {self.field}: {self.message}"


@dataclass
class TaskSet:
    tasks: list[Task] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


class _RowError(Exception):
    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name
        self.message = message


def _field(row: dict[str, Any], name: str, parse: Any) -> Any:
    try:
        return parse(row.get(name))
    except FieldError as exc:
        raise _RowError(name, str(exc)) from exc


def _text(value: Any) -> str:
    if value is None or not isinstance(value, str) or not value.strip():
        raise FieldError("empty")
    return value.strip()


def atlas_row_to_task(row: dict[str, Any], where: str) -> Task:
    """One MCP-Atlas public-format row (TASK, PROMPT, ENABLED_TOOLS, GTFA_CLAIMS, TRAJECTORY)."""
    task_id = _field(row, "TASK", lambda v: _text(str(v) if v is not None else None))
    prompt = _field(row, "PROMPT", _text)
    tools = _field(row, "ENABLED_TOOLS", parse_tool_list)
    claims = _field(row, "GTFA_CLAIMS", parse_claims)
    trajectory = _field(
        row, "TRAJECTORY", lambda v: parse_openai_trajectory(v) if v not in (None, "") else []
    )
    task = Task(
        id=task_id,
        prompt=prompt,
        enabled_tools=tools,
        claims=claims,
        reference_trajectory=trajectory,
        source=where,
    )
    _check_trajectory_tools(task, "TRAJECTORY")
    return task


def native_row_to_task(row: dict[str, Any], where: str) -> Task:
    """One native task object (lower-case keys; see README 'Task files')."""
    data = dict(row)
    data["id"] = _field(data, "id", lambda v: _text(str(v) if v is not None else None))
    data["prompt"] = _field(data, "prompt", _text)
    data["enabled_tools"] = _field(data, "enabled_tools", parse_tool_list)
    data["claims"] = _field(data, "claims", parse_claims)
    trajectory = data.get("reference_trajectory") or []
    if (
        trajectory
        and isinstance(trajectory, list)
        and isinstance(trajectory[0], dict)
        and "role" in trajectory[0]
    ):
        data["reference_trajectory"] = _field(data, "reference_trajectory", parse_openai_trajectory)
    else:
        data["reference_trajectory"] = _field(
            data, "reference_trajectory", lambda v: parse_native_trajectory(v or [])
        )
    data.setdefault("source", where)
    try:
        task = Task.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _RowError(".".join(str(p) for p in first["loc"]), format_validation(exc)) from exc
    for name in task.distractors:
        if name not in task.enabled_tools:
            raise _RowError("distractors", f"{name!r} is not in enabled_tools")
    _check_trajectory_tools(task, "reference_trajectory")
    return task


def _check_trajectory_tools(task: Task, field_name: str) -> None:
    enabled = set(task.enabled_tools)
    for call in task.reference_calls():
        if call.name not in enabled:
            raise _RowError(field_name, f"calls unknown tool {call.name!r} (not in the enabled tools)")


def read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based row number, row) from any supported container."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        csv.field_size_limit(sys.maxsize)
        with path.open(newline="", encoding="utf-8") as fh:
            # Row numbers count data rows from 1 (the header is not a row).
            for i, row in enumerate(csv.DictReader(fh), start=1):
                yield i, dict(row)
    elif suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        yield i, json.loads(line)
                    except ValueError as exc:
                        yield i, {"__error__": f"line is not JSON: {exc}"}
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield i, row
    elif suffix in (".yaml", ".yml", ".json"):
        text = path.read_text(encoding="utf-8")
        try:
            doc = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise InputError(f"not valid {suffix[1:].upper()}: {exc}", where=str(path)) from exc
        items = doc.get("tasks") if isinstance(doc, dict) else doc
        if not isinstance(items, list):
            raise InputError("expected a list of tasks or a mapping with 'tasks:'", where=str(path))
        for i, row in enumerate(items, start=1):
            yield i, row if isinstance(row, dict) else {"__error__": "task is not a mapping"}
    else:
        raise InputError(
            f"unsupported task file type {suffix!r} (use .csv, .jsonl, .parquet, .yaml, .json)",
            where=str(path),
        )


def load_tasks(path: str | Path) -> TaskSet:
    source = Path(path)
    if not source.exists():
        raise InputError("task file not found", where=str(source))
    result = TaskSet()
    seen: dict[str, str] = {}
    label = (
        "row"
        if source.suffix.lower() in (".csv", ".parquet")
        else ("line" if source.suffix.lower() == ".jsonl" else "task")
    )
    for number, row in read_rows(source):
        where = f"{source.name} {label} {number}"
        if "__error__" in row:
            result.rejected.append(Rejection(where, "(row)", row["__error__"]))
            continue
        try:
            is_atlas = any(col in row for col in ATLAS_COLUMNS)
            task = atlas_row_to_task(row, where) if is_atlas else native_row_to_task(row, where)
        except _RowError as exc:
            result.rejected.append(Rejection(where, exc.field, exc.message))
            continue
        if task.id in seen:
            result.rejected.append(
                Rejection(where, "id", f"duplicate task id {task.id!r} (first at {seen[task.id]})")
            )
            continue
        seen[task.id] = where
        result.tasks.append(task)
    return result
