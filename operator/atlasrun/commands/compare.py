"""``atlas compare OUT_A OUT_B``: two models, paired on the tasks both scored.

OUT_A and OUT_B are results directories; pass the same directory twice to compare two of its
models. Prints pass rates, the A - B deltas with paired-bootstrap 95% CIs, and McNemar's test.
With ``--fail-on-regression`` it exits EXIT_REGRESSION when B is significantly worse than A
(``regression``), for regression gates in CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from atlasrun.errors import EXIT_OK, EXIT_REGRESSION, InputError
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.stats import PairedComparison, by_model, paired_comparison
from atlasrun.scoring.store import ResultsDir


def _load(path: str) -> dict[str, list[TaskResult]]:
    root = Path(path)
    if not root.is_dir():
        raise InputError("results directory not found", where=path)
    results = ResultsDir(root).load()
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


def _judges(rows: list[TaskResult]) -> set[str]:
    return {r.judge.name for r in rows if r.judge is not None}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f}"


def format_comparison(cmp: PairedComparison, label_a: str, label_b: str) -> str:
    p, c, m = cmp.pass_rate_diff, cmp.coverage_diff, cmp.mcnemar
    test = (
        f"exact binomial p={m.p_value:.4g}"
        if m.method == "exact"
        else f"chi2={m.statistic:.3f} (continuity-corrected) p={m.p_value:.4g}"
    )
    width = max(len(label_a), len(label_b), 8)
    return "\n".join(
        [
            f"paired tasks: {cmp.tasks} ({cmp.pairs} task/repeat pairs scored by both)",
            f"{'':<14} {'A':<{width}} {'B':<{width}} {'A - B':>9}  95% CI",
            f"{'model':<14} {label_a:<{width}} {label_b}",
            f"{'pass rate':<14} {_pct(cmp.pass_rate_a):<{width}} {_pct(cmp.pass_rate_b):<{width}} "
            f"{_pp(p.point) + ' pp':>9}  [{_pp(p.low)}, {_pp(p.high)}] pp",
            f"{'mean coverage':<14} {cmp.coverage_a:<{width}.3f} {cmp.coverage_b:<{width}.3f} "
            f"{c.point:>+9.3f}  [{c.low:+.3f}, {c.high:+.3f}]",
            f"McNemar on {cmp.mcnemar_unit}: A better b={m.b}, B better c={m.c}; {test}",
            *_unpaired_lines(cmp, label_a, label_b),
        ]
    )


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
    cmp = paired_comparison(models_a[model_a], models_b[model_b], args.resamples, args.seed)
    if cmp is None:
        raise InputError(f"no task scored by both {model_a!r} ({args.out_a}) and {model_b!r} ({args.out_b})")
    judges_a, judges_b = _judges(models_a[model_a]), _judges(models_b[model_b])
    if judges_a != judges_b:
        print(
            f"note: different primary judges ({', '.join(sorted(judges_a))} vs {', '.join(sorted(judges_b))}); "
            "differences mix model and judge",
            file=sys.stderr,
        )
    if args.json:
        doc: dict[str, Any] = {
            "a": {"dir": args.out_a, "model": model_a},
            "b": {"dir": args.out_b, "model": model_b},
            **cmp.model_dump(),
        }
        print(json.dumps(doc, indent=2))
    else:
        print(format_comparison(cmp, f"{model_a}", f"{model_b}"))
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
    parser.epilog = "example: atlas compare runs/baseline runs/candidate --fail-on-regression"
    parser.set_defaults(func=cmd_compare)
