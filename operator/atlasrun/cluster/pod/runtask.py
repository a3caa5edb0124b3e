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
the other, each exactly as a single item runs (stored, skipped when already stored), each on fresh
server state (``fresh.py``: the sidecars' servers that keep state in their process are started
again, the data volume is reset; if that fails, the item and the rest fail as infrastructure
errors, exit 3, and the retried pod runs them), and the
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlasrun.cluster.pod.cpu import pod_cpu_seconds
from atlasrun.cluster.pod.fresh import FreshStateError, PodState
from atlasrun.cluster.pod.termination import batch_exit, compact, compact_batch, write_termination
from atlasrun.cluster.wire.contract import (
    ENV_CONTROL_PORTS,
    ENV_DATA_SOURCE,
    ENV_INDEX,
    ENV_RUN_SPEC,
    ENV_TERMINATION_LIMIT,
    ENV_WORK_UNIT,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_RETRY,
    EXIT_STORE,
    INFRA_EXITS,
    TERMINATION_LIMIT,
    TasksRef,
    WorkUnit,
)
from atlasrun.cluster.wire.records import TaskSummary
from atlasrun.cluster.wire.sidecars import sidecar_servers
from atlasrun.cluster.wire.store import (
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
    "termination_limit": ENV_TERMINATION_LIMIT,
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
    body.models = models
    # The pod has a sidecar for each of these and no other server: the engine plans with exactly
    # the servers the operator planned with (a task needing another is excluded, as there).
    body.servers.enabled = sidecar_servers(body, build_catalog(spec))
    return spec


def sidecar_url(port: int) -> str:
    return f"http://{SIDECAR_HOST}:{port}/mcp"


def port_overrides(variable: str = "ATLAS_SERVER_PORTS") -> dict[str, int]:
    """``ATLAS_SERVER_PORTS`` (JSON ``{"server": port}``): where a node runs sidecars on other ports
    than the catalog's (e.g. the tests' node stand-in, where pods share one loopback);
    ``ATLAS_CONTROL_PORTS`` the same for their control endpoints."""
    raw = os.environ.get(variable)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(k): int(v) for k, v in data.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise InputError(f"not a JSON object of server ports: {exc}", where=variable) from exc


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


# -- outcome ---------------------------------------------------------------------------------


def exit_code(result: TaskResult) -> int:
    if result.status != "error" or result.error_kind == ErrorKind.JUDGE:
        return EXIT_OK
    return EXIT_RETRY


def summary(result: TaskResult, stored: str | None, code: int) -> dict[str, Any]:
    return TaskSummary.of_result(result, stored, code).to_message()


def failure(
    task_id: str, model: str, repeat: int | None, kind: ErrorKind, reason: str, code: int
) -> TaskSummary:
    """The summary of an attempt that reached no result (the item may not even be known yet:
    a plan by reference that could not be read leaves the task id empty)."""
    return TaskSummary(
        status="error",
        task=task_id or None,
        model=model or None,
        repeat=repeat,
        error_kind=kind,
        reason=reason,
        infra=code in INFRA_EXITS,
        exit_code=code,
    )


def stored_result(
    store: S3Results, model: str, task_id: str, repeat: int, warn: Callable[[str], None]
) -> TaskResult | None:
    """The record a previous attempt stored, if any. Write-only credentials (GetObject denied)
    only lose the skip of finished work; any other storage failure is raised (before the run)."""
    try:
        return store.get_result(model, task_id, repeat)
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


@dataclass(frozen=True)
class ItemDone:
    """One item's summary and the exit code it asks for."""

    summary: TaskSummary
    code: int


class PodRun:
    """A pod's items, run in sequence by one engine: the run spec, the plan (with the sidecars as
    its servers), the object-store client and the engine are built once, however many items the
    pod has. ``run`` returns one ``ItemDone`` per item; nothing here writes the termination message."""

    def __init__(
        self, inputs: Inputs, items: Sequence[tuple[str, int]], out: Path, warn: Callable[[str], None]
    ):
        self.inputs, self.items, self.warn = inputs, list(items), warn
        self.spec = load_spec(inputs)
        plan = plan_run(self.spec)
        needed = sorted({server for task_id, _ in self.items for server in needed_servers(plan, task_id)})
        self.plan = dataclasses.replace(plan, catalog=sidecar_catalog(plan.catalog, needed))
        aws = Redactor(_AWS_SECRETS)
        self.mask: Callable[[str], str] = aws
        self.store = S3Results(
            inputs.results_uri,
            inputs.endpoint_url,
            attempts=inputs.s3_attempts,
            backoff_s=inputs.s3_backoff_s,
            warn=lambda m: warn(self.mask(m)),
        )
        # The sidecars see the data at ATLAS_DATA_ROOT, by default the data mount itself (paths
        # pass unchanged); a different root (e.g. the test's node stand-in) is mapped like locally.
        data_root = os.environ.get("ATLAS_DATA_ROOT") or self.spec.spec.data_mount
        self.engine = Engine(self.spec, self.plan, out, Path(data_root))
        run_redact = self.store.redact = self.engine.store.redact
        self.mask = lambda text: aws(run_redact(text))
        self._todo = {(i.task.id, i.repeat): i for i in self.engine.items({})}
        self._excluded = {(r.task_id, r.repeat): r for r in self.engine.excluded_results()}
        # Several items: the servers' state is made fresh between them (cluster/pod/fresh.py).
        self.fresh: PodState | None = None
        if len(self.items) > 1:
            source = os.environ.get(ENV_DATA_SOURCE)
            self.fresh = PodState(
                [self.plan.catalog.get(n) for n in needed],
                Path(data_root),
                Path(source) if source else None,
                port_overrides(ENV_CONTROL_PORTS),
                self.spec.spec.limits.server_start_timeout_s,
            )
        self._state = "unused"  # of the servers and data: unused, fresh, used, broken
        self._reached: set[str] = set()  # the servers the last item could reach
        self._broken = ""  # why the state is broken

    async def run(self) -> list[ItemDone]:
        try:
            return [await self.run_item(task_id, repeat) for task_id, repeat in self.items]
        finally:
            if self.fresh is not None:
                self.fresh.close()

    async def run_item(self, task_id: str, repeat: int) -> ItemDone:
        model = self.inputs.model
        result: TaskResult | None = None
        try:
            chosen = self._select(task_id, repeat)
            previous = stored_result(self.store, model, task_id, repeat, self.warn)
            if previous is not None and previous.status in ("scored", "excluded"):
                stored = self.store.result_uri(previous)
                self.warn(f"kept: {stored} is already {previous.status}; not run again")
                return ItemDone(TaskSummary.of_result(previous, stored, EXIT_OK), EXIT_OK)
            if isinstance(chosen, Item):
                if previous is not None:  # lets the engine rejudge a judge failure from its transcript
                    self.engine.store.append(previous)
                    chosen.previous = previous
                result = await self._execute(chosen)
                if result is None:  # the servers' state could not be made fresh: not run
                    return ItemDone(self._unfresh(task_id, repeat), EXIT_RETRY)
            else:
                result = chosen
            stored = await asyncio.to_thread(self.store.put_result, result)
        except InputError as exc:
            self.warn(self.mask(f"error: {exc}"))
            return ItemDone(
                failure(task_id, model, repeat, ErrorKind.INPUT, f"input: {exc}", EXIT_INPUT), EXIT_INPUT
            )
        except StoreError as exc:
            self.warn(self.mask(f"error: {'storage' if result is None else 'result not stored'}: {exc}"))
            if result is None:
                reason = f"storage: {exc}"
                return ItemDone(
                    failure(task_id, model, repeat, ErrorKind.STORAGE, reason, EXIT_STORE), EXIT_STORE
                )
            # The work is done but not stored: keep its costs, claim no verdict.
            lost = result.as_error(ErrorKind.STORAGE, f"storage: {result.status} result not stored: {exc}")
            return ItemDone(TaskSummary.of_result(lost, None, EXIT_STORE), EXIT_STORE)
        code = exit_code(result)
        if code != EXIT_OK:
            self.warn(
                self.mask(
                    f"error: {result.status}: {result.reason}; exiting {code} so the Job retries the pod"
                )
            )
        return ItemDone(TaskSummary.of_result(result, stored, code), code)

    def _select(self, task_id: str, repeat: int) -> Item | TaskResult:
        """The engine's item for the key, or its ``excluded`` record; InputError for an unknown task."""
        if repeat >= self.spec.spec.repeats:
            raise InputError(
                f"repeat {repeat} is out of range (the run has {self.spec.spec.repeats} repeat(s): "
                f"0..{self.spec.spec.repeats - 1})",
                where=ENV["repeat"],
            )
        found = self._todo.get((task_id, repeat)) or self._excluded.get((task_id, repeat))
        if found is not None:
            return found
        rejected = [str(r) for r in self.plan.rejected if task_id in str(r)]
        if rejected:
            raise InputError(f"task {task_id!r} was rejected: {rejected[0]}", where=ENV["task_id"])
        known = [t.id for t in self.plan.tasks] + [e.task.id for e in self.plan.excluded]
        shown = ", ".join(known[:10]) + (f", ... ({len(known)} in all)" if len(known) > 10 else "")
        raise InputError(
            f"task {task_id!r} is not in the run's tasks ({shown or 'none'})", where=ENV["task_id"]
        )

    async def _execute(self, item: Item) -> TaskResult | None:
        """The item's result; None when the pod's servers could not be given fresh state for it."""
        catalog = self.plan.catalog
        ports = {n: int(catalog.get(n).port or 0) for n in needed_servers(self.plan, item.task.id)}
        timeout_s = self.spec.spec.limits.server_start_timeout_s
        if not await self._make_fresh():
            return None
        for name in await wait_for_ports(ports, timeout_s):
            self.warn(
                f"warning: sidecar {name!r} is not listening on {sidecar_url(ports[name])} after {timeout_s:.0f}s"
            )
        results: list[TaskResult] = []
        self.engine.on_result = results.append
        self._state, self._reached = "used", set(ports)
        await self.engine.run([item])
        return results[0]

    async def _make_fresh(self) -> bool:
        """Before an item runs: the first one adopts the state the pod started with (once every
        sidecar listens); a later one after a used state gets it reset. False: the state is broken."""
        if self.fresh is None or self._state == "fresh":
            return True
        if self._state == "unused":
            ports = {n: int(self.plan.catalog.get(n).port or 0) for n in self._pod_servers()}
            await wait_for_ports(ports, self.spec.spec.limits.server_start_timeout_s)
            await asyncio.to_thread(self.fresh.adopt)
        elif self._state == "used":
            try:
                between = await self.fresh.reset(self._reached)
            except FreshStateError as exc:
                self._state, self._broken = "broken", str(exc)
                self.warn(self.mask(f"error: fresh state: {exc}; the pod takes no further item"))
                return False
            print(between.line(), file=sys.stderr, flush=True)
        else:  # broken
            return False
        self._state = "fresh"
        return True

    def _pod_servers(self) -> list[str]:
        return sorted({s for task_id, _ in self.items for s in needed_servers(self.plan, task_id)})

    def _unfresh(self, task_id: str, repeat: int) -> TaskSummary:
        reason = f"infrastructure: fresh server state for this item failed: {self._broken}"
        return failure(task_id, self.inputs.model, repeat, ErrorKind.SERVER_START, reason, EXIT_RETRY)


def run_task(inputs: Inputs, warn: Callable[[str], None] = _stderr) -> int:
    """Run the pod's item(s), store each, write the termination message (one item's summary, or a
    ``batch`` summary listing each item's); returns the exit code (see the module docstring)."""
    aws = Redactor(_AWS_SECRETS)
    fetched = tempfile.TemporaryDirectory(prefix="atlas-tasks-")
    try:
        inputs = fetch_plan(inputs)
        inputs = fetch_tasks(inputs, Path(fetched.name))
        items = list(inputs.batch) or [(inputs.task_id, inputs.repeat)]
        with local_dir(inputs.work_dir) as tmp:
            pod = PodRun(inputs, items, Path(tmp), warn)
            done = asyncio.run(pod.run())
            mask = pod.mask
    except InputError as exc:
        done, mask = _all_failed(inputs, ErrorKind.INPUT, f"input: {exc}", EXIT_INPUT), aws
        warn(mask(f"error: {exc}"))
    except StoreError as exc:
        done, mask = _all_failed(inputs, ErrorKind.STORAGE, f"storage: {exc}", EXIT_STORE), aws
        warn(mask(f"error: storage: {exc}"))
    finally:
        fetched.cleanup()
    cpu_s = _pod_cpu(warn)
    if inputs.batch:
        for item in done:  # one line per item in the pod's log
            print(mask(compact(item.summary.to_message())), flush=True)
        code = batch_exit([item.code for item in done])
        text = mask(compact_batch([item.summary for item in done], code, cpu_s, inputs.termination_limit))
    else:
        (item,) = done
        summary = item.summary.model_copy(update={"cpu_s": cpu_s})
        message = json.loads(mask(json.dumps(summary.to_message())))
        code, text = item.code, compact(message, inputs.termination_limit)
    print(text, flush=True)
    write_termination(inputs.termination_path, text, warn)
    return code


def _pod_cpu(warn: Callable[[str], None]) -> float | None:
    """The pod's CPU-seconds so far (runner and sidecars, cluster/pod/cpu.py); None if not known."""
    try:
        ports = port_overrides(ENV_CONTROL_PORTS)
    except InputError as exc:
        warn(f"warning: CPU not reported: {exc}")
        return None
    seconds, missing = pod_cpu_seconds({n: f"http://{SIDECAR_HOST}:{p}" for n, p in ports.items()})
    if missing:
        warn(f"warning: CPU of sidecar(s) {', '.join(missing)} not known: the pod's figure leaves them out")
    return seconds


def _all_failed(inputs: Inputs, kind: ErrorKind, reason: str, code: int) -> list[ItemDone]:
    """Every item of the pod, when what they share (plan, task document, spec, store) failed."""
    items = list(inputs.batch) or [(inputs.task_id, inputs.repeat)]
    return [ItemDone(failure(t, inputs.model, r, kind, reason, code), code) for t, r in items]


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
        text = compact(failure("", "", None, ErrorKind.INPUT, f"input: {exc}", EXIT_INPUT).to_message())
        write_termination(path, text, _stderr)
        return EXIT_INPUT
    return run_task(inputs)
