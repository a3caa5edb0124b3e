"""Load tasks from MCP-Atlas files (CSV / JSONL / Parquet) or native YAML/JSON.

A bad row never stops the file: it becomes a ``Rejection`` naming the row and
field, and every good row still loads.
"""

from __future__ import annotations

import csv
import io
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from atlasrun.errors import InputError, did_you_mean, field_names, format_validation, printable
from atlasrun.tasks.documents import decode, json_item_lines, load_json, load_yaml_with_lines
from atlasrun.tasks.fields import (
    FieldError,
    parse_claims,
    parse_native_trajectory,
    parse_openai_trajectory,
    parse_tool_list,
)
from atlasrun.tasks.files import DOCUMENT_LIMIT, TASK_FILE_LIMIT, check_user_file, read_user_file
from atlasrun.tasks.hub import fetch_dataset, is_hub_source
from atlasrun.tasks.model import Task
from atlasrun.tasks.sizes import id_problem, oversized, unwritable

ATLAS_COLUMNS = ("TASK", "PROMPT", "ENABLED_TOOLS", "GTFA_CLAIMS", "TRAJECTORY")
YAML_WHAT = "YAML task file (write larger task sets as JSON, JSONL, CSV or Parquet)"


@dataclass(frozen=True)
class Rejection:
    """A rejected row: ``tasks.csv line 7, task q3-bad-claims, field GTFA_CLAIMS: no claims``.

    ``where`` is the file and the 1-based line where the row starts (``row N`` in Parquet, which
    has no lines); ``task_id`` is the row's id when it could be read.
    """

    where: str  # e.g. "tasks.csv line 7"
    field: str
    message: str
    task_id: str | None = None

    def __str__(self) -> str:
        task = f", task {self.task_id}" if self.task_id else ""
        return printable(f"{self.where}{task}, field {self.field}: {self.message}")


def row_task_id(value: Any) -> str | None:
    """A row's id for naming it in an error: text or a whole number, shown readably and short."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value).strip()
    if not text:
        return None
    shown = text if len(text) <= 80 else text[:80] + "..."
    return shown if shown.isprintable() and " " not in shown else repr(shown)


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
    if value is None:
        raise FieldError("missing")
    if not isinstance(value, str):
        raise FieldError(f"expected text, got {type(value).__name__} {_preview(value)}")
    if not value.strip():
        raise FieldError("empty")
    return value.strip()


def _task_id(value: Any) -> str:
    """Text, or a whole number written without quotes in JSON or Parquet (kept as its digits);
    printable and of bounded length (it names files and keys, and is printed)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    task_id = _text(value)
    if problem := id_problem(task_id):
        raise FieldError(problem)
    return task_id


