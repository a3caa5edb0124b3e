"""``atlas audit TASKS``: is every task still solvable, and still true, on the live servers?

Each task's reference trajectory is replayed by the engine (built-in ``replay`` agent,
``deterministic`` judge, one fresh run), then each task gets every flag that applies,
most severe first (tasks without a reference trajectory are ``skipped``):

* ``unsolvable`` - a reference tool is not offered any more, the servers failed, a call was
  not replayed, or a replayed call errored where the recorded reference did not;
* ``drifted`` - a recorded reference output (MCP-Atlas ``TRAJECTORY`` tool messages; native
  ``output``) differs from the live output, whitespace normalised;
* ``unsupported_claims`` - a claim whose key facts are gone from the live tool outputs: the
  deterministic judge labels it ``not_fulfilled`` against the outputs joined together;
* otherwise ``ok``. Tasks needing servers that are not enabled are ``skipped`` (not flagged).

Exit status 1 when any task is flagged or any task row was rejected.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from atlasrun.agent.transcript import CallRecord, Transcript
from atlasrun.flags import CATALOG_HELP, UNSAFE_FLAG, UNSAFE_HELP
from atlasrun.judge.deterministic import DeterministicJudge, key_facts, ungrounded
from atlasrun.runner.engine import DETERMINISTIC, REPLAY, Engine
from atlasrun.runner.flags_check import check_data_dir, check_flag, check_output_dir
from atlasrun.runner.interrupt import run_interruptibly
from atlasrun.runner.plan import Plan, plan_run
from atlasrun.runspec.run import RunSpec, RunSpecBody
from atlasrun.scoring.result import TaskResult
from atlasrun.servers.catalog import is_builtin
from atlasrun.servers.sandbox import Sandbox
from atlasrun.tasks.files import resolve_user_path
from atlasrun.tasks.hub import is_hub_source
from atlasrun.tasks.model import RefCall, Task

FLAGS = ("unsolvable", "drifted", "unsupported_claims")  # most severe first
NO_OUTPUT_CAP = 1_000_000_000  # live outputs are compared in full


@dataclass
class AuditRow:
    task: str
    status: str = "ok"  # ok | skipped | one of FLAGS (the most severe)
    flags: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    calls: int = 0  # reference calls replayed

    def flag(self, name: str, detail: str) -> None:
        if name not in self.flags:
            self.flags.append(name)
            self.flags.sort(key=FLAGS.index)
            self.status = self.flags[0]
        self.details.append(f"{name}: {detail}")


def normalise(text: str) -> str:
    return " ".join(text.split())


def _short(text: str, limit: int = 120) -> str:
    text = normalise(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _difference(recorded: str, live: str, context: int = 30) -> str:
    """Where two outputs first differ (whitespace normalised), with a little context."""
    a, b = normalise(recorded), normalise(live)
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, at - context)
    return (
        f"at character {at} recorded {'...' * (start > 0)}{a[start : at + context]!r}, "
        f"live {'...' * (start > 0)}{b[start : at + context]!r}"
    )


def replayed_calls(task: Task, transcript: Transcript) -> list[tuple[RefCall, CallRecord | None]]:
    """Each reference call with the live call that replayed it (None if it was not replayed).

    The replay agent writes one assistant message per reference turn with calls, its tool calls
    in reference order, so ids in message order line up with ``task.reference_calls()``.
    """
    by_id: dict[str, list[CallRecord]] = defaultdict(list)
    for record in transcript.calls:
        by_id[record.id].append(record)
    ordered = [
        str(tc.get("id"))
        for m in transcript.messages
        if m.get("role") == "assistant"
        for tc in (m.get("tool_calls") or [])
    ]
    live = [by_id[i].pop(0) if by_id.get(i) else None for i in ordered]
    refs = task.reference_calls()
    return list(zip(refs, live + [None] * (len(refs) - len(live)), strict=False))


def audit_result(task: Task, result: TaskResult, judge: DeterministicJudge) -> AuditRow:
    row = AuditRow(task.id)
    if not task.reference_calls():
        return AuditRow(task.id, status="skipped", details=["no reference trajectory to replay"])
    if result.status == "excluded" or result.transcript is None:
        row.flag("unsolvable", result.reason or "not replayed")
        return row
    for error in result.transcript.infra_errors:
        row.flag("unsolvable", f"server failure: {error}")
    outputs = []
    for ref, live in replayed_calls(task, result.transcript):
        if live is None:
            row.flag("unsolvable", f"{ref.name} was not replayed")
            continue
        row.calls += 1
        if live.is_error:
            if not ref.is_error:
                row.flag(
                    "unsolvable", f"{ref.name} {json.dumps(ref.arguments)} failed: {_short(live.result)}"
                )
            continue
        outputs.append(live.result)
        if ref.output is not None and normalise(ref.output) != normalise(live.result):
            row.flag(
                "drifted", f"{ref.name} {json.dumps(ref.arguments)}: {_difference(ref.output, live.result)}"
            )
    live_text = "\n\n".join(outputs)
    # Tool outputs are data, not an answer (lists of values the judge rightly rejects as number
    # dumps), so a claim is checked fact by fact (judge.deterministic.ungrounded).
    for claim in task.claims:
        absent = ungrounded(claim, live_text)
        if absent:
            row.flag("unsupported_claims", f"{claim!r} (not in the tool outputs: {', '.join(absent[:4])})")
        elif (
            key_facts(claim, live_text) == ([], [])
            and judge.judge_sync(claim, live_text).label == "not_fulfilled"
        ):
            row.flag("unsupported_claims", f"{claim!r} (its wording is not in the tool outputs)")
    return row


def with_live_outputs(task: Task, transcript: Transcript | None) -> Task:
    """The task with each reference call's output set to what it returned live (errors left as recorded)."""
    recorded = task.model_copy(deep=True)
    if transcript is not None:
        for ref, live in replayed_calls(recorded, transcript):
            if live is not None and not live.is_error:
                ref.output, ref.is_error = live.result, False
    return recorded


