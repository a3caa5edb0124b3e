"""The ``atlas`` command line.

Building the parser imports nothing heavy (``atlas --help`` answers at once): each handler
imports what it needs, and of the modules in ``atlasrun.commands`` only the one of the command
being run is imported (``atlasrun.commands.COMMANDS``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlasrun.commands import COMMANDS
from atlasrun.redact import ScrubbingStream

if TYPE_CHECKING:
    from atlasrun.runspec.run import RunSpec


def _is_run_file(path: Path) -> bool:
    from atlasrun.errors import InputError
    from atlasrun.tasks.documents import decode, load_yaml
    from atlasrun.tasks.files import DOCUMENT_LIMIT, read_user_file

    if path.suffix.lower() not in (".yaml", ".yml"):
        return False
    try:  # a special or too-large file is no run file: the task loader says what is wrong with it
        text = decode(read_user_file(path, "run file", DOCUMENT_LIMIT), str(path))
        # Parsed only if it may be one (a top-level kind: or spec:, or a flow mapping): a task file
        # is then parsed once, by the task loader (YAML composes at ~1 s per MB).
        if not re.search(r"^(kind|spec)\s*:", text, re.M) and not text.lstrip().startswith("{"):
            return False
        doc = load_yaml(text, str(path))
    except InputError:
        return False
    from atlasrun.runspec.run import KIND

    return isinstance(doc, dict) and (doc.get("kind") == KIND or "spec" in doc)


def apply_overrides(spec: RunSpec, args: argparse.Namespace) -> RunSpec:
    from pydantic import ValidationError

    from atlasrun.errors import InputError

    try:
        return _apply_overrides(spec, args)
    except ValidationError as exc:
        raise InputError.from_validation(exc, where="command line (--model/--judge)") from exc


def _check_flags(args: argparse.Namespace) -> None:
    """Each numeric flag as its run-file field would be checked (0 is a value, not "unset")."""
    from atlasrun.runner.flags_check import check_flag
    from atlasrun.runspec.run import ModelSpec, RunSpecBody, TasksSource

    check_flag("--limit", getattr(args, "limit", None), TasksSource, "limit")
    check_flag("--repeats", getattr(args, "repeats", None), RunSpecBody, "repeats")
    check_flag("--parallelism", getattr(args, "parallelism", None), RunSpecBody, "parallelism")
    check_flag("--max-concurrency", getattr(args, "max_concurrency", None), ModelSpec, "max_concurrency")


def _check_model_flag(name: str, defined: dict[str, Any], api_base: str | None) -> None:
    """A ``--model`` that is no model of the run file, no built-in agent, and a bare name litellm
    cannot route (no ``provider/`` and not in its model map) is a typo: say so before anything runs."""
    from atlasrun.agent.replay import BUILTIN_AGENTS
    from atlasrun.errors import InputError, did_you_mean
    from atlasrun.provider import priced_models

    if name in defined or name in BUILTIN_AGENTS or "/" in name or api_base or name in priced_models():
        return
    known = [*defined, *BUILTIN_AGENTS]
    raise InputError(
        f"--model {name}: not a model of the run file ({', '.join(defined) or 'none'}), not a built-in "
        f"agent ({', '.join(BUILTIN_AGENTS)}), and not a model name litellm knows"
        f"{did_you_mean(name, known) or '; for a provider model write provider/model, e.g. openai/' + name}",
        where="command line",
    )


def _apply_overrides(spec: RunSpec, args: argparse.Namespace) -> RunSpec:
    from atlasrun.runspec.run import JudgeSpec, ModelSpec, TasksSource
    from atlasrun.tasks.files import resolve_user_path
    from atlasrun.tasks.hub import is_hub_source

    _check_flags(args)
    body = spec.spec
    if getattr(args, "catalog", None):
        from atlasrun.servers.catalog import is_builtin

        catalog = args.catalog
        body.servers.catalog = catalog if is_builtin(catalog) else str(resolve_user_path(catalog, "catalog"))
    if args.tasks:
        body.tasks = (
            TasksSource(dataset=args.tasks)  # hf://OWNER/NAME[@REVISION]: a Hugging Face dataset
            if is_hub_source(args.tasks)
            else TasksSource(path=str(resolve_user_path(args.tasks, "task file")))
        )
    if args.model:
        # A --model naming one of the run file's models selects it; any other is a litellm model.
        defined = {m.name: m for m in body.models}
        for name in args.model:
            _check_model_flag(name, defined, args.api_base)
        body.models = [
            defined.get(m)
            or ModelSpec(
                name=m,
                api_base=args.api_base,
                api_key_env=args.api_key_env,
                max_concurrency=4 if args.max_concurrency is None else args.max_concurrency,
            )
            for m in dict.fromkeys(args.model)
        ]
    if args.api_base or args.api_key_env or args.max_concurrency is not None:
        for model in body.models:
            model.api_base = args.api_base or model.api_base
            model.api_key_env = args.api_key_env or model.api_key_env
            if args.max_concurrency is not None:
                model.max_concurrency = args.max_concurrency
    if args.judge:
        body.judges = [
            JudgeSpec(name=j, api_base=args.judge_api_base, api_key_env=args.judge_api_key_env)
            for j in args.judge
        ]
    if args.parallelism is not None:
        body.parallelism = args.parallelism
    if args.repeats is not None:
        body.repeats = args.repeats
    if args.task:
        body.tasks.ids = list(dict.fromkeys(args.task))
    if args.limit is not None:
        body.tasks.limit = args.limit
    return spec


def _unknown_ids(lines: list[str], args: argparse.Namespace) -> list[str]:
    """The plan's unknown-id lines, naming ``--task`` when the ids came from the command line."""
    if not getattr(args, "task", None):
        return lines
    return [line.replace("spec.tasks.ids:", "--task:", 1) for line in lines]


