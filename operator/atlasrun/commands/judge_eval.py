"""``atlas judge-eval LABELS.jsonl --judge NAME``: measure a judge against hand-labelled pairs.

Prints the confusion matrix, exact agreement, Cohen's kappa and precision/recall of
``fulfilled`` on the pairs the judge answered, its abstentions (count, rate, by kind) and the
accuracy counting an abstention as wrong; ``--json`` prints them as one object. NAME is ``deterministic`` or a judge of
the run file given with ``--run`` (an LLM judge is called once per pair). ``--against GRADES.jsonl``
measures a second grader's labels of the same pairs instead of a judge: how far two careful graders
agree is the ceiling a judge's figures are read against.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from atlasrun.errors import InputError


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _judge(name: str, run_file: str | None) -> Any:
    from atlasrun.runner.engine import make_judge
    from atlasrun.runspec.run import JudgeSpec, load_run_spec

    if run_file is None:
        if name != "deterministic":
            raise InputError(f"judge {name!r} needs --run RUN.yaml (only 'deterministic' is built in)")
        return make_judge(JudgeSpec(name=name), retries=0, backoff_s=0.0)
    spec = load_run_spec(run_file)
    judges = {j.name: j for j in spec.spec.judges}
    if name not in judges:
        if name == "deterministic":
            return make_judge(JudgeSpec(name=name), retries=0, backoff_s=0.0)
        raise InputError(
            f"no judge {name!r} in the run file; judges: {', '.join(judges) or 'none'}", where=run_file
        )
    limits = spec.spec.limits
    return make_judge(judges[name], limits.judge_retries, limits.retry_backoff_s)


def cmd_judge_eval(args: argparse.Namespace) -> int:
    from atlasrun.scoring.agreement import LABELS
    from atlasrun.scoring.judge_eval import compare_graders, evaluate, load_grades, load_labels

    if (args.judge is None) == (args.against is None):
        raise InputError("give either --judge NAME or --against GRADES.jsonl")
    pairs = load_labels(Path(args.labels))
    if args.against is not None:
        grades = load_grades(Path(args.against), pairs)
        result = compare_graders(f"grader {Path(args.against).name}", pairs, grades)
    else:
        result = evaluate(_judge(args.judge, args.run), pairs)
    if args.json:
        body = result.model_dump(exclude={"outcomes"} if not args.verbose else set())
        print(json.dumps(body, indent=2))
        return 0
    short = {"fulfilled": "F", "partially_fulfilled": "P", "not_fulfilled": "N"}
    print(
        f"{'' if args.against else 'judge '}{result.judge} on {args.labels}: {result.n} pair(s) answered, "
        f"{result.abstained} abstained ({_fmt(result.abstention_rate)}), {result.failed} failed"
    )
    print(f"\nconfusion (rows: label, columns: {'second grader' if args.against else 'judge'})")
    print(f"{'':>22}" + "".join(f"{short[g]:>6}" for g in LABELS))
    for expected in LABELS:
        print(f"{expected:>22}" + "".join(f"{result.confusion[expected][g]:>6}" for g in LABELS))
    print(
        f"\naccuracy {_fmt(result.accuracy)}  kappa {_fmt(result.kappa)}  "
        f"fulfilled precision {_fmt(result.fulfilled_precision)}  recall {_fmt(result.fulfilled_recall)}"
        f"\naccuracy counting an abstention as wrong {_fmt(result.accuracy_abstain_wrong)}"
    )
    if result.abstained_by_kind:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(result.abstained_by_kind.items()))
        print(f"abstentions by kind: {kinds}")
    if len(result.by_category) > 1:
        print("\nexact agreement by category")
        for category, acc in result.by_category.items():
            print(f"  {category:<24} {acc:.2f}")
    if args.verbose:
        print("\ndisagreements")
        for o in result.outcomes:
            if o.got != o.expected and o.abstained is None:
                print(f"  {o.id}: label {o.expected}, judge {o.got}: {o.reason}")
        print("\nabstentions")
        for o in result.outcomes:
            if o.abstained is not None:
                print(f"  {o.id}: label {o.expected}: {o.reason}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "judge-eval",
        help="measure a judge on hand-labelled (claim, answer) pairs: agreement, kappa, abstentions",
    )
    parser.add_argument("labels", metavar="LABELS.jsonl", help='JSONL lines {"id","claim","answer","label"}')
    parser.add_argument("--judge", help="'deterministic' or a judge name from --run")
    parser.add_argument(
        "--against",
        metavar="GRADES.jsonl",
        help='a second grader\'s labels of the same pairs (JSONL {"id","label"}), measured instead of a judge',
    )
    parser.add_argument("--run", help="run file whose judges to use")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list every disagreement")
    parser.set_defaults(func=cmd_judge_eval)
