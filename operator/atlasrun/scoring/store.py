"""Persisted results: the per-task record, and the results directory that is the unit of resume.

``results.jsonl`` is append-only, one line per (task, model, repeat) attempt that
reached a verdict; a line is written only after the task's full JSON is on disk,
so a crash (even SIGKILL) loses at most work in flight. On resume the newest
line per key wins: ``scored`` and ``excluded`` are kept, ``error`` is redone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from atlasrun.agent.transcript import Transcript
from atlasrun.errors import StorageError
from atlasrun.redact import declare, scrub
from atlasrun.scoring.result import TaskResult

M = TypeVar("M", bound=BaseModel)
K = TypeVar("K")


def load_latest(path: Path, model: type[M], key: Callable[[M], K]) -> dict[K, M]:
    """An append-only JSONL log read as the newest record per key; unreadable (torn) lines are skipped."""
    latest: dict[K, M] = {}
    if not path.exists():
        return latest
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                record = model.model_validate_json(line)
            except ValueError:
                continue
            latest[key(record)] = record
    return latest


def append_line(path: Path, line: str) -> None:
    """Append one record durably; a torn last line (a kill mid-write) is cut first, so it stays the
    only casualty. A failed write raises ``StorageError`` naming the file."""
    try:
        if path.exists():
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                with path.open("r+b") as fh:
                    fh.truncate(data.rfind(b"\n") + 1)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(scrub(line.rstrip("\n")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise StorageError(path, exc) from exc


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def run_secret_envs(root: Path) -> list[str]:
    """The secret env var names the run in ``root`` declared (models', judges', servers' secrets),
    from its run.json: later commands on the directory (diagnose, report) mask them too."""
    try:
        record = json.loads((root / "run.json").read_text(encoding="utf-8"))
        body = record["spec"]["spec"]
        names = [entry.get("apiKeyEnv") for kind in ("models", "judges") for entry in body.get(kind) or []]
        names += [
            name
            for server in (body.get("servers") or {}).get("inline") or []
            for name in server.get("secrets") or []
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str) and n]


class ResultsDir:
    def __init__(self, root: Path, redact: Callable[[str], str] = lambda text: text) -> None:
        self.root = root
        self.jsonl = root / "results.jsonl"
        self.redact = redact
        declare(run_secret_envs(root))

    def task_path(self, result: TaskResult) -> Path:
        return self.root / "tasks" / slug(result.model) / f"{slug(result.task_id)}.r{result.repeat}.json"

    def load(self) -> dict[tuple[str, str, int], TaskResult]:
        """Newest line per key; a torn last line (killed mid-write) is ignored."""
        return load_latest(self.jsonl, TaskResult, lambda r: r.key)

    def load_full(self, result: TaskResult) -> TaskResult | None:
        """The per-task record with task and transcript (None if missing or unreadable)."""
        try:
            return TaskResult.model_validate_json(self.task_path(result).read_text(encoding="utf-8"))
        except (OSError, ValueError):
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