def cmd_run(args: argparse.Namespace) -> int:
    from atlasrun.errors import EXIT_BAD_INPUT
    from atlasrun.runner.flags_check import check_data_dir, check_data_root, check_output_dir
    from atlasrun.runner.gates import item_count, parse_rate, run_verdict, selection_summary
    from atlasrun.runner.local import banner, format_table, output_dir, run_local
    from atlasrun.runner.plan import plan_run
    from atlasrun.runspec.run import load_run_spec

    fail_under = parse_rate(args.fail_under) if args.fail_under is not None else None
    spec = apply_overrides(load_run_spec(args.run_file), args)
    out = output_dir(spec, args.out)
    check_output_dir(out, "--out" if args.out else "spec.output.dir")
    if args.data_dir:
        check_data_dir(Path(args.data_dir), "--data-dir")
    elif spec.spec.data_dir:
        check_data_dir(spec.resolve(spec.spec.data_dir), "spec.dataDir")
    plan = plan_run(spec)
    unknown_ids = _unknown_ids(plan.unknown_ids, args)
    for line in [f"rejected: {r}" for r in plan.rejected] + [f"error: {u}" for u in unknown_ids]:
        print(line, file=sys.stderr)
    for exclusion in plan.excluded:
        print(f"excluded: task {exclusion.task.id}: {exclusion.reason}", file=sys.stderr)
    if unknown_ids or not plan.tasks:
        print(
            f"error: nothing was run: {plan.why_nothing()}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    check_data_root(spec, plan.tasks, args.data_dir)
    if not args.no_preflight:
        from atlasrun.runner.preflight import preflight

        preflight(spec)
    if not args.data_dir and not spec.spec.data_dir and not spec.spec.servers.environment_url:
        why = "spec.emptyDataDir" if spec.spec.empty_data_dir else "no --data-dir or spec.dataDir"
        print(f"note: {why}: servers see an empty data root ({out / 'data'})", file=sys.stderr)
    from atlasrun.servers.sandbox import Sandbox

    print(banner(spec, plan, out), file=sys.stderr)
    data_dir = Path(args.data_dir) if args.data_dir else None
    sandbox = Sandbox(allow_host_exec=args.unsafe_host_exec)
    outcome = run_local(
        spec, out, data_dir, progress=not args.quiet, sandbox=sandbox, plan=plan, force_new=args.force_new
    )
    if outcome.moved_aside:
        print(f"--force-new: the earlier results were moved to {outcome.moved_aside}", file=sys.stderr)
    if outcome.skipped:
        print(
            f"resumed: {outcome.skipped} finished task(s) kept from {out / 'results.jsonl'}", file=sys.stderr
        )
    for warning in outcome.skipped_lines:
        print(warning, file=sys.stderr)
    models = [m.name for m in spec.spec.models]
    selected = selection_summary(outcome.results, models)  # what the gate and --junit judge
    everything = item_count(outcome.summary)
    human = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the JSON alone
    if everything != len(outcome.results):
        print(
            f"this run: {len(outcome.results)} item(s) (the table, --fail-under and --junit cover them)",
            file=human,
        )
    print(format_table(selected), file=human)
    if everything != len(outcome.results):
        print(
            f"\nthe results directory: {everything} item(s), earlier runs into it included (summary.json, report)",
            file=human,
        )
        print(format_table(outcome.summary), file=human)
    print(f"\nresults: {out / 'results.jsonl'}\nsummary: {out / 'summary.json'}", file=human)
    if args.junit:
        from atlasrun.reports.junit import write_junit

        write_junit(Path(args.junit), spec.metadata.name, outcome.results)
        print(f"junit: {args.junit} ({len(outcome.results)} testcase(s))", file=human)
    code, reasons = run_verdict(selected, fail_under, models)
    for reason in reasons:
        print(f"exit {code}: {reason}", file=sys.stderr)
    if args.json:
        verdict = {
            "run": spec.metadata.name,
            "exit_code": code,
            "reasons": reasons,
            "items": len(outcome.results),
            "models": selected["models"],  # this command's items: what the exit code judged
            "results_dir": {"path": str(out), "items": everything, "summary": str(out / "summary.json")},
            "junit": args.junit,
        }
        print(json.dumps(verdict, indent=1))
    return code


def _validate_cluster(spec: RunSpec) -> tuple[list[str], list[str], list[str]]:
    """(errors, warnings, skipped) for a cluster run file: what can be checked without the cluster."""
    from atlasrun.agent.replay import BUILTIN_AGENTS
    from atlasrun.cluster.operator.images import cluster_spec_problems, unpinned_images
    from atlasrun.cluster.wire.sidecars import servers_used
    from atlasrun.errors import did_you_mean
    from atlasrun.runner.plan import build_catalog

    body = spec.spec
    catalog = build_catalog(spec)
    known = set(catalog.by_name())
    errors = cluster_spec_problems(body)
    errors += [
        f"spec.servers.enabled: unknown server {n!r}{did_you_mean(n, known)}"
        for n in body.servers.enabled or []
        if n not in known
    ]
    if not body.cluster.allow_unpinned_images:
        errors += unpinned_images(body, catalog)
    warnings = [
        f"server {s.name!r} has no image: tasks that need it are excluded in cluster mode"
        for s in servers_used(body, catalog)
        if not s.image
    ]
    warnings += [
        f"model {m.name!r} has no apiKeySecret: its pods get no API key"
        for m in body.models
        if m.litellm_model not in BUILTIN_AGENTS and not m.api_key_secret and not m.api_base
    ]
    source = body.tasks
    skipped = [
        f"the tasks ({'ConfigMap ' + source.config_map if source.config_map else source.uri or source.dataset}): "
        "not readable from here"
        if not source.path
        else "",
        "that the images exist in their registry and the node can pull them",
        "that the Secrets exist: "
        + (
            ", ".join(
                sorted(
                    {s.name for s in [m.api_key_secret for m in body.models] if s}
                    | ({body.output.credentials_secret} if body.output.credentials_secret else set())
                )
            )
            or "(none named)"
        ),
        f"that bucket {body.output.bucket!r} exists and is writable" if body.output.bucket else "",
    ]
    return errors, warnings, [s for s in skipped if s]


def cmd_validate(args: argparse.Namespace) -> int:
    from atlasrun.errors import EXIT_FAIL_UNDER, EXIT_OK, InputError
    from atlasrun.runspec.run import load_run_spec
    from atlasrun.tasks.hub import is_hub_source
    from atlasrun.tasks.loader import load_tasks

    path = Path(args.file)
    hub = is_hub_source(args.file)  # hf://OWNER/NAME[@REVISION]: a Hugging Face dataset
    try:
        found = hub or path.exists() or path.is_symlink()  # a symlink loop: the loader says so
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", where=str(path)) from exc
    if not found:
        raise InputError("file not found", where=str(path))
    if not hub and _is_run_file(path):
        spec = load_run_spec(path)
        tasks_source = spec.spec.tasks
        local = tasks_source.path or tasks_source.dataset or is_hub_source(tasks_source.uri or "")
        if not local:  # a cluster run file: its tasks are in a ConfigMap or object storage
            errors, warnings, skipped = _validate_cluster(spec)
            for line in [*(f"error: {e}" for e in errors), *(f"warning: {w}" for w in warnings)]:
                print(line)
            for line in skipped:
                print(f"skipped: {line}")
            print(f"{path}: cluster run file: {len(errors)} error(s), {len(warnings)} warning(s)")
            return EXIT_FAIL_UNDER if errors else EXIT_OK
        return _validate_local_run(spec, path)
    else:
        loaded = load_tasks(args.file if hub else path)
        tasks, rejected = loaded.tasks, [str(r) for r in loaded.rejected]
        kind = "dataset" if hub else "task file"
        if args.catalog:
            from atlasrun.servers.catalog import load_catalog
            from atlasrun.servers.readiness import needs_lines

            for line in needs_lines(load_catalog(args.catalog), tasks):
                print(f"needs: {line}")
    for rejection in rejected:
        print(f"error: {rejection}")
    if not tasks and not rejected:
        print(f"error: {args.file if hub else path} has no task (an empty file, or a header alone)")
    print(f"{args.file if hub else path}: {kind}: {len(tasks)} task(s) loadable, {len(rejected)} rejected")
    return EXIT_FAIL_UNDER if rejected or not tasks else EXIT_OK


def _validate_local_run(spec: RunSpec, path: Path) -> int:
    """Rows rejected, ids unknown, tasks excluded, and what would run: each counted by its name."""
    from atlasrun.errors import EXIT_FAIL_UNDER, EXIT_OK
    from atlasrun.runner.plan import plan_run
    from atlasrun.servers.sandbox import overreach

    plan = plan_run(spec)
    for exclusion in plan.excluded:
        print(f"excluded: task {exclusion.task.id}: {exclusion.reason}")
    # what `atlas run` would refuse before any work: a server asking for more than the host grants
    refused = []
    for name in plan.servers_used():
        where, field = plan.catalog.get(name).origin
        refused += [f"{where + ': ' if where else ''}{field}.{p}" for p in overreach(plan.catalog.get(name))]
    for problem in [*plan.rejected, *plan.unknown_ids, *refused]:
        print(f"error: {problem}")
    if not plan.tasks and not plan.unknown_ids:
        print(f"error: nothing would run: {plan.why_nothing()}")
    counts = [f"{plan.loaded} task(s) loadable", f"{len(plan.rejected)} rejected"]
    if plan.unknown_ids:
        counts.append(f"{len(plan.unknown_ids)} unknown id(s) in spec.tasks.ids")
    if plan.excluded:
        counts.append(f"{len(plan.excluded)} excluded")
    counts.append(f"{len(plan.tasks)} would run")
    if refused:
        counts.insert(-1, f"{len(refused)} server problem(s)")
    print(f"{path}: run file: {', '.join(counts)}")
    return EXIT_FAIL_UNDER if plan.rejected or plan.unknown_ids or refused or not plan.tasks else EXIT_OK


def cmd_init_workspace(args: argparse.Namespace) -> int:
    if args.catalog == "mcp-atlas":
        from atlasrun.starter.mcp_atlas import create_mcp_atlas_workspace

        built = create_mcp_atlas_workspace(Path(args.dir), log=lambda line: print(line, file=sys.stderr))
        for missing in built.missing:
            print(f"missing: {missing}", file=sys.stderr)
        print(f"MCP-Atlas /data ready at {built.root} (pass it as --data-dir; the model sees it as /data)")
        return 0
    from atlasrun.starter.workspace import create_workspace

    path = create_workspace(Path(args.dir))
    print(f"starter workspace ready at {path} (pass it as --data-dir; the model sees it as /data)")
    return 0


# One example per command, shown at the end of its --help (a module may set its own epilog).
EXAMPLES = {
    "validate": "atlas validate examples/demo.yaml   (exit 0 valid, 1 rows rejected / errors found, 2 unreadable)",
    "init-workspace": "atlas init-workspace runs/ws",
    "audit": "atlas audit examples/starter/tasks.yaml --data-dir runs/ws",
    "diagnose": "atlas diagnose runs/demo",
    "export-atlas": "atlas export-atlas runs/demo --out demo.csv",
    "import-atlas": "atlas import-atlas results.csv --model gpt-4o --out runs/imported",
    "judge-eval": "atlas judge-eval labels.jsonl --judge deterministic",
    "report": "atlas report runs/demo",
    "view": "atlas view runs   (prints the URL; add --no-open in CI or over ssh; Ctrl-C to stop)",
    "run-task": "atlas run-task --help (started by the operator inside a Job)",
}


def _add_examples(sub: Any) -> None:
    for name, parser in sub.choices.items():
        if parser.epilog is None and name in EXAMPLES:
            parser.epilog = f"example: {EXAMPLES[name]}"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``atlas`` parser; of the command modules only ``command``'s is imported (its full
    parser), the others are listed by name and help."""
    from atlasrun import __version__
    from atlasrun.flags import CATALOG_HELP, UNSAFE_FLAG, UNSAFE_HELP

    parser = argparse.ArgumentParser(
        prog="atlas",
        description="Benchmark LLM agents' MCP tool use.",
        epilog="example: atlas init-workspace runs/ws && atlas run examples/demo.yaml --data-dir runs/ws "
        "--out runs/demo && atlas report runs/demo. Exit codes: README 'Exit codes'.",
    )
    parser.add_argument("--version", action="version", version=f"atlas (AtlasRun) {__version__}")
    sub = parser.add_subparsers(dest="command")  # none: the newcomer's guide (main)

    run = sub.add_parser(
        "run",
        help="run a benchmark on this machine",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: atlas run examples/demo.yaml --data-dir runs/ws --out runs/demo --limit 5\n\n"
        "exit codes: 0 all done (and --fail-under met); 1 a pass rate below --fail-under;\n"
        "  2 bad input or a failed pre-flight check; 3 some items errored after retries; 130 interrupted",
    )
    run.add_argument("run_file", metavar="RUN.yaml", help="the run file (kind: AtlasRun)")
    run.add_argument(
        "--tasks",
        metavar="FILE",
        help="task file or hf://OWNER/NAME[@REVISION] dataset (overrides spec.tasks)",
    )
    run.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="run only the run file's model NAME, or, if it has none by that name, the litellm model "
        "NAME, e.g. openai/gpt-4o (repeatable; 'replay' is built in)",
    )
    run.add_argument(
        "--api-base", help="OpenAI-compatible endpoint for --model (vLLM, Ollama, LiteLLM proxy)"
    )
    run.add_argument("--api-key-env", metavar="VAR", help="env var holding the API key for --model")
    run.add_argument("--max-concurrency", type=int, metavar="N", help="per-model concurrency")
    run.add_argument(
        "--judge", action="append", help="judge (repeatable; first is primary; 'deterministic' built in)"
    )
    run.add_argument("--judge-api-base", help="OpenAI-compatible endpoint for --judge")
    run.add_argument("--judge-api-key-env", metavar="VAR", help="env var holding the API key for --judge")
    run.add_argument("--data-dir", help="the data root the offline servers see (shown to the model as /data)")
    run.add_argument("--out", help="results directory (default: spec.output.dir or runs/NAME)")
    run.add_argument("--parallelism", type=int, metavar="N", help="items run at once")
    run.add_argument("--repeats", type=int, metavar="N", help="runs of each (task, model)")
    run.add_argument("--task", action="append", metavar="ID", help="run only task ID (repeatable)")
    run.add_argument("--limit", type=int, metavar="N", help="run only the first N tasks")
    run.add_argument(
        "--fail-under",
        metavar="RATE",
        help="exit 1 when a model's pass rate is below RATE (0.8 or 80%%); with --model, that model's",
    )
    run.add_argument("--junit", metavar="FILE", help="also write a JUnit XML file (one testcase per item)")
    run.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the checks before the run (key variables set, model names routable, one call each)",
    )
    run.add_argument(
        "--force-new",
        action="store_true",
        help="OUT holds another run's results: move them aside (OUT.replaced-TIME) and start afresh",
    )
    run.add_argument("--quiet", action="store_true", help="no progress display")
    run.add_argument(
        "--json",
        action="store_true",
        help="print the final summary as one JSON object on stdout (everything else goes to stderr)",
    )
    run.add_argument("--catalog", help=CATALOG_HELP + " (overrides spec.servers.catalog)")
    run.add_argument(UNSAFE_FLAG, action="store_true", help=UNSAFE_HELP)
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser("validate", help="check a run file or task file")
    validate.add_argument(
        "file", metavar="FILE", help="a run file (kind: AtlasRun, local or cluster) or a task file"
    )
    validate.add_argument(
        "--catalog",
        help=CATALOG_HELP + "; with a task file: the servers its tasks need, and the keys, egress "
        "and installs that would unlock them",
    )
    validate.set_defaults(func=cmd_validate)

    init = sub.add_parser(
        "init-workspace", help="create the starter suite's sample workspace (the data root)"
    )
    init.add_argument("dir", metavar="DIR", help="where to create it (pass it as --data-dir)")
    init.add_argument(
        "--catalog",
        default="starter",
        choices=["starter", "mcp-atlas"],
        help="starter (default): the starter suite's data; mcp-atlas: MCP-Atlas's /data",
    )
    init.set_defaults(func=cmd_init_workspace)

    _register_command_modules(sub, command)
    _add_examples(sub)
    _add_rescore_aliases(sub)
    for name, command_parser in sub.choices.items():
        _add_logging_flags(command_parser, name)
    return parser


def _add_rescore_aliases(sub: Any) -> None:
    """``rescore`` has only judges: ``--api-key-env``/``--api-base`` are its judge's, as in ``run``."""
    rescore = sub.choices.get("rescore")
    if rescore is None:
        return
    rescore.add_argument(
        "--api-key-env", dest="judge_api_key_env", metavar="VAR", help="same as --judge-api-key-env"
    )
    rescore.add_argument("--api-base", dest="judge_api_base", help="same as --judge-api-base")