def audit_spec(
    tasks: Path | str, enabled: list[str] | None, parallelism: int, catalog: str | None = None
) -> RunSpec:
    """``tasks``: a task file, or an ``hf://`` dataset source (text); ``catalog``: a built-in
    catalog's name or a catalog file."""
    body: dict[str, Any] = {
        "tasks": {"dataset": tasks} if isinstance(tasks, str) else {"path": str(tasks.resolve())},
        "models": [{"name": REPLAY}],
        "judges": [{"name": DETERMINISTIC}],
        "parallelism": parallelism,
        "limits": {"toolOutputChars": NO_OUTPUT_CAP},
    }
    servers: dict[str, Any] = {}
    if enabled is not None:
        servers["enabled"] = enabled
    if catalog:
        servers["catalog"] = catalog if is_builtin(catalog) else str(resolve_user_path(catalog, "catalog"))
    if servers:
        body["servers"] = servers
    return RunSpec.model_validate({"metadata": {"name": "audit"}, "spec": body})


def run_audit(
    spec: RunSpec, out: Path, data_dir: Path, record: Path | None = None, sandbox: Sandbox | None = None
) -> tuple[Plan, list[AuditRow]]:
    plan = plan_run(spec)
    out.mkdir(parents=True, exist_ok=True)
    results: list[TaskResult] = []
    engine = Engine(
        spec,
        plan,
        out,
        data_dir.resolve(),
        on_result=results.append,
        sandbox=sandbox,
        replay_needs_answer=False,
    )
    engine.manager.preflight(plan.servers_used())
    run_interruptibly(engine.run(engine.items({})))
    judge = DeterministicJudge()
    by_id = {r.task_id: r for r in results}
    rows = [audit_result(task, by_id[task.id], judge) for task in plan.tasks]
    rows += [AuditRow(e.task.id, status="skipped", details=[e.reason]) for e in plan.excluded]
    rows.sort(key=lambda r: r.task)
    if record is not None:
        recorded = [with_live_outputs(t, by_id[t.id].transcript) for t in plan.tasks] + [
            e.task for e in plan.excluded
        ]
        data = [t.model_dump(mode="json", exclude={"source"}, exclude_defaults=True) for t in recorded]
        record.write_text(
            yaml.safe_dump({"tasks": data}, sort_keys=False, allow_unicode=True), encoding="utf-8"
        )
    return plan, rows


