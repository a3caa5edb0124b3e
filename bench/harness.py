"""``make bench``: the local engine's cost, measured against floors taken in the same run.

Workload (as in the MCP-Atlas harness comparison): a one-tool-call task. An
instant scripted model (a separate process on 127.0.0.1, reached through
litellm's real HTTP path) asks for one calculator call, then answers.

Printed:
- per-task harness overhead at concurrency 1: wall time minus model and tool time
- per tool call through the harness vs. a bare loop of MCP calls on the same transport
- per-task server start-up vs. a bare spawn + initialize of the same server
- throughput at concurrency 1, 8, 32 with pooled (stateless) and fresh-per-task servers
- peak memory of the harness process
- the sandbox's cost: server start-up and per-call latency with and without bubblewrap for a
  few servers (median of N, measured alternately so machine load hits both alike)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client

from atlasrun.runner.engine import Engine
from atlasrun.runner.plan import Plan
from atlasrun.runspec.run import RunSpec
from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.install import install_dir
from atlasrun.servers.instance import ServerInstance
from atlasrun.servers.sandbox import Sandbox
from atlasrun.servers.surface import ToolSurface
from atlasrun.tasks.model import RefCall, RefTurn, Task

SERVER = "calculator"
_DEVNULL = open(os.devnull, "w")  # noqa: SIM115 - the floors' server stderr, like the harness's log files
ATLAS_REFERENCE = {
    "task_ms": 82.0,
    "call_ms": 48.0,
    "call_floor_ms": 1.2,
    "tasks_per_s_c32": 30.0,
    "rss_mb": 583.0,
}


def make_tasks(n: int) -> list[Task]:
    return [
        Task(
            id=f"bench-{i}",
            prompt=f"What is 2+3? ({i})",
            enabled_tools=["calculator_calculate"],
            claims=["The result is 5"],
            reference_answer="The result is 5.",
            reference_trajectory=[
                RefTurn(calls=[RefCall(name="calculator_calculate", arguments={"expression": "2+3"})])
            ],
        )
        for i in range(n)
    ]


def engine_for(api_base: str, concurrency: int, stateful: bool, out: Path, data: Path, n: int) -> Engine:
    catalog = load_catalog()
    spec_entry = catalog.get(SERVER).model_copy(update={"stateful": stateful})
    catalog = catalog.merged([spec_entry])
    spec = RunSpec.model_validate(
        {
            "metadata": {"name": "bench"},
            "spec": {
                "tasks": {"path": "unused"},
                "parallelism": concurrency,
                "models": [
                    {
                        "name": "instant",
                        "model": "openai/instant",
                        "apiBase": api_base,
                        "maxConcurrency": concurrency,
                    }
                ],
            },
        }
    )
    plan = Plan(catalog=catalog, enabled_servers=[SERVER], tasks=make_tasks(n))
    return Engine(spec, plan, out, data)


async def run_engine(engine: Engine) -> tuple[float, list]:
    items = engine.items({})
    started = time.perf_counter()
    results = []
    engine.on_result = results.append
    await engine.run(items)
    wall = time.perf_counter() - started
    bad = [r for r in results if r.status != "scored" or not r.passed]
    if bad:
        raise SystemExit(f"bench tasks did not pass: {bad[0].status} {bad[0].reason}")
    return wall, results


async def bare_calls(n: int, data: Path) -> float:
    """Floor: a bare loop of MCP calls to the same server over stdio (ms per call)."""
    spec = load_catalog().get(SERVER)
    command = str(install_dir(spec) / "bin" / "mcp-server-calculator")
    params = StdioServerParameters(command=command, env=get_default_environment())
    async with stdio_client(params, errlog=_DEVNULL) as (r, w), ClientSession(r, w) as session:
        await session.initialize()
        for _ in range(20):
            await session.call_tool("calculate", {"expression": "2+3"})
        started = time.perf_counter()
        for _ in range(n):
            await session.call_tool("calculate", {"expression": "2+3"})
        return (time.perf_counter() - started) / n * 1000


async def harness_calls(n: int, data: Path) -> float:
    """The same loop through the harness's ToolSurface (ms per call)."""
    instance = await ServerInstance(load_catalog().get(SERVER), data, "/data").start()
    try:
        surface = ToolSurface(["calculator_calculate"], {SERVER: instance}, max_tool_calls=n + 100)
        for _ in range(20):
            await surface.call("calculator_calculate", {"expression": "2+3"})
        started = time.perf_counter()
        for _ in range(n):
            await surface.call("calculator_calculate", {"expression": "2+3"})
        return (time.perf_counter() - started) / n * 1000
    finally:
        await instance.stop()


