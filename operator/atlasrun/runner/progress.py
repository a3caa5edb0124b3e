"""A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from atlasrun.scoring.result import TaskResult


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 0
        self.tty = self.stream.isatty()
        self.done = self.passed = self.failed = self.errored = 0
        self.started = time.perf_counter()
        self._last_step = -1

    def update(self, result: TaskResult) -> None:
        self.done += 1
        if result.status == "error":
            self.errored += 1
        elif result.status == "scored":
            self.passed += bool(result.passed)
            self.failed += not result.passed
        if not self.enabled:
            return
        step = self.done * 10 // self.total
        if self.tty or step != self._last_step or self.done == self.total:
            self._last_step = step
            self._draw()

    def _draw(self) -> None:
        width = 24
        filled = width * self.done // self.total
        rate = self.done / max(time.perf_counter() - self.started, 1e-9)
        line = (
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}  passed {self.passed}  "
            f"failed {self.failed}  errors {self.errored}  {rate:.1f} tasks/s"
        )
        self.stream.write(("\r" + line) if self.tty else line + "\n")
        if self.tty and self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()
