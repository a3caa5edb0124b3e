"""``atlas import-atlas`` / ``atlas export-atlas``: results of the MCP-Atlas harness in and out.

What is accepted and written is documented in ``atlasrun.interop.mcp_atlas``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from atlasrun import __version__
from atlasrun.errors import ErrorKind, InputError
from atlasrun.interop.mcp_atlas import (
    IMPORTED_VERSION,
    export_rows,
    import_results,
    write_csv,
)
from atlasrun.judge.base import JudgeInfo
from atlasrun.runner.local import write_summary
from atlasrun.runner.record import RUN_FILE, ImportInfo, RunRecord
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.store import ResultsDir, printable
from atlasrun.tasks.loader import load_tasks


def cmd_import(args: argparse.Namespace) -> int:
    from atlasrun.runner.local import format_table

    results_path = Path(args.results)
    if not results_path.exists():
        raise InputError("results file not found", where=str(results_path))
    if not 0 < args.threshold <= 1:
        raise InputError(f"--threshold must be in (0, 1], got {args.threshold}")
    # Without --tasks, the tasks come from the results file itself (the harness copies TASK, PROMPT,
    # ENABLED_TOOLS, GTFA_CLAIMS and TRAJECTORY into every completion row).
    loaded = load_tasks(Path(args.tasks) if args.tasks else results_path)
    if not loaded.tasks:
        raise InputError(
            "no loadable tasks: give the MCP-Atlas tasks file with --tasks"
            + ("" if args.tasks else " (the results file has no task columns)"),
            where=args.tasks or str(results_path),
        )
    if args.tasks:
        for rejection in loaded.rejected:
            print(f"warning: tasks file: {rejection}", file=sys.stderr)
    imported = import_results(
        results_path,
        {t.id: t for t in loaded.tasks},
        args.model,
        scores=[Path(p) for p in args.scores or []],
        threshold=args.threshold,
        judge_model=args.judge_model,
    )
    out = Path(args.out)
    store = ResultsDir(out)
    out.mkdir(parents=True, exist_ok=True)
    for result in imported.results:
        store.append(result)
    judge = next((r.judge for r in imported.results if r.judge), None)
    record = RunRecord(
        atlasrun_version=__version__,
        judge=judge,
        imported=ImportInfo(
            imported_from=str(results_path.resolve()),
            tasks=str(Path(args.tasks).resolve()) if args.tasks else None,
            scores=[str(Path(p).resolve()) for p in args.scores or []],
            model=args.model,
            pass_threshold=args.threshold,
        ),
    )
    store.write_record(RUN_FILE, record, covers=[r.key for r in imported.results])
    summary = write_summary(
        store,
        out.name,
        [judge] if judge else [],
        args.threshold,
        rejected_rows=[str(r) for r in imported.rejected],
    )
    for rejection in imported.rejected:
        print(f"rejected: {rejection}", file=sys.stderr)
    print(format_table(summary))
    print(f"\n{import_summary(imported.results, len(imported.rejected), out)}")
    print(f"results: {out / 'results.jsonl'}")
    return 1 if imported.rejected else 0


def import_summary(results: list[TaskResult], rejected: int, out: Path) -> str:
    """What the import holds, truthfully: scores and who produced them, unscored rows, errors."""
    scored = [r for r in results if r.status == "scored"]
    unscored = sum(1 for r in results if r.error_kind == ErrorKind.UNJUDGED)
    errors = sum(1 for r in results if r.status == "error") - unscored
    producers = Counter(_producer(r.judge) for r in scored if r.judge)
    parts = [f"imported {len(results)} row(s), rejected {rejected}"]
    if scored:
        parts.append(
            f"{len(scored)} with imported scores (by {', '.join(f'{who}: {n}' for who, n in producers.items())})"
        )
    if unscored:
        parts.append(f"{unscored} unscored (judge them: atlas rescore {out} --judge NAME)")
    if errors:
        parts.append(f"{errors} error(s) (see the table)")
    return "; ".join(parts)


def _producer(judge: JudgeInfo) -> str:
    if judge.version == IMPORTED_VERSION:
        return f"{printable(judge.name, 80)}, from the file's judge column"
    return f"the MCP-Atlas scorer, judge model {printable(judge.model or 'not given (--judge-model)', 80)}"


def cmd_export(args: argparse.Namespace) -> int:
    store = ResultsDir(Path(args.out_dir))
    latest = store.load()
    for warning in store.skipped_text():
        print(warning, file=sys.stderr)
    if not latest:
        raise InputError("no results.jsonl with results: not a results directory", where=args.out_dir)
    models = sorted({model for model, _, _ in latest})
    model = args.model or (models[0] if len(models) == 1 else None)
    if model not in models:
        raise InputError(f"holds model(s) {', '.join(models)}; choose one with --model", where=args.out_dir)
    results = [store.load_full(r) or r for key, r in sorted(latest.items()) if key[0] == model]
    columns, rows, missing = export_rows(results)
    write_csv(Path(args.out), columns, rows)
    for result in missing:
        where = store.task_path(result).relative_to(store.root)
        print(
            f"warning: left out task {printable(result.task_id, 80)} repeat {result.repeat}: "
            f"no transcript ({where})",
            file=sys.stderr,
        )
    print(
        f"exported {len(rows)} row(s) of model {model} to {args.out}"
        + (f"; {len(missing)} left out without a transcript" if missing else "")
    )
    return 0


def register(subparsers: Any) -> None:
    imp = subparsers.add_parser(
        "import-atlas", help="import results of the MCP-Atlas harness as a results dir"
    )
    imp.add_argument(
        "results",
        metavar="RESULTS.csv",
        help="completion results (task_id/TASK, raw_conversation_history, response); may be scored",
    )
    imp.add_argument(
        "--tasks",
        help="MCP-Atlas tasks file (CSV/JSONL/Parquet) with the claims "
        "(default: the task columns of RESULTS.csv)",
    )
    imp.add_argument("--model", required=True, help="the model name to record the results under")
    imp.add_argument("--out", required=True, help="results directory to write")
    imp.add_argument("--scores", action="append", help="scored CSV of the MCP-Atlas scorer (repeatable)")
    imp.add_argument("--threshold", type=float, default=0.75, help="pass threshold for imported scores")
    imp.add_argument("--judge-model", help="the judge model that produced the imported scores (recorded)")
    imp.set_defaults(func=cmd_import)

    exp = subparsers.add_parser(
        "export-atlas", help="export a results dir in the MCP-Atlas harness's columns"
    )
    exp.add_argument("out_dir", metavar="OUT", help="results directory")
    exp.add_argument("--out", required=True, help="CSV file to write")
    exp.add_argument("--model", help="which model (needed when OUT holds several)")
    exp.set_defaults(func=cmd_export)
