"""``atlas run-task``: run one (model, task, repeat) work item in a cluster pod.

Every input comes from the pod's environment (``ATLAS_*``, ``AWS_*``); the flags
override them for debugging. Exit codes and behaviour: ``atlasrun.cluster.pod.runtask``.
"""

from __future__ import annotations

import argparse
from typing import Any


def cmd_run_task(args: argparse.Namespace) -> int:
    from atlasrun.cluster.pod.runtask import main

    return main(
        {
            "run_spec": args.run_spec,
            "tasks": args.tasks,
            "task_id": args.task_id,
            "model": args.model,
            "repeat": args.repeat,
            "results_uri": args.results_uri,
            "termination_path": args.termination_path,
            "endpoint_url": args.s3_endpoint_url,
            "s3_attempts": args.s3_attempts,
            "s3_backoff_s": args.s3_backoff,
            "work_dir": args.work_dir,
        }
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run-task",
        help="cluster mode: run one work item against sidecar servers, store the result in S3",
        description="Run one (model, task, repeat) work item inside a pod. Inputs come from the ATLAS_* env "
        "vars; flags override them. Exit 0: verdict stored; 2: bad input (permanent); "
        "3: infra/provider error (stored, retry the pod); 4: result could not be stored.",
    )
    parser.add_argument("--run-spec", help="run file (env ATLAS_RUN_SPEC)")
    parser.add_argument("--tasks", help="tasks file (env ATLAS_TASKS)")
    parser.add_argument("--task-id", help="task id (env ATLAS_TASK_ID)")
    parser.add_argument("--model", help="model name from the run file (env ATLAS_MODEL)")
    parser.add_argument("--repeat", help="repeat index, from 0 (env ATLAS_REPEAT)")
    parser.add_argument("--results-uri", help="s3://bucket/prefix/<run>/ (env ATLAS_RESULTS_URI)")
    parser.add_argument(
        "--termination-path",
        help="termination message file (env ATLAS_TERMINATION_PATH, default /dev/termination-log)",
    )
    parser.add_argument("--s3-endpoint-url", help="S3 endpoint (env AWS_ENDPOINT_URL)")
    parser.add_argument("--s3-attempts", help="storage attempts per request (env ATLAS_S3_ATTEMPTS)")
    parser.add_argument("--s3-backoff", help="first retry delay in seconds (env ATLAS_S3_BACKOFF_SECONDS)")
    parser.add_argument("--work-dir", help="keep the local results directory here (env ATLAS_WORK_DIR)")
    parser.set_defaults(func=cmd_run_task)