LOG_LEVELS = ("debug", "info", "warning", "error")


def _add_logging_flags(parser: argparse.ArgumentParser, name: str) -> None:
    """``-v``/``--log-level`` on every command (and each ``servers`` subcommand)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub_parser in action.choices.items():
                _add_logging_flags(sub_parser, f"{name} {sub_name}")
            return
    group = parser.add_argument_group("logging")
    try:
        group.add_argument(
            "-v",
            "--verbose",
            dest="verbosity",
            action="count",
            default=0,
            help="log more to stderr: -v info, -vv debug",
        )
    except argparse.ArgumentError:  # the command has its own -v (judge-eval: list disagreements)
        pass
    group.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        help=f"log level on stderr: {', '.join(LOG_LEVELS)} (default: warning)",
    )


def _configure_logging(args: argparse.Namespace) -> tuple[Any, int] | None:
    """A stderr handler at the level the flags ask for (none without them), with the root level it
    replaced: both are undone when the command ends (``main`` may run several commands in a process,
    and a root level left at INFO lets other libraries' own handlers print)."""
    import logging

    verbosity = getattr(args, "verbosity", 0) or 0
    if isinstance(getattr(args, "verbose", None), bool) and args.verbose:
        verbosity = max(verbosity, 1)  # a command's own -v/--verbose also means "more"
    level_name = getattr(args, "log_level", None) or (
        "debug" if verbosity >= 2 else "info" if verbosity == 1 else None
    )
    if level_name is None:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    before = root.level
    root.addHandler(handler)
    root.setLevel(level_name.upper())
    return handler, before


def _register_command_modules(sub: Any, command: str | None) -> None:
    import importlib
    import pkgutil

    import atlasrun.commands as package

    listed = {module for module, _ in COMMANDS.values()}
    unlisted = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name not in listed)
    wanted = [COMMANDS[command][0]] if command in COMMANDS else []
    for module in [*wanted, *unlisted]:  # unlisted: registered eagerly (slow --help; a test flags it)
        importlib.import_module(f"{package.__name__}.{module}").register(sub)
    for name, (_, help_text) in COMMANDS.items():
        if name not in sub.choices:  # a module may register several commands
            sub.add_parser(name, help=help_text)


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the top-level parser has no options taking a value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Everything the CLI (and litellm's logging) prints goes through the secret masking.
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if isinstance(s, ScrubbingStream) else ScrubbingStream(s) for s in streams)
    handler = None
    try:
        args = build_parser(_command_of(argv)).parse_args(argv)
        if args.command is None:
            print(newcomer_guide())
            return 0
        handler = _configure_logging(args)
        return _dispatch(args)
    finally:
        if handler is not None:
            import logging

            logging.getLogger().removeHandler(handler[0])
            logging.getLogger().setLevel(handler[1])
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams


