"""Command-line values checked like the run-file fields they override, before any work starts.

``--limit 0`` is a value (and a bad one), not "unset"; ``--parallelism -2`` is the same error
as ``parallelism: -2`` in a run file, with the flag named. Paths given on the command line are
checked for what they must be (``--out`` a directory or nothing yet, ``--data-dir`` a directory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, create_model

from atlasrun.errors import InputError

WHERE = "command line"


def check_flag(flag: str, value: Any, model: type[BaseModel], field: str) -> None:
    """Raise ``InputError`` naming ``flag`` if ``value`` breaks ``model.field``'s constraints."""
    if value is None:
        return
    info = model.model_fields[field]
    annotation: Any = info.annotation
    single = create_model("Flag", value=(annotation, info))  # the field alone, constraints included
    try:
        single.model_validate({info.alias or "value": value})
    except ValidationError as exc:
        message = exc.errors()[0].get("msg", "invalid")
        raise InputError(f"{flag} {value}: {message[0].lower()}{message[1:]}", where=WHERE) from exc


def check_output_dir(path: Path, flag: str = "--out") -> None:
    """The results directory may not exist yet; if it does, it must be a directory."""
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path}: exists and is not a directory", where=WHERE)


def check_data_dir(path: Path, flag: str) -> None:
    """A data root the servers will see must be an existing directory."""
    if not path.exists():
        raise InputError(
            f"{flag} {path}: no such directory (create one with `atlas init-workspace DIR`)", where=WHERE
        )
    if not path.is_dir():
        raise InputError(f"{flag} {path}: not a directory", where=WHERE)
