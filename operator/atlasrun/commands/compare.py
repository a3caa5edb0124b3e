"""``atlas compare OUT_A OUT_B``: two models, paired on the tasks both scored.

OUT_A and OUT_B are results directories; pass the same directory twice to compare two of its
models. Prints the paired count and the tasks dropped because only one side scored them (and
why), pass rates, the A - B deltas with paired-bootstrap 95% CIs, and McNemar's exact test.
Two runs scored at different pass thresholds, by different judges or on different task content
are refused (exit 2) unless ``--allow-different`` is given; then the differences are printed first.
With ``--fail-on-regression`` it exits EXIT_REGRESSION when B is significantly worse than A
(``regression``), for regression gates in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from atlasrun.errors import EXIT_OK, EXIT_REGRESSION, InputError
from atlasrun.judge.base import JudgeInfo
from atlasrun.runner.record import RUN_FILE, RunRecord, read_record
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.stats import (
    PairedComparison,
    by_model,
    count_dropped,
    dropped_tasks,
    paired_comparison,
    paired_tasks,
    scored,
)
from atlasrun.scoring.store import ResultsDir
from atlasrun.scoring.summary import SUMMARY_FILE, RunSummary

DIFFERENT_TASKS_LISTED = 5  # task ids named in the message; the count covers them all


def _load(path: str) -> dict[str, list[TaskResult]]:
    root = Path(path)
    if not root.is_dir():
        raise InputError("results directory not found", where=path)
    store = ResultsDir(root)
    results = store.load()
    for warning in store.skipped_text():
        print(warning, file=sys.stderr)
    if not results:
        raise InputError("no results (results.jsonl missing or empty)", where=path)
    return by_model(results.values())


def _pick(
    models: dict[str, list[TaskResult]], wanted: str | None, where: str, flag: str, other: str | None = None
) -> str:
    names = sorted(models)
    if wanted is not None:
        if wanted not in models:
            raise InputError(f"unknown model {wanted!r}; models here: {', '.join(names)}", where=where)
        return wanted
    candidates = [n for n in names if n != other]
    if not candidates:
        raise InputError(f"only model {other!r} here; nothing to compare it with", where=where)
    if len(candidates) != 1:
        raise InputError(
            f"{len(candidates)} model(s) to choose from ({', '.join(candidates) or 'none'}); pass {flag}",
            where=where,
        )
    return candidates[0]


def _threshold(root: Path) -> float | None:
    """The pass threshold the directory's verdicts were scored at (summary.json, else run.json)."""
    summary = read_record(root / SUMMARY_FILE, RunSummary)
    if summary is not None:
        return summary.pass_threshold
    record = read_record(root / RUN_FILE, RunRecord)
    if record is None:
        return None
    for source in (record.rescore, record.imported):
        if source is not None:
            return source.pass_threshold
    threshold = ((record.spec or {}).get("spec") or {}).get("passThreshold")
    return float(threshold) if isinstance(threshold, (int, float)) else None


def _judge_text(judge: JudgeInfo) -> str:
    parts = [judge.kind, *([judge.model] if judge.model else []), f"version {judge.version}"]
    if judge.prompt_sha256:
        parts.append(f"prompt {judge.prompt_sha256[:12]}")
    return f"{judge.name} ({', '.join(parts)})"


def _judges(rows: Iterable[TaskResult]) -> set[str]:
    """The primary judges of the scored results, each with what identifies its verdicts."""
    return {_judge_text(r.judge) for r in scored(rows) if r.judge is not None}


def _task_digests(store: ResultsDir, rows: Iterable[TaskResult], tasks: set[str]) -> dict[str, str]:
    """task id -> digest of the task as run (its per-task record; the source location left out),
    for the ``tasks`` whose record holds the task."""
    out: dict[str, str] = {}
    for r in scored(rows):
        if r.task_id not in tasks or r.task_id in out:
            continue
        full = store.load_full(r)
        if full is not None and full.task is not None:
            content = full.task.model_dump_json(exclude={"source"})
            out[r.task_id] = hashlib.sha256(content.encode()).hexdigest()
    return out