def format_rows(rows: list[AuditRow]) -> str:
    width = max([len(r.task) for r in rows] + [4])
    lines = [f"{'task':<{width}}  {'status':<18}  {'calls':>5}  detail", "-" * (width + 40)]
    for row in rows:
        detail = row.details[0] if row.details else ""
        more = f" (+{len(row.details) - 1} more)" if len(row.details) > 1 else ""
        lines.append(f"{row.task:<{width}}  {row.status:<18}  {row.calls:>5}  {_short(detail, 100)}{more}")
    counts = Counter(r.status for r in rows)
    flagged = sum(counts[f] for f in FLAGS)
    lines.append(
        f"\n{len(rows)} task(s): {counts['ok']} ok, {flagged} flagged ("
        + ", ".join(f"{counts[f]} {f}" for f in FLAGS)
        + f"), {counts['skipped']} skipped"
    )
    return "\n".join(lines)


def cmd_audit(args: argparse.Namespace) -> int:
    enabled = (
        [s for item in args.servers_enabled for s in item.split(",") if s] if args.servers_enabled else None
    )
    tasks = args.tasks if is_hub_source(args.tasks) else Path(args.tasks)
    check_flag("--parallelism", args.parallelism, RunSpecBody, "parallelism")
    if args.data_dir:
        check_data_dir(Path(args.data_dir), "--data-dir")
    if args.out:
        check_output_dir(Path(args.out))
    spec = audit_spec(tasks, enabled, args.parallelism, args.catalog)
    with tempfile.TemporaryDirectory(prefix="atlas-audit-") as scratch:
        out = Path(args.out) if args.out else Path(scratch)
        if args.data_dir:
            data_dir = Path(args.data_dir)
        else:
            data_dir = out / "data"
            data_dir.mkdir(parents=True, exist_ok=True)
            print(f"note: no --data-dir: servers see an empty data root ({data_dir})", file=sys.stderr)
        record = Path(args.record) if args.record else None
        plan, rows = run_audit(spec, out, data_dir, record, Sandbox(allow_host_exec=args.unsafe_host_exec))
        report = {"tasks": [asdict(r) for r in rows], "rejected_rows": [str(r) for r in plan.rejected]}
        if args.out:
            (out / "audit.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    for rejection in plan.rejected:
        print(f"rejected: {rejection}", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else format_rows(rows))
    return 1 if plan.rejected or any(r.flags for r in rows) else 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit", help="replay every task's reference on the live servers; flag drift"
    )
    parser.add_argument(
        "tasks",
        metavar="TASKS",
        help="task file (MCP-Atlas CSV/JSONL/Parquet or native YAML/JSON) or hf://OWNER/NAME[@REVISION]",
    )
    parser.add_argument("--data-dir", help="the data root the servers see (shown to the model as /data)")
    parser.add_argument("--catalog", help=CATALOG_HELP)
    parser.add_argument(
        "--servers-enabled",
        nargs="+",
        metavar="SERVER",
        help="only these servers (space or comma separated); tasks needing others are skipped",
    )
    parser.add_argument("--out", help="keep the replay results (results dir layout) and audit.json here")
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="also write the tasks (native YAML) with the live outputs "
        "recorded: a baseline that later audits check for drift",
    )
    parser.add_argument("--parallelism", type=int, default=8, help="tasks replayed at once (default 8)")
    parser.add_argument("--json", action="store_true", help="print the audit as JSON")
    parser.add_argument(UNSAFE_FLAG, action="store_true", help=UNSAFE_HELP)
    parser.set_defaults(func=cmd_audit)
