"""Persisted results: the per-task record, and the results directory that is the unit of resume.

``results.jsonl`` is append-only, one line per (task, model, repeat) attempt that
reached a verdict; a line is written only after the task's full JSON is on disk,
so a crash (even SIGKILL) loses at most work in flight. On resume the newest
line per key wins: ``scored`` and ``excluded`` are kept, ``error`` is redone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard, TypeVar

from pydantic import BaseModel, ValidationError

from atlasrun.agent.transcript import Transcript
from atlasrun.errors import InputError, StorageError
from atlasrun.redact import declare, scrub
from atlasrun.scoring.records import M, VersionedRecord
from atlasrun.scoring.result import TaskResult
from atlasrun.tasks.files import DOCUMENT_LIMIT, RESULTS_LIMIT, check_user_file, read_user_file

K = TypeVar("K")

TAIL_CHUNK = 64 * 1024  # bytes read per step when looking back for the last line's start


MAX_LINE = 16 * 1024 * 1024  # bytes of one results line (no transcript in it): more is damage
SHOWN_SKIPPED = 10  # skipped lines listed one by one in messages; the rest are counted


@dataclass(frozen=True)
class SkippedLine:
    """A line of an append-only log that was not counted, and why."""

    path: Path
    number: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path} line {self.number}: {self.reason}"


def skipped_lines_text(skipped: Sequence[SkippedLine]) -> list[str]:
    """``warning:`` lines for a command to print: the first few skipped lines, then a count."""
    if not skipped:
        return []
    lines = [f"warning: skipped (not counted): {entry}" for entry in skipped[:SHOWN_SKIPPED]]
    if len(skipped) > SHOWN_SKIPPED:
        lines.append(f"warning: ... and {len(skipped) - SHOWN_SKIPPED} more skipped line(s)")
    lines.append(f"warning: {len(skipped)} line(s) of {skipped[0].path} skipped")
    return lines


def _lines(fh: BinaryIO) -> Iterator[bytes | None]:
    """The file's lines as bytes; None for a line longer than ``MAX_LINE`` (read past, never held)."""
    while True:
        line = fh.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while (rest := fh.readline(TAIL_CHUNK)) and not rest.endswith(b"\n"):
                pass
            yield None
        else:
            yield line


def load_latest(
    path: Path,
    model: type[M],
    key: Callable[[M], K],
    skipped: list[SkippedLine] | None = None,
    accept: Callable[[M], str | None] | None = None,
) -> dict[K, M]:
    """An append-only JSONL log read as the newest record per key.

    Every line goes through the typed record: a line that is not UTF-8 JSON of this record, or
    that ``accept`` refuses (it returns why), is left out and appended to ``skipped`` with its
    number and reason; a blank line is ignored. A line of an unknown schema version raises
    ``RecordVersionError`` naming the file and line (a newer AtlasRun wrote it: skipping would
    undercount silently).
    """
    latest: dict[K, M] = {}
    skipped = [] if skipped is None else skipped
    try:
        path.lstat()
    except FileNotFoundError:
        return latest
    except OSError:
        pass  # check_user_file names it
    check_user_file(path, "results file", RESULTS_LIMIT)  # a FIFO or /dev/zero here would never end
    try:
        with path.open("rb") as fh:
            for number, line in enumerate(_lines(fh), 1):
                if line is None:
                    skipped.append(SkippedLine(path, number, f"longer than {MAX_LINE // 1024 // 1024} MiB"))
                    continue
                if not line.strip():
                    continue
                try:
                    record = model.from_json(line, f"{path} line {number}")
                except ValidationError as exc:
                    skipped.append(SkippedLine(path, number, f"not a {model.RECORD}: {_first_error(exc)}"))
                    continue
                except json.JSONDecodeError as exc:
                    skipped.append(SkippedLine(path, number, f"not JSON ({printable(exc.msg)})"))
                    continue
                except ValueError as exc:  # not UTF-8, not valid Unicode, a number of 4,300+ digits
                    huge = "integer string conversion" in str(exc)
                    reason = (
                        "a number of more than 4,300 digits" if huge else printable(str(exc)) or "unreadable"
                    )
                    skipped.append(SkippedLine(path, number, reason))
                    continue
                refused = accept(record) if accept else None
                if refused:
                    skipped.append(SkippedLine(path, number, refused))
                    continue
                latest[key(record)] = record
    except OSError as exc:
        raise InputError(f"cannot read the results file: {exc.strerror or exc}", where=str(path)) from exc
    return latest


