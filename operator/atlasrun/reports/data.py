"""The numbers behind ``report.html``, assembled from a results directory (rendering is in ``html``).

Every statistic comes from the scoring modules (``summary``, ``stats``, ``agreement``,
``tool_metrics``) and the failure modes from ``diagnostics``; this module only groups
them per model and reads each per-task record once, keeping a size-bounded view of it
for the drill-down (prompt, claim verdicts, final answer, tool calls, diagnosis).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from atlasrun.agent.replay import BUILTIN_AGENTS
from atlasrun.diagnostics.aggregate import DiagnosisReport, aggregate, is_failing
from atlasrun.diagnostics.model import Diagnosis
from atlasrun.diagnostics.signals import (
    Signal,
    canonical_arguments,
    detect,
    strongest_mode,
)
from atlasrun.diagnostics.store import SUMMARY_FILE, DiagnosesLog
from atlasrun.diagnostics.taxonomy import UNCLASSIFIED
from atlasrun.judge.base import JudgeInfo
from atlasrun.reports.matrix import Comparison, MatrixRow, comparisons, task_matrix
from atlasrun.runner.record import RUN_FILE, RunRecord, read_record
from atlasrun.scoring.agreement import (
    JudgeAgreement,
    JudgeRates,
    claim_agreement,
    cross_judge_rates,
)
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.stats import (
    BreakdownKey,
    Estimate,
    RepeatStats,
    breakdown,
    by_model,
    common_tasks,
    coverage_ci,
    pass_rate_ci,
    repeat_stats,
)
from atlasrun.scoring.store import ResultsDir
from atlasrun.scoring.summary import SUMMARY_FILE as RUN_SUMMARY_FILE
from atlasrun.scoring.summary import RunSummary, summarize
from atlasrun.scoring.tool_metrics import (
    ModelToolMetrics,
    TaskToolMetrics,
    aggregate_tool_metrics,
    task_tool_metrics,
)
from atlasrun.tasks.files import read_json_mapping

BREAKDOWNS: tuple[BreakdownKey, ...] = ("domain", "category", "server")
# The drill-down's size budget in characters, markup included (estimated), over all rows and per row:
# a 3,000-row run gets ~5 KB per row, a 300-row run 40 KB. Past that, the middle tool calls are dropped.
DETAIL_BUDGET = 16_000_000
ROW_BUDGET_MIN, ROW_BUDGET_MAX = 4_000, 40_000
ROW_OVERHEAD, CLAIM_OVERHEAD, CALL_OVERHEAD = 1_800, 220, 320  # markup of a row, a claim, a call
CALL_RESULT_MAX = 2_000
CALL_ARGS_MAX = 800
CALL_MIN = 160  # text per call below which middle calls are dropped instead
REASON_MAX = 600
SIGNALS_JUDGE = JudgeInfo(name="trace signals", kind="deterministic", version="signals")


@dataclass
class RunHeader:
    name: str
    out_dir: str
    started: str | None
    generated: str
    threshold: float
    judges: list[tuple[str, JudgeInfo]]  # (role, info): role is "primary" or "secondary"
    version: str | None = None
    repeats: int = 1
    data_dir: str | None = None
    servers: list[str] = field(default_factory=list)
    models: dict[str, str] = field(
        default_factory=dict
    )  # model name -> what it is (built-in agents labelled)
    skipped_lines: int = 0  # results.jsonl lines not counted (damaged, tampered with, outside the run)


@dataclass
class ModelRow:
    model: str
    totals: dict[str, Any]  # one model's row of scoring.summary.summarize
    pass_rate: Estimate | None
    coverage: Estimate | None
    tools: ModelToolMetrics
    coverages: list[float]  # scored coverages (the histogram)
    repeats: RepeatStats | None
    # With several models, pass_rate and coverage are on the tasks scored for every model (paired,
    # ``paired_tasks`` of them); the model's own figure over all it scored is secondary.
    paired_tasks: int | None = None
    pass_rate_all: Estimate | None = None


@dataclass
class FailureModes:
    source: Literal["diagnoses", "signals", "none"]
    threshold: float
    report: DiagnosisReport
    failing: int


@dataclass
class CallView:
    number: int
    name: str
    arguments: str
    result: str
    is_error: bool
    error_kind: str | None
    elapsed_s: float


@dataclass
class ClaimView:
    claim: str
    label: str | None
    score: float | None
    reason: str
    error: str | None
    others: dict[str, str | None]  # secondary judge name -> label


@dataclass
class DrillRow:
    result: TaskResult  # the results.jsonl record (no task or transcript)
    record_found: bool = False
    prompt: str = ""
    claims: list[ClaimView] = field(default_factory=list)
    answer: str = ""
    stop_reason: str | None = None
    calls: list[CallView] = field(default_factory=list)
    omitted_calls: int = 0  # middle calls dropped to keep the file small
    omitted_after: int = 0  # ... after this many shown calls
    diagnosis: Diagnosis | None = None
    signals: list[Signal] = field(default_factory=list)


@dataclass
class ReportData:
    header: RunHeader
    models: list[ModelRow]
    breakdowns: dict[str, dict[str, dict[str, dict[str, Any]]]]  # by -> model -> group -> totals
    judge_rates: dict[str, JudgeRates]  # only when several judges scored
    agreement: list[JudgeAgreement]
    failures: FailureModes
    rows: list[DrillRow]
    matrix: list[MatrixRow] = field(default_factory=list)  # tasks x models coverage
    comparisons: list[Comparison] = field(default_factory=list)  # paired, with two or more models


def clip(text: Any, limit: int) -> str:
    """At most ``limit`` characters, saying how many were cut."""
    value = "" if text is None else str(text)
    if len(value) <= limit:
        return value
    return f"{value[: max(limit, 0)]}… [{len(value) - limit:,} more chars]"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _judges(results: list[TaskResult]) -> list[tuple[str, JudgeInfo]]:
    primary: dict[str, JudgeInfo] = {}
    secondary: dict[str, JudgeInfo] = {}
    for r in results:
        if r.judge is not None:
            primary.setdefault(r.judge.name, r.judge)
        for judgement in r.secondary:
            secondary.setdefault(judgement.judge.name, judgement.judge)
    return [("primary", i) for i in primary.values()] + [
        ("secondary", i) for n, i in secondary.items() if n not in primary
    ]


def _header(out: Path, results: list[TaskResult]) -> RunHeader:
    run = read_record(out / RUN_FILE, RunRecord)
    summary = read_record(out / RUN_SUMMARY_FILE, RunSummary)
    spec = _dict(run.spec if run else None)
    body, meta = _dict(spec.get("spec")), _dict(spec.get("metadata"))
    threshold = summary.pass_threshold if summary else body.get("passThreshold", 0.75)
    started = run.started if run else None
    if not started and (out / "results.jsonl").exists():
        mtime = (out / "results.jsonl").stat().st_mtime
        started = dt.datetime.fromtimestamp(mtime, dt.UTC).isoformat(timespec="seconds")
    return RunHeader(
        name=str((summary.run if summary else None) or meta.get("name") or out.resolve().name),
        out_dir=str(out.resolve()),
        started=str(started) if started else None,
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        threshold=float(threshold) if isinstance(threshold, (int, float)) else 0.75,
        judges=_judges(results),
        version=run.atlasrun_version if run else None,
        repeats=max((r.repeat for r in results), default=0) + 1,
        data_dir=run.data_dir if run else None,
        servers=run.servers if run else [],
        models={
            str(m.get("name")): BUILTIN_AGENTS.get(
                str(m.get("model") or m.get("name")), str(m.get("model") or m.get("name"))
            )
            for m in body.get("models") or []
            if isinstance(m, dict)
        },
    )


def _order(results: list[TaskResult], out: Path) -> list[str]:
    """Models in the run file's order, then any others by name."""
    run = read_record(out / RUN_FILE, RunRecord)
    body = _dict(_dict(run.spec if run else None).get("spec"))
    listed = [m.get("name") for m in body.get("models") or [] if isinstance(m, dict)]
    present = {r.model for r in results}
    return [m for m in listed if m in present] + sorted(present - set(listed))


