"""Command-line values checked like the run-file fields they override, before any work starts.

``--limit 0`` is a value (and a bad one), not "unset"; ``--parallelism -2`` is the same error
as ``parallelism: -2`` in a run file, with the flag named. Paths given on the command line are
checked for what they must be (``--out`` a directory or nothing yet, ``--data-dir`` a directory).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, create_model

from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpec
from atlasrun.tasks.model import Task

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


def _mentions(mount: str) -> re.Pattern[str]:
    """``/data`` as a path of its own (``/data``, ``/data/x``), not ``/database`` or ``/srv/data``."""
    return re.compile(rf"(?<![\w./-]){re.escape(mount.rstrip('/') or '/')}(?![\w.-])")


def tasks_reading_data(tasks: Sequence[Task], mount: str) -> list[str]:
    """Ids of the tasks whose prompt or reference calls name a path under the data mount."""
    pattern = _mentions(mount)
    return [
        task.id
        for task in tasks
        if pattern.search(task.prompt)
        or any(pattern.search(json.dumps(call.arguments)) for call in task.reference_calls())
    ]


def check_data_root(spec: RunSpec, tasks: Sequence[Task], data_dir_flag: str | None) -> None:
    """Without a data root (no ``--data-dir``, ``spec.dataDir``, agent-environment backend) the
    servers see an empty one: refused when tasks read files there, unless ``spec.emptyDataDir``."""
    body = spec.spec
    if data_dir_flag or body.data_dir or body.empty_data_dir or body.servers.environment_url:
        return
    needing = tasks_reading_data(tasks, body.data_mount)
    if not needing:
        return
    shown = ", ".join(needing[:5]) + (f" and {len(needing) - 5} more" if len(needing) > 5 else "")
    raise InputError(
        f"no data root (--data-dir or spec.dataDir), but {len(needing)} of {len(tasks)} task(s) read "
        f"files under {body.data_mount}: {shown}. Give --data-dir DIR (`atlas init-workspace DIR` "
        "creates the starter suite's), or set spec.emptyDataDir: true if an empty data root is intended",
        where=str(spec.source_file) if spec.source_file else "run file",
    )
