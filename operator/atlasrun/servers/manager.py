"""Gives each task the server instances it needs.

Stateful servers (``stateful: true``: filesystem writes, memory, git, code
runners) get a fresh process per task so no state leaks between tasks.
Stateless ones are pooled: one shared session per server for the whole run,
restarted if it breaks. Every process runs confined by ``sandbox`` (servers/sandbox.py);
a new manager first removes the scratch directories of runs that died (servers/scratch.py).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from atlasrun.servers.catalog import Catalog
from atlasrun.servers.instance import ServerInstance
from atlasrun.servers.sandbox import Sandbox
from atlasrun.servers.scratch import sweep_stale


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
        sweep_stale()

    def preflight(self, names: list[str]) -> None:
        """Raise ``SandboxError`` before any work if a named server may not run here."""
        self.sandbox.check(*(self.catalog.get(name) for name in names))

    def _new(self, name: str) -> ServerInstance:
        return ServerInstance(
            self.catalog.get(name),
            self.data_dir,
            self.data_mount,
            self.start_timeout_s,
            self.log_dir,
            self.sandbox,
        )

    async def _start(self, name: str) -> ServerInstance:
        async with self._spawn_slots:
            return await self._new(name).start()

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
        results = await asyncio.gather(
            *(self._start(s.name) if s.stateful else self._pooled(s.name) for s in specs),
            return_exceptions=True,
        )
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
            if instance.spec.stateful:
                task = asyncio.create_task(instance.stop())
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)

    async def close(self) -> None:
        pooled, self._pool = list(self._pool.values()), {}
        await asyncio.gather(*(i.stop() for i in pooled), *list(self._stopping))
