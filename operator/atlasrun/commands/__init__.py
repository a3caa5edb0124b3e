"""Subcommands beyond ``run``/``validate``/``init-workspace``: one module per command.

Each module defines ``register(subparsers)`` that adds its parser and sets ``func`` (taking the
parsed args, returning an exit code). ``COMMANDS`` lists them by name so that ``atlas --help``
imports none of them (they import the MCP SDK and litellm): only the module of the command being
run is imported. tests/test_cli.py checks that this table matches what the modules register.
"""

# command -> (module in this package, one-line help as the module registers it)
COMMANDS: dict[str, tuple[str, str]] = {
    "audit": ("audit", "replay every task's reference on the live servers; flag drift"),
    "compare": ("compare", "paired comparison of two models on the tasks both scored"),
    "diagnose": ("diagnose", "classify why failed tasks failed (11-mode failure taxonomy)"),
    "export-atlas": ("interop", "export a results dir in the MCP-Atlas harness's columns"),
    "judge-eval": (
        "judge_eval",
        "measure a judge on hand-labelled (claim, answer) pairs: agreement, kappa, abstentions",
    ),
    "import-atlas": ("interop", "import results of the MCP-Atlas harness as a results dir"),
    "pull": ("pull", "bring a cluster run's results (S3) into a local results directory"),
    "report": ("report", "write OUT/report.html: tables, charts and a per-task drill-down"),
    "servers": ("servers", "the MCP server catalog"),
    "rescore": ("rescore", "judge a finished run's saved answers again (no agent reruns)"),
    "view": ("view", "a live local web page of runs: progress, pass rates, errors, transcripts"),
    "run-task": (
        "run_task",
        "cluster mode: run one work item against sidecar servers, store the result in S3",
    ),
}