# `atlas` alone: the commands a newcomer needs first, in the order they are used.
FIRST_COMMANDS = (
    ("atlas init-workspace runs/ws", "create the sample data the starter tasks read"),
    (
        "atlas run examples/demo.yaml --data-dir runs/ws --out runs/demo",
        "run the starter suite offline (no model, no API key)",
    ),
    ("atlas report runs/demo", "write runs/demo/report.html; open it in a browser"),
    ("atlas validate RUN.yaml", "check a run file or task file before running it"),
    ("atlas servers check", "start each MCP server and make one real call"),
)


def newcomer_guide() -> str:
    readme = Path(__file__).resolve().parents[2] / "README.md"
    where = str(readme) if readme.is_file() else "README.md at the top of the AtlasRun repository"
    lines = ["atlas: benchmark how LLM agents use tools over MCP.", "", "Start here:"]
    for command, what in FIRST_COMMANDS:
        lines += [f"  {command}", f"      {what}"]
    lines += ["", "Every command: atlas --help (and atlas COMMAND --help).", f"User guide: {where}"]
    return "\n".join(lines)


def _dispatch(args: argparse.Namespace) -> int:
    import logging
    import time

    from atlasrun import __version__

    log = logging.getLogger("atlasrun.cli")
    command = " ".join(
        str(c) for c in (getattr(args, "command", None), getattr(args, "servers_command", None)) if c
    )
    log.info("atlas %s (AtlasRun %s) started", command, __version__)
    started = time.monotonic()
    code = _run_command(args)
    log.info("atlas %s finished in %.1f s: exit %d", command, time.monotonic() - started, code)
    return code


def _run_command(args: argparse.Namespace) -> int:
    from atlasrun.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, AtlasError

    try:
        return int(args.func(args))
    except AtlasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        # Bad input, unless the error says otherwise (an unreachable store or cluster: exit 3).
        return int(getattr(exc, "exit_code", EXIT_BAD_INPUT))
    except BrokenPipeError:  # `atlas ... | head`: the reader left; nothing more to say
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno() if sys.__stdout__ else 1)
        return EXIT_OK
    except KeyboardInterrupt:
        print("interrupted: finished results are kept; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
