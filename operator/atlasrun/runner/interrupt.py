"""Ctrl-C during a run: cancel the work, stop the servers, exit 130, within a bound.

``asyncio.run`` turns the first SIGINT into a cancellation of the main task; the engine then
stops its servers (the MCP SDK closes a server's stdin, waits 2 s, then signals it), which takes
seconds. A clean-up that does not end (a bug, a process that ignores its signals) must not keep
a user's terminal: ``GRACE_S`` after the first Ctrl-C, or at a second one, the process prints the
tasks it was still waiting on (where each is suspended) and exits 130. Finished results are
already on disk, one appended line each; sandboxed servers die with the process
(``bwrap --die-with-parent``, ``PR_SET_PDEATHSIG`` otherwise).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from atlasrun.errors import EXIT_INTERRUPTED

T = TypeVar("T")
GRACE_S = 30.0
MAX_LISTED = 20


def run_interruptibly(main: Coroutine[Any, Any, T], grace_s: float = GRACE_S) -> T:
    """``asyncio.run(main)``; a Ctrl-C cancels ``main`` and raises KeyboardInterrupt once it has
    unwound, or ends the process after ``grace_s`` (or at a second Ctrl-C) if it has not."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)  # signal handlers belong to the main thread (tests call from others)
    timers: list[threading.Timer] = []

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_sigint() -> None:
            if timers:
                _exit_now(loop, "a second Ctrl-C")
            task.cancel()
            timer = threading.Timer(grace_s, _exit_now, (loop, f"stopping took over {grace_s:g} s"))
            timer.daemon = True
            timers.append(timer)
            timer.start()

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            return await main
        except asyncio.CancelledError:
            if timers:
                raise KeyboardInterrupt from None
            raise
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    try:
        return asyncio.run(guarded())  # its own clean-up (tasks cancelled, executor joined) is bounded too
    finally:
        for timer in timers:
            timer.cancel()


def _exit_now(loop: asyncio.AbstractEventLoop, why: str) -> None:
    pending = [t for t in _tasks(loop) if not t.done()]
    lines = [f"  {t.get_name()}: {_where(t)}" for t in pending[:MAX_LISTED]]
    if len(pending) > MAX_LISTED:
        lines.append(f"  ... and {len(pending) - MAX_LISTED} more")
    message = [
        f"interrupted: {why}; exiting anyway (finished results are kept; run the same command again to resume)",
        *(["still waiting on:", *lines] if lines else []),
    ]
    stream = sys.__stderr__
    if stream is not None:
        stream.write("\n".join(message) + "\n")
        stream.flush()
    os._exit(EXIT_INTERRUPTED)


def _tasks(loop: asyncio.AbstractEventLoop) -> list[asyncio.Task[Any]]:
    """The loop's tasks, read from another thread (the loop may be stuck, or still changing them)."""
    for _ in range(10):
        try:
            return list(asyncio.all_tasks(loop))
        except RuntimeError:  # the set changed while it was read
            continue
    return []


def _where(task: asyncio.Task[Any], depth: int = 3) -> str:
    """The innermost ``depth`` coroutine frames ``task`` is suspended in, outermost first."""
    coro: Any = task.get_coro()
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            frames.append(
                f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} ({frame.f_code.co_name})"
            )
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    return " > ".join(frames[-depth:]) or "(not started)"