def differences(
    a: tuple[Path, list[TaskResult]], b: tuple[Path, list[TaskResult]], paired: set[str]
) -> tuple[list[str], int]:
    """What makes the two sides' verdicts incomparable (pass threshold, primary judge, content of
    the paired tasks), one line each; and how many paired tasks had no recorded content to check."""
    found: list[str] = []
    (root_a, rows_a), (root_b, rows_b) = a, b
    threshold_a, threshold_b = _threshold(root_a), _threshold(root_b)
    if threshold_a is not None and threshold_b is not None and threshold_a != threshold_b:
        found.append(f"pass threshold: A {threshold_a:g}, B {threshold_b:g}")
    judges_a, judges_b = _judges(rows_a), _judges(rows_b)
    if judges_a != judges_b:
        found.append(f"primary judge: A {'; '.join(sorted(judges_a))}, B {'; '.join(sorted(judges_b))}")
    content_a = _task_digests(ResultsDir(root_a), rows_a, paired)
    content_b = _task_digests(ResultsDir(root_b), rows_b, paired)
    known = set(content_a) & set(content_b)
    changed = sorted(t for t in known if content_a[t] != content_b[t])
    if changed:
        named = ", ".join(changed[:DIFFERENT_TASKS_LISTED]) + (
            ", ..." if len(changed) > DIFFERENT_TASKS_LISTED else ""
        )
        found.append(f"task content: {len(changed)} of {len(known)} paired task(s) differ ({named})")
    return found, len(paired - known)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f}"


def format_comparison(cmp: PairedComparison, label_a: str, label_b: str) -> str:
    p, c, m = cmp.pass_rate_diff, cmp.coverage_diff, cmp.mcnemar
    width = max(len(label_a), len(label_b), 8)
    return "\n".join(
        [
            f"paired tasks: {cmp.tasks} ({cmp.pairs} task/repeat pairs scored by both)",
            dropped_line(cmp.dropped_by_reason),
            f"{'':<14} {'A':<{width}} {'B':<{width}} {'A - B':>9}  95% CI",
            f"{'model':<14} {label_a:<{width}} {label_b}",
            f"{'pass rate':<14} {_pct(cmp.pass_rate_a):<{width}} {_pct(cmp.pass_rate_b):<{width}} "
            f"{_pp(p.point) + ' pp':>9}  [{_pp(p.low)}, {_pp(p.high)}] pp",
            f"{'mean coverage':<14} {cmp.coverage_a:<{width}.3f} {cmp.coverage_b:<{width}.3f} "
            f"{c.point:>+9.3f}  [{c.low:+.3f}, {c.high:+.3f}]",
            f"McNemar ({m.method}) on {cmp.mcnemar_unit}: A better b={m.b}, B better c={m.c}; "
            f"p={m.p_value:.4g}",
            *_unpaired_lines(cmp, label_a, label_b),
        ]
    )


def dropped_line(by_side: dict[str, dict[str, int]]) -> str:
    """``dropped tasks: 3 scored by one side only (not scored by B: 2 error; ...)``."""
    total = sum(sum(reasons.values()) for reasons in by_side.values())
    if not total:
        return "dropped tasks: none (every task scored by one side was scored by both)"
    parts = [
        f"not scored by {side.upper()}: "
        + ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
        for side, reasons in sorted(by_side.items())
    ]
    return f"dropped tasks: {total} scored by one side only ({'; '.join(parts)})"


def _unpaired_lines(cmp: PairedComparison, label_a: str, label_b: str) -> list[str]:
    if cmp.unpaired_a is None or cmp.unpaired_b is None:
        return []
    ua, ub = cmp.unpaired_a, cmp.unpaired_b
    return [
        f"secondary, unpaired (each model on every task it scored; task sets differ): "
        f"{label_a} {_pct(ua.pass_rate)} of {ua.tasks} task(s), {label_b} {_pct(ub.pass_rate)} of {ub.tasks} task(s)"
    ]


