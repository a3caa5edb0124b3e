"""A run as ``atlas view`` shows it while it is written: progress, pass rates with their intervals,
errors by kind, cost.

Results come from the store's readers (``ResultsDir.load``: damaged lines are skipped and named),
the totals from ``scoring.summary``, the intervals from ``scoring.stats`` (one method everywhere,
docs/statistics.md). Nothing here writes: a run being written by ``atlas run`` is only read.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from atlasrun.errors import AtlasError
from atlasrun.runner.fingerprint import LOCK_FILE
from atlasrun.runner.record import RUN_FILE, RunRecord, read_record
from atlasrun.scoring.stats import Estimate, by_model, pass_rate_ci
from atlasrun.scoring.store import ResultsDir, slug
from atlasrun.scoring.summary import SUMMARY_FILE, summarize_models

RESULTS_FILE = "results.jsonl"
RUN_MARKERS = (RUN_FILE, RESULTS_FILE)  # a folder holding either is a results directory
DEFAULT_THRESHOLD = 0.75  # spec.passThreshold's default

State = Literal["running", "finished", "stopped", "empty", "unreadable"]


class ModelStatus(BaseModel):
    """One model's numbers so far (items count task x repeat; the interval's n counts tasks)."""

    model: str
    items: int
    scored: int
    passed: int
    excluded: int
    errored: int
    pass_rate: Estimate | None
    mean_coverage: float | None
    errors_by_kind: dict[str, int]
    excluded_by_kind: dict[str, int]
    tokens: int
    cost_usd: float
    cost_known: bool


class RunStatus(BaseModel):
    """What the page's JSON endpoint returns for one results directory."""

    id: str
    name: str
    dir: str
    state: State
    pid: int | None = None  # the `atlas run` writing it (from its lock), while running
    done: int = 0  # items with a verdict (scored, excluded or error), the directory's newest each
    planned: int = 0  # items the run file plans: models x repeats x tasks (at least ``done``)
    started: str | None = None
    updated: str | None = None  # when results.jsonl last changed
    threshold: float = DEFAULT_THRESHOLD
    models: list[ModelStatus] = Field(default_factory=list)
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    skipped: list[str] = Field(default_factory=list)  # results lines not counted, and why
    problem: str | None = None  # why the directory could not be read (state "unreadable")


def is_results_dir(path: Path) -> bool:
    return any((path / marker).is_file() for marker in RUN_MARKERS)


def run_id(path: Path) -> str:
    """A URL-safe, stable id: the folder's name and a hash of its absolute path."""
    resolved = path.resolve()
    digest = hashlib.sha256(str(resolved).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{slug(resolved.name)[:40]}-{digest}"


def discover(roots: Sequence[Path]) -> dict[str, Path]:
    """id -> results directory. Each root is one, or a folder of them (its subfolders that are);
    read again at every call, so runs started after ``atlas view`` appear."""
    found: dict[str, Path] = {}
    for root in roots:
        if is_results_dir(root):
            candidates = [root]
        else:
            try:
                candidates = sorted(p for p in root.iterdir() if p.is_dir() and is_results_dir(p))
            except OSError:  # gone or unreadable since start: nothing to list now
                candidates = []
        for path in candidates:
            found.setdefault(run_id(path), path)
    return found


def _stat_key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _lock_holder(run_dir: Path) -> int | None:
    """The pid of the `atlas run` holding the directory's lock (0 if unknown), None if none does.

    Read from /proc/locks, never by taking the lock: a probe that took it, even for a moment,
    could make a starting run refuse the directory."""
    lock = run_dir / LOCK_FILE
    try:
        st = lock.stat()
        held = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        locks = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    if not any("FLOCK" in line and held in line.split() for line in locks.splitlines()):
        return None
    try:
        return int(lock.read_text(encoding="ascii", errors="replace").strip() or 0)
    except (OSError, ValueError):
        return 0


def change_key(run_dir: Path) -> tuple[Any, ...]:
    """Changes whenever what ``read_status`` returns could: the files it reads, and the lock."""
    files = (RESULTS_FILE, RUN_FILE, SUMMARY_FILE, "diagnoses.jsonl")
    return (*(_stat_key(run_dir / name) for name in files), _lock_holder(run_dir))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _iso(mtime_ns: int) -> str:
    return dt.datetime.fromtimestamp(mtime_ns / 1e9, dt.UTC).isoformat(timespec="seconds")


def _state(run_dir: Path, record: RunRecord | None, done: int, holder: int | None) -> State:
    if holder is not None:
        return "running"
    if record is None and not done:
        return "empty"
    run, summary = _stat_key(run_dir / RUN_FILE), _stat_key(run_dir / SUMMARY_FILE)
    # `atlas run` writes run.json first and summary.json last: an older summary is an earlier one's.
    if summary is not None and (run is None or summary[0] >= run[0]):
        return "finished"
    return "stopped"


def read_status(run_dir: Path) -> RunStatus:
    """The run in ``run_dir`` now; a directory that cannot be read is ``unreadable`` with the reason."""
    ident, name = run_id(run_dir), run_dir.resolve().name
    store = ResultsDir(run_dir)
    try:
        record = read_record(run_dir / RUN_FILE, RunRecord)
        latest = store.load()
    except AtlasError as exc:
        return RunStatus(
            id=ident, name=name, dir=str(run_dir.resolve()), state="unreadable", problem=str(exc)
        )
    results = list(latest.values())
    spec = _dict(record.spec if record else None)
    body = _dict(spec.get("spec"))
    listed = [str(m.get("name")) for m in body.get("models") or [] if isinstance(m, dict)]
    order = listed + sorted({r.model for r in results} - set(listed))
    repeats = body.get("repeats", 1)
    planned = 0
    if record is not None and body and isinstance(repeats, int):
        planned = len(listed) * repeats * (record.tasks + len(record.excluded))
    grouped = by_model(results)
    models = [
        ModelStatus(
            model=model,
            items=row.items,
            scored=row.scored,
            passed=row.passed,
            excluded=row.excluded,
            errored=row.errored,
            pass_rate=pass_rate_ci(grouped.get(model, [])),
            mean_coverage=row.mean_coverage,
            errors_by_kind={str(k): n for k, n in row.errors_by_kind.items()},
            excluded_by_kind={str(k): n for k, n in row.excluded_by_kind.items()},
            tokens=row.tokens,
            cost_usd=row.cost_usd,
            cost_known=row.cost_known,
        )
        for model, row in summarize_models(results, order).items()
    ]
    errors: Counter[str] = Counter()
    for model_status in models:
        errors.update(model_status.errors_by_kind)
    holder = _lock_holder(run_dir)
    threshold = body.get("passThreshold", DEFAULT_THRESHOLD)
    updated = _stat_key(run_dir / RESULTS_FILE)
    return RunStatus(
        id=ident,
        name=str(_dict(spec.get("metadata")).get("name") or name),
        dir=str(run_dir.resolve()),
        state=_state(run_dir, record, len(results), holder),
        pid=holder or None,
        done=len(results),
        planned=max(planned, len(results)),
        started=record.started if record else None,
        updated=_iso(updated[0]) if updated else None,
        threshold=float(threshold) if isinstance(threshold, (int, float)) else DEFAULT_THRESHOLD,
        models=models,
        errors_by_kind=dict(errors.most_common()),
        skipped=store.skipped_text(),
    )
