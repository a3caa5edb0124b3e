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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from atlasrun.agent.transcript import Transcript
from atlasrun.errors import InputError, StorageError
from atlasrun.redact import declare, scrub
from atlasrun.scoring.records import M, VersionedRecord
from atlasrun.scoring.result import TaskResult
from atlasrun.tasks.files import DOCUMENT_LIMIT, RESULTS_LIMIT, check_user_file, read_user_file

K = TypeVar("K")

TAIL_CHUNK = 64 * 1024  # bytes read per step when looking back for the last line's start


def load_latest(path: Path, model: type[M], key: Callable[[M], K]) -> dict[K, M]:
    """An append-only JSONL log read as the newest record per key.

    Unreadable (torn) lines are skipped; a line of an unknown schema version raises
    ``RecordVersionError`` naming the file and line.
    """
    latest: dict[K, M] = {}
    if not path.exists():
        return latest
    check_user_file(path, "results file", RESULTS_LIMIT)  # a FIFO or /dev/zero here would never end
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            try:
                record = model.from_json(line, f"{path} line {number}")
            except ValueError:
                continue
            latest[key(record)] = record
    return latest


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
    except (InputError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str) and n]


class ResultsDir:
    def __init__(self, root: Path, redact: Callable[[str], str] = lambda text: text) -> None:
        self.root = root
        self.jsonl = root / "results.jsonl"
        self.redact = redact
        declare(run_secret_envs(root))

    def task_path(self, result: TaskResult) -> Path:
        return self.root / task_record_name(result.model, result.task_id, result.repeat)

    def load(self) -> dict[tuple[str, str, int], TaskResult]:
        """Newest line per key; a torn last line (killed mid-write) is ignored."""
        return load_latest(self.jsonl, TaskResult, lambda r: r.key)

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

    def write_record(self, name: str, record: VersionedRecord) -> Path:
        """A run-level record (``run.json``, ``summary.json``), written atomically."""
        path = self.root / name
        atomic_write(path, self.redact(record.model_dump_json(indent=2)))
        return path

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
