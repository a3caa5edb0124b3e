"""Reading a user-supplied file (task file, run file, catalog, labels, results) safely.

A path may name anything: a symlink to ``/dev/zero`` (endless bytes), a FIFO (a read that never
returns), a directory, a symlink loop, or a file larger than memory. ``read_user_file`` opens the
path without blocking, refuses anything but a regular file, and refuses a file over its limit
(the limit is stated in the error) before reading it; ``check_user_file`` does the same checks
for a file another library reads (Parquet, read by pyarrow). Errors are ``InputError`` naming
the path, never the file's contents.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from atlasrun.errors import InputError

MIB = 1024 * 1024
TASK_FILE_LIMIT = 256 * MIB  # the largest task sets seen are tens of MB
DOCUMENT_LIMIT = 16 * MIB  # run files, server catalogs, judge label files: written by hand
RESULTS_LIMIT = 1024 * MIB  # results.jsonl of a long run (one line per item), per-task records

_KINDS = [
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
]


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")


def _size_text(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit % MIB == 0 else f"{limit:,} bytes"


def _check(info: os.stat_result, what: str, where: str, limit: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"the {what} is {_kind(info.st_mode)}, not a regular file", where=where)
    if info.st_size > limit:
        raise InputError(
            f"the {what} is {info.st_size:,} bytes, over the limit of {_size_text(limit)}", where=where
        )


def _unreadable(exc: OSError, what: str, where: str) -> InputError:
    return InputError(f"cannot read {what}: {exc.strerror or exc}", where=where)


def check_user_file(path: str | os.PathLike[str], what: str, limit: int) -> None:
    """Raise ``InputError`` unless ``path`` (symlinks followed) is a regular file of at most
    ``limit`` bytes: for a file another library opens by path."""
    where = str(path)
    try:
        info = os.stat(path)
    except OSError as exc:  # missing, ELOOP (a symlink loop), ENAMETOOLONG, EACCES, ...
        raise _unreadable(exc, what, where) from exc
    _check(info, what, where, limit)


def read_user_file(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The bytes of ``path`` (``what`` names it in errors: "task file", "run file", ...), read only
    if it is a regular file of at most ``limit`` bytes. ``O_NONBLOCK`` keeps opening a FIFO from
    waiting for a writer; the checks are on the opened file, so a swap after them changes nothing;
    at most ``limit`` bytes are read even if the file grows meanwhile."""
    where = str(path)
    check_user_file(path, what, limit)  # names the kind; opening a socket would only say ENXIO
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _unreadable(exc, what, where) from exc
    try:
        info = os.fstat(fd)
        _check(info, what, where, limit)
        with open(fd, "rb", closefd=False) as handle:
            # Read what the file holds (not ``limit`` bytes: a buffer of that size is reserved up
            # front), then at most what brings it over the limit if it grew meanwhile.
            data = handle.read(min(limit, info.st_size) + 1)
            if len(data) > info.st_size:
                data += handle.read(limit + 1 - len(data))
    except OSError as exc:
        raise _unreadable(exc, what, where) from exc
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputError(f"the {what} grew over the limit of {_size_text(limit)} while read", where=where)
    return data


def resolve_user_path(path: str | os.PathLike[str], what: str) -> Path:
    """``Path(path).resolve()``, with a symlink loop an ``InputError`` (Python 3.11 raises
    ``RuntimeError``, later versions ``OSError``)."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as exc:
        message = f"cannot resolve the {what}: a symlink loop or an unreadable path"
        raise InputError(message, where=str(path)) from exc


def read_json_mapping(path: str | os.PathLike[str], what: str = "results file") -> dict[str, Any]:
    """A JSON object from a results directory's file; {} when it is missing, not a regular file
    under the results limit, not JSON or not an object (callers treat that as "not written")."""
    try:
        data = json.loads(read_user_file(path, what, RESULTS_LIMIT))
    except (InputError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
