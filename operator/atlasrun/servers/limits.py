"""Resource bounds of a sandboxed server: memory, processes, CPU time and open files.

Limits come from the catalog (``limits:`` of the catalog, then of the entry; the built-in
starter catalog's block is the host's default and, for any entry that is not from a built-in
catalog, also the ceiling). Three mechanisms enforce them, measured on this kind of machine:

- rlimits set inside the sandbox (util-linux ``prlimit`` runs the server): open files
  (``RLIMIT_NOFILE``); CPU seconds per process; a memory backstop per process (``RLIMIT_DATA``,
  private writable memory, at twice the memory limit plus 1 GiB; not ``RLIMIT_AS``: Node's
  WebAssembly reserves ~10 GiB of address space and fails under it); ``RLIMIT_NPROC``,
  which in the sandbox's own user namespace counts only the sandbox's processes, but is ignored
  for a runner that is root (the kernel exempts uid 0).
- a ``pids`` cgroup per instance with ``pids.max``, where one can be made (root with a writable
  pids hierarchy, v1 or v2): bounds a fork bomb whoever runs the runner.
- a guard polling the sandbox (its cgroup's processes, else the process tree below it) every
  ``GUARD_INTERVAL_S``: resident memory of all its processes, their CPU time, processes and
  threads, open files per process. The first bound hit kills the whole sandbox and names the
  limit; the instance's calls then fail with ``ServerResourceError`` and the engine records the
  item as the ``server_resource`` infrastructure error.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from atlasrun.servers.catalog import DEFAULT_CATALOG, ResourceLimits, ServerSpec, load_catalog
from atlasrun.servers.scratch import owner_tag

GUARD_INTERVAL_S = 0.2
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_CGROUP_PREFIX = "atlasrun-"


@dataclass(frozen=True)
class Bounds:
    """The resolved limits of one server (every field set)."""

    memory_mb: int
    processes: int
    cpu_seconds: int
    open_files: int

    def prlimit(self) -> list[str]:
        """``prlimit`` options (soft:hard); CPU and data size are backstops behind the guard."""
        data = (2 * self.memory_mb + 1024) * 1024 * 1024
        cpu = self.cpu_seconds + 5
        return [
            f"--data={data}:{data}",
            f"--nofile={self.open_files}:{self.open_files}",
            f"--cpu={cpu}:{cpu + 5}",
            f"--nproc={self.processes}:{self.processes}",
        ]


@functools.cache
def host_limits() -> ResourceLimits:
    """The host's default limits: the built-in starter catalog's ``limits:`` block (complete)."""
    limits = load_catalog(DEFAULT_CATALOG).limits
    missing = [name for name, value in limits.model_dump().items() if value is None]
    if missing:
        raise RuntimeError(f"{DEFAULT_CATALOG}: limits lacks {', '.join(missing)}")
    return limits


def bounds_for(spec: ServerSpec) -> Bounds:
    """``spec``'s limits over the host's; an entry not from a built-in catalog cannot exceed them."""
    host = host_limits().model_dump()
    mine = spec.limits.over(host_limits()).model_dump()
    if not spec.host_trusted:
        mine = {name: min(value, host[name]) for name, value in mine.items()}
    return Bounds(**mine)


def prlimit_command() -> str | None:
    return shutil.which("prlimit", path=_SYSTEM_PATH)


@functools.cache
def _pids_hierarchy() -> Path | None:
    """This process's cgroup in a pids hierarchy where a child can be made, or None."""
    mounts: dict[str, Path] = {}
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fstype, _, options = right.split(" ", 2)
            point = Path(left.split()[4])
            if fstype == "cgroup" and "pids" in options.split()[-1].split(","):
                mounts["pids"] = point
            elif fstype == "cgroup2":
                mounts.setdefault("", point)
        memberships = Path("/proc/self/cgroup").read_text().splitlines()
    except (OSError, ValueError):
        return None
    for line in memberships:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and "" in mounts and "pids" not in mounts:
            base = mounts[""] / path.lstrip("/")
            with contextlib.suppress(OSError):
                if "pids" in (base / "cgroup.subtree_control").read_text().split():
                    return base if os.access(base, os.W_OK) else None
        elif "pids" in controllers.split(",") and "pids" in mounts:
            base = mounts["pids"] / path.lstrip("/")
            return base if os.access(base, os.W_OK) else None
    return None


