"""``atlas rescore OUT --judge NAME``: judge a finished run's saved answers again, with no agent reruns.

Every (task, model, repeat) of OUT is read from its per-task JSON and written to a new
results directory (default ``OUT-rescored-<judge>``) with the same layout, so every other
command works on it:

* records with a task and a transcript go through the engine's own scoring path
  (``Engine._score``: ``judge_task`` with judges from ``make_judge``). Transcripts that
  never reached an answer (infrastructure or provider failure) come out as the same
  error as before; judge failures become ``judge failed on N/M claims`` errors, never 0.
* excluded tasks, and agent or server errors without a transcript, are copied unchanged
  (reason kept). A scored or judge-failed item whose transcript is gone (its per-task JSON
  deleted or unreadable) becomes an ``unjudged`` error: never its old verdict, so a rescored
  directory holds one judge's verdicts only.

Like ``atlas run``, it prints the errors by kind (with their most common reason) and an
``exit 3: ...`` line when it left items it could not judge.

No server is started and no model is called. Resumable like ``atlas run``: keys already
scored (or excluded) in the target are kept, errors are redone.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from atlasrun import __version__
from atlasrun.errors import EXIT_ITEM_ERRORS, EXIT_OK, InputError
from atlasrun.runner.engine import Engine, Item
from atlasrun.runner.interrupt import run_interruptibly
from atlasrun.runner.local import write_summary
from atlasrun.runner.plan import Plan
from atlasrun.runner.record import RUN_FILE, RescoreInfo, RunRecord, read_record
from atlasrun.runspec.run import JudgeSpec, ModelSpec, RunSpec
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.scoring.store import ResultsDir, printable, slug
from atlasrun.scoring.summary import SUMMARY_FILE, RunSummary
from atlasrun.servers.catalog import load_catalog
from atlasrun.tasks.files import read_json_mapping

RECORD = "rescore.json"
MAX_TASKS_IN_FLIGHT = 64  # tasks judged at once (each judge also caps its own concurrent calls)


def default_target(source: Path, judge: str) -> Path:
    return source.parent / f"{source.name}-rescored-{slug(judge)}"


def rescore_spec(
    source: Path, judges: list[JudgeSpec], threshold: float | None, models: list[str]
) -> RunSpec:
    """The source run's spec (limits, models) with the new judges; a minimal spec when it has none."""
    run_record = read_record(source / RUN_FILE, RunRecord)
    data = run_record.spec if run_record else None
    try:
        RunSpec.model_validate(data)
    except ValidationError:
        data = {"metadata": {"name": source.name}, "spec": {"tasks": {"path": "unused"}, "models": []}}
    assert isinstance(data, dict)
    body = data["spec"]
    known = {m.get("name") for m in body["models"]}
    body["models"] = body["models"] + [{"name": m} for m in models if m not in known]
    body["judges"] = [j.model_dump(by_alias=True, exclude_none=True) for j in judges]
    if threshold is not None:
        body["passThreshold"] = threshold
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise InputError.from_validation(exc, where="rescore options") from exc


def _check_target(target: Path, record: dict[str, Any]) -> None:
    previous = read_json_mapping(target / RECORD)
    if previous and previous != record:
        raise InputError(
            f"already holds a rescore of {previous.get('source')} with judge(s) "
            f"{', '.join(previous.get('judges') or [])} (threshold {previous.get('pass_threshold')}); "
            "choose another --out",
            where=str(target),
        )
    if not previous and (target / "results.jsonl").exists():
        raise InputError("holds results that are not a rescore; choose another --out", where=str(target))


async def _rescore(engine: Engine, source: ResultsDir, todo: list[TaskResult]) -> list[TaskResult]:
    slots = asyncio.Semaphore(MAX_TASKS_IN_FLIGHT)
    lock = asyncio.Lock()

    async def one(line: TaskResult) -> TaskResult:
        async with slots:
            full = await asyncio.to_thread(source.load_full, line)
            if line.status == "excluded" or (
                (full is None or full.transcript is None) and line.error_kind not in NEEDS_JUDGING
            ):
                result = full or line  # nothing to judge (an agent or server error): copied as it was
            elif full is None or full.transcript is None:
                result = unjudged(line, source)
            elif full.task is None:
                result = full.as_error(ErrorKind.INPUT, "rescore: the per-task record has no task (claims)")
            else:
                model = next(
                    (m for m in engine.body.models if m.name == full.model), ModelSpec(name=full.model)
                )
                result = await engine.score_transcript(Item(full.task, model, full.repeat), full.transcript)
        async with lock:
            await asyncio.to_thread(engine.store.append, result)
        return result

    return list(await asyncio.gather(*(one(line) for line in todo)))


# What a rescore judges: scored answers, and answers the judge failed on or never saw. Any other
# error (provider, server, harness) never reached an answer and is copied as it was.
NEEDS_JUDGING = (None, ErrorKind.JUDGE, ErrorKind.UNJUDGED)
# Error kinds a rescore itself produces (the exit code counts these; copied ones were the source's).
RESCORE_ERRORS = (ErrorKind.JUDGE, ErrorKind.UNJUDGED, ErrorKind.INPUT)


def unjudged(line: TaskResult, source: ResultsDir) -> TaskResult:
    """An item whose saved answer is gone: not judged by the new judge, never its old verdict."""
    where = source.task_path(line).relative_to(source.root)
    reason = f"rescore: no transcript ({where} is missing or unreadable): not judged by the new judge"
    return line.as_error(ErrorKind.UNJUDGED, reason).model_copy(
        update={"claims": [], "judge": None, "secondary": []}
    )