def _calls(record: TaskResult, budget: int) -> tuple[list[CallView], int, int]:
    calls = record.transcript.calls if record.transcript else []
    if not calls:
        return [], 0, 0
    per_call = budget // len(calls) - CALL_OVERHEAD
    shown = list(enumerate(calls, 1))
    omitted = after = 0
    if per_call < CALL_MIN:
        keep = min(len(calls), max(4, budget // (CALL_MIN + CALL_OVERHEAD)))
        after = (keep + 1) // 2
        omitted = len(calls) - keep
        shown = shown[:after] + shown[len(shown) - (keep - after) :]
        per_call = CALL_MIN
    result_max = min(CALL_RESULT_MAX, per_call * 3 // 4)
    args_max = min(CALL_ARGS_MAX, max(per_call // 4, 60))
    views = [
        CallView(
            number=n,
            name=c.name,
            arguments=clip(canonical_arguments(c.arguments), args_max),
            result=clip(c.result, result_max),
            is_error=c.is_error,
            error_kind=c.error_kind,
            elapsed_s=c.elapsed_s,
        )
        for n, c in shown
    ]
    return views, omitted, after


def _drill(result: TaskResult, full: TaskResult | None, budget: int) -> DrillRow:
    row = DrillRow(result=result, record_found=full is not None, stop_reason=result.stop_reason)
    record = full or result
    claims = record.claims or []
    budget -= ROW_OVERHEAD + CLAIM_OVERHEAD * max(len(claims), len(record.task.claims) if record.task else 0)
    text_max = max(200, min(4_000, budget // 6))
    reason_max = max(120, min(REASON_MAX, budget // (4 * max(len(claims), 1))))
    others = {j.judge.name: {v.claim: v.label for v in j.claims} for j in record.secondary}
    row.claims = [
        ClaimView(
            claim=clip(v.claim, reason_max),
            label=v.label,
            score=v.score,
            reason=clip(v.reason, reason_max),
            error=v.error and clip(v.error, reason_max),
            others={name: labels.get(v.claim) for name, labels in others.items()},
        )
        for v in claims
    ]
    if record.task is not None:
        row.prompt = clip(record.task.prompt, text_max)
        if not row.claims:  # never judged (excluded, or an error before scoring): show the claims alone
            row.claims = [
                ClaimView(claim=clip(c, reason_max), label=None, score=None, reason="", error=None, others={})
                for c in record.task.claims
            ]
    if record.transcript is not None:
        row.answer = clip(record.transcript.final_answer, text_max)
        row.stop_reason = record.transcript.stop_reason
        spent = len(row.prompt) + len(row.answer) + sum(len(c.claim) + len(c.reason) for c in row.claims)
        row.calls, row.omitted_calls, row.omitted_after = _calls(record, max(budget - spent, 0))
    return row


def _signals_diagnosis(result: TaskResult, signals: list[Signal]) -> Diagnosis:
    """What the trace alone says (no diagnosis on file): the strongest signal's mode, else unclassified."""
    return Diagnosis(
        model=result.model,
        task_id=result.task_id,
        repeat=result.repeat,
        coverage=result.coverage,
        status="diagnosed",
        primary_mode=strongest_mode(signals) or UNCLASSIFIED,
        signals=signals,
        judge=SIGNALS_JUDGE,
    )


def build_data(out: Path) -> ReportData:
    store = ResultsDir(out)
    latest = store.load()
    order = _order(list(latest.values()), out)
    results = sorted(latest.values(), key=lambda r: (order.index(r.model), r.task_id, r.repeat))
    header = _header(out, results)
    header.skipped_lines = len(store.skipped)
    diagnoses = DiagnosesLog(out).load()
    diag_threshold = read_json_mapping(out / SUMMARY_FILE).get(
        "threshold"
    )  # the threshold `atlas diagnose` used
    fail_threshold = float(diag_threshold) if isinstance(diag_threshold, (int, float)) else header.threshold
    budget = max(ROW_BUDGET_MIN, min(ROW_BUDGET_MAX, DETAIL_BUDGET // max(len(results), 1)))

    rows: list[DrillRow] = []
    metrics: dict[str, list[TaskToolMetrics]] = {m: [] for m in order}
    missing: Counter[str] = Counter()
    derived: dict[tuple[str, str, int], Diagnosis] = {}
    for result in results:  # one per-task record in memory at a time
        full = store.load_full(result)
        row = _drill(result, full, budget)
        row.diagnosis = diagnoses.get(result.key)
        if full is not None and full.transcript is not None:
            if result.status == "scored":
                metrics[result.model].append(
                    task_tool_metrics(full.transcript, result.task_id, result.model, result.repeat)
                )
            if is_failing(result, fail_threshold) and row.diagnosis is None:
                needs = bool(full.task.reference_calls()) if full.task is not None else None
                row.signals = detect(full.transcript, needs)
                derived[result.key] = _signals_diagnosis(result, row.signals)
        elif result.status == "scored":
            missing[result.model] += 1
        rows.append(row)

    failing = [r.key for r in results if is_failing(r, fail_threshold)]
    diagnosed = {k: diagnoses[k] for k in failing if k in diagnoses}
    source: Literal["diagnoses", "signals", "none"] = (
        "diagnoses" if diagnosed else "signals" if derived else "none"
    )
    modes = aggregate(failing, diagnosed if diagnosed else derived)

    grouped = by_model(results)
    totals = summarize(results, order)
    common = common_tasks(results) if len(order) > 1 else None
    paired = {
        m: grouped[m] if common is None else [r for r in grouped[m] if r.task_id in common] for m in order
    }
    models = [
        ModelRow(
            model=m,
            totals=totals[m],
            pass_rate=pass_rate_ci(paired[m]),
            coverage=coverage_ci(paired[m]),
            tools=aggregate_tool_metrics(metrics[m], missing[m]),
            coverages=[r.coverage for r in grouped[m] if r.status == "scored" and r.coverage is not None],
            repeats=repeat_stats(grouped[m]) if header.repeats > 1 else None,
            paired_tasks=None if common is None else len(common),
            pass_rate_all=None if common is None else pass_rate_ci(grouped[m]),
        )
        for m in order
    ]
    several_judges = len(header.judges) > 1
    return ReportData(
        header=header,
        models=models,
        breakdowns={by: {m: breakdown(grouped[m], by) for m in order} for by in BREAKDOWNS},
        judge_rates=cross_judge_rates(results) if several_judges else {},
        agreement=claim_agreement(results) if several_judges else [],
        failures=FailureModes(source=source, threshold=fail_threshold, report=modes, failing=len(failing)),
        rows=rows,
        matrix=task_matrix(results, order, header.threshold),
        comparisons=comparisons(grouped, order) if len(order) > 1 else [],
    )
