"""The ``atlas`` command line.

Building the parser imports nothing heavy (``atlas --help`` answers at once): each handler
imports what it needs, and of the modules in ``atlasrun.commands`` only the one of the command
being run is imported (``atlasrun.commands.COMMANDS``).
"""

from __future__ import annotations

import argparse
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

    if path.suffix.lower() not in (".yaml", ".yml"):
        return False
    try:
        doc = load_yaml(decode(path.read_bytes(), str(path)), str(path))
    except (OSError, InputError):
        return False
    return isinstance(doc, dict) and (doc.get("kind") == "AtlasRun" or "spec" in doc)


def apply_overrides(spec: RunSpec, args: argparse.Namespace) -> RunSpec:
    from pydantic import ValidationError

    from atlasrun.errors import InputError

    try:
        return _apply_overrides(spec, args)
    except ValidationError as exc:
        raise InputError.from_validation(exc, where="command line (--model/--judge)") from exc


def _apply_overrides(spec: RunSpec, args: argparse.Namespace) -> RunSpec:
    from atlasrun.runspec.run import JudgeSpec, ModelSpec, TasksSource

    body = spec.spec
    if args.tasks:
        body.tasks = TasksSource(path=str(Path(args.tasks).resolve()))
    if args.model:
        body.models = [
            ModelSpec(
                name=m,
                api_base=args.api_base,
                api_key_env=args.api_key_env,
                max_concurrency=args.max_concurrency or 4,
            )
            for m in args.model
        ]
    elif args.api_base or args.api_key_env or args.max_concurrency:
        for model in body.models:
            model.api_base = args.api_base or model.api_base
            model.api_key_env = args.api_key_env or model.api_key_env
            model.max_concurrency = args.max_concurrency or model.max_concurrency
    if args.judge:
        body.judges = [
            JudgeSpec(name=j, api_base=args.judge_api_base, api_key_env=args.judge_api_key_env)
            for j in args.judge
        ]
    if args.parallelism:
        body.parallelism = args.parallelism
    if args.repeats:
        body.repeats = args.repeats
    return spec


def cmd_run(args: argparse.Namespace) -> int:
    from atlasrun.runner.local import format_table, output_dir, run_local
    from atlasrun.runspec.run import load_run_spec

    spec = apply_overrides(load_run_spec(args.run_file), args)
    out = output_dir(spec, args.out)
    if not args.data_dir and not spec.spec.data_dir:
        print(
            f"note: no --data-dir or spec.dataDir: servers see an empty data root ({out / 'data'})",
            file=sys.stderr,
        )
    from atlasrun.servers.sandbox import Sandbox

    data_dir = Path(args.data_dir) if args.data_dir else None
    sandbox = Sandbox(allow_host_exec=args.unsafe_host_exec)
    outcome = run_local(spec, out, data_dir, progress=not args.quiet, sandbox=sandbox)
    for rejection in outcome.plan.rejected:
        print(f"rejected: {rejection}", file=sys.stderr)
    for exclusion in outcome.plan.excluded:
        print(f"excluded: task {exclusion.task.id}: {exclusion.reason}", file=sys.stderr)
    if outcome.skipped:
        print(
            f"resumed: {outcome.skipped} finished task(s) kept from {out / 'results.jsonl'}", file=sys.stderr
        )
    print(format_table(outcome.summary))
    print(f"\nresults: {out / 'results.jsonl'}\nsummary: {out / 'summary.json'}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from atlasrun.errors import InputError
    from atlasrun.runner.plan import plan_run
    from atlasrun.runspec.run import load_run_spec
    from atlasrun.tasks.loader import load_tasks

    path = Path(args.file)
    try:
        found = path.exists()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", where=str(path)) from exc
    if not found:
        raise InputError("file not found", where=str(path))
    if _is_run_file(path):
        plan = plan_run(load_run_spec(path))
        tasks, rejected = plan.tasks, plan.rejected
        for exclusion in plan.excluded:
            print(f"excluded: task {exclusion.task.id}: {exclusion.reason}")
        kind = "run file"
    else:
        loaded = load_tasks(path)
        tasks, rejected = loaded.tasks, loaded.rejected
        kind = "task file"
    for rejection in rejected:
        print(f"error: {rejection}")
    print(f"{path}: {kind}: {len(tasks)} task(s) loadable, {len(rejected)} rejected")
    return 1 if rejected or not tasks else 0


def cmd_servers_install(args: argparse.Namespace) -> int:
    from atlasrun.servers.catalog import load_catalog
    from atlasrun.servers.install import install_all

    install_all(load_catalog(args.catalog), args.names or None)
    return 0


def _scratch_data_root() -> Path:
    """An empty data root that is also a git repository, so every catalog check can succeed."""
    import subprocess

    from atlasrun.servers.scratch import new_scratch

    root = new_scratch("check")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _check_arguments(check: dict[str, object] | None) -> dict[str, Any]:
    arguments = (check or {}).get("arguments")
    return dict(arguments) if isinstance(arguments, dict) else {}


async def _check(args: argparse.Namespace) -> list[dict[str, Any]]:
    import asyncio
    import shutil
    import time

    from atlasrun.servers.catalog import load_catalog
    from atlasrun.servers.instance import ServerInstance
    from atlasrun.servers.sandbox import Sandbox

    catalog = load_catalog(args.catalog)
    names = args.names or [s.name for s in catalog.servers]
    data_dir = Path(args.data_dir).resolve() if args.data_dir else _scratch_data_root()
    sandbox = Sandbox(allow_host_exec=args.unsafe_host_exec)

    async def check(name: str) -> dict[str, Any]:
        spec = catalog.get(name)
        row: dict[str, Any] = {"server": name, "ok": False, "tools": 0}
        try:
            instance = await ServerInstance(spec, data_dir, "/data", args.timeout, sandbox=sandbox).start()
        except Exception as exc:
            row["message"] = str(exc)
            return row
        try:
            row["startup_ms"] = round(instance.startup_s * 1000, 1)
            row["tools"] = len(instance.tools)
            tool = str((spec.check or {}).get("tool") or "")
            if not tool:
                row.update(ok=True, message="listed tools (no check call configured)")
                return row
            began = time.perf_counter()
            text, is_error = await instance.call(tool, _check_arguments(spec.check), args.timeout)
            row["call_ms"] = round((time.perf_counter() - began) * 1000, 1)
            # The server answered at protocol level: it is up. A tool-level error (e.g. git_status on
            # a data root that is not a repository) is shown, not failed.
            row.update(ok=True, message=f"{tool}: {'tool error: ' if is_error else ''}{text[:80]!r}")
        except Exception as exc:
            row["message"] = f"check call failed: {exc!r}"
        finally:
            await instance.stop()
        return row

    try:
        return list(await asyncio.gather(*(check(n) for n in names)))
    finally:
        if not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)


