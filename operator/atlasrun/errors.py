"""Errors a user can act on. Each names *what* is wrong and *where* (file, row, field)."""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, ValidationError

# Exit codes of `atlas` commands (README "Exit codes" lists them; one place, used by every command).
EXIT_OK = 0  # everything ran and (with --fail-under) met the bar
EXIT_FAIL_UNDER = 1  # a pass rate below --fail-under; `validate`/`audit`: problems found
EXIT_BAD_INPUT = 2  # bad input: run file, task file, argument; also a failed pre-flight check
EXIT_ITEM_ERRORS = 3  # some items ended as errors (provider, server, judge) after their retries
EXIT_REGRESSION = 4  # `atlas compare --fail-on-regression`: B significantly worse than A
EXIT_INTERRUPTED = 130  # Ctrl-C


class ErrorKind(StrEnum):
    """Why a result is ``error`` or ``excluded``: what metrics, summaries and reports count by.

    ``reason`` is the human-readable detail; nothing parses it.
    """

    PROVIDER = "provider"  # the model's provider failed (after its retries)
    PROVIDER_AUTH = "provider_auth"  # 401/403 or no key: not retried
    PROVIDER_MODEL = "provider_model"  # 404, or a model name litellm cannot route: not retried
    PROVIDER_REQUEST = "provider_request"  # 400/422, the request was refused as malformed: not retried
    PROVIDER_TIMEOUT = "provider_timeout"  # the provider did not answer in time
    SERVER_START = "server_start"  # an MCP server did not start
    SERVER_TRANSPORT = "server_transport"  # an MCP server crashed or its connection failed mid-task
    SERVER_RESOURCE = "server_resource"  # an MCP server's sandbox hit a resource limit and was stopped
    JUDGE = "judge"  # the judge failed on some claims (the transcript is kept and rejudged)
    UNJUDGED = "unjudged"  # imported without scores: rescore it
    STORAGE = "storage"  # the result could not be stored
    INPUT = "input"  # bad input: task, run file, catalog
    SERVER_NOT_ENABLED = "server_not_enabled"  # excluded: the task needs servers the run does not enable
    NO_REFERENCE = "no_reference"  # excluded: the replay agent needs a reference answer the task lacks
    SERVER_DRIFT = "server_drift"  # excluded: the servers no longer offer a reference tool
    JOB_FAILED = "job_failed"  # cluster mode: the Job failed without a result
    HARNESS = "harness"  # a bug in AtlasRun itself
    OTHER = "other"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on (control, bidi override, line
    separator: not ``str.isprintable``) escaped; newlines and tabs kept. For echoing input."""
    return "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode() for c in text)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest of ``choices`` other than ``word`` itself, or ''
    (a key valid elsewhere but not here gets no hint to use itself)."""
    close = difflib.get_close_matches(word, [c for c in choices if c != word], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def field_names(model: type[BaseModel]) -> set[str]:
    """Every field name and alias of ``model`` and the models nested in it (for 'did you mean')."""
    names: set[str] = set()
    seen: set[type[BaseModel]] = set()
    todo = [model]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name, info in current.model_fields.items():
            names.update(n for n in (name, info.alias) if n)
            todo.extend(_models_in(info.annotation))
    return names


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


class AtlasError(Exception):
    """Base class for errors AtlasRun reports to the user without a traceback."""


class InputError(AtlasError):
    """Bad input: a run file, task file, catalog or CLI argument."""

    def __init__(self, message: str, where: str | None = None) -> None:
        self.message = message
        self.where = where
        # A where comes from input too (a path, a field name): it never drives the terminal.
        super().__init__(f"{printable(where)}: {message}" if where else message)

    @classmethod
    def from_validation(
        cls, exc: ValidationError, where: str, model: type[BaseModel] | None = None
    ) -> InputError:
        return cls(format_validation(exc, field_names(model) if model else ()), where=where)


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


def format_validation(exc: ValidationError, known: Iterable[str] = ()) -> str:
    """Pydantic errors as 'field.path: message' lines, one per problem; a misspelt field name gets
    the closest of ``known`` as a 'did you mean'."""
    lines = []
    for err in exc.errors():
        loc = ".".join(printable(str(p)) for p in err["loc"]) or "(root)"
        hint = ""
        if err["type"] == "extra_forbidden" and err["loc"]:
            hint = did_you_mean(str(err["loc"][-1]), known)
        lines.append(f"{loc}: {printable(err['msg'])}{printable(hint)}")
    return "; ".join(lines)
