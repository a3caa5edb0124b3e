"""Gives each task the server instances it needs.

Stateful servers (``stateful: true``: filesystem writes, memory, git, code
runners) get fresh state per task so no state leaks between tasks: a new process
(``fresh: respawn``, the default), one started ahead of need (``prestart``), or a
process that keeps no state outside its data, given a fresh data copy between tasks
(``reuse-with-fresh-data``); the last two through servers/pool.py.
Stateless ones are pooled: one shared session per server for the whole run,
restarted if it breaks. Every process runs confined by ``sandbox`` (servers/sandbox.py);
a new manager first removes the scratch directories (servers/scratch.py) and pids cgroups
(servers/limits.py) of runs that died.

``ServerManager`` is the ``local`` backend of ``spec.servers.backend``; ``ServerBackend`` is what
the engine needs of any backend (the other: servers/remote.py, MCP-Atlas's agent-environment).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Protocol

from atlasrun.servers.catalog import Catalog, ServerSpec
from atlasrun.servers.instance import ServerInstance
from atlasrun.servers.limits import sweep_stale_cgroups
from atlasrun.servers.pool import FreshPool
from atlasrun.servers.sandbox import Sandbox
from atlasrun.servers.scratch import TaskData, sweep_stale


class ServerBackend(Protocol):
    """Where a run's server instances come from (runner/engine.py builds one per run)."""

    def preflight(self, names: list[str]) -> None:
        """Raise before any work if a named server may not run (``SandboxError``)."""

    async def acquire(self, names: list[str]) -> dict[str, ServerInstance]:
        """The instances one task uses, by server name (``ServerStartError`` if one is unavailable)."""

    async def reacquire(self, name: str) -> ServerInstance:
        """A working instance of a shared server whose transport failed."""

    def release(self, instances: dict[str, ServerInstance]) -> None:
        """The task is done with ``instances``."""

    async def close(self) -> None:
        """Stop everything the backend started (end of the run)."""


class ServerManager:
    def __init__(
        self,
        catalog: Catalog,
        data_dir: Path,
        data_mount: str = "/data",
        start_timeout_s: float = 60.0,
        log_dir: Path | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.catalog = catalog
        self.sandbox = sandbox or Sandbox()
        self.data_dir = data_dir
        self.data_mount = data_mount
        self.start_timeout_s = start_timeout_s
        self.log_dir = log_dir
        self._pool: dict[str, ServerInstance] = {}
        self._pool_locks: dict[str, asyncio.Lock] = {}
        # Server start-up is CPU-bound (interpreter and SDK imports): more concurrent
        # spawns than cores only thrash, so start-ups queue here while tasks run.
        self._spawn_slots = asyncio.Semaphore(max(2, os.cpu_count() or 2))
        self._stopping: set[asyncio.Task[None]] = set()
        self._fresh: dict[str, FreshPool] = {}
        # ATLAS_FRESH=respawn turns the pools off (benchmarks compare the strategies).
        self.fresh_override = os.environ.get("ATLAS_FRESH") or None
        sweep_stale()
        sweep_stale_cgroups()

    def preflight(self, names: list[str]) -> None:
        """Raise ``SandboxError`` before any work if a named server may not run here."""
        self.sandbox.check(*(self.catalog.get(name) for name in names))

    def _new(self, name: str, task_data: TaskData | None = None) -> ServerInstance:
        return ServerInstance(
            self.catalog.get(name),
            self.data_dir,
            self.data_mount,
            self.start_timeout_s,
            self.log_dir,
            self.sandbox,
            task_data,
        )

    async def _start(self, name: str, task_data: TaskData | None = None) -> ServerInstance:
        async with self._spawn_slots:
            return await self._new(name, task_data).start()

    async def _task_data(self, specs: list[ServerSpec]) -> TaskData | None:
        """One fresh data copy for the task's ``data_scope: task`` servers (None if it has none)."""
        scoped = [s for s in specs if s.data_scope == "task"]
        if not scoped:
            return None
        mounted = self.sandbox.unavailable is None
        shared = sorted({rel for s in scoped if s.mount_data and mounted for rel in s.shared_data})
        task_data = TaskData(self.data_dir, shared)
        task_data.hold()  # until every server of the task has it
        await asyncio.to_thread(task_data.create)
        return task_data

    def _strategy(self, name: str) -> str:
        spec = self.catalog.get(name)
        if spec.data_scope == "task":
            return "task"
        if not spec.stateful:
            return "shared"
        if self.fresh_override == "respawn":
            return "respawn"
        return spec.fresh

    def _fresh_pool(self, name: str) -> FreshPool:
        pool = self._fresh.get(name)
        if pool is None:
            reuse = self._strategy(name) == "reuse-with-fresh-data"
            pool = self._fresh[name] = FreshPool(lambda: self._start(name), reuse=reuse)
        return pool

    async def _fresh_instance(self, name: str, task_data: TaskData | None = None) -> ServerInstance:
        strategy = self._strategy(name)
        if strategy == "task":
            return await self._start(name, task_data)
        if strategy == "shared":
            return await self._pooled(name)
        if strategy == "respawn":
            return await self._start(name)
        return await self._fresh_pool(name).take()

    async def reacquire(self, name: str) -> ServerInstance:
        """A working instance of a pooled server (restarting it if it broke)."""
        return await self._pooled(name)

    async def _pooled(self, name: str) -> ServerInstance:
        lock = self._pool_locks.setdefault(name, asyncio.Lock())
        async with lock:
            current = self._pool.get(name)
            if current is not None and current.broken is None:
                return current
            if current is not None:
                await current.stop()
            self._pool[name] = await self._start(name)
            return self._pool[name]

    async def acquire(self, names: list[str]) -> dict[str, ServerInstance]:
        """Start (or reuse) every named server concurrently; on any failure stop what started."""
        specs = [self.catalog.get(n) for n in names]
        task_data = await self._task_data(specs)
        try:
            results = await asyncio.gather(
                *(self._fresh_instance(s.name, task_data) for s in specs),
                return_exceptions=True,
            )
        finally:
            if task_data is not None:
                task_data.release()  # its servers hold it now, and let go when they stop
        instances = {s.name: r for s, r in zip(specs, results, strict=False) if isinstance(r, ServerInstance)}
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            self.release(instances)
            raise failures[0]
        return instances

    def release(self, instances: dict[str, ServerInstance]) -> None:
        """Stop the task's fresh instances in the background; pooled ones stay up.

        A server's graceful exit can take a good fraction of a second; nothing
        waits for it but ``close()``, so the next task's slot frees at once.
        """
        for instance in instances.values():
            strategy = self._strategy(instance.name)
            if strategy in ("prestart", "reuse-with-fresh-data"):
                self._fresh_pool(instance.name).give_back(instance)
            elif strategy in ("respawn", "task"):
                task = asyncio.create_task(instance.stop())
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)

    async def settle(self) -> None:
        """Wait for background stops and data refreshes (tests: the next task sees the result)."""
        await asyncio.gather(*list(self._stopping), *(p.settle() for p in self._fresh.values()))

    async def close(self) -> None:
        pooled, self._pool = list(self._pool.values()), {}
        fresh, self._fresh = list(self._fresh.values()), {}
        await asyncio.gather(*(i.stop() for i in pooled), *(p.close() for p in fresh), *list(self._stopping))
