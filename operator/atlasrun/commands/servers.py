"""``atlas servers install|list|check``: the MCP server catalog."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from atlasrun.flags import CATALOG_HELP, UNSAFE_FLAG, UNSAFE_HELP


def _known_names(catalog: Any, names: list[str], command: str) -> list[str]:
    """``names`` if the catalog has each (else InputError with a "did you mean"); all when empty."""
    from atlasrun.errors import InputError, did_you_mean

    table = catalog.by_name()
    for name in names:
        if name not in table:
            raise InputError(
                f"unknown server {name!r}{did_you_mean(name, table)}", where=f"atlas servers {command}"
            )
    return names or [s.name for s in catalog.servers]


def cmd_servers_install(args: argparse.Namespace) -> int:
    from atlasrun.servers.catalog import load_catalog
    from atlasrun.servers.install import install_all

    catalog = load_catalog(args.catalog)
    install_all(catalog, _known_names(catalog, args.names, "install") if args.names else None)
    return 0


def _scratch_data_root() -> Path:
    """An empty data root that is also a git repository, so every catalog check can succeed."""
    import subprocess

    from atlasrun.servers.scratch import new_scratch

    root = new_scratch("check")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


async def _live_tools(args: argparse.Namespace, names: list[str]) -> dict[str, list[str] | str]:
    """Each server's ``{server}_{tool}`` names as it lists them when started (or why it did not start)."""
    import asyncio
    import shutil

    from atlasrun.naming import qualify
    from atlasrun.servers.catalog import load_catalog
    from atlasrun.servers.instance import ServerInstance
    from atlasrun.servers.sandbox import Sandbox

    catalog = load_catalog(args.catalog)
    data_dir = _scratch_data_root()
    sandbox = Sandbox(allow_host_exec=args.unsafe_host_exec)

    async def listed(name: str) -> list[str] | str:
        try:
            instance = await ServerInstance(
                catalog.get(name), data_dir, "/data", 60.0, sandbox=sandbox
            ).start()
        except Exception as exc:
            return f"did not start: {exc}"
        try:
            return sorted(qualify(name, t.name) for t in instance.tools)
        finally:
            await instance.stop()

    try:
        return dict(zip(names, await asyncio.gather(*(listed(n) for n in names)), strict=True))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def cmd_servers_list(args: argparse.Namespace) -> int:
    import asyncio

    from atlasrun import naming
    from atlasrun.servers.catalog import load_catalog
    from atlasrun.servers.readiness import readiness
    from atlasrun.tasks.loader import load_tasks

    catalog = load_catalog(args.catalog)
    table = catalog.by_name()
    names = _known_names(catalog, args.names, "list") if args.names else sorted(table)
    if args.live:
        tools = asyncio.run(_live_tools(args, names))
    else:  # the tools the starter suite's tasks name (start the servers with --live for all of them)
        starter = Path(__file__).resolve().parents[3] / "examples" / "starter" / "tasks.yaml"
        known: dict[str, set[str]] = {}
        if starter.exists() and args.catalog in (None, "starter"):
            for task in load_tasks(starter).tasks:
                for tool in task.enabled_tools:
                    known.setdefault(naming.server_of(tool), set()).add(tool)
        tools = {n: sorted(known.get(n, ())) for n in names}
    for name in names:
        spec = table[name]
        state = readiness(spec)
        installed = "installed" if state.installed else "not installed"
        if not state.installed and spec.package and spec.package.unavailable:
            installed += f": {spec.package.unavailable}"
        print(
            f"{name}  ({spec.transport}, {'stateful' if spec.stateful else 'stateless'}, {installed}"
            f"{', image' if spec.image else ''})  {spec.description}".rstrip()
        )
        needs = [f"key {k} (set)" for k in state.keys_set] + [
            f"key {k} (not set)" for k in state.keys_missing
        ]
        if state.egress:
            needs.append(f"egress {state.egress}")
        print(f"    needs: {', '.join(needs) if needs else 'nothing (runs offline)'}")
        listed = tools.get(name) or []
        if isinstance(listed, str):
            print(f"    {listed}")
        else:
            if args.live:  # the server's own count, as `atlas servers check` reports it
                print(f"    {len(listed)} tool(s), listed live: {', '.join(listed) or '-'}")
            elif listed:  # a subset: not the server's count
                print(f"    tools the starter suite uses: {', '.join(listed)} (--live lists all of them)")
            else:
                print("    tools: --live starts it and lists them")
    return 0


async def _check(args: argparse.Namespace) -> list[dict[str, Any]]:
    import asyncio
    import shutil
    import time

    from atlasrun.servers.catalog import load_catalog
    from atlasrun.servers.instance import ServerInstance
    from atlasrun.servers.sandbox import Sandbox

    catalog = load_catalog(args.catalog)
    names = _known_names(catalog, args.names, "check")
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
            arguments = (spec.check or {}).get("arguments")
            text, is_error = await instance.call(
                tool, dict(arguments) if isinstance(arguments, dict) else {}, args.timeout
            )
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


def register(subparsers: Any) -> None:
    servers = subparsers.add_parser(
        "servers", help="the MCP server catalog", epilog="example: atlas servers list --live"
    )
    ssub = servers.add_subparsers(dest="servers_command", required=True)
    install = ssub.add_parser(
        "install",
        help="install the pinned server packages",
        epilog="example: atlas servers install filesystem calculator",
    )
    install.add_argument("names", nargs="*", help="servers to install (default: all)")
    install.add_argument("--catalog", help=CATALOG_HELP)
    install.set_defaults(func=cmd_servers_install)
    listing = ssub.add_parser(
        "list",
        help="the catalog's servers and their {server}_{tool} names",
        epilog="example: atlas servers list --live filesystem calculator",
    )
    listing.add_argument("names", nargs="*", help="servers to list (default: all)")
    listing.add_argument("--catalog", help=CATALOG_HELP)
    listing.add_argument(
        "--live", action="store_true", help="start each server and list every tool it offers"
    )
    listing.add_argument(UNSAFE_FLAG, action="store_true", help=UNSAFE_HELP)
    listing.set_defaults(func=cmd_servers_list)
    check = ssub.add_parser(
        "check", help="start each server and make one real call", epilog="example: atlas servers check --json"
    )
    check.add_argument("names", nargs="*", help="servers to check (default: all)")
    check.add_argument("--catalog", help=CATALOG_HELP)
    check.add_argument("--data-dir", help="data root the servers see (default: an empty scratch git repo)")
    check.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per start and per call (default 60)"
    )
    check.add_argument("--json", action="store_true", help="print the rows as JSON")
    check.add_argument(UNSAFE_FLAG, action="store_true", help=UNSAFE_HELP)
    check.set_defaults(func=cmd_servers_check)