async def bare_spawn(n: int) -> float:
    """Floor: spawn the server and complete the MCP handshake, nothing else (ms)."""
    spec = load_catalog().get(SERVER)
    command = str(install_dir(spec) / "bin" / "mcp-server-calculator")
    times = []
    for _ in range(n):
        started = time.perf_counter()
        params = StdioServerParameters(command=command, env=get_default_environment())
        async with stdio_client(params, errlog=_DEVNULL) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def bare_spawn_rate(n: int, concurrency: int) -> float:
    """Floor for fresh-per-task throughput: bare spawns+handshakes per second at this concurrency."""
    slots = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with slots:
            await bare_spawn(1)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - started)


async def harness_spawn(n: int, data: Path) -> float:
    times = []
    for _ in range(n):
        instance = await ServerInstance(load_catalog().get(SERVER), data, "/data").start()
        times.append(instance.startup_s)
        await instance.stop()
    return statistics.median(times) * 1000


SANDBOX_SERVERS = ("calculator", "everything", "code-runner")


async def sandbox_costs(
    names: tuple[str, ...], starts: int, calls: int, data: Path
) -> list[tuple[str, str, str, str]]:
    """Median start-up and per-call ms for each server, sandboxed vs. unconfined (alternating)."""
    catalog = load_catalog()
    modes = {"bwrap": Sandbox(), "none": Sandbox(bwrap=None, allow_host_exec=True)}
    if modes["bwrap"].unavailable:
        return [("sandbox overhead", "-", "-", f"not measured: {modes['bwrap'].unavailable}")]
    rows = []
    for name in names:
        spec = catalog.get(name)
        check = spec.check or {}
        tool, arguments = str(check["tool"]), check.get("arguments") or {}
        assert isinstance(arguments, dict)
        start_ms: dict[str, list[float]] = {m: [] for m in modes}
        call_ms: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(starts):
            for mode, sandbox in modes.items():
                instance = await ServerInstance(spec, data, "/data", sandbox=sandbox).start()
                try:
                    start_ms[mode].append(instance.startup_s * 1000)
                    for n in range(calls // starts + 2):
                        began = time.perf_counter()
                        await instance.call(tool, arguments, 60)
                        if n >= 2:  # the first calls warm the server up
                            call_ms[mode].append((time.perf_counter() - began) * 1000)
                finally:
                    await instance.stop()
        for label, samples in (("start-up", start_ms), ("call", call_ms)):
            ours, floor = statistics.median(samples["bwrap"]), statistics.median(samples["none"])
            rows.append(
                (
                    f"{name} {label}, sandboxed (ms)",
                    f"{ours:.1f}",
                    f"{floor:.1f} unconfined",
                    f"{ours / floor:.2f}x, {ours - floor:+.1f} ms (median of {len(samples['bwrap'])})",
                )
            )
    return rows


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    header = ("metric", "atlasrun", "floor (same run)", "ratio / reference")
    widths = [max(len(r[i]) for r in [*rows, header]) for i in range(4)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=200, help="tasks per pooled throughput point")
    parser.add_argument("--fresh-tasks", type=int, default=64, help="tasks per fresh-server throughput point")
    parser.add_argument("--sandbox-starts", type=int, default=6, help="start-ups per server and sandbox mode")
    parser.add_argument("--sandbox-calls", type=int, default=60, help="calls per server and sandbox mode")
    parser.add_argument("--sandbox-only", action="store_true", help="measure only the sandbox's cost")
    args = parser.parse_args()
    if args.sandbox_only:
        with tempfile.TemporaryDirectory(prefix="atlas-bench-") as scratch:
            print_table(
                asyncio.run(
                    sandbox_costs(SANDBOX_SERVERS, args.sandbox_starts, args.sandbox_calls, Path(scratch))
                )
            )
        return

    provider = subprocess.Popen(
        [sys.executable, "-m", "atlasrun.testing.scripted_provider"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert provider.stdout is not None
    api_base = provider.stdout.readline().strip()
    work = Path(tempfile.mkdtemp(prefix="atlas-bench-"))
    data = work / "data"
    data.mkdir()
    rows: list[tuple[str, str, str, str]] = []
    try:
        floor_call = asyncio.run(bare_calls(500, data))
        ours_call = asyncio.run(harness_calls(500, data))
        rows.append(
            (
                "tool call (ms)",
                f"{ours_call:.2f}",
                f"{floor_call:.2f} bare MCP loop",
                f"{ours_call / floor_call:.2f}x floor; MCP-Atlas {ATLAS_REFERENCE['call_ms']:.0f} ms "
                f"({ATLAS_REFERENCE['call_ms'] / ours_call:.0f}x slower)",
            )
        )
        floor_spawn = asyncio.run(bare_spawn(8))
        ours_spawn = asyncio.run(harness_spawn(8, data))
        rows.append(
            (
                "server start-up (ms)",
                f"{ours_spawn:.0f}",
                f"{floor_spawn:.0f} bare spawn+init",
                f"{ours_spawn / floor_spawn:.2f}x floor",
            )
        )

        # Warm-up (imports, litellm's first-call setup, connection pools), not measured.
        asyncio.run(run_engine(engine_for(api_base, 1, False, work / "warm", data, 20)))
        # Concurrency 1, pooled: per-task overhead = wall - model - tool.
        wall, results = asyncio.run(run_engine(engine_for(api_base, 1, False, work / "c1", data, args.tasks)))
        per_task = wall / len(results) * 1000
        model = statistics.mean(r.model_s for r in results) * 1000
        tool = statistics.mean(r.tool_s for r in results) * 1000
        overhead = per_task - model - tool
        rows.append(
            (
                "task wall, c=1 (ms)",
                f"{per_task:.1f}",
                f"{model + tool:.1f} model+tool",
                f"MCP-Atlas {ATLAS_REFERENCE['task_ms']:.0f} ms ({ATLAS_REFERENCE['task_ms'] / per_task:.1f}x)",
            )
        )
        rows.append(("  model time (ms)", f"{model:.1f}", "-", "2 litellm calls to the instant model"))
        rows.append(("  tool time (ms)", f"{tool:.2f}", f"{floor_call:.2f}", "1 call"))
        rows.append(("  harness overhead (ms)", f"{overhead:.1f}", "-", "wall - model - tool"))

        for stateful, n in ((False, args.tasks), (True, args.fresh_tasks)):
            kind = "fresh" if stateful else "pooled"
            for concurrency in (1, 8, 32):
                wall, results = asyncio.run(
                    run_engine(
                        engine_for(api_base, concurrency, stateful, work / f"{kind}-{concurrency}", data, n)
                    )
                )
                rate = len(results) / wall
                floor = "-"
                if stateful:
                    floor_rate = asyncio.run(bare_spawn_rate(n, concurrency))
                    floor = f"{floor_rate:.1f} bare spawns/s"
                note = (
                    (
                        f"MCP-Atlas ~{ATLAS_REFERENCE['tasks_per_s_c32']:.0f}/s "
                        f"({rate / ATLAS_REFERENCE['tasks_per_s_c32']:.1f}x)"
                    )
                    if concurrency == 32
                    else ""
                )
                if stateful:
                    note = f"{rate / floor_rate:.2f}x floor" + (f"; {note}" if note else "")
                rows.append((f"throughput {kind} c={concurrency} (tasks/s)", f"{rate:.1f}", floor, note))
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows.append(
            (
                "peak RSS, harness (MB)",
                f"{rss_mb:.0f}",
                "-",
                f"MCP-Atlas {ATLAS_REFERENCE['rss_mb']:.0f} MB ({ATLAS_REFERENCE['rss_mb'] / rss_mb:.1f}x)",
            )
        )
        rows += asyncio.run(sandbox_costs(SANDBOX_SERVERS, args.sandbox_starts, args.sandbox_calls, data))
    finally:
        assert provider.stdin is not None
        provider.stdin.close()
        provider.wait(timeout=10)
        subprocess.run(["rm", "-rf", str(work)], check=False)

    print_table(rows)


if __name__ == "__main__":
    main()
