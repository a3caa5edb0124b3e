"""Private scratch directories for server instances, and the sweep of those a dead run left.

Every directory lives under ``$TMPDIR/atlasrun-<uid>/`` (mode 0700) and is named
``<pid>.<start time>-<label>-<random>`` after the process that made it. A process killed
with SIGKILL cannot remove its directories (data copies, code snippets); the next run
removes every directory whose owner is gone. The start time (from ``/proc/<pid>/stat``)
tells a live owner from a later process that reused its pid.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def scratch_root() -> Path:
    root = Path(tempfile.gettempdir()) / f"atlasrun-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    info = root.lstat()
    if root.is_symlink() or info.st_uid != os.getuid():
        raise PermissionError(f"{root} is not a directory owned by this user; remove it")
    return root


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, after "pid (comm)"


def owner_tag(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{_start_time(pid)}"


def new_scratch(label: str) -> Path:
    """A fresh private directory owned by this process."""
    return Path(tempfile.mkdtemp(prefix=f"{owner_tag()}-{label}-", dir=scratch_root()))


def _owner_alive(name: str) -> bool:
    tag = name.split("-", 1)[0]
    pid, dot, _ = tag.partition(".")
    if not dot or not pid.isdigit():
        return True  # not ours to judge
    return owner_tag(int(pid)) == tag


def sweep_stale() -> list[Path]:
    """Remove the scratch directories of processes that are gone; returns what was removed."""
    removed = []
    for entry in scratch_root().iterdir():
        if not _owner_alive(entry.name):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
