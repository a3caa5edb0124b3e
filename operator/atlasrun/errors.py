"""Errors a user can act on. Each names *what* is wrong and *where* (file, row, field)."""

from __future__ import annotations

import errno

from pydantic import ValidationError


class AtlasError(Exception):
    """Base class for errors AtlasRun reports to the user without a traceback."""


class InputError(AtlasError):
    """Bad input: a run file, task file, catalog or CLI argument."""

    def __init__(self, message: str, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)

    @classmethod
    def from_validation(cls, exc: ValidationError, where: str) -> InputError:
        return cls(format_validation(exc), where=where)


class StorageError(AtlasError):
    """A results file could not be written (disk full, name too long, read-only, ...)."""

    def __init__(self, path: object, exc: OSError) -> None:
        self.path = str(path)
        self.errno = exc.errno
        reason = exc.strerror or str(exc)
        hint = ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            hint = "; finished results are kept: free space and run the same command again to resume"
        super().__init__(f"cannot write {self.path}: {reason}{hint}")


def format_validation(exc: ValidationError) -> str:
    """Pydantic errors as 'field.path: message' lines, one per problem."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        lines.append(f"{loc}: {err['msg']}")
    return "; ".join(lines)