def regression(cmp: PairedComparison, alpha: float = 0.05) -> str | None:
    """Why B is significantly worse than A on the paired tasks, or None: McNemar's p below
    ``alpha`` with A better on more tasks, or a paired-bootstrap CI of A - B (pass rate or mean
    coverage) entirely above 0."""
    m, p, c = cmp.mcnemar, cmp.pass_rate_diff, cmp.coverage_diff
    if m.p_value < alpha and m.b > m.c:
        return f"McNemar p={m.p_value:.4g} < {alpha:g}: A better on {m.b} task(s), B on {m.c}"
    if p.low > 0:
        return f"pass rate A - B {_pp(p.point)} pp, 95% CI [{_pp(p.low)}, {_pp(p.high)}] above 0"
    if c.low > 0:
        return f"mean coverage A - B {c.point:+.3f}, 95% CI [{c.low:+.3f}, {c.high:+.3f}] above 0"
    return None


def cmd_compare(args: argparse.Namespace) -> int:
    if args.resamples < 1:
        raise InputError("must be at least 1", where="--resamples")
    models_a = _load(args.out_a)
    same_dir = Path(args.out_a).resolve() == Path(args.out_b).resolve()
    models_b = models_a if same_dir else _load(args.out_b)
    model_a = _pick(models_a, args.model_a, args.out_a, "--model-a", other=args.model_b if same_dir else None)
    model_b = _pick(models_b, args.model_b, args.out_b, "--model-b", other=model_a if same_dir else None)
    if same_dir and model_a == model_b:
        raise InputError(
            f"both sides are model {model_a!r} of the same directory; pass --model-a/--model-b",
            where=args.out_a,
        )
    rows_a, rows_b = models_a[model_a], models_b[model_b]
    paired = paired_tasks(rows_a, rows_b)
    if not paired:
        raise InputError(
            f"no task scored by both {model_a!r} ({args.out_a}) and {model_b!r} ({args.out_b}); "
            + dropped_line(count_dropped(dropped_tasks(rows_a, rows_b)))
        )
    found, unchecked = (
        ([], 0) if same_dir else differences((Path(args.out_a), rows_a), (Path(args.out_b), rows_b), paired)
    )
    if found and not args.allow_different:
        raise InputError(
            "the two runs' verdicts are not comparable: "
            + "; ".join(found)
            + ". Pass --allow-different to compare them anyway",
            where=f"{args.out_a} vs {args.out_b}",
        )
    if unchecked:
        print(
            f"note: {unchecked} paired task(s) have no recorded task content: content not checked",
            file=sys.stderr,
        )
    cmp = paired_comparison(rows_a, rows_b, args.resamples, args.seed)
    assert cmp is not None  # some task is paired
    shown = [f"difference (--allow-different): {line}" for line in found]
    if args.json:
        for line in shown:  # stdout stays one JSON document
            print(line, file=sys.stderr)
        doc: dict[str, Any] = {
            "a": {"dir": args.out_a, "model": model_a},
            "b": {"dir": args.out_b, "model": model_b},
            "differences": found,
            **cmp.model_dump(),
        }
        print(json.dumps(doc, indent=2))
    else:
        print("\n".join([*shown, format_comparison(cmp, model_a, model_b)]))
    if args.fail_on_regression:
        worse = regression(cmp, args.alpha)
        if worse:
            print(f"regression: {model_b} is significantly worse than {model_a}: {worse}", file=sys.stderr)
            return EXIT_REGRESSION
    return EXIT_OK


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("compare", help="paired comparison of two models on the tasks both scored")
    parser.add_argument("out_a", metavar="OUT_A", help="results directory of model A")
    parser.add_argument("out_b", metavar="OUT_B", help="results directory of model B (may equal OUT_A)")
    parser.add_argument("--model-a", help="model in OUT_A (needed if it holds several)")
    parser.add_argument("--model-b", help="model in OUT_B (needed if it holds several)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help=f"exit {EXIT_REGRESSION} when B is significantly worse than A (McNemar p < --alpha with A "
        "better more often, or a paired 95%% CI of A - B above 0)",
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    parser.add_argument(
        "--allow-different",
        action="store_true",
        help="compare runs scored at different pass thresholds, by different judges or on different "
        "task content (refused otherwise, exit 2); the differences are printed first",
    )
    parser.epilog = "example: atlas compare runs/baseline runs/candidate --fail-on-regression"
    parser.set_defaults(func=cmd_compare)
