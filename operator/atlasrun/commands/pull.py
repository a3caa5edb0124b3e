"""``atlas pull SOURCE OUT``: bring a cluster run's results into a local results directory.

SOURCE is ``s3://bucket/prefix/<run>/`` (the run's ``status.resultsURI``) or ``atlasrun/NAME``
(read from the cluster with the current kubeconfig). Then ``atlas report OUT`` etc. work as on a
local run. Logic: ``atlasrun.cluster.pull``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def cmd_pull(args: argparse.Namespace) -> int:
    from atlasrun.cluster.pull import pull
    from atlasrun.runner.local import format_table

    pulled = pull(
        args.source,
        Path(args.out),
        endpoint_url=args.s3_endpoint_url,
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        warn=lambda m: print(m, file=sys.stderr),
    )
    print(format_table(pulled.summary))
    print(f"\npulled {pulled.results} task result(s) from {pulled.source} into {args.out}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "pull",
        help="bring a cluster run's results (S3) into a local results directory",
        description="Copy a cluster run's per-task results from object storage into OUT, then write "
        "run.json and summary.json, so atlas report/compare/rescore/diagnose work on it.",
        epilog="example: atlas pull atlasrun/sweep -n evals runs/sweep && atlas report runs/sweep",
    )
    parser.add_argument("source", metavar="SOURCE", help="s3://bucket/prefix/<run>/ or atlasrun/NAME")
    parser.add_argument("out", metavar="OUT", help="local results directory (created or updated)")
    parser.add_argument("-n", "--namespace", help="namespace of atlasrun/NAME (default: the kubeconfig's)")
    parser.add_argument("--kubeconfig", help="kubeconfig for atlasrun/NAME (default: KUBECONFIG)")
    parser.add_argument("--s3-endpoint-url", help="S3 endpoint (default: AWS_ENDPOINT_URL)")
    parser.set_defaults(func=cmd_pull)
