"""The inputs of ``atlas run-task`` (see ``runtask``): from the environment or a work unit, the
plan and the pinned task document fetched and verified, and the run file narrowed to the model."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlasrun.cluster.wire.contract import (
    ENV_INDEX,
    ENV_RUN_SPEC,
    ENV_TERMINATION_LIMIT,
    ENV_WORK_UNIT,
    TERMINATION_LIMIT,
    TasksRef,
    WorkUnit,
)
from atlasrun.cluster.wire.sidecars import sidecar_servers
from atlasrun.cluster.wire.store import (
    DEFAULT_ATTEMPTS,
    DEFAULT_BACKOFF_S,
    S3Results,
    parse_s3_uri,
    read_plan,
)
from atlasrun.errors import InputError
from atlasrun.runner.plan import build_catalog
from atlasrun.runspec.run import RunSpec, TasksSource, load_run_spec
from atlasrun.scoring.records import RecordVersionError
from atlasrun.tasks.files import TASK_FILE_LIMIT, read_user_file

DEFAULT_TERMINATION_PATH = "/dev/termination-log"
ENV = {
    "run_spec": ENV_RUN_SPEC,
    "tasks": "ATLAS_TASKS",
    "task_id": "ATLAS_TASK_ID",
    "model": "ATLAS_MODEL",
    "repeat": "ATLAS_REPEAT",
    "results_uri": "ATLAS_RESULTS_URI",
    "termination_path": "ATLAS_TERMINATION_PATH",
    "termination_limit": ENV_TERMINATION_LIMIT,
    "s3_attempts": "ATLAS_S3_ATTEMPTS",
    "s3_backoff_s": "ATLAS_S3_BACKOFF_SECONDS",
    "work_dir": "ATLAS_WORK_DIR",
}


@dataclass(frozen=True)
class Inputs:
    run_spec: Path
    tasks: Path | None  # None: the run file's own spec.tasks.path
    task_id: str
    model: str
    repeat: int
    results_uri: str
    termination_path: Path = Path(DEFAULT_TERMINATION_PATH)
    termination_limit: int = TERMINATION_LIMIT  # bytes: the runner's share of the pod's 12 KiB
    endpoint_url: str | None = None  # None: AWS_ENDPOINT_URL(_S3)
    s3_attempts: int = DEFAULT_ATTEMPTS
    s3_backoff_s: float = DEFAULT_BACKOFF_S
    work_dir: Path | None = None  # keep the local results directory here (default: a temp dir)
    tasks_ref: TasksRef | None = None  # the pinned task document (work unit): fetched and verified
    unit: WorkUnit | None = None  # a work unit to resolve (plan by reference, several items per pod)
    index: int = 0  # the completion index (with ``unit``)
    batch: tuple[tuple[str, int], ...] = ()  # several items for this pod, run in sequence


def read_inputs(env: Mapping[str, str], overrides: Mapping[str, Any] | None = None) -> Inputs:
    """Inputs from ``env`` (``ENV`` names), each overridable (flags); InputError names what is missing."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}

    def value(field: str, required: bool = True) -> str | None:
        raw = given.get(field, env.get(ENV[field]))
        text = str(raw).strip() if raw is not None else ""
        if not text and required:
            raise InputError("missing (set the env var or pass the flag)", where=ENV[field])
        return text or None

    def number(field: str, kind: Callable[[str], Any], default: Any, minimum: float) -> Any:
        text = value(field, required=default is None)
        if text is None:
            return default
        try:
            parsed = kind(text)
        except ValueError:
            parsed = None
        if parsed is None or parsed < minimum:
            raise InputError(f"{text!r} is not a {kind.__name__} >= {minimum:g}", where=ENV[field])
        return parsed

    unit_text = env.get(ENV_WORK_UNIT)
    if unit_text:
        return _unit_inputs(unit_text, env.get(ENV_INDEX), value, number)
    tasks = value("tasks", required=False)
    return Inputs(
        run_spec=Path(str(value("run_spec"))),
        tasks=Path(tasks) if tasks else None,
        task_id=str(value("task_id")),
        model=str(value("model")),
        repeat=number("repeat", int, None, 0),
        results_uri=str(value("results_uri")),
        termination_path=Path(value("termination_path", required=False) or DEFAULT_TERMINATION_PATH),
        termination_limit=number("termination_limit", int, TERMINATION_LIMIT, 256),
        endpoint_url=given.get("endpoint_url"),
        s3_attempts=number("s3_attempts", int, DEFAULT_ATTEMPTS, 1),
        s3_backoff_s=number("s3_backoff_s", float, DEFAULT_BACKOFF_S, 0),
        work_dir=Path(work_dir) if (work_dir := value("work_dir", required=False)) else None,
    )


