"""``OUT/diagnoses.jsonl``: one diagnosis per (model, task, repeat), appended as each finishes.

Like ``results.jsonl`` the newest line per key wins and a torn last line is
ignored, so a killed ``atlas diagnose`` loses only work in flight;
``compact()`` rewrites the file to one line per key at the end of a run.
"""

from __future__ import annotations

from pathlib import Path

from atlasrun.diagnostics.model import Diagnosis, Key
from atlasrun.scoring.store import append_line, atomic_write, load_latest

FILENAME = "diagnoses.jsonl"


class DiagnosesLog:
    def __init__(self, root: Path) -> None:
        self.path = root / FILENAME

    def load(self) -> dict[Key, Diagnosis]:
        return load_latest(self.path, Diagnosis, lambda d: d.key)

    def append(self, diagnosis: Diagnosis) -> None:
        append_line(self.path, diagnosis.model_dump_json())

    def compact(self) -> None:
        """Rewrite as one line per key (the newest), sorted by key."""
        latest = self.load()
        if latest:
            atomic_write(self.path, "".join(latest[k].model_dump_json() + "\n" for k in sorted(latest)))


SUMMARY_FILE = "diagnosis_summary.json"  # per-model tables written by ``atlas diagnose``
