"""``atlas run-task``: run ONE work item (model, task, repeat) inside a Kubernetes pod.

In an Indexed Job the item comes from ``ATLAS_WORK_UNIT`` (a ``contract.WorkUnit``: the model,
the chunk's items or a reference to its plan in object storage, the pinned task document and the
results URI) and ``JOB_COMPLETION_INDEX`` (which item of the chunk). The plan and the task
document are read from object storage (or the mounted ConfigMap) and must have their pinned
sha256, else the pod exits 2 (bad input); storage failing exits 4 (retried).
Without a work unit, the inputs come one by one from the environment (see ``ENV``; each also
has a flag for debugging): the run file, the tasks file, the task id, the model name, the
repeat, the results URI (``s3://bucket/prefix/<run>/``) and the termination message path; S3
access uses the standard ``AWS_*`` variables and ``AWS_ENDPOINT_URL``. Optional knobs:
``ATLAS_S3_ATTEMPTS`` and ``ATLAS_S3_BACKOFF_SECONDS`` (storage retries).

The item runs through the local ``Engine`` unchanged, with the catalog rewritten so that
every server the task uses is its sidecar: streamable HTTP at
``http://127.0.0.1:<ServerSpec.port>/mcp``, no local process. The runner first waits (up
to ``serverStartTimeoutSeconds``) for the sidecar ports to accept connections. The full
per-task JSON goes to ``<results URI>/tasks/<model>/<task>.r<N>.json``; a summary of at
most 4 KiB goes to the termination message and to stdout. A record already stored as
``scored`` or ``excluded`` is kept and not run again (a retried pod never redoes
finished work); a stored judge failure is rejudged from its transcript, as locally.
``ATLAS_WORK_DIR`` (``--work-dir``) keeps the local results directory for debugging.

With ``spec.cluster.itemsPerPod`` > 1 a completion index names several items: they run one after
the other, each exactly as a single item runs (stored, skipped when already stored), and the
termination message lists their summaries (``{"status": "batch", "exit_code", "items"}``); the
pod exits 2 only if every item's input was bad, 4 if storage failed for one, 3 if another
failed (the retried pod skips the stored ones), else 0.

Exit codes (the Job's podFailurePolicy keys on them):

- ``0``: a verdict was reached and stored: ``scored``, ``excluded``, or ``error`` because
  the judge failed (re-running the agent would not fix the judge; ``atlas rescore``
  does). Kubernetes does not retry.
- ``2``: bad input (run file, tasks file, unknown task id or model, repeat out of range,
  bad results URI, missing S3 credentials, a needed server without a port). Permanent:
  the podFailurePolicy fails the Job at once.
- ``3``: the item ended in an ``error`` that says nothing about the model: infrastructure
  (a sidecar down or broken), the model provider (after its own retries), or a harness
  failure. The error record IS stored (so the reason is visible) and the pod fails so the
  Job retries it per ``backoffLimit``; a later success overwrites the record.
- ``4``: object storage failed after retries: the result could not be stored (or the
  stored state could not be read). Nothing claims success; the Job retries the pod.
- anything else (``1``: an unexpected crash, with its traceback) is retried the same way.

The termination summary has ``task, model, repeat, status, reason, coverage, passed,
tool_calls, wall_s, tokens, cost_usd, tool_errors, provider_retries, rate_limited, infra, result,
exit_code`` (``records.TaskSummary``; the usage fields come from ``usage.summary_fields`` and
the operator folds them into ``status.models[m].usage``); ``infra`` is true for
exit codes 3 and 4 (the outcome is not the model's), ``result`` is the stored object's
URI (null when nothing was stored). Secrets (the run's key env vars, AWS credentials)
are masked in everything printed or written.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlasrun.cluster.contract import (
    BATCH,
    ENV_INDEX,
    ENV_RUN_SPEC,
    ENV_WORK_UNIT,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_RETRY,
    EXIT_STORE,
    TERMINATION_LIMIT,
    TasksRef,
    WorkUnit,
)
from atlasrun.cluster.images import sidecar_servers
from atlasrun.cluster.records import TaskSummary
from atlasrun.cluster.store import (
    DEFAULT_ATTEMPTS,
    DEFAULT_BACKOFF_S,
    S3Results,
    StoreError,
    parse_s3_uri,
    read_plan,
)
from atlasrun.errors import InputError
from atlasrun.redact import Redactor
from atlasrun.runner.engine import Engine, Item
from atlasrun.runner.plan import Plan, build_catalog, plan_run
from atlasrun.runspec.run import RunSpec, TasksSource, load_run_spec
from atlasrun.scoring.records import RecordVersionError
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.servers.catalog import Catalog
from atlasrun.servers.selection import task_servers
from atlasrun.tasks.files import TASK_FILE_LIMIT, read_user_file

DEFAULT_TERMINATION_PATH = "/dev/termination-log"
SIDECAR_HOST = "127.0.0.1"
ENV = {
    "run_spec": ENV_RUN_SPEC,
    "tasks": "ATLAS_TASKS",
    "task_id": "ATLAS_TASK_ID",
    "model": "ATLAS_MODEL",
    "repeat": "ATLAS_REPEAT",
    "results_uri": "ATLAS_RESULTS_URI",
    "termination_path": "ATLAS_TERMINATION_PATH",
    "s3_attempts": "ATLAS_S3_ATTEMPTS",
    "s3_backoff_s": "ATLAS_S3_BACKOFF_SECONDS",
    "work_dir": "ATLAS_WORK_DIR",
}
_AWS_SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


@dataclass(frozen=True)
class Inputs:
    run_spec: Path
    tasks: Path | None  # None: the run file's own spec.tasks.path
    task_id: str
    model: str
    repeat: int
    results_uri: str
    termination_path: Path = Path(DEFAULT_TERMINATION_PATH)
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


# -- the work item ---------------------------------------------------------------------------


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
    if inputs.repeat >= body.repeats:
        raise InputError(
            f"repeat {inputs.repeat} is out of range (the run has {body.repeats} repeat(s): "
            f"0..{body.repeats - 1})",
            where=ENV["repeat"],
        )
    body.models = models
    # The pod has a sidecar for each of these and no other server: the engine plans with exactly
    # the servers the operator planned with (a task needing another is excluded, as there).
    body.servers.enabled = sidecar_servers(body, build_catalog(spec))
    return spec


def sidecar_url(port: int) -> str:
    return f"http://{SIDECAR_HOST}:{port}/mcp"


def port_overrides() -> dict[str, int]:
    """``ATLAS_SERVER_PORTS`` (JSON ``{"server": port}``): where a node runs sidecars on other ports
    than the catalog's (e.g. the tests' node stand-in, where pods share one loopback)."""
    raw = os.environ.get("ATLAS_SERVER_PORTS")
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(k): int(v) for k, v in data.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise InputError(f"not a JSON object of server ports: {exc}", where="ATLAS_SERVER_PORTS") from exc


def sidecar_catalog(catalog: Catalog, needed: list[str]) -> Catalog:
    """``catalog`` with each ``needed`` server reached over streamable HTTP on its sidecar port."""
    rewritten = []
    overrides = port_overrides()
    for name in needed:
        spec = catalog.get(name)
        if name in overrides:
            spec = spec.model_copy(update={"port": overrides[name]})
        if not spec.port:
            raise InputError(
                f"server {name!r} has no 'port': in cluster mode it is a sidecar serving "
                f"http://{SIDECAR_HOST}:<port>/mcp",
                where="servers",
            )
        rewritten.append(
            spec.model_copy(
                update={
                    "transport": "http",
                    "url": sidecar_url(spec.port),
                    "command": None,
                    "args": [],
                    "env": {},
                    "cwd": None,
                    "package": None,
                    # The sidecar owns the data: it sees the pod's own copy at the data mount,
                    # so the runner keeps no copy of its own and maps no paths.
                    "isolate_data": False,
                    "data_scope": "server",
                    "mount_data": False,
                    "shared_data": [],
                    "path_aliases": {},
                }
            )
        )
    return catalog.merged(rewritten)


def needed_servers(plan: Plan, task_id: str) -> list[str]:
    """The servers the engine will connect to for this task (its enabled tools' servers)."""
    for task in plan.tasks:
        if task.id == task_id:
            return task_servers(task, plan.enabled_servers).connect
    return []


def select(engine: Engine, plan: Plan, task_id: str, model: str, repeat: int) -> Item | TaskResult:
    """The engine's item for the key, or its ``excluded`` record; InputError for an unknown task."""
    key = (model, task_id, repeat)
    for item in engine.items({}):
        if (item.model.name, item.task.id, item.repeat) == key:
            return item
    for result in engine.excluded_results():
        if result.key == key:
            return result
    rejected = [str(r) for r in plan.rejected if task_id in str(r)]
    if rejected:
        raise InputError(f"task {task_id!r} was rejected: {rejected[0]}", where=ENV["task_id"])
    known = [t.id for t in plan.tasks] + [e.task.id for e in plan.excluded]
    shown = ", ".join(known[:10]) + (f", ... ({len(known)} in all)" if len(known) > 10 else "")
    raise InputError(f"task {task_id!r} is not in the run's tasks ({shown or 'none'})", where=ENV["task_id"])


async def wait_for_ports(ports: dict[str, int], timeout_s: float) -> list[str]:
    """Wait until every sidecar port accepts connections; returns the servers that never did."""
    deadline = time.monotonic() + timeout_s
    waiting = dict(ports)
    while waiting:
        for name, port in list(waiting.items()):
            try:
                _, writer = await asyncio.open_connection(SIDECAR_HOST, port)
                writer.close()
                del waiting[name]
            except OSError:
                pass
        if not waiting or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.1)
    return sorted(waiting)