def _unit_inputs(
    text: str, index_text: str | None, value: Callable[..., Any], number: Callable[..., Any]
) -> Inputs:
    try:
        unit = WorkUnit.from_json(text, ENV_WORK_UNIT)
    except RecordVersionError as exc:
        raise InputError(str(exc), where=ENV_WORK_UNIT) from exc
    except ValueError as exc:
        raise InputError(f"not a work unit: {exc}", where=ENV_WORK_UNIT) from exc
    if not index_text or not index_text.strip().isdigit():
        raise InputError(f"{index_text!r} is not a completion index", where=ENV_INDEX)
    index = int(index_text)
    by_reference = (unit.plan is not None and not unit.items) or unit.per_pod > 1
    if by_reference:
        if index >= unit.indexes:
            raise InputError(f"completion index {index} is outside 0..{unit.indexes - 1}", where=ENV_INDEX)
        task_id, repeat = "", 0  # known once fetch_plan has resolved the unit
    else:
        try:
            task_id, repeat = unit.item(index)
        except IndexError as exc:
            raise InputError(str(exc), where=ENV_INDEX) from exc
    return Inputs(
        run_spec=Path(str(value("run_spec"))),
        tasks=Path(unit.tasks.path) if unit.tasks.path else None,
        task_id=task_id,
        model=unit.model,
        repeat=repeat,
        results_uri=unit.results_uri,
        termination_path=Path(value("termination_path", required=False) or DEFAULT_TERMINATION_PATH),
        termination_limit=number("termination_limit", int, TERMINATION_LIMIT, 256),
        s3_attempts=number("s3_attempts", int, DEFAULT_ATTEMPTS, 1),
        s3_backoff_s=number("s3_backoff_s", float, DEFAULT_BACKOFF_S, 0),
        work_dir=Path(work_dir) if (work_dir := value("work_dir", required=False)) else None,
        tasks_ref=unit.tasks,
        unit=unit if by_reference else None,
        index=index,
    )


def fetch_plan(inputs: Inputs) -> Inputs:
    """The item(s) of the pod's completion index; a plan by reference is read from object storage
    and verified by sha256: InputError if it is gone or altered, StoreError if storage fails."""
    unit = inputs.unit
    if unit is None:
        return inputs
    where = f"{ENV_WORK_UNIT} plan"
    if unit.plan is not None and not unit.items:

        def open_store(uri: str) -> S3Results:
            return S3Results(
                uri, inputs.endpoint_url, attempts=inputs.s3_attempts, backoff_s=inputs.s3_backoff_s
            )

        ref = unit.plan
        plan = read_plan(ref, open_store, where=where)
        try:
            unit = unit.resolve(plan)
        except ValueError as exc:
            raise InputError(f"{ref.uri}: {exc}", where=where) from exc
    try:
        items = [unit.item(p) for p in unit.positions(inputs.index)]
    except IndexError as exc:
        raise InputError(str(exc), where=ENV_INDEX) from exc
    if len(items) == 1:
        return dataclasses.replace(inputs, task_id=items[0][0], repeat=items[0][1], unit=None)
    return dataclasses.replace(inputs, unit=None, batch=tuple(items))


def fetch_tasks(inputs: Inputs, dest: Path) -> Inputs:
    """The pinned task document as a local file whose sha256 is the pinned one (InputError if
    it differs or is gone; StoreError if object storage fails)."""
    ref = inputs.tasks_ref
    if ref is None:
        return inputs
    if ref.path:
        path = Path(ref.path)
        data = read_user_file(path, "pinned task document", TASK_FILE_LIMIT)
    elif ref.uri:
        location = parse_s3_uri(ref.uri, "work unit tasks.uri")
        parent, _, key = location.prefix.rpartition("/")
        got = S3Results(
            f"s3://{location.bucket}/{parent}",
            inputs.endpoint_url,
            attempts=inputs.s3_attempts,
            backoff_s=inputs.s3_backoff_s,
        ).read_bytes(key)
        if got is None:
            raise InputError(f"{ref.uri}: the pinned task document is gone", where=ENV_WORK_UNIT)
        data = got
        path = dest / Path(ref.name).name
        path.write_bytes(data)
    else:
        raise InputError("the work unit names no task document", where=ENV_WORK_UNIT)
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.sha256:
        raise InputError(
            f"the task document's sha256 is {digest[:12]}..., the run pinned {ref.sha256[:12]}...",
            where=ref.uri or ref.path or ENV_WORK_UNIT,
        )
    return dataclasses.replace(inputs, tasks=path, tasks_ref=None)


def load_spec(inputs: Inputs) -> RunSpec:
    """The run file with the tasks file from the inputs and only the selected model."""
    spec = load_run_spec(inputs.run_spec)
    body = spec.spec
    if inputs.tasks is not None:
        body.tasks = TasksSource(path=str(inputs.tasks.resolve()), ids=body.tasks.ids, limit=body.tasks.limit)
    elif not body.tasks.path:
        raise InputError("missing: the run file names no local tasks path", where=ENV["tasks"])
    models = [m for m in body.models if m.name == inputs.model]
    if not models:
        raise InputError(
            f"model {inputs.model!r} is not in the run (models: {', '.join(m.name for m in body.models)})",
            where=ENV["model"],
        )
    body.models = models
    # The pod has a sidecar for each of these and no other server: the engine plans with exactly
    # the servers the operator planned with (a task needing another is excluded, as there).
    body.servers.enabled = sidecar_servers(body, build_catalog(spec))
    return spec