def _first_error(exc: ValidationError) -> str:
    """The first problem of a record that failed validation, as ``field: message``."""
    error = exc.errors(include_url=False, include_input=False)[0]
    message = str(error["msg"]).removeprefix("Value error, ")
    field = ".".join(str(part) for part in error["loc"])
    return printable(f"{field}: {message}" if field else message)


def printable(text: str, limit: int = 200) -> str:
    """The first line of ``text`` for a message: at most ``limit`` characters, control, line
    separator and bidi characters shown as ``?`` (text from a file never drives the terminal)."""
    first = text.splitlines()[0] if text.strip() else ""
    flat = "".join(ch if ch.isprintable() else "?" for ch in first)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def append_line(path: Path, line: str) -> None:
    """Append one record durably, secrets masked.

    A last line without its newline is kept (newline added) when it parses as a JSON object, and
    cut only when it does not (a write torn by a kill), so a torn line is the only casualty. Only
    the tail is read, never the whole file. A failed write raises ``StorageError`` naming the file.
    """
    try:
        with path.open("a+b") as fh:
            end = fh.seek(0, os.SEEK_END)
            if end:
                fh.seek(end - 1)
                if fh.read(1) != b"\n":
                    start, tail = _last_line(fh, end)
                    if _is_record(tail):
                        fh.write(b"\n")
                    else:
                        fh.truncate(start)
            fh.write(scrub(line.rstrip("\n")).encode("utf-8") + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise StorageError(path, exc) from exc


def _last_line(fh: Any, end: int) -> tuple[int, bytes]:
    """(offset, bytes) of the last line of a file that does not end in a newline."""
    tail = b""
    pos = end
    while pos > 0:
        step = min(TAIL_CHUNK, pos)
        pos -= step
        fh.seek(pos)
        tail = fh.read(step) + tail
        cut = tail.rfind(b"\n")
        if cut >= 0:
            return pos + cut + 1, tail[cut + 1 :]
    return 0, tail


def _is_record(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def slug(text: str) -> str:
    """A readable, path-safe rendering of ``text``; NOT unique (see ``record_key``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


SLUG_MAX = 80  # characters of the readable part; the hash keeps longer ids unique


def record_key(text: str) -> str:
    """The file or object name part for an exact id (task id, model name): a readable slug plus a
    short hash of the exact text, so distinct ids never share a name (``日本`` / ``中国``,
    ``a/b`` / ``a_b``) and any id fits a file-name limit. Local files and S3 keys both use it."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return f"{slug(text)[:SLUG_MAX]}-{digest}"


def task_record_name(model: str, task_id: str, repeat: int) -> str:
    """``tasks/<model>/<task>.r<N>.json``, relative to a results directory or S3 prefix."""
    return f"tasks/{record_key(model)}/{record_key(task_id)}.r{repeat}.json"


def _v1_task_record_name(model: str, task_id: str, repeat: int) -> str:
    """Where version-1 results directories kept the per-task JSON (slugs only, could collide)."""
    return f"tasks/{slug(model)}/{slug(task_id)}.r{repeat}.json"


def run_secret_envs(root: Path) -> list[str]:
    """The secret env var names the run in ``root`` declared (models', judges', servers' secrets),
    from its run.json: later commands on the directory (diagnose, report) mask them too."""
    try:
        record = json.loads(read_user_file(root / "run.json", "run record", DOCUMENT_LIMIT))
        body = record["spec"]["spec"]
        names = [entry.get("apiKeyEnv") for kind in ("models", "judges") for entry in body.get(kind) or []]
        names += [
            name
            for server in (body.get("servers") or {}).get("inline") or []
            for name in server.get("secrets") or []
        ]
    except (InputError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return []
    return [n for n in names if isinstance(n, str) and n]


class RunScope(BaseModel):
    """What a results directory's run covers, from its ``run.json``: a results line outside it
    (a made-up model, an unknown task, a repeat the run never had) is reported and not counted.

    ``models`` and ``repeats`` come from the recorded spec (models that ran before and not now
    stay in the fingerprint); ``task_ids`` from the record's ``scope`` when the writer stored one
    (None: tasks are not checked)."""

    models: set[str] | None = None  # None: no run record to check against
    repeats: int | None = None
    task_ids: set[str] | None = None

    @classmethod
    def of(cls, record: dict[str, Any]) -> RunScope:
        """The scope of a decoded ``run.json``. ValueError when it is not a run record every writer
        leaves (no ``atlasrun_version``, a malformed ``scope``); the recorded spec is read as far as
        it is well formed (a damaged spec is refused by the commands that read it)."""
        if not isinstance(record.get("atlasrun_version"), str):
            raise ValueError("no atlasrun_version")
        stored = record.get("scope", {})
        if not isinstance(stored, dict) or not _scope_shape(stored):
            raise ValueError("a malformed scope")
        body = _dict(_dict(record.get("spec")).get("spec"))
        models = {m.get("name") for m in _list(body.get("models")) if isinstance(m, dict)}
        models |= set(_dict(_dict(record.get("fingerprint")).get("models")))
        models.add(_dict(record.get("imported")).get("model"))
        models |= set(stored.get("models") or [])
        names = {m for m in models if isinstance(m, str) and m}
        repeats = [r for r in (body.get("repeats"), stored.get("repeats")) if _count(r)]  # absent: unchecked
        ids = stored.get("task_ids")
        return cls(
            models=names or None,
            repeats=max(repeats) if repeats else None,
            task_ids=set(ids) if ids is not None else None,
        )

    def refuses(self, result: TaskResult) -> str | None:
        """Why ``result`` is outside this run (None when it is inside, or nothing is known)."""
        if self.models is not None and result.model not in self.models:
            return f"model {printable(repr(result.model), 80)} is not one of the run's models (run.json)"
        if self.task_ids is not None and result.task_id not in self.task_ids:
            return f"task {printable(repr(result.task_id), 80)} is not one of the run's tasks (run.json)"
        if self.repeats is not None and result.repeat >= self.repeats:
            return f"repeat {result.repeat} is outside the run's {self.repeats} repeat(s) (run.json)"
        return None


def _scope_shape(stored: dict[str, Any]) -> bool:
    """Whether a stored scope has the shape ``write_record`` writes."""
    models, repeats, ids = stored.get("models", []), stored.get("repeats"), stored.get("task_ids")
    return (
        isinstance(models, list)
        and all(isinstance(m, str) for m in models)
        and (repeats is None or _count(repeats))
        and (ids is None or (isinstance(ids, list) and all(isinstance(i, str) for i in ids)))
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class ResultsDir:
    def __init__(self, root: Path, redact: Callable[[str], str] = lambda text: text) -> None:
        self.root = root
        self.jsonl = root / "results.jsonl"
        self.redact = redact
        # Lines of results.jsonl the last ``load`` left out (damaged, or outside the run), in order.
        self.skipped: list[SkippedLine] = []
        declare(run_secret_envs(root))

    def scope(self) -> RunScope:
        """The run's scope from ``run.json`` (an empty one, checking nothing, when there is none).

        A ``run.json`` that is there but unreadable is an ``InputError``: which lines belong to
        the run cannot be told, and counting them all could count a made-up model."""
        path = self.root / "run.json"
        try:
            path.lstat()
        except FileNotFoundError:
            return RunScope()
        except OSError:
            pass  # read_user_file names it
        data = read_user_file(path, "run record", RESULTS_LIMIT)  # a regular file, bounded
        try:
            record = json.loads(data)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            return RunScope.of(record)
        except (ValueError, RecursionError) as exc:
            unreadable = isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError))
            why = "not UTF-8 JSON" if unreadable else printable(str(exc), 80)
            raise InputError(
                f"the run record is damaged ({why}): which results lines belong to the run cannot be "
                "told (restore it, or move the directory's results.jsonl to a new one)",
                where=str(path),
            ) from None

    def task_path(self, result: TaskResult) -> Path:
        return self.root / task_record_name(result.model, result.task_id, result.repeat)

    def load(self) -> dict[tuple[str, str, int], TaskResult]:
        """Newest valid line per key, of the run's models, tasks and repeats. Every other line
        (torn by a kill, damaged, tampered with, outside the run) is in ``self.skipped``."""
        self.skipped = []
        return load_latest(self.jsonl, TaskResult, lambda r: r.key, self.skipped, self.scope().refuses)

    def skipped_text(self) -> list[str]:
        """What the last ``load`` skipped, as ``warning:`` lines to print."""
        return skipped_lines_text(self.skipped)

    def load_full(self, result: TaskResult) -> TaskResult | None:
        """The per-task record with task and transcript (None if missing or unreadable).

        A results directory written before keys were hashed is read at its old path, and the
        record is used only if it is really this key's (old names could collide).
        """
        for path in (
            self.task_path(result),
            self.root / _v1_task_record_name(result.model, result.task_id, result.repeat),
        ):
            try:
                full = TaskResult.from_json(read_user_file(path, "result record", RESULTS_LIMIT), str(path))
            except (InputError, ValueError):
                continue
            if full.key == result.key:
                return full
        return None

    def load_transcript(self, result: TaskResult) -> Transcript | None:
        full = self.load_full(result)
        return full.transcript if full else None

    def append(self, result: TaskResult) -> None:
        path = self.task_path(result)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(path.parent, exc) from exc
        atomic_write(path, self.redact(result.model_dump_json(indent=1)))
        self.append_verdict(result)

    def append_verdict(self, result: TaskResult) -> None:
        """Only the results.jsonl line (no per-task file)."""
        append_line(self.jsonl, self.redact(result.model_dump_json(exclude={"task", "transcript"})))

    def write_record(
        self, name: str, record: VersionedRecord, covers: Iterable[tuple[str, str, int]] | None = None
    ) -> Path:
        """A run-level record (``run.json``, ``summary.json``), written atomically.

        ``run.json`` also gets the run's ``scope``, merged with the one already there, so a later
        invocation with fewer repeats, other models or other task filters keeps what earlier ones
        ran. ``covers`` are the (model, task, repeat) items this invocation covers; without them
        the tasks are unknown, and are not checked from then on."""
        path = self.root / name
        text = record.model_dump_json(indent=2)
        if name == "run.json":
            data = json.loads(text)
            data["scope"] = self._merged_scope(RunScope.of(data), None if covers is None else list(covers))
            text = json.dumps(data, indent=2, ensure_ascii=False)
        atomic_write(path, self.redact(text))
        return path

    def _merged_scope(self, new: RunScope, covers: list[tuple[str, str, int]] | None) -> dict[str, Any]:
        try:
            old = self.scope()
        except InputError:  # the damaged record is being replaced: nothing of it is kept
            old = RunScope()
        models = (old.models or set()) | (new.models or set()) | {model for model, _, _ in covers or []}
        repeats = max([old.repeats or 0, new.repeats or 0] + [repeat + 1 for _, _, repeat in covers or []])
        # Without a run record yet, ``covers`` is all the directory holds (a run writes run.json
        # before any result; import, pull and rescore write it after all of theirs).
        ids: set[str] | None = None
        if covers is not None and (old.task_ids is not None or not (self.root / "run.json").exists()):
            ids = {task for _, task, _ in covers} | (old.task_ids or set())
        return {
            "models": sorted(models),
            "repeats": repeats or None,
            "task_ids": sorted(ids) if ids is not None else None,
        }

    def write_json(self, name: str, data: Any) -> Path:
        path = self.root / name
        atomic_write(path, self.redact(json.dumps(data, indent=2, sort_keys=False)))
        return path


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` (secrets masked) to ``path`` via a temporary file: readers never see half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(scrub(text), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise StorageError(path, exc) from exc
