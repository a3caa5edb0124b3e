"""``run.json``: what was run (the spec, the judge, the servers) and where it came from.

Written by ``atlas run``; ``atlas rescore`` adds ``rescore``, ``atlas import`` writes one with
``imported`` instead of a spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from atlasrun.errors import InputError
from atlasrun.judge.base import JudgeInfo
from atlasrun.scoring.records import M, VersionedRecord
from atlasrun.scoring.summary import ExcludedTask
from atlasrun.tasks.files import RESULTS_LIMIT, read_user_file

RUN_FILE = "run.json"


class RescoreInfo(BaseModel):
    source: str
    judges: list[str]
    pass_threshold: float


class ImportInfo(BaseModel):
    imported_from: str  # the MCP-Atlas results file
    tasks: str | None = None
    scores: list[str] = Field(default_factory=list)
    model: str
    pass_threshold: float


class RunRecord(VersionedRecord):
    RECORD = "run record"
    atlasrun_version: str
    started: str | None = None
    spec: dict[str, Any] | None = None  # the run file as run (AtlasRun manifest)
    data_dir: str | None = None
    judge: JudgeInfo | None = None
    servers: list[str] = Field(default_factory=list)
    tasks: int = 0
    excluded: list[ExcludedTask] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)
    hidden_tools: dict[str, list[str]] = Field(default_factory=dict)
    # What results depend on (runner.fingerprint): a resume with another fingerprint is refused.
    fingerprint: dict[str, Any] | None = None
    rescore: RescoreInfo | None = None
    imported: ImportInfo | None = None

    @classmethod
    def upgrade_v1(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Version 1 import records kept the import's fields at the top level (``tasks`` a path)."""
        if "imported_from" in data:
            fields = ("imported_from", "tasks", "scores", "model", "pass_threshold")
            data["imported"] = {k: data.pop(k) for k in fields if k in data}
        return data


def read_record(path: Path, model: type[M]) -> M | None:
    """A run-level record file (``run.json``, ``summary.json``); None when there is none.

    An unreadable file is an InputError naming it; an unknown version a RecordVersionError.
    """
    try:
        path.stat()
    except FileNotFoundError:
        return None
    except OSError:
        pass  # read_user_file names it
    data = read_user_file(path, model.RECORD, RESULTS_LIMIT)  # a regular file, bounded
    try:
        return model.from_json(data, str(path))
    except ValueError as exc:
        raise InputError(f"not a {model.RECORD}: {str(exc).splitlines()[0]}", where=str(path)) from exc