def cmd_servers_check(args: argparse.Namespace) -> int:
    import asyncio
    import json

    rows = asyncio.run(_check(args))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'server':<18} {'status':<6} {'start ms':>8} {'call ms':>8} {'tools':>5}  detail")
        for r in rows:
            print(
                f"{r['server']:<18} {'ok' if r['ok'] else 'FAIL':<6} {r.get('startup_ms', '-'):>8} "
                f"{r.get('call_ms', '-'):>8} {r['tools']:>5}  {r.get('message', '')}"
            )
    return 0 if all(r["ok"] for r in rows) else 1


def cmd_init_workspace(args: argparse.Namespace) -> int:
    from atlasrun.starter.workspace import create_workspace

    path = create_workspace(Path(args.dir))
    print(f"starter workspace ready at {path} (pass it as --data-dir; the model sees it as /data)")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``atlas`` parser; of the command modules only ``command``'s is imported (its full
    parser), the others are listed by name and help."""
    from atlasrun.flags import UNSAFE_FLAG, UNSAFE_HELP

    parser = argparse.ArgumentParser(prog="atlas", description="Benchmark LLM agents' MCP tool use.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a benchmark on this machine")
    run.add_argument("run_file")
    run.add_argument("--tasks", help="task file (overrides spec.tasks)")
    run.add_argument("--model", action="append", help="model to run (repeatable; 'replay' is built in)")
    run.add_argument(
        "--api-base", help="OpenAI-compatible endpoint for --model (vLLM, Ollama, LiteLLM proxy)"
    )
    run.add_argument("--api-key-env", help="env var holding the API key for --model")
    run.add_argument("--max-concurrency", type=int, help="per-model concurrency")
    run.add_argument(
        "--judge", action="append", help="judge (repeatable; first is primary; 'deterministic' built in)"
    )
    run.add_argument("--judge-api-base")
    run.add_argument("--judge-api-key-env")
    run.add_argument("--data-dir", help="the data root the offline servers see (shown to the model as /data)")
    run.add_argument("--out", help="results directory (default: spec.output.dir or runs/NAME)")
    run.add_argument("--parallelism", type=int)
    run.add_argument("--repeats", type=int)
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument(UNSAFE_FLAG, action="store_true", help=UNSAFE_HELP)
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser("validate", help="check a run file or task file")
    validate.add_argument("file")
    validate.set_defaults(func=cmd_validate)

    init = sub.add_parser(
        "init-workspace", help="create the starter suite's sample workspace (the data root)"
    )
    init.add_argument("dir")
    init.set_defaults(func=cmd_init_workspace)

    servers = sub.add_parser("servers", help="the MCP server catalog")
    ssub = servers.add_subparsers(dest="servers_command", required=True)
    install = ssub.add_parser("install", help="install the pinned server packages")
    install.add_argument("names", nargs="*")
    install.add_argument("--catalog")
    install.set_defaults(func=cmd_servers_install)
    check = ssub.add_parser("check", help="start each server and make one real call")
    check.add_argument("names", nargs="*")
    check.add_argument("--catalog")
    check.add_argument("--data-dir")
    check.add_argument("--timeout", type=float, default=60.0)
    check.add_argument("--json", action="store_true")
    check.add_argument(UNSAFE_FLAG, action="store_true", help=UNSAFE_HELP)
    check.set_defaults(func=cmd_servers_check)
    _register_command_modules(sub, command)
    return parser


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
    try:
        return _dispatch(build_parser(_command_of(argv)).parse_args(argv))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams


def _dispatch(args: argparse.Namespace) -> int:
    from atlasrun.errors import AtlasError

    try:
        return int(args.func(args))
    except AtlasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished results are kept; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
