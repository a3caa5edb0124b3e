"""Fresh server state per task, without paying a server start-up inside every task.

One ``FreshPool`` per stateful server whose catalog entry declares a ``fresh`` strategy other
than ``respawn``:

- ``prestart``: every instance serves exactly one task and is then stopped, as with respawn,
  but instances are started ahead of need, so start-up overlaps with other tasks' work;
- ``reuse-with-fresh-data``: an instance serves one task at a time; between tasks its private
  data copy is made fresh again (``ServerInstance.refresh_data``: only what the task changed is
  copied) and it goes back to the idle list. Only for servers that keep no state outside their
  data directory (each one proven by a leak test); an instance that broke, whose call timed
  out, or whose refresh failed in any way is stopped instead: a dirty server never serves a task.

The warm size follows demand: the most instances ever checked out at once (so it is bounded by
the run's parallelism without being told it), capped by ``max_warm``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from atlasrun.servers.instance import ServerInstance

Starter = Callable[[], Awaitable[ServerInstance]]


class FreshPool:
    def __init__(self, start: Starter, reuse: bool, max_warm: int = 64) -> None:
        self._start = start
        self.reuse = reuse
        self.max_warm = max_warm
        self._ready: asyncio.Queue[ServerInstance | BaseException] = asyncio.Queue()
        self._starting = 0
        self._recycling = 0  # given back, being refreshed: will be ready soon
        self._waiting = 0
        self._out = 0  # checked out right now
        self.peak = 0  # most ever checked out at once: the warm target
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        self.started = 0  # processes started (for benchmarks and tests)
        self.refreshed = 0  # instances given back and refreshed for reuse
        self.refresh_copies = 0  # refreshes that had to copy something (the task changed its data)
        self.refresh_failures = 0  # refreshes that failed: that instance was stopped, not reused
        self.last_refresh_error: str | None = None

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _fill(self) -> None:
        """Start enough instances to serve the waiters and keep ``peak`` warm."""
        if self._closed:
            return
        target = self._waiting + min(self.peak, self.max_warm)
        if self.reuse:  # idle instances come back: count the ones out, not just the ready ones
            target = max(self._waiting, min(self.peak, self.max_warm) - self._out)
        for _ in range(target - self._ready.qsize() - self._starting - self._recycling):
            self._starting += 1
            self._spawn(self._start_one())

    async def _start_one(self) -> None:
        try:
            self.started += 1
            item: ServerInstance | BaseException = await self._start()
        except Exception as exc:  # handed to the waiter that needs it
            item = exc
        finally:
            self._starting -= 1
        if self._closed and isinstance(item, ServerInstance):
            await item.stop()
            return
        self._ready.put_nowait(item)

    async def take(self) -> ServerInstance:
        """A fresh instance for one task (raises what its start-up raised)."""
        while True:
            self._waiting += 1
            try:
                self._fill()
                item = await self._ready.get()
            finally:
                self._waiting -= 1
            if isinstance(item, BaseException):
                raise item
            if item.broken is not None:  # died while it waited
                self._spawn(item.stop())
                continue
            self._out += 1
            self.peak = max(self.peak, self._out)
            self._fill()
            return item

    def give_back(self, instance: ServerInstance) -> None:
        """The task is done with ``instance``: refresh it for reuse, or stop it."""
        self._out -= 1
        reuse = self.reuse and instance.reusable and not self._closed
        self._recycling += reuse
        self._spawn(self._recycle(instance, reuse))

    async def _recycle(self, instance: ServerInstance, reuse: bool) -> None:
        if reuse:
            try:
                self.refreshed += 1
                self.refresh_copies += bool(await instance.refresh_data())
                keep = not self._closed and self._ready.qsize() < max(self.peak, 1)
            except Exception as exc:  # whatever went wrong, a half-refreshed copy must not serve a task
                self.refresh_failures += 1
                self.last_refresh_error = f"{type(exc).__name__}: {exc}"
                keep = False
            finally:
                self._recycling -= 1
            if keep:
                self._ready.put_nowait(instance)
                return
        await instance.stop()
        self._fill()

    async def settle(self) -> None:
        """Wait until every start, refresh and stop under way has finished."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def close(self) -> None:
        self._closed = True
        await self.settle()
        while not self._ready.empty():
            item = self._ready.get_nowait()
            if isinstance(item, ServerInstance):
                await item.stop()