def new_pids_cgroup(label: str, processes: int) -> Path | None:
    """A pids cgroup for one instance (``pids.max`` = ``processes``), or None where none can be made."""
    base = _pids_hierarchy()
    if base is None:
        return None
    try:
        run = base / f"{_CGROUP_PREFIX}{owner_tag()}"
        run.mkdir(exist_ok=True)
        group = run / label
        group.mkdir()
        (group / "pids.max").write_text(str(processes))
    except OSError:
        return None
    return group


def remove_cgroup(group: Path, wait_s: float = 2.0) -> bool:
    """Kill what is left in an instance's cgroup and remove it (False if its processes outlive
    ``wait_s``: the sweep of a later run removes it)."""
    deadline = time.monotonic() + wait_s
    while True:
        _kill_all(group)
        try:
            group.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)  # killed processes are not reaped yet
    with contextlib.suppress(OSError):
        group.parent.rmdir()  # the run's directory, once its last instance is gone
    return True


def sweep_stale_cgroups() -> list[Path]:
    """Remove the cgroups runs that died left behind (their processes died with them)."""
    base = _pids_hierarchy()
    removed: list[Path] = []
    if base is None:
        return removed
    with contextlib.suppress(OSError):
        for run in base.iterdir():
            tag = run.name.removeprefix(_CGROUP_PREFIX)
            pid, dot, _ = tag.partition(".")
            if run.name == tag or not dot or not pid.isdigit() or owner_tag(int(pid)) == tag:
                continue
            for group in [g for g in run.iterdir() if g.is_dir()]:
                remove_cgroup(group)
            with contextlib.suppress(OSError):
                run.rmdir()
                removed.append(run)
    return removed


def _pids_in(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_all(group: Path) -> None:
    for _ in range(50):  # a fork bomb may refill freed slots between reads
        pids = _pids_in(group)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def _tree(root: int) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += _children(pid)
    return found


def find_child(marker: str) -> int | None:
    """The newest child of this process whose command line holds ``marker`` (its scratch path)."""
    best: tuple[float, int] | None = None
    for pid in _children(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            started = float(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        except (OSError, ValueError, IndexError):
            continue
        if marker in cmdline and (best is None or started > best[0]):
            best = (started, pid)
    return best[1] if best else None


@dataclass
class Guard:
    """Watches one sandbox (its cgroup, or the process tree below ``root``) against ``bounds``."""

    bounds: Bounds
    marker: str  # in the launched process's command line: finds it among this process's children
    cgroup: Path | None = None
    root: int | None = None

    def attach(self) -> None:
        self.root = find_child(self.marker)

    def pids(self) -> list[int]:
        if self.cgroup is not None:
            return _pids_in(self.cgroup)
        return _tree(self.root) if self.root is not None else []

    def exceeded(self) -> str | None:
        """Which limit the sandbox hit (a phrase for the error), or None."""
        if self.cgroup is not None and _pids_max_hit(self.cgroup):
            return f"process limit ({self.bounds.processes} processes and threads)"
        rss = ticks = threads = 0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, IndexError):
                continue  # gone meanwhile
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
            threads += int(fields[17])
            rss += int(fields[21]) * _PAGE
            if fds >= self.bounds.open_files:
                return f"open-file limit ({self.bounds.open_files} per process)"
        if rss > self.bounds.memory_mb * 1024 * 1024:
            return f"memory limit ({self.bounds.memory_mb} MiB resident; it used {rss >> 20} MiB)"
        if threads >= self.bounds.processes:
            return f"process limit ({self.bounds.processes} processes and threads)"
        if ticks / _TICK >= self.bounds.cpu_seconds:
            return f"CPU time limit ({self.bounds.cpu_seconds} s)"
        return None

    def kill(self) -> None:
        """SIGKILL the sandbox: its outermost process (bwrap: the namespace dies with it), then the
        rest of its cgroup."""
        if self.root is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.root, signal.SIGKILL)
        if self.cgroup is not None:
            _kill_all(self.cgroup)


def _pids_max_hit(group: Path) -> bool:
    """A fork in the cgroup failed at ``pids.max`` (its ``pids.events`` ``max`` count)."""
    with contextlib.suppress(OSError, ValueError):
        for line in (group / "pids.events").read_text().splitlines():
            key, _, count = line.partition(" ")
            if key == "max":
                return int(count) > 0
    return False
