"""Private scratch directories for server instances, and the sweep of those a dead run left.

Every directory lives under ``$TMPDIR/atlasrun-<uid>/`` (mode 0700) and is named
``<pid>.<start time>-<label>-<random>`` after the process that made it. A process killed
with SIGKILL cannot remove its directories (data copies, code snippets); the next run
removes every directory whose owner is gone. The start time (from ``/proc/<pid>/stat``)
tells a live owner from a later process that reused its pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
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


# What identifies an entry's state: kind and permissions, inode, size, modification and change
# times. The kernel sets ctime on every write, rename, link, chmod or utime, so a task cannot
# hide a change by putting the modification time back.
Stat = tuple[int, int, int, int, int]
_CTIME = 4


def _scan(root: Path) -> dict[str, Stat]:
    """Every entry under ``root`` (symlinks not followed) by relative path, parents before children."""
    found: dict[str, Stat] = {}
    todo = [""]
    while todo:
        prefix = todo.pop()
        with os.scandir(root / prefix if prefix else root) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                rel = f"{prefix}/{entry.name}" if prefix else entry.name
                found[rel] = (info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
                if stat.S_ISDIR(info.st_mode):
                    todo.append(rel)
    return found


def _under(rel: str, roots: set[str]) -> bool:
    """``rel`` or one of its ancestors is in ``roots``."""
    while rel:
        if rel in roots:
            return True
        rel = rel.rpartition("/")[0]
    return False


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


class DataCopy:
    """A private copy of a data directory, made fresh again at the cost of what a task changed.

    ``create()`` copies the source and records the state of every entry of the copy.
    ``refresh()`` compares the copy with that record: entries the task added are removed, entries
    it changed or removed are copied again from the source, directories whose entries it changed
    get the source's permissions and times back; untouched entries are not copied. The copy then
    equals a fresh copy of the source (whose contents must not change while the copy is in use).

    A change made within one tick of a coarse filesystem clock after the record was taken could
    leave every time unchanged; so the record is taken only once the clock (read from ``clock``, a
    file on the same filesystem) has moved past every recorded change time.
    """

    def __init__(self, source: Path, target: Path, clock: Path, shared: list[str] | None = None) -> None:
        self.source = source
        self.target = target
        # Paths the copy leaves out (an empty directory stands in): mounted over it read-only.
        self.shared = [rel.strip("/") for rel in shared or []]
        self._clock = clock
        self._record: dict[str, Stat] = {}
        self._adopted_extra: set[str] = set()
        self.copied = 0  # entries copied from the source over this copy's life (benchmarks, tests)

    def create(self) -> None:
        if self.source.exists():
            shutil.copytree(self.source, self.target, symlinks=True, ignore=self._left_out)
            for rel in self.shared:
                if (self.source / rel).is_dir():
                    (self.target / rel).mkdir(parents=True, exist_ok=True)
        else:
            self.target.mkdir()
        self._take_record()
        self.copied += len(self._record)

    def adopt(self) -> None:
        """Take ``target`` as it is now as the fresh state, without copying: a copy someone else
        made (a pod's seed container), possibly with files its servers wrote at start-up (those
        are removed when changed, not restored: the source has none)."""
        self._take_record()
        # Entries the source never had (servers' start-up writes): removed when changed, not restored.
        self._adopted_extra = {
            rel
            for rel in self._record
            if not (self.source / rel).is_symlink() and not (self.source / rel).exists()
        }

    def _left_out(self, directory: str, names: list[str]) -> set[str]:
        if not self.shared:
            return set()
        rel = Path(directory).relative_to(self.source).as_posix()
        prefix = "" if rel == "." else f"{rel}/"
        return {name for name in names if f"{prefix}{name}" in self.shared}

    def refresh(self) -> list[str]:
        """Undo what changed since the record was taken; returns the paths copied from the source."""
        now = _scan(self.target)
        if now == self._record:
            return []
        record = self._record
        gone: set[str] = set()  # removed from the copy (with everything under them)
        touched: list[str] = []  # the same directory, entries under it changed
        for rel, info in now.items():
            if _under(rel, gone):
                continue
            before = record.get(rel)
            if before == info:
                continue
            if (
                before is not None
                and stat.S_ISDIR(before[0])
                and stat.S_ISDIR(info[0])
                and before[1] == info[1]
            ):
                touched.append(rel)
            else:
                _remove(self.target / rel)
                gone.add(rel)
        copied: list[str] = []
        restored: set[str] = set()
        for rel in record:  # parents first: a restored directory brings back what is under it
            if (rel in gone or rel not in now) and not _under(rel, restored):
                source, target = self.source / rel, self.target / rel
                if rel in self._adopted_extra:
                    continue  # made after the copy (adopt), not from the source
                if source.is_symlink():
                    os.symlink(os.readlink(source), target)
                    shutil.copystat(source, target, follow_symlinks=False)  # as copytree does
                elif source.is_dir():
                    shutil.copytree(source, target, symlinks=True)
                else:
                    shutil.copy2(source, target, follow_symlinks=False)
                copied.append(rel)
                restored.add(rel)
        for rel in reversed(touched):  # children before parents: copying times changes none above
            shutil.copystat(self.source / rel, self.target / rel, follow_symlinks=False)
        if self.source.exists():
            # A copy's root may belong to someone else (a pod's data volume: the kubelet's, group
            # fsGroup): its times cannot be set, and no task could have changed its mode either.
            with contextlib.suppress(PermissionError):
                shutil.copystat(self.source, self.target, follow_symlinks=False)
        self._take_record()
        self.copied += sum(1 for rel in self._record if _under(rel, restored))
        return copied

    def _take_record(self) -> None:
        self._record = _scan(self.target)
        newest = max((info[_CTIME] for info in self._record.values()), default=0)
        while self._clock_ns() <= newest:
            time.sleep(0.001)

    def _clock_ns(self) -> int:
        self._clock.touch()  # sets its times to the filesystem's clock now
        return self._clock.stat().st_ctime_ns


class TaskData:
    """One fresh copy of a data root shared by the servers of one task (``data_scope: task``).

    Each server holds it while it runs; the copy is removed when the last one lets go."""

    def __init__(self, source: Path, shared: list[str]) -> None:
        self.root = new_scratch("task")
        self.path = self.root / "data"
        self._copy = DataCopy(source, self.path, self.root / ".clock", shared)
        self._users = 0

    def create(self) -> None:
        self._copy.create()

    def hold(self) -> None:
        self._users += 1

    def release(self) -> None:
        self._users -= 1
        if self._users <= 0:
            shutil.rmtree(self.root, ignore_errors=True)
