"""CPU time and resident memory of a process tree, from /proc (Linux), for the benchmarks."""

from __future__ import annotations

import os
import resource
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on


def descendants(root: int, exclude: frozenset[int] = frozenset()) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            if child not in exclude:
                found.append(child)
                todo.append(child)
    return found


def cpu_ms(pid: int) -> float:
    """utime + stime of one live process (ms), 0 if it is gone."""
    fields = _stat(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) * 1000 / _TICK


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


class TreeCpu:
    """CPU used by ``root`` and all its descendants between ``start()`` and ``stop()`` (ms).

    Live processes by /proc deltas; processes that exited in between count through the
    reaped-children rusage (when ``root`` is this process).
    """

    def __init__(self, root: int | None = None, exclude: frozenset[int] = frozenset()) -> None:
        self.root = root or os.getpid()
        self.exclude = exclude
        self._before: dict[int, float] = {}
        self._children = 0.0

    def _live(self) -> dict[int, float]:
        return {p: cpu_ms(p) for p in [self.root, *descendants(self.root, self.exclude)]}

    def _reaped(self) -> float:
        if self.root != os.getpid():
            return 0.0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (usage.ru_utime + usage.ru_stime) * 1000

    def start(self) -> None:
        self._before, self._children = self._live(), self._reaped()

    def stop(self) -> float:
        after = self._live()
        live = sum(ms - self._before.get(pid, 0.0) for pid, ms in after.items())
        return live + self._reaped() - self._children
