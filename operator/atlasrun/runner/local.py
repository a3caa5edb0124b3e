"""``atlas run``: plan, resume, execute and summarise a run on this machine."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atlasrun import __version__
from atlasrun.judge.base import JudgeInfo
from atlasrun.runner.engine import Engine, default_data_dir
from atlasrun.runner.fingerprint import check_resume, exclusive_lock, fingerprint, move_aside
from atlasrun.runner.interrupt import run_interruptibly
from atlasrun.runner.plan import Plan, plan_run
from atlasrun.runner.progress import Progress
from atlasrun.runner.record import RUN_FILE, RunRecord, read_record
from atlasrun.runspec.run import RunSpec, check_output_path
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.stats import INTERVAL_TEXT, model_summaries
from atlasrun.scoring.store import ResultsDir
from atlasrun.scoring.summary import SUMMARY_FILE, ExcludedTask, RunSummary
from atlasrun.servers.sandbox import Sandbox


@dataclass
class RunOutcome:
    out: Path
    plan: Plan
    results: list[TaskResult]
    summary: dict[str, Any]
    skipped: int  # items already scored by an earlier attempt (resume)
    moved_aside: Path | None = None  # --force-new: where the directory's earlier results went
    # results.jsonl lines not counted (damaged, tampered with, outside the run), as warning lines
    skipped_lines: list[str] = field(default_factory=list)


def output_dir(spec: RunSpec, out: str | None) -> Path:
    if out:
        return Path(check_output_path(out, "--out"))
    if spec.spec.output.dir:
        return spec.resolve(spec.spec.output.dir)
    return Path("runs") / spec.metadata.name


def run_local(
    spec: RunSpec,
    out: Path,
    data_dir: Path | None = None,
    progress: bool | Progress = True,
    sandbox: Sandbox | None = None,
    *,
    plan: Plan | None = None,
    force_new: bool = False,
) -> RunOutcome:
    """Run ``spec`` into ``out`` (resuming what it holds, when it holds the same run; ``force_new``
    moves a different run's results aside), holding the directory's lock throughout."""
    plan = plan or plan_run(spec)
    moved = None
    printed = fingerprint(spec)
    if (out / RUN_FILE).exists():
        record = read_record(out / RUN_FILE, RunRecord)
        # Only scored verdicts can mix; errors and exclusions are redone or rewritten anyway.
        has_results = any(r.status == "scored" for r in ResultsDir(out).load().values())
        if force_new and has_results:
            moved = move_aside(out)
        else:
            check_resume(out, spec, record.fingerprint if record else None, has_results)
            if record and record.fingerprint:  # models that ran before and not now stay recorded
                printed["models"] = {**record.fingerprint.get("models", {}), **printed["models"]}
    with exclusive_lock(out):
        outcome = _run_locked(spec, plan, out, data_dir, progress, sandbox, printed)
    outcome.moved_aside = moved
    return outcome


def _run_locked(
    spec: RunSpec,
    plan: Plan,
    out: Path,
    data_dir: Path | None,
    progress: bool | Progress,
    sandbox: Sandbox | None,
    printed: dict[str, Any],
) -> RunOutcome:
    if data_dir is None:
        data_dir = spec.resolve(spec.spec.data_dir) if spec.spec.data_dir else default_data_dir(out)
    engine = Engine(spec, plan, out, data_dir.resolve(), sandbox=sandbox)
    engine.manager.preflight(plan.servers_used())
    store = engine.store
    finished = store.load()
    items = engine.items(finished)
    covers = [
        (m.name, t.id, r)
        for m in spec.spec.models
        for t in plan.tasks + [e.task for e in plan.excluded]
        for r in range(spec.spec.repeats)
    ]
    store.write_record(RUN_FILE, _run_record(spec, plan, data_dir, engine, printed), covers=covers)
    for result in engine.excluded_results():
        if finished.get(result.key) != result:
            store.append(result)
    bar = progress if isinstance(progress, Progress) else Progress(len(items), enabled=progress)
    bar.start(len(items))
    engine.on_result = bar.update
    run_interruptibly(engine.run(items))
    keys = {
        (m.name, t.id, r)
        for r in range(spec.spec.repeats)
        for m in spec.spec.models
        for t in plan.tasks + [e.task for e in plan.excluded]
    }
    latest = store.load()
    results = [latest[k] for k in sorted(keys) if k in latest]
    # summary.json covers the whole directory (one run, the fingerprint says), like the report:
    # items an earlier invocation ran with other --task/--limit/--model filters count too.
    names = [m.name for m in spec.spec.models]
    names += sorted({k[0] for k in latest} - set(names))
    summary = write_summary(
        store,
        spec.metadata.name,
        [j.info for j in engine.judges],
        spec.spec.pass_threshold,
        results=[latest[k] for k in sorted(latest)],
        models=names,
        rejected_rows=[str(r) for r in plan.rejected],
    )
    planned = spec.spec.repeats * len(spec.spec.models) * len(plan.tasks)
    return RunOutcome(
        out, plan, results, summary, skipped=planned - len(items), skipped_lines=store.skipped_text()
    )


def write_summary(
    store: ResultsDir,
    run: str,
    judges: Sequence[JudgeInfo],
    threshold: float,
    *,
    results: list[TaskResult] | None = None,
    models: list[str] | None = None,
    rejected_rows: list[str] | None = None,
    excluded_tasks: list[ExcludedTask] | None = None,
    rescored_from: str | None = None,
) -> dict[str, Any]:
    """summary.json: per-model totals with 95% intervals (scoring.stats: Wilson, n = tasks), from the
    newest records. Returns it as plain data (the printed table reads that)."""
    if results is None:
        latest = store.load()
        results = [latest[k] for k in sorted(latest)]
    table = model_summaries(results, models)
    if excluded_tasks is None:
        excluded_tasks = list(
            {
                r.task_id: ExcludedTask(task=r.task_id, reason=r.reason)
                for r in results
                if r.status == "excluded"
            }.values()
        )
    summary = RunSummary(
        run=run,
        judge=judges[0] if judges else None,
        judges=list(judges),
        pass_threshold=threshold,
        models=table,
        rejected_rows=rejected_rows or [],
        excluded_tasks=excluded_tasks,
        rescored_from=rescored_from,
        skipped_lines=len(store.skipped),  # of the load that gave ``results`` (the caller's or ours)
    )
    store.write_record(SUMMARY_FILE, summary)
    return summary.model_dump(mode="json")


def _run_record(
    spec: RunSpec, plan: Plan, data_dir: Path, engine: Engine, printed: dict[str, Any]
) -> RunRecord:
    return RunRecord(
        atlasrun_version=__version__,
        started=dt.datetime.now(dt.UTC).isoformat(),
        spec=spec.model_dump(mode="json", by_alias=True),
        data_dir=str(data_dir),
        judge=engine.judge.info,
        servers=plan.enabled_servers,
        tasks=len(plan.tasks),
        excluded=[ExcludedTask(task=e.task.id, reason=e.reason) for e in plan.excluded],
        rejected=[str(r) for r in plan.rejected],
        hidden_tools=plan.dropped_tools,
        fingerprint=printed,
    )


def cost_text(row: dict[str, Any]) -> str:
    """A model's cost as ``$1.23``, or ``n/a`` when some call had no known price."""
    return f"${row['cost_usd']:.2f}" if row.get("cost_known", True) else "n/a"


def format_table(summary: dict[str, Any]) -> str:
    """The per-model table ``atlas run`` prints. ``tasks`` are distinct tasks; ``items`` (shown
    only when some model ran repeats), scored, passed, excl and err count task x repeat items.
    Intervals are printed as bounds: a Wilson interval is not symmetric around the rate."""
    rows = summary["models"]
    with_items = any(row.get("items", row["tasks"]) != row["tasks"] for row in rows.values())
    items_head = f" {'items':>5}" if with_items else ""
    header = (
        f"{'model':<28} {'tasks':>5}{items_head} {'scored':>6} {'passed':>6} {'pass rate [95% CI]':>20} "
        f"{'coverage [95% CI]':>20} "
        f"{'excl':>4} {'err':>4} {'calls/task':>10} {'tokens':>10} {'cost':>8}"
    )
    lines = [header, "-" * len(header)]

    def pct(value: float | None, ci: dict[str, float] | None = None) -> str:
        if value is None:
            return "-"
        return f"{100 * value:.1f}%" + (f" [{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]" if ci else "")

    for model, row in rows.items():
        calls = row["mean_tool_calls"]
        items = f" {row.get('items', row['tasks']):>5}" if with_items else ""
        lines.append(
            f"{model:<28} {row['tasks']:>5}{items} {row['scored']:>6} {row['passed']:>6} "
            f"{pct(row['pass_rate'], row.get('pass_rate_ci')):>20} "
            f"{pct(row['mean_coverage'], row.get('mean_coverage_ci')):>20} {row['excluded']:>4} "
            f"{row['errored']:>4} {('-' if calls is None else f'{calls:.1f}'):>10} {row['tokens']:>10,} "
            f"{cost_text(row):>8}"
        )
    if rows:
        lines.append(f"intervals: {INTERVAL_TEXT} (docs/statistics.md)")
    return "\n".join(lines)


def banner(spec: RunSpec, plan: Plan, out: Path) -> str:
    """The line ``atlas run`` prints before it starts: what runs, where results go, who judges."""
    body = spec.spec
    models, tasks, repeats = len(body.models), len(plan.tasks), body.repeats
    excluded = f" ({len(plan.excluded)} excluded)" if plan.excluded else ""
    url = body.servers.environment_url
    shared = (
        f"; servers: MCP-Atlas agent-environment at {url} (state shared by all tasks: no fresh state per task)"
        if url
        else ""
    )
    return (
        f"run {spec.metadata.name}: {tasks} task(s){excluded} x {models} model(s) "
        f"({', '.join(m.name for m in body.models)}) x {repeats} repeat(s) = {tasks * models * repeats} item(s); "
        f"judges: {', '.join(j.name for j in body.judges)}; parallelism {body.parallelism}; out: {out}{shared}"
    )
