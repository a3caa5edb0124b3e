"""The live display of ``atlas run`` on stderr: done/total, elapsed, ETA, tokens, cost, errors by
kind, and the reasons of the most recent errors. One redrawn line on a terminal; plain lines
(at every tenth of the run and at each error) when stderr is not a terminal.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, deque
from typing import TextIO

from atlasrun.scoring.result import TaskResult

RECENT_ERRORS = 3


def duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    def __init__(self, total: int = 0, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.wanted = enabled
        self.tty = self.stream.isatty()
        self.errors_by_kind: Counter[str] = Counter()
        self.recent: deque[str] = deque(maxlen=RECENT_ERRORS)
        self.start(total)

    def start(self, total: int) -> None:
        self.total = total
        self.enabled = self.wanted and total > 0
        self.done = self.passed = self.failed = self.errored = 0
        self.tokens = 0
        self.cost_usd: float | None = 0.0  # None once a call had no known price (shown as n/a)
        self.started = time.perf_counter()
        self._last_step = -1

    def update(self, result: TaskResult) -> None:
        self.done += 1
        self.tokens += result.prompt_tokens + result.completion_tokens
        if self.cost_usd is not None:
            self.cost_usd = self.cost_usd + result.cost_usd if result.cost_known else None
        if result.status == "error":
            self.errored += 1
            self.errors_by_kind[str(result.error_kind or "other")] += 1
            self.recent.append(f"{result.model}/{result.task_id}: {(result.reason or '')[:160]}")
        elif result.status == "scored":
            self.passed += bool(result.passed)
            self.failed += not result.passed
        if not self.enabled:
            return
        step = self.done * 10 // self.total
        if self.tty or step != self._last_step or self.done == self.total or result.status == "error":
            self._last_step = step
            self._draw(new_error=result.status == "error")

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else None
        cost = "n/a" if self.cost_usd is None else f"${self.cost_usd:.2f}"
        kinds = ", ".join(f"{k} {n}" for k, n in self.errors_by_kind.most_common())
        return (
            f"{self.done}/{self.total}  passed {self.passed}  failed {self.failed}  "
            f"errors {self.errored}{f' ({kinds})' if kinds else ''}  "
            f"elapsed {duration(elapsed)}  eta {'-' if eta is None else duration(eta)}  "
            f"tokens {self.tokens:,}  cost {cost}"
        )

    def _draw(self, new_error: bool) -> None:
        width = 20
        filled = width * self.done // self.total
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.line()}"
        if self.tty:
            if new_error:  # the reason stays on the terminal above the redrawn line
                self.stream.write(f"\r\x1b[Kerror: {self.recent[-1]}\n")
            self.stream.write(f"\r\x1b[K{line}")
            if self.done == self.total:
                self.stream.write("\n")
        else:
            if new_error:
                self.stream.write(f"error: {self.recent[-1]}\n")
            self.stream.write(line + "\n")
        self.stream.flush()