def _preview(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def atlas_row_to_task(row: dict[str, Any], where: str) -> Task:
    """One MCP-Atlas public-format row (TASK, PROMPT, ENABLED_TOOLS, GTFA_CLAIMS, TRAJECTORY)."""
    task_id = _field(row, "TASK", _task_id)
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
    _check_texts(task, atlas_row=True)
    return task


def native_row_to_task(row: dict[str, Any], where: str) -> Task:
    """One native task object (lower-case keys; see docs/run-file.md, task files)."""
    data = dict(row)
    _check_field_names(data)
    data["id"] = _field(data, "id", _task_id)
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
        field_path = ".".join(str(p) for p in first["loc"])
        raise _RowError(field_path, format_validation(exc, field_names(Task))) from exc
    for name in task.distractors:
        if name not in task.enabled_tools:
            raise _RowError("distractors", f"{name!r} is not in enabled_tools")
    _check_trajectory_tools(task, "reference_trajectory")
    _check_texts(task, atlas_row=False)
    return task


NATIVE_FIELDS = tuple(Task.model_fields)


def _check_field_names(row: dict[str, Any]) -> None:
    """A misspelt field (``promt:``, ``domian:``) is named with the field it was meant to be,
    before the field it left missing is."""
    for key in row:
        if key not in NATIVE_FIELDS:
            hint = did_you_mean(str(key), NATIVE_FIELDS) or f" (fields: {', '.join(NATIVE_FIELDS)})"
            raise _RowError(str(key), f"unknown field{hint}")


def _check_texts(task: Task, atlas_row: bool) -> None:
    if found := oversized(task, atlas_row) or unwritable(task, atlas_row):
        raise _RowError(*found)


def _check_trajectory_tools(task: Task, field_name: str) -> None:
    enabled = set(task.enabled_tools)
    for call in task.reference_calls():
        if call.name not in enabled:
            raise _RowError(field_name, f"calls unknown tool {call.name!r} (not in the enabled tools)")


TEXT_FIELDS = (
    "id",
    "prompt",
    "domain",
    "reference_answer",
    "claims",
    "enabled_tools",
    "distractors",
    *ATLAS_COLUMNS,
)
# Where task fields sit in a native file: a list of tasks, or a mapping with ``tasks:``.
_TASK_TEXT_PATHS = [
    (*prefix, name, *item)
    for prefix in (("*",), ("tasks", "*"))
    for name in TEXT_FIELDS
    for item in ((), ("*",))
]


@dataclass(frozen=True)
class Unreadable:
    """A row that could not be read as a record (not JSON, not an object, bad bytes, ...)."""

    message: str
    field: str = "(row)"


Row = dict[str, Any] | Unreadable


def _csv_rows(path: Path) -> Iterator[tuple[str, Row]]:
    # Bad bytes stay in the text as surrogates, so one bad row is rejected by name, not the file.
    text = _read(path).decode("utf-8-sig", errors="surrogateescape")
    csv.field_size_limit(sys.maxsize)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield f"line {reader.line_num}", Unreadable(f"not valid CSV: {exc}")
            continue
        # The line the row starts on: where the reader stands, less the line breaks inside quoted
        # values (blank lines the reader skipped are counted in ``line_num``).
        inner = sum(v.count("\n") for v in _values(row))
        where = f"line {reader.line_num - inner}"
        bad = [str(k) for k, v in row.items() if _has_bad_bytes(k) or _has_bad_bytes(v)]
        if bad:
            yield where, Unreadable("not valid UTF-8", field=", ".join(bad))
            continue
        yield where, dict(row)


def _values(row: dict[Any, Any]) -> Iterator[str]:
    for value in row.values():
        if isinstance(value, list):
            yield from (v for v in value if isinstance(v, str))
        elif isinstance(value, str):
            yield value


def _has_bad_bytes(value: Any) -> bool:
    if isinstance(value, list):
        return any(_has_bad_bytes(v) for v in value)
    return isinstance(value, str) and any("\udc80" <= ch <= "\udcff" for ch in value)


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Row]]:
    for number, row in _jsonl_numbered(path):
        yield f"line {number}", row


def _jsonl_numbered(path: Path) -> Iterator[tuple[int, Row]]:
    with io.BytesIO(_read(path)) as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                yield number, Unreadable(f"line is not valid UTF-8 (byte {exc.start} of the line)")
                continue
            if not line.strip():
                continue
            try:
                value = load_json(line, "")
            except InputError as exc:
                yield number, Unreadable(f"line is {exc.message}")
                continue
            if not isinstance(value, dict):
                yield number, Unreadable(f"line is not a JSON object (got {type(value).__name__})")
                continue
            yield number, value


def _parquet_rows(path: Path) -> Iterator[tuple[str, Row]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_user_file(path, "task file", TASK_FILE_LIMIT)  # before pyarrow opens it
    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"not a readable Parquet file: {printable(str(exc))}", where=str(path)) from exc
    for number, row in enumerate(rows, start=1):  # Parquet has no lines: data rows count from 1
        yield f"row {number}", row if isinstance(row, dict) else Unreadable("row is not a record")


def _read(path: Path) -> bytes:
    return read_user_file(path, "task file", TASK_FILE_LIMIT)


