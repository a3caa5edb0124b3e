"""CPU time and resident memory of a process tree, from /proc (Linux), for the benchmarks."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on


def _children(pid: int) -> list[int] | None:
    """Direct children of ``pid`` (of any of its threads) from /proc; None if the kernel lacks
    ``/proc/<pid>/task/<tid>/children``."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except FileNotFoundError:
            if not Path(f"/proc/{pid}/task/{tid}").exists():
                continue  # the thread ended
            return None
        except OSError:
            continue
    return found


def _descendants_by_scan(root: int, exclude: frozenset[int]) -> list[int]:
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


def descendants(root: int, exclude: frozenset[int] = frozenset()) -> list[int]:
    """Every process below ``root``: read down from ``root`` (cheap, whatever else runs on the
    machine), or by scanning all of /proc where the kernel has no children files."""
    found, todo = [], [root]
    while todo:
        children = _children(todo.pop())
        if children is None:
            return _descendants_by_scan(root, exclude)
        for child in children:
            if child not in exclude:
                found.append(child)
                todo.append(child)
    return found


def _name(pid: int) -> str:
    """What the process runs: the file name of its program plus, for an interpreter, its script."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [Path(a.decode(errors="replace")).name for a in argv if a and not a.startswith(b"-")]
    if words and words[0] in ("python", "python3", "node", "bwrap") and len(words) > 1:
        return (
            " ".join(words[:2])
            if words[0] != "bwrap"
            else "bwrap "
            + next((w for w in words[1:] if w.startswith("mcp-server") or w == "node"), words[-1])
        )
    return words[0] if words else "?"


def cpu_ms(pid: int) -> float:
    """utime + stime of one live process (ms), 0 if it is gone."""
    fields = _stat(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) * 1000 / _TICK


def rss_mb(pids: list[int]) -> float:
    """The sum of the processes' VmRSS: a page several of them map (the interpreter's or node's
    code, shared libraries, bwrap's) counts once per process."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


_PAGE = os.sysconf("SC_PAGE_SIZE")
_PRESENT, _PFN = 1 << 63, (1 << 55) - 1


def _frames(pid: int) -> set[int] | None:
    """The physical page frames resident in ``pid``'s memory (``/proc/<pid>/pagemap``); None if
    the kernel hides frame numbers from this process (they read as 0 without CAP_SYS_ADMIN)."""
    found: set[int] = set()
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    except OSError:
        return found  # gone
    hidden = False
    try:
        for line in maps:
            low, high = (int(x, 16) for x in line.split(maxsplit=1)[0].split("-"))
            first, count = low // _PAGE, (high - low) // _PAGE
            for start in range(0, count, 1 << 16):
                n = min(1 << 16, count - start)
                try:
                    entries = os.pread(fd, n * 8, (first + start) * 8)
                except OSError:
                    break  # e.g. [vsyscall]
                for (entry,) in struct.iter_unpack("<Q", entries):
                    if entry & _PRESENT:
                        if entry & _PFN:
                            found.add(entry & _PFN)
                        else:
                            hidden = True
    finally:
        os.close(fd)
    return None if hidden and not found else found


def unique_mb(pids: list[int]) -> float | None:
    """Resident memory of the processes together, each physical page counted once (a page two
    of them share counts once, a page one of them maps twice too); None where frame numbers are
    hidden (not root). Pages the tree shares with processes outside it count in full."""
    frames: set[int] = set()
    for pid in pids:
        found = _frames(pid)
        if found is None:
            return None
        frames |= found
    return len(frames) * _PAGE / 2**20


class TreeCpu:
    """CPU used by ``root`` and all its descendants between ``start()`` and ``stop()`` (ms).

    A thread samples the tree every ``interval_s``: a process that exits in between counts
    with its last sample (at most one interval of its CPU is missed), so servers stopped
    (or killed with their sandbox) during the measurement are counted too.
    """

    def __init__(
        self, root: int | None = None, exclude: frozenset[int] = frozenset(), interval_s: float = 0.1
    ) -> None:
        self.root = root or os.getpid()
        self.exclude = exclude
        self.interval_s = interval_s
        self._before: dict[int, float] = {}
        self._seen: dict[int, float] = {}
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.sampler_ms = 0.0  # CPU of the sampling thread itself
        self.names: dict[int, str] = {}

    def _sample(self) -> dict[int, float]:
        return {p: cpu_ms(p) for p in [self.root, *descendants(self.root, self.exclude)]}

    def _note(self, sample: dict[int, float]) -> None:
        for pid, ms in sample.items():
            if ms:
                self._seen[pid] = max(ms, self._seen.get(pid, 0.0))
                if pid not in self.names:
                    self.names[pid] = _name(pid)

    def by_name(self) -> dict[str, float]:
        """CPU ms per process name (the command, e.g. ``node`` or ``python``) since ``start()``."""
        totals: dict[str, float] = {}
        for pid, ms in self._seen.items():
            name = self.names.get(pid, "?")
            totals[name] = totals.get(name, 0.0) + ms - self._before.get(pid, 0.0)
        return totals

    def _loop(self) -> None:
        started = time.thread_time()
        while not self._done.wait(self.interval_s):
            self._note(self._sample())
        self.sampler_ms = (time.thread_time() - started) * 1000

    def start(self) -> None:
        self._before = self._sample()
        self._seen = dict(self._before)
        self._done.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._note(self._sample())
        used = sum(ms - self._before.get(pid, 0.0) for pid, ms in self._seen.items())
        # The sampling thread runs in this process: inside the measured tree when root is this
        # process. Its CPU is the measurement's, not the harness's.
        return used - (self.sampler_ms if self.root == os.getpid() else 0.0)


def wait_idle(
    root: int | None = None, busy_ms_per_s: float = 50.0, interval_s: float = 0.25, timeout_s: float = 30.0
) -> float:
    """Wait until ``root``'s process tree uses less than ``busy_ms_per_s`` of CPU per second
    (servers done starting, JIT warm-up over), so a measurement starts from quiet; returns the
    seconds waited (``timeout_s`` at most)."""
    root = root or os.getpid()
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        pids = [root, *descendants(root)]
        before = {p: cpu_ms(p) for p in pids}
        time.sleep(interval_s)
        used = sum(max(cpu_ms(p) - ms, 0.0) for p, ms in before.items())
        if used / interval_s < busy_ms_per_s:
            break
    return time.monotonic() - started
