"""``atlas diagnose OUT``: classify why each failed task failed (the 11-mode taxonomy, Appendix E).

Every scored result below the threshold is diagnosed from its per-task record
(task, claim verdicts, transcript). Diagnoses are appended to
``OUT/diagnoses.jsonl`` as they finish; a rerun skips keys already diagnosed by
the same judge at the same coverage (``--force`` redoes them); failed
diagnoses are always retried. The per-model table goes to stdout and
``OUT/diagnosis_summary.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlasrun.diagnostics.aggregate import (
    DiagnosisReport,
    aggregate,
    format_report,
    is_failing,
)
from atlasrun.diagnostics.model import DETERMINISTIC, Diagnosis
from atlasrun.diagnostics.store import SUMMARY_FILE, DiagnosesLog
from atlasrun.errors import InputError
from atlasrun.redact import declare
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.store import ResultsDir, printable

if (
    TYPE_CHECKING
):  # the diagnosers import litellm: loaded only when the command runs (atlas imports every command)
    from atlasrun.diagnostics.judge import Diagnoser


@dataclass
class DiagnoseOutcome:
    report: DiagnosisReport
    failing: int = 0
    skipped: int = 0  # already diagnosed
    done: list[Diagnosis] = field(default_factory=list)  # diagnosed (or failed) in this run
    missing: list[str] = field(default_factory=list)  # failing results that could not be diagnosed, with why
    skipped_lines: list[str] = field(default_factory=list)  # results.jsonl lines not counted (warnings)


def _current(previous: Diagnosis | None, result: TaskResult, judge: str) -> bool:
    return (
        previous is not None
        and previous.status == "diagnosed"
        and previous.judge.name == judge
        and previous.coverage == result.coverage
    )


async def diagnose_dir(
    out: Path, diagnoser: Diagnoser, *, threshold: float = 0.75, concurrency: int = 8, force: bool = False
) -> DiagnoseOutcome:
    """Diagnose the failing results in ``out``; returns the per-model report over all of them."""
    results, log = ResultsDir(out), DiagnosesLog(out)
    failing = sorted((r for r in results.load().values() if is_failing(r, threshold)), key=lambda r: r.key)
    existing = log.load()
    todo = [r for r in failing if force or not _current(existing.get(r.key), r, diagnoser.info.name)]
    outcome = DiagnoseOutcome(
        report=DiagnosisReport(),
        failing=len(failing),
        skipped=len(failing) - len(todo),
        skipped_lines=results.skipped_text(),
    )
    slots = asyncio.Semaphore(concurrency)

    async def one(result: TaskResult) -> None:
        where = f"{printable(result.model, 80)} / {printable(result.task_id, 80)} (repeat {result.repeat})"
        async with slots:
            full = await asyncio.to_thread(results.load_full, result)
            if full is None:
                outcome.missing.append(
                    f"{where}: per-task record {results.task_path(result)} missing or unreadable"
                )
                return
            try:
                diagnosis = await diagnoser.diagnose(full)
            except ValueError as exc:
                outcome.missing.append(f"{where}: {exc}")
                return
        log.append(diagnosis)
        outcome.done.append(diagnosis)

    await asyncio.gather(*(one(r) for r in todo))
    log.compact()
    outcome.report = aggregate([r.key for r in failing], log.load())
    return outcome


def cmd_diagnose(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if not out.exists():
        raise InputError("results directory not found", where=str(out))
    if not out.is_dir():
        raise InputError("not a directory: give the results directory of `atlas run`", where=str(out))
    if not ResultsDir(out).jsonl.exists():
        raise InputError("no results.jsonl here: not a results directory of `atlas run`", where=str(out))
    if not 0 < args.threshold <= 1:
        raise InputError(f"must be in (0, 1], got {args.threshold}", where="--threshold")
    if args.concurrency < 1:
        raise InputError(f"must be at least 1, got {args.concurrency}", where="--concurrency")
    if args.judge_api_key_env and not os.environ.get(args.judge_api_key_env):
        raise InputError(
            f"environment variable {args.judge_api_key_env} is not set", where="--judge-api-key-env"
        )
    from atlasrun.diagnostics.judge import make_diagnoser

    declare([args.judge_api_key_env])

    diagnoser = make_diagnoser(
        args.judge,
        args.judge_api_base,
        args.judge_api_key_env,
        retries=args.retries,
        temperature=args.judge_temperature,
    )
    outcome = asyncio.run(
        diagnose_dir(out, diagnoser, threshold=args.threshold, concurrency=args.concurrency, force=args.force)
    )
    for line in outcome.skipped_lines:
        print(line, file=sys.stderr)
    for message in outcome.missing:
        print(f"not diagnosed: {message}", file=sys.stderr)
    failed = sum(1 for d in outcome.done if d.status == "failed")
    print(
        f"{outcome.failing} failing task(s) below coverage {args.threshold:g}: {len(outcome.done) - failed} "
        f"diagnosed now, {failed} failed diagnosis, {outcome.skipped} already diagnosed, "
        f"{len(outcome.missing)} without a record",
        file=sys.stderr,
    )
    summary: dict[str, Any] = {
        "threshold": args.threshold,
        "judge": diagnoser.info.model_dump(),
        **outcome.report.model_dump(),
    }
    ResultsDir(out).write_json(SUMMARY_FILE, summary)
    if args.json:  # stdout holds the summary alone, as written to diagnosis_summary.json
        print(json.dumps(summary, indent=1))
        return 0
    print(format_report(outcome.report))
    print(f"\ndiagnoses: {out / 'diagnoses.jsonl'}\nsummary: {out / SUMMARY_FILE}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diagnose", help="classify why failed tasks failed (11-mode failure taxonomy)"
    )
    parser.add_argument("out", metavar="OUT", help="results directory of `atlas run`")
    parser.add_argument(
        "--judge",
        default=DETERMINISTIC,
        help="litellm model id of the diagnostic judge, or 'deterministic' "
        "(trace signals only, no API key; the default)",
    )
    parser.add_argument("--judge-api-base", help="OpenAI-compatible endpoint for --judge")
    parser.add_argument("--judge-api-key-env", help="env var holding the API key for --judge")
    parser.add_argument(
        "--judge-temperature",
        type=float,
        default=0.0,
        help="sampling temperature of an LLM --judge (default 0)",
    )
    parser.add_argument(
        "--threshold", type=float, default=0.75, help="diagnose tasks with coverage below this"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="diagnoses in flight at once")
    parser.add_argument(
        "--retries", type=int, default=3, help="judge retries (provider errors and unusable output)"
    )
    parser.add_argument("--force", action="store_true", help="rediagnose tasks that already have a diagnosis")
    parser.add_argument(
        "--json", action="store_true", help="print the diagnosis summary as JSON on stdout (notes on stderr)"
    )
    parser.set_defaults(func=cmd_diagnose)