def rescore(
    source_dir: Path,
    judges: list[JudgeSpec],
    target: Path | None = None,
    threshold: float | None = None,
    check: bool = False,
) -> tuple[Path, dict[str, Any], int]:
    """Rescore ``source_dir`` into ``target``; returns (target, summary, records kept from a previous attempt)."""
    source = ResultsDir(source_dir)
    latest = source.load()
    for warning in source.skipped_text():
        print(warning, file=sys.stderr)
    if not latest:
        raise InputError("no results.jsonl with results: not a results directory", where=str(source_dir))
    target = target or default_target(source_dir, judges[0].name)
    if target.resolve() == source_dir.resolve():
        raise InputError("the rescored results must go to a new directory", where=str(target))
    spec = rescore_spec(source_dir, judges, threshold, sorted({k[0] for k in latest}))
    record = {
        "source": str(source_dir.resolve()),
        "judges": [j.name for j in judges],
        "pass_threshold": spec.spec.pass_threshold,
    }
    _check_target(target, record)
    if check:  # every LLM judge answers before any record is judged
        from atlasrun.runner.preflight import preflight

        preflight(spec, models=False)
    target.mkdir(parents=True, exist_ok=True)
    engine = Engine(spec, Plan(catalog=load_catalog(), enabled_servers=[]), target, target / "data")
    store = engine.store
    store.write_json(RECORD, record)
    done = store.load()
    todo = [line for key, line in sorted(latest.items()) if key not in done or done[key].status == "error"]
    run_interruptibly(_rescore(engine, source, todo))
    run_record = read_record(source_dir / RUN_FILE, RunRecord) or RunRecord(atlasrun_version=__version__)
    run_record.spec = spec.model_dump(mode="json", by_alias=True)
    run_record.judge = engine.judge.info
    run_record.rescore = RescoreInfo.model_validate(record)
    store.write_record(RUN_FILE, run_record, covers=latest)
    old = read_record(source_dir / SUMMARY_FILE, RunSummary)
    summary = write_summary(
        store,
        old.run if old else source_dir.name,
        [j.info for j in engine.judges],
        spec.spec.pass_threshold,
        rejected_rows=old.rejected_rows if old else [],
        rescored_from=str(source_dir.resolve()),
    )
    return target, summary, len(latest) - len(todo)


def cmd_rescore(args: argparse.Namespace) -> int:
    from atlasrun.runner.local import format_table

    judges = [
        JudgeSpec(name=j, api_base=args.judge_api_base, api_key_env=args.judge_api_key_env)
        for j in args.judge
    ]
    target, summary, kept = rescore(
        Path(args.out_dir),
        judges,
        Path(args.out) if args.out else None,
        args.threshold,
        check=not args.no_preflight,
    )
    if kept:
        print(f"resumed: {kept} record(s) kept from {target / 'results.jsonl'}", file=sys.stderr)
    print(format_table(summary))
    print(f"\nresults: {target / 'results.jsonl'}\nsummary: {target / 'summary.json'}")
    code, lines = rescore_verdict(list(ResultsDir(target).load().values()))
    for line in lines:
        print(line, file=sys.stderr)
    return code


def rescore_verdict(results: list[TaskResult]) -> tuple[int, list[str]]:
    """(exit code, lines to print), like ``atlas run``'s: errors by kind with their most common
    reason, then ``exit 3`` when this rescore left items it could not judge. Errors copied from the
    source run (provider, server) were not this command's: listed, they do not change the code."""
    reasons: dict[ErrorKind, Counter[str]] = {}
    for result in results:
        if result.status == "error":
            kind = result.error_kind or ErrorKind.OTHER
            reasons.setdefault(kind, Counter())[result.reason or ""] += 1
    if not reasons:
        return EXIT_OK, []
    counts = Counter({kind: sum(found.values()) for kind, found in reasons.items()})
    lines = [
        f"errors: {kind} {count}"
        + ("" if kind in RESCORE_ERRORS else " (copied from the source run)")
        + f": {printable(reasons[kind].most_common(1)[0][0])}"
        for kind, count in counts.most_common()
    ]
    ours = {kind: n for kind, n in counts.items() if kind in RESCORE_ERRORS}
    if not ours:
        return EXIT_OK, lines
    listed = ", ".join(f"{kind} {n}" for kind, n in ours.items())
    lines.append(
        f"exit {EXIT_ITEM_ERRORS}: item(s) this rescore could not judge: {listed} (see the errors above)"
    )
    return EXIT_ITEM_ERRORS, lines


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rescore", help="judge a finished run's saved answers again (no agent reruns)"
    )
    parser.add_argument("out_dir", metavar="OUT", help="results directory of a finished run")
    parser.add_argument(
        "--judge",
        action="append",
        required=True,
        help="judge (repeatable; first is primary; 'deterministic' built in)",
    )
    parser.add_argument("--judge-api-base", help="OpenAI-compatible endpoint for --judge")
    parser.add_argument("--judge-api-key-env", metavar="VAR", help="env var holding the API key for --judge")
    parser.add_argument("--threshold", type=float, help="pass threshold (default: the source run's)")
    parser.add_argument("--out", help="new results directory (default: OUT-rescored-<judge>)")
    parser.add_argument(
        "--no-preflight", action="store_true", help="skip the check that every judge answers one call first"
    )
    parser.epilog = (
        "example: atlas rescore runs/demo --judge openai/gpt-4o --judge-api-key-env OPENAI_API_KEY"
    )
    parser.set_defaults(func=cmd_rescore)