async def execute(engine: Engine, item: Item, timeout_s: float, warn: Callable[[str], None]) -> TaskResult:
    ports = {n: int(engine.plan.catalog.get(n).port or 0) for n in needed_servers(engine.plan, item.task.id)}
    for name in await wait_for_ports(ports, timeout_s):
        warn(
            f"warning: sidecar {name!r} is not listening on {sidecar_url(ports[name])} after {timeout_s:.0f}s"
        )
    results: list[TaskResult] = []
    engine.on_result = results.append
    await engine.run([item])
    return results[0]


# -- outcome ---------------------------------------------------------------------------------


def exit_code(result: TaskResult) -> int:
    if result.status != "error" or result.error_kind == ErrorKind.JUDGE:
        return EXIT_OK
    return EXIT_RETRY


def summary(result: TaskResult, stored: str | None, code: int) -> dict[str, Any]:
    return TaskSummary.of_result(result, stored, code).to_message()


def failure(inputs: Inputs, kind: ErrorKind, reason: str, code: int) -> dict[str, Any]:
    result = TaskResult(
        task_id=inputs.task_id,
        model=inputs.model,
        repeat=inputs.repeat,
        status="error",
        error_kind=kind,
        reason=reason,
    )
    return summary(result, None, code)


def compact(data: dict[str, Any], limit: int = TERMINATION_LIMIT) -> str:
    """JSON of at most ``limit`` bytes: the longest strings are cut until it fits."""
    data = json.loads(json.dumps(data))
    text = json.dumps(data, separators=(",", ":"))
    while len(text.encode()) > limit:
        strings = [k for k, v in data.items() if isinstance(v, str)]
        if not strings:
            return json.dumps(
                {
                    "schema_version": data.get("schema_version"),
                    "status": data.get("status"),
                    "exit_code": data.get("exit_code"),
                    "truncated": True,
                }
            )
        longest = max(strings, key=lambda k: len(data[k]))
        value = data[longest]
        data[longest] = value[: len(value) // 2] + "...[truncated]" if len(value) > 32 else ""
        if not data[longest]:
            del data[longest]
        text = json.dumps(data, separators=(",", ":"))
    return text


def write_termination(path: Path, text: str, warn: Callable[[str], None]) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        warn(f"warning: cannot write the termination message to {path}: {exc.strerror or exc}")


def stored_result(store: S3Results, inputs: Inputs, warn: Callable[[str], None]) -> TaskResult | None:
    """The record a previous attempt stored, if any. Write-only credentials (GetObject denied)
    only lose the skip of finished work; any other storage failure is raised (before the run)."""
    try:
        return store.get_result(inputs.model, inputs.task_id, inputs.repeat)
    except StoreError as exc:
        if not exc.denied:
            raise
        warn(f"warning: cannot read earlier results ({exc}); running the item")
        return None


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def local_dir(keep: Path | None) -> Iterator[str]:
    """The engine's local results directory: ``keep`` if given, else a temporary one."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="atlas-task-") as tmp:
            yield tmp
        return
    keep.mkdir(parents=True, exist_ok=True)
    yield str(keep)


def run_task(inputs: Inputs, warn: Callable[[str], None] = _stderr) -> int:
    """Run the item, store it, write the summary; returns the exit code (see the module docstring)."""
    aws = Redactor(_AWS_SECRETS)
    mask: Callable[[str], str] = aws

    def finish(data: dict[str, Any], code: int, message: str | None = None) -> int:
        text = compact(json.loads(mask(json.dumps(data))))
        if message:
            warn(mask(message))
        print(text, flush=True)
        write_termination(inputs.termination_path, text, warn)
        return code

    result: TaskResult | None = None
    fetched = tempfile.TemporaryDirectory(prefix="atlas-tasks-")
    try:
        inputs = fetch_plan(inputs)
        inputs = fetch_tasks(inputs, Path(fetched.name))
        if inputs.batch:
            return run_batch(inputs, warn)
        spec = load_spec(inputs)
        plan = plan_run(spec)
        store = S3Results(
            inputs.results_uri,
            inputs.endpoint_url,
            attempts=inputs.s3_attempts,
            backoff_s=inputs.s3_backoff_s,
            warn=lambda m: warn(mask(m)),
        )
        plan.catalog = sidecar_catalog(plan.catalog, needed_servers(plan, inputs.task_id))
        with local_dir(inputs.work_dir) as tmp:
            # The sidecars see the data at ATLAS_DATA_ROOT, by default the data mount itself (paths
            # pass unchanged); a different root (e.g. the test's node stand-in) is mapped like locally.
            data_root = os.environ.get("ATLAS_DATA_ROOT") or spec.spec.data_mount
            engine = Engine(spec, plan, Path(tmp), Path(data_root))
            chosen = select(engine, plan, inputs.task_id, inputs.model, inputs.repeat)
            run_redact = store.redact = engine.store.redact

            def mask(text: str) -> str:
                return aws(run_redact(text))

            previous = stored_result(store, inputs, warn)
            if previous is not None and previous.status in ("scored", "excluded"):
                warn(f"kept: {store.result_uri(previous)} is already {previous.status}; not run again")
                return finish(summary(previous, store.result_uri(previous), EXIT_OK), EXIT_OK)
            if isinstance(chosen, Item):
                if previous is not None:  # lets the engine rejudge a judge failure from its transcript
                    engine.store.append(previous)
                    chosen.previous = previous
                result = asyncio.run(execute(engine, chosen, spec.spec.limits.server_start_timeout_s, warn))
            else:
                result = chosen
            stored = store.put_result(result)
    except InputError as exc:
        return finish(
            failure(inputs, ErrorKind.INPUT, f"input: {exc}", EXIT_INPUT), EXIT_INPUT, f"error: {exc}"
        )
    except StoreError as exc:
        if result is None:
            return finish(
                failure(inputs, ErrorKind.STORAGE, f"storage: {exc}", EXIT_STORE),
                EXIT_STORE,
                f"error: storage: {exc}",
            )
        # The work is done but not stored: keep its costs, claim no verdict.
        lost = result.model_copy(
            update={
                "status": "error",
                "error_kind": ErrorKind.STORAGE,
                "coverage": None,
                "passed": None,
                "reason": f"storage: {result.status} result not stored: {exc}",
            }
        )
        return finish(summary(lost, None, EXIT_STORE), EXIT_STORE, f"error: result not stored: {exc}")
    finally:
        fetched.cleanup()
    code = exit_code(result)
    if code != EXIT_OK:
        warn(mask(f"error: {result.status}: {result.reason}; exiting {code} so the Job retries the pod"))
    return finish(summary(result, stored, code), code)


def run_batch(inputs: Inputs, warn: Callable[[str], None] = _stderr) -> int:
    """Run the pod's items in sequence (``cluster.itemsPerPod``), each as ``run_task`` runs one,
    then write one termination message listing their summaries (``contract.BATCH``)."""
    summaries: list[dict[str, Any]] = []
    codes: list[int] = []
    with tempfile.TemporaryDirectory(prefix="atlas-batch-") as tmp:
        for n, (task_id, repeat) in enumerate(inputs.batch):
            one = dataclasses.replace(
                inputs, task_id=task_id, repeat=repeat, batch=(), termination_path=Path(tmp) / f"item-{n}"
            )
            code = run_task(one, warn)
            codes.append(code)
            try:
                summaries.append(dict(json.loads(one.termination_path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, TypeError):
                summaries.append(
                    {
                        "task": task_id,
                        "repeat": repeat,
                        "status": "error",
                        "reason": "no summary",
                        "exit_code": code,
                    }
                )
    code = batch_exit(codes)
    text = compact_batch(summaries, code)
    print(text, flush=True)
    write_termination(inputs.termination_path, text, warn)
    return code


def batch_exit(codes: list[int]) -> int:
    """The pod's exit code: bad input only if every item's input was bad; a storage failure or
    any other failure retries the pod (its stored items are kept, not run again); else 0."""
    if codes and all(c == EXIT_INPUT for c in codes):
        return EXIT_INPUT
    if EXIT_STORE in codes:
        return EXIT_STORE
    return EXIT_RETRY if any(c not in (EXIT_OK, EXIT_INPUT) for c in codes) else EXIT_OK


BATCH_KEYS = (
    "schema_version",
    "task",
    "repeat",
    "status",
    "passed",
    "coverage",
    "wall_s",
    "error_kind",
    "reason",
)
USAGE_KEYS = ("tool_calls", "tokens", "cost_usd", "tool_errors", "provider_retries", "rate_limited", "infra")


def compact_batch(summaries: list[dict[str, Any]], code: int, limit: int = TERMINATION_LIMIT) -> str:
    """``{"status": "batch", "exit_code", "items": [...]}`` in at most ``limit`` bytes: reasons are
    cut first; if it still does not fit the items are left out (the operator then reads the
    stored results)."""
    for cut in (200, 80, 20, 0):
        keys = BATCH_KEYS + USAGE_KEYS if cut >= 80 else BATCH_KEYS  # usage goes before the reasons
        items = []
        for summary in summaries:
            entry = {k: summary.get(k) for k in keys if summary.get(k) is not None}
            reason = str(entry.get("reason") or "")
            if len(reason) > cut:
                entry["reason"] = reason[:cut] + "..." if cut else None
            items.append({k: v for k, v in entry.items() if v is not None})
        text = json.dumps({"status": BATCH, "exit_code": code, "items": items}, separators=(",", ":"))
        if len(text.encode()) <= limit:
            return text
    return json.dumps({"status": BATCH, "exit_code": code, "items": [], "truncated": True})


def main(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    try:
        inputs = read_inputs(env, overrides)
    except InputError as exc:
        _stderr(f"error: {exc}")
        path = Path(
            (overrides or {}).get("termination_path")
            or env.get(ENV["termination_path"])
            or DEFAULT_TERMINATION_PATH
        )
        write_termination(
            path,
            compact(
                TaskSummary(
                    status="error",
                    error_kind=ErrorKind.INPUT,
                    reason=f"input: {exc}",
                    infra=False,
                    exit_code=EXIT_INPUT,
                ).to_message()
            ),
            _stderr,
        )
        return EXIT_INPUT
    return run_task(inputs)
