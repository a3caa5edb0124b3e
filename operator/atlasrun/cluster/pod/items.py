"""A pod's items, run in sequence by one engine (``PodRun``), and the summaries of their outcomes
(``exit_code``, ``failure``); see ``runtask`` for the exit codes."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlasrun.cluster.pod.fresh import FreshStateError, PodState
from atlasrun.cluster.pod.inputs import ENV, Inputs, load_spec
from atlasrun.cluster.pod.servers import (
    needed_servers,
    port_overrides,
    sidecar_catalog,
    sidecar_url,
    wait_for_ports,
)
from atlasrun.cluster.wire.contract import (
    ENV_CONTROL_PORTS,
    ENV_DATA_SOURCE,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_RETRY,
    EXIT_STORE,
    INFRA_EXITS,
)
from atlasrun.cluster.wire.records import TaskSummary
from atlasrun.cluster.wire.store import (
    S3Results,
    StoreError,
)
from atlasrun.errors import InputError
from atlasrun.redact import Redactor
from atlasrun.runner.engine import Engine, Item
from atlasrun.runner.plan import plan_run
from atlasrun.scoring.result import ErrorKind, TaskResult

AWS_SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


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
        aws = Redactor(AWS_SECRETS)
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