def read_rows(path: Path) -> Iterator[tuple[str, Row]]:
    """Yield (location, row) from any supported container: ``line N`` (1-based, where the row
    starts; ``task N`` for a JSON/YAML item whose line is unknown), or ``row N`` in Parquet. A
    row that cannot be read is yielded as ``Unreadable(why)``. A file that cannot be read at all
    raises ``InputError``."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        yield from _csv_rows(path)
    elif suffix == ".jsonl":
        yield from _jsonl_rows(path)
    elif suffix == ".parquet":
        yield from _parquet_rows(path)
    elif suffix in (".yaml", ".yml", ".json"):
        # PyYAML composes in Python: a long scalar costs ~20 bytes of memory per byte (a 50 MB
        # field: 1 GB, 20 s), so a YAML task file is bounded like a run file.
        what, limit = ("task file", TASK_FILE_LIMIT) if suffix == ".json" else (YAML_WHAT, DOCUMENT_LIMIT)
        text = decode(read_user_file(path, what, limit), str(path))
        if suffix == ".json":
            doc = load_json(text, str(path))
            lines = json_item_lines(text)
        else:
            doc, lines = load_yaml_with_lines(text, str(path), _TASK_TEXT_PATHS)
        items = doc.get("tasks") if isinstance(doc, dict) else doc
        if not isinstance(items, list):
            if isinstance(doc, dict) and doc.get("kind") == "AtlasRun":
                raise InputError(
                    "this is a run file, not a task file: give its task file (spec.tasks.path)",
                    where=str(path),
                )
            raise InputError("expected a list of tasks or a mapping with 'tasks:'", where=str(path))
        if len(lines) != len(items):
            lines = []
        shared = {n for n, times in Counter(lines).items() if times > 1}
        for i, row in enumerate(items, start=1):
            line = lines[i - 1] if lines else None
            # Items on one line (a one-line JSON file) are told apart by their 1-based position.
            where = (
                f"task {i}" if line is None else f"line {line}" + (f", item {i}" if line in shared else "")
            )
            yield where, row if isinstance(row, dict) else Unreadable("task is not a mapping")
    else:
        raise InputError(
            f"unsupported task file type {suffix!r} (use .csv, .jsonl, .parquet, .yaml, .json)",
            where=str(path),
        )


def load_tasks(path: str | Path) -> TaskSet:
    """Tasks from a local file, or from a Hugging Face dataset (``hf://OWNER/NAME[@REVISION]``,
    see ``atlasrun.tasks.hub``): its data files, downloaded once and cached, load as one file."""
    if isinstance(path, str) and is_hub_source(path):
        snapshot = fetch_dataset(path)
        return _load_files([(f"{snapshot.label} {name}", local) for name, local in snapshot.files])
    source = Path(path)
    try:
        if not source.is_symlink() and not source.exists():  # a symlink loop: check_user_file says so
            raise InputError("task file not found", where=str(source))
        check_user_file(source, "task file", TASK_FILE_LIMIT)  # not a FIFO, device, directory; bounded
    except OSError as exc:  # e.g. a path longer than the file-name limit
        raise InputError(f"cannot read task file: {exc.strerror or exc}", where=str(source)) from exc
    return _load_files([(source.name, source)])


def _load_files(sources: list[tuple[str, Path]]) -> TaskSet:
    """Rows of each (name shown in messages, file), in order, as one task set (ids unique across)."""
    result = TaskSet()
    seen: dict[str, str] = {}
    rows: list[tuple[str, Row]] = []
    for name, source in sources:
        try:
            rows += [(f"{name} {location}", row) for location, row in read_rows(source)]
        except OSError as exc:
            raise InputError(f"cannot read task file: {exc.strerror or exc}", where=str(source)) from exc
    for where, row in rows:
        if isinstance(row, Unreadable):
            result.rejected.append(Rejection(where, row.field, row.message))
            continue
        is_atlas = any(col in row for col in ATLAS_COLUMNS)
        task_id = row_task_id(row.get("TASK" if is_atlas else "id"))
        try:
            task = atlas_row_to_task(row, where) if is_atlas else native_row_to_task(row, where)
        except _RowError as exc:
            result.rejected.append(Rejection(where, exc.field, exc.message, task_id))
            continue
        except Exception as exc:  # a parser gap must still cost one row, never the file
            message = f"internal error reading this row: {type(exc).__name__}: {exc}"
            result.rejected.append(Rejection(where, "(row)", message[:500], task_id))
            continue
        if task.id in seen:
            result.rejected.append(
                Rejection(where, "id", f"duplicate task id {task.id!r} (first at {seen[task.id]})", task_id)
            )
            continue
        seen[task.id] = where
        result.tasks.append(task)
    return result
