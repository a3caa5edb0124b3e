"""``OUT/diagnoses.jsonl``: one diagnosis per (model, task, repeat), appended as each finishes.

Like ``results.jsonl`` the newest line per key wins and a torn last line is
ignored, so a killed ``atlas diagnose`` loses only work in flight;
``compact()`` rewrites the file to one line per key at the end of a run.
"""

from __future__ import annotations

import os
from pathlib import Path

from atlasrun.diagnostics.model import Diagnosis, Key
from atlasrun.scoring.store import atomic_write

FILENAME = "diagnoses.jsonl"


class DiagnosesLog:
    def __init__(self, root: Path) -> None:
        self.path = root / FILENAME

    def load(self) -> dict[Key, Diagnosis]:
        latest: dict[Key, Diagnosis] = {}
        if not self.path.exists():
            return latest
        with self.path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    diagnosis = Diagnosis.model_validate_json(line)
                except ValueError:
                    continue
                latest[diagnosis.key] = diagnosis
        return latest

    def append(self, diagnosis: Diagnosis) -> None:
        prefix = "\n" if self._torn() else ""
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(prefix + diagnosis.model_dump_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _torn(self) -> bool:
        """The last line was cut short (a kill mid-write): the next one must start on a fresh line."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return False
        with self.path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"

    def compact(self) -> None:
        """Rewrite as one line per key (the newest), sorted by key."""
        latest = self.load()
        if latest:
            atomic_write(self.path, "".join(latest[k].model_dump_json() + "\n" for k in sorted(latest)))


SUMMARY_FILE = "diagnosis_summary.json"  # per-model tables written by ``atlas diagnose``
