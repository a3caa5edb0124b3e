"""Failure diagnostics: why a scored task fell below the pass threshold (MCP-Atlas Appendix E).

``taxonomy`` holds the 11 modes; ``signals`` what the trace alone establishes;
``model`` the diagnosis record; ``judge`` the LLM and deterministic diagnosers;
``store`` ``diagnoses.jsonl``; ``aggregate`` the per-model shares (Tables 3 and 4).
``atlas diagnose`` drives them. The diagnosers (which import litellm) load lazily,
so reading diagnoses stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from atlasrun.diagnostics.aggregate import (
    DiagnosisReport,
    ModelModes,
    aggregate,
    format_report,
)
from atlasrun.diagnostics.model import DETERMINISTIC, Diagnosis, Failure
from atlasrun.diagnostics.signals import Signal, detect, enriched_trace, format_trace
from atlasrun.diagnostics.store import DiagnosesLog
from atlasrun.diagnostics.taxonomy import MODE_IDS, MODES, UNCLASSIFIED, FailureMode

_LAZY = {"DeterministicDiagnoser", "Diagnoser", "LLMDiagnoser", "make_diagnoser", "parse_diagnosis"}

__all__ = [
    "DETERMINISTIC",
    "MODES",
    "MODE_IDS",
    "UNCLASSIFIED",
    "DiagnosesLog",
    "Diagnosis",
    "DiagnosisReport",
    "Failure",
    "FailureMode",
    "ModelModes",
    "Signal",
    "aggregate",
    "detect",
    "enriched_trace",
    "format_report",
    "format_trace",
    *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module("atlasrun.diagnostics.judge"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
