"""``atlas report OUT``: write ``OUT/report.html``, one self-contained HTML page of the run.

The page has the per-model table with bootstrap CIs, tool metrics, charts (pass rate, failure
modes, latency vs pass rate, coverage), breakdowns, cross-judge agreement, pass@k and a per-task
drill-down with every claim verdict and tool call. It needs no network and no JavaScript library.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from atlasrun.errors import InputError
from atlasrun.scoring.store import ResultsDir


def cmd_report(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if not out.exists():
        raise InputError("results directory not found", where=str(out))
    if not out.is_dir():
        raise InputError("not a directory: give the results directory of `atlas run`", where=str(out))
    from atlasrun.reports.data import build_data
    from atlasrun.reports.html import write_report

    store = ResultsDir(out)
    store.load()  # the lines the report leaves out, named here (the page counts only valid ones)
    for warning in store.skipped_text():
        print(warning, file=sys.stderr)
    data = build_data(out)
    if not data.rows:
        raise InputError(
            "no results (results.jsonl missing or empty): not a finished `atlas run`", where=str(out)
        )
    path = write_report(data, out)
    if args.open_path_only:
        print(path.resolve())
        return 0
    size = path.stat().st_size
    print(f"{len(data.models)} model(s), {len(data.rows)} task result(s), {size / 1e6:.1f} MB")
    if data.failures.failing and data.failures.source != "diagnoses":
        print(f"note: failures not diagnosed yet; run `atlas diagnose {out}` for the failure-mode chart")
    print(f"report: {path.resolve()}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="write OUT/report.html: tables, charts and a per-task drill-down"
    )
    parser.add_argument("out", metavar="OUT", help="results directory of `atlas run`")
    parser.add_argument(
        "--open-path-only",
        action="store_true",
        help="print only the report's absolute path (e.g. for xdg-open \"$(atlas report OUT "
        '--open-path-only)")',
    )
    parser.set_defaults(func=cmd_report)
