"""Per-model failure-mode shares (MCP-Atlas Tables 3 and 4) from the diagnoses of failed tasks.

Shares are fractions of a model's *diagnosed* failures (``unclassified`` from the
deterministic diagnoser included, so the shares always sum to 1). Failed
diagnoses (the judge gave no usable answer) and undiagnosed failures (no
diagnosis yet, e.g. the per-task record is missing) are counted, never shared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, Field

from atlasrun.diagnostics import taxonomy
from atlasrun.diagnostics.model import Diagnosis, Key
from atlasrun.scoring.result import TaskResult

OVERALL = "Overall"
TOP_N = 3
_COLUMNS = (*taxonomy.MODE_IDS, taxonomy.UNCLASSIFIED)


class ModelModes(BaseModel):
    model: str
    failing: int = 0  # scored below the threshold
    diagnosed: int = 0
    failed: int = 0  # the judge failed: no usable diagnosis
    undiagnosed: int = 0  # no diagnosis recorded
    counts: dict[str, int] = Field(default_factory=dict)  # per mode id (and unclassified), diagnosed only
    shares: dict[str, float] = Field(default_factory=dict)  # counts / diagnosed
    family_shares: dict[str, float] = Field(default_factory=dict)  # tool_call, cognitive
    top_modes: list[str] = Field(default_factory=list)  # most frequent first (taxonomy order breaks ties)


class DiagnosisReport(BaseModel):
    judges: list[str] = Field(default_factory=list)
    models: list[ModelModes] = Field(default_factory=list)
    overall: ModelModes = Field(default_factory=lambda: ModelModes(model=OVERALL))


def _breakdown(model: str, keys: list[Key], diagnoses: Mapping[Key, Diagnosis]) -> ModelModes:
    found = [diagnoses[k] for k in keys if k in diagnoses]
    done = [d for d in found if d.status == "diagnosed"]
    counts = Counter(d.primary_mode for d in done if d.primary_mode)
    row = ModelModes(
        model=model,
        failing=len(keys),
        diagnosed=len(done),
        failed=sum(1 for d in found if d.status == "failed"),
        undiagnosed=len(keys) - len(found),
        counts={m: counts[m] for m in _COLUMNS},
    )
    if done:
        row.shares = {m: counts[m] / len(done) for m in _COLUMNS}
        row.family_shares = {
            f: sum(row.shares[m.id] for m in taxonomy.modes_of(f)) for f in taxonomy.FAMILIES
        }
        ranked = sorted((m for m in _COLUMNS if counts[m]), key=lambda m: (-counts[m], _COLUMNS.index(m)))
        row.top_modes = ranked[:TOP_N]
    return row


def aggregate(failing: Iterable[Key], diagnoses: Mapping[Key, Diagnosis]) -> DiagnosisReport:
    """Per-model breakdown over the ``failing`` keys; diagnoses of other keys are ignored."""
    keys = sorted(set(failing))
    by_model: dict[str, list[Key]] = {}
    for key in keys:
        by_model.setdefault(key[0], []).append(key)
    judges = sorted({diagnoses[k].judge.name for k in keys if k in diagnoses})
    return DiagnosisReport(
        judges=judges,
        models=[_breakdown(m, ks, diagnoses) for m, ks in by_model.items()],
        overall=_breakdown(OVERALL, keys, diagnoses),
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def format_report(report: DiagnosisReport) -> str:
    """Three tables: tool-call modes (like Table 3), cognitive modes (like Table 4), counts and top modes."""
    rows = [*report.models, report.overall] if report.models else []
    if not rows:
        return "no failed tasks to diagnose"
    width = max(12, *(len(r.model) for r in rows))
    out: list[str] = []
    for family in taxonomy.FAMILIES:
        modes = taxonomy.modes_of(family)
        header = f"{'model':<{width}} {taxonomy.FAMILY_LABELS[family]:>6} " + " ".join(
            f"{m.label:>{max(len(m.label), 6)}}" for m in modes
        )
        out += [header, "-" * len(header)]
        for row in rows:
            cells = " ".join(f"{_pct(row.shares.get(m.id)):>{max(len(m.label), 6)}}" for m in modes)
            out.append(f"{row.model:<{width}} {_pct(row.family_shares.get(family)):>6} {cells}")
        out.append("")
    header = (
        f"{'model':<{width}} {'failing':>7} {'diagnosed':>9} {'failed':>6} {'undiag':>6} {'unclass%':>8}"
        "  top modes"
    )
    out += [header, "-" * len(header)]
    for row in rows:
        top = ", ".join(f"{m} {_pct(row.shares[m])}%" for m in row.top_modes) or "-"
        out.append(
            f"{row.model:<{width}} {row.failing:>7} {row.diagnosed:>9} {row.failed:>6} {row.undiagnosed:>6} "
            f"{_pct(row.shares.get(taxonomy.UNCLASSIFIED)):>8}  {top}"
        )
    if report.judges:
        out.append(f"\nshares in % of diagnosed failures; diagnosed by: {', '.join(report.judges)}")
    return "\n".join(out)


def is_failing(result: TaskResult, threshold: float) -> bool:
    """A scored task below the pass threshold: the ones diagnostics explain."""
    return result.status == "scored" and result.coverage is not None and result.coverage < threshold - 1e-9
