"""The sidecar's view of processes, from /proc, and of a child's stderr (images/mcp-server/sidecar.py).

Standard library only, like the sidecar: the image's Python is mcp-proxy's, without atlasrun.
"""

from __future__ import annotations

import collections
import os
import re
import sys
from typing import IO

STDERR_TAIL_LINES = 12  # the runner keeps 500 characters of an error


def stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, process group) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # the command name may hold spaces and ")"
    return fields[0].decode(), int(fields[1]), int(fields[2])


def processes() -> dict[int, tuple[str, int, int]]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (found := stat(int(name))) is not None:
            table[int(name)] = found
    return table


def cpu_of(pid: int) -> float:
    """CPU-seconds of a live process and of its children it reaped (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        fields = data[data.rindex(b")") + 2 :].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
    except (OSError, ValueError, IndexError):
        return 0.0


def cgroup_cpu() -> float | None:
    """CPU-seconds of this container's cgroup (v2 cpu.stat, else v1 cpuacct.usage); None if none.
    (The runner's copy: atlasrun/cluster/pod/cpu.py; this file imports nothing of atlasrun.)"""
    try:
        with open("/sys/fs/cgroup/cpu.stat", encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
    except (OSError, ValueError):
        pass
    for name in ("cpuacct/cpuacct.usage", "cpu,cpuacct/cpuacct.usage", "cpuacct.usage"):
        try:
            with open(f"/sys/fs/cgroup/{name}", encoding="ascii") as fh:
                return int(fh.read().strip()) / 1e9
        except (OSError, ValueError):
            continue
    return None


def alive(pid: int, state: str) -> bool:
    """Not dead yet: a zombie thread-group leader still has threads running until they exit."""
    if state not in "ZX":
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


class StderrTail:
    """The child's last stderr lines, Python tracebacks condensed to their messages: the server's
    own complaint, printed before mcp-proxy's long traceback, stays in the few lines kept."""

    _FRAME = re.compile(r"^\s*(File \"|Traceback \(|Exception Group Traceback|[\^~]+$|[+-]+[-+ \d]*$)")

    def __init__(self, lines: int = STDERR_TAIL_LINES) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=lines)
        self._source_line_next = False  # the line after a ``File "..."`` line is its source code

    def add(self, raw: bytes) -> None:
        line = raw[:2000].decode("utf-8", "replace").rstrip()
        text = line.lstrip(" |+")  # exception groups indent with "|" and "+"
        source_line, self._source_line_next = self._source_line_next, text.startswith('File "')
        if source_line or not text or self._FRAME.match(text):
            return
        if not self.lines or self.lines[-1] != text:
            self.lines.append(text)

    def text(self) -> str:
        return "\n".join(self.lines) or "(nothing)"


def drain(stream: IO[bytes], tail: StderrTail) -> None:
    """Echo the child's stderr to ours (the container log) and keep its last lines for errors."""
    out = sys.stderr.buffer
    for line in iter(lambda: stream.readline(65536), b""):
        tail.add(line)
        try:
            out.write(line)
            out.flush()
        except (OSError, ValueError):
            pass
    stream.close()
