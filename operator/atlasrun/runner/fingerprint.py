"""A results directory holds one run: its spec's fingerprint is kept in ``run.json``.

Resuming into a directory whose fingerprint differs (another judge, task file, limit, model
definition) is refused, since old verdicts would mix with new ones; fields that cannot change a
result are left out of the fingerprint and may change on resume: parallelism, each model's
maxConcurrency, retries and backoff, task filters (``tasks.ids``, ``tasks.limit``, ``--task``,
``--limit``), repeats, output and cluster settings, and which of the models run (``--model``);
a model that ran before must be the same model. While a run writes a directory it holds an
exclusive lock on ``OUT/.lock`` (a second run into it stops at once).
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from atlasrun.errors import AtlasError, InputError
from atlasrun.runspec.run import RunSpec, ScoringSpec
from atlasrun.tasks.files import TASK_FILE_LIMIT, read_user_file
from atlasrun.tasks.hub import fetch_dataset, hub_source, is_hub_source

LOCK_FILE = ".lock"
# spec fields (camelCase, as in the run file) that results do not depend on
SAFE_SPEC_FIELDS = ("parallelism", "repeats", "output", "cluster", "dataDir", "emptyDataDir")
SAFE_TASK_FIELDS = ("ids", "limit")
SAFE_LIMIT_FIELDS = ("providerRetries", "judgeRetries", "retryBackoffSeconds")
# where an endpoint is served and how it is reached do not change which model answers
SAFE_MODEL_FIELDS = ("maxConcurrency", "apiBase", "apiKeyEnv", "apiKeySecret", "egress")


class RunLockedError(AtlasError):
    """Another process is writing to this results directory."""


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _tasks_digest(spec: RunSpec) -> str | None:
    path = spec.spec.tasks.path
    source = spec.spec.tasks.dataset or (
        spec.spec.tasks.uri if is_hub_source(spec.spec.tasks.uri or "") else ""
    )
    if source:  # a hub dataset: its commit names its content (a moved branch is another run)
        try:
            return "hf:" + fetch_dataset(hub_source(source)).sha[:16]
        except InputError:  # not reachable and never loaded: the id alone stands for it
            return None
    if not path:
        return None
    try:
        return hashlib.sha256(read_user_file(spec.resolve(path), "task file", TASK_FILE_LIMIT)).hexdigest()[
            :16
        ]
    except InputError:
        return None


def fingerprint(spec: RunSpec) -> dict[str, Any]:
    """{"fields": {top-level spec field: digest}, "models": {name: digest}} of what results depend on."""
    body = spec.model_dump(mode="json", by_alias=True)["spec"]
    models = {
        m["name"]: _digest({k: v for k, v in m.items() if k not in SAFE_MODEL_FIELDS})
        for m in body.pop("models")
    }
    tasks = {k: v for k, v in body["tasks"].items() if k not in SAFE_TASK_FIELDS}
    content = _tasks_digest(spec)
    if (
        content is not None
    ):  # the same task file under another path (--tasks, a moved run file) is the same run
        tasks.pop("path", None)
        tasks["content"] = content
    body["tasks"] = tasks
    body["limits"] = {k: v for k, v in body["limits"].items() if k not in SAFE_LIMIT_FIELDS}
    body.get("servers", {}).pop("url", None)  # where the environment is reached, like a model's apiBase
    for judge in body.get("judges", []):
        for key in SAFE_MODEL_FIELDS:
            judge.pop(key, None)
    if body.get("scoring") == ScoringSpec().model_dump(mode="json", by_alias=True):
        body.pop("scoring")  # the default fingerprints as before spec.scoring existed: old dirs resume
    fields = {k: _digest(v) for k, v in sorted(body.items()) if k not in SAFE_SPEC_FIELDS}
    return {"fields": fields, "models": models}


def mismatches(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints (a model new to the directory is not a mismatch)."""
    old_fields, new_fields = old.get("fields", {}), new.get("fields", {})
    found = [
        f"spec.{k}"
        for k in sorted(set(old_fields) | set(new_fields))
        if old_fields.get(k) != new_fields.get(k)
    ]
    old_models = old.get("models", {})
    found += [
        f"spec.models[{name}]"
        for name, digest in new.get("models", {}).items()
        if name in old_models and old_models[name] != digest
    ]
    return [f.replace("spec.tasks", "spec.tasks (path or task file content)") for f in found]


def check_resume(out: Path, spec: RunSpec, recorded: dict[str, Any] | None, has_results: bool) -> None:
    """Refuse to resume into ``out`` when its recorded fingerprint differs from ``spec``'s."""
    if not has_results or recorded is None:
        return
    differ = mismatches(recorded, fingerprint(spec))
    if differ:
        raise InputError(
            f"holds results of a different run ({', '.join(differ)} changed): their verdicts would mix. "
            "Use a new --out directory, or --force-new to move the old results aside",
            where=str(out),
        )


def move_aside(out: Path) -> Path:
    """``--force-new``: rename ``out`` to ``out.replaced-<UTC time>`` (nothing is deleted)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    target = out.with_name(f"{out.name}.replaced-{stamp}")
    with exclusive_lock(out):  # not while another run writes to it
        pass
    out.rename(target)
    return target


@contextmanager
def exclusive_lock(out: Path) -> Iterator[None]:
    """Hold ``out/.lock`` exclusively (fcntl.flock); RunLockedError at once if another run holds it."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise RunLockedError(
                f"{out}: another atlas run (pid {holder}) is writing to this directory; "
                "wait for it, or use another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
