"""One AtlasRun repetition of the side-by-side workload, in its own process (``bench/versus.py``).

Workload: one-tool-call tasks (the scripted model asks for one calculator call, then answers)
whose tool surface spans the four servers MCP-Atlas is compared on (filesystem, memory, git,
calculator), so each task connects to all four. Modes:

- ``pooled``: every server shared by all tasks (what the peer does; no isolation);
- ``fresh``: the catalog's default strategies (filesystem, memory, git fresh per task); the pools
  are warmed to the engine's concurrency before the clock starts (a long run's steady state);
- ``respawn``: every stateful server a new process per task (``ATLAS_FRESH=respawn``).

Prints one JSON line: tasks/s, CPU per task of the whole process tree, memory ready (``--rss``:
the pooled warm-up's tree at its last result, summed VmRSS and each page once), and the fresh
pools' counts during the measured run (processes started, refreshes, refreshes that copied data).
The clock starts once the process tree is quiet (``proctree.wait_idle``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parent))

from proctree import TreeCpu, descendants, rss_mb, unique_mb, wait_idle

SERVERS = ("calculator", "filesystem", "memory", "git")
TOOLS = ["calculator_calculate", "filesystem_list_allowed_directories", "memory_read_graph", "git_git_status"]


def make_tasks(n: int, prefix: str = "t") -> list:  # type: ignore[type-arg]
    from atlasrun.tasks.model import RefCall, RefTurn, Task

    return [
        Task(
            id=f"{prefix}-{i}",
            prompt=f"What is 2+3? ({i})",
            enabled_tools=TOOLS,
            claims=["The result is 5"],
            reference_answer="The result is 5.",
            reference_trajectory=[
                RefTurn(calls=[RefCall(name="calculator_calculate", arguments={"expression": "2+3"})])
            ],
        )
        for i in range(n)
    ]


def make_engine(api_base: str, mode: str, concurrency: int, tasks: list, out: Path, data: Path):  # type: ignore[no-untyped-def,type-arg]
    from atlasrun.runner.engine import Engine
    from atlasrun.runner.plan import Plan
    from atlasrun.runspec.run import RunSpec
    from atlasrun.servers.catalog import load_catalog

    catalog = load_catalog()
    if mode == "pooled":
        catalog = catalog.merged([catalog.get(s).model_copy(update={"stateful": False}) for s in SERVERS])
    model = {"name": "instant", "model": "openai/instant", "apiBase": api_base, "maxConcurrency": concurrency}
    spec = RunSpec.model_validate(
        {
            "metadata": {"name": "bench"},
            "spec": {"tasks": {"path": "unused"}, "parallelism": concurrency, "models": [model]},
        }
    )
    return Engine(spec, Plan(catalog=catalog, enabled_servers=list(SERVERS), tasks=tasks), out, data)


async def run(engine, on_last=None) -> int:  # type: ignore[no-untyped-def]
    """Run every item; ``on_last()`` is called when the last result is recorded, before the
    engine stops its servers (a long run's teardown is not part of its per-task cost)."""
    results: list = []  # type: ignore[type-arg]
    items = engine.items({})

    def record(result) -> None:  # type: ignore[no-untyped-def]
        results.append(result)
        if len(results) == len(items) and on_last is not None:
            on_last()

    engine.on_result = record
    await engine.run(items)
    bad = [r for r in results if r.status != "scored" or not r.passed]
    if bad:
        raise SystemExit(f"bench tasks did not pass: {bad[0].status} {bad[0].reason}")
    return len(results)


# The warm-up before every measurement, the peer's too (bench/versus.py): memory "ready" is
# measured at its last result, both harnesses' servers having served the same tasks.
WARM_TASKS, WARM_CONCURRENCY = 16, 4


def memory_now(exclude: frozenset[int]) -> dict[str, float | None]:
    """This process's tree (harness + servers + their sandboxes): summed VmRSS, and resident
    memory with each physical page counted once (``proctree.unique_mb``)."""
    pids = [os.getpid(), *descendants(os.getpid(), exclude)]
    return {"rss_ready_mb": rss_mb(pids), "mem_ready_mb": unique_mb(pids), "processes": len(pids)}


async def warm_up(engine, mode: str, concurrency: int) -> None:  # type: ignore[no-untyped-def]
    """Start the servers before the clock starts, as the peer's are: pooled, the shared ones;
    fresh, the pools' instances, as many as the engine has tasks preparing or running at once
    (``parallelism`` plus its start-up lookahead). Then wait for the process tree to go quiet."""
    manager = engine.manager
    if mode == "pooled":
        manager.release(await manager.acquire(list(SERVERS)))
    elif mode == "fresh":
        held = await asyncio.gather(
            *(manager.acquire(list(SERVERS)) for _ in range(concurrency + min(concurrency, 4)))
        )
        for instances in held:
            manager.release(instances)
        await manager.settle()
    await asyncio.to_thread(wait_idle)


def pool_counts(pools: list) -> dict[str, int]:  # type: ignore[type-arg]
    """Processes started, refreshes and refreshes that copied data, over the fresh pools."""
    names = ("started", "refreshed", "refresh_copies")  # (a --baseline tree may lack some)
    return {name: sum(getattr(p, name, 0) for p in pools) for name in names}


async def measured(
    engine, mode: str, concurrency: int, profile: Path | None
) -> tuple[int, float, float, dict[str, int]]:  # type: ignore[no-untyped-def]
    """Run the engine; returns (tasks, wall s, tree CPU ms, pool counts during the run)."""
    (engine.store.root / "logs").mkdir(parents=True, exist_ok=True)
    await warm_up(engine, mode, concurrency)
    pools = list(engine.manager._fresh.values())  # kept: the engine's close() lets go of them
    counts: dict[str, int] = {}
    counts_before = pool_counts(pools)
    profiler = None
    if profile:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="disabled")
        profiler.start()
    cpu = TreeCpu()
    cpu.start()
    own = time.process_time()
    started = time.perf_counter()
    ended: list[float] = []

    def last() -> None:  # the clock stops at the last result, before the servers are stopped
        ended.append(time.perf_counter() - started)
        ended.append(cpu.stop())
        counts["harness_cpu_ms"] = int((time.process_time() - own) * 1000 - cpu.sampler_ms)

    done = await run(engine, last)
    wall, used = ended
    counts |= {k: v - counts_before[k] for k, v in pool_counts(pools).items()}
    if os.environ.get("BENCH_BY_PROCESS"):
        shares = sorted(cpu.by_name().items(), key=lambda kv: -kv[1])
        print(
            "CPU ms per task by process: " + ", ".join(f"{n} {ms / done:.2f}" for n, ms in shares),
            file=sys.stderr,
        )
    if profiler is not None:
        profiler.stop()
        all_frames = bool(os.environ.get("PROFILE_ALL"))
        shares = package_shares(profiler)
        text = profiler.output_text(unicode=False, color=False, show_all=all_frames)
        profile.write_text(shares + "\n" + text)
        print(shares, file=sys.stderr)
    return done, wall, used, counts


# Where a sample's own time is charged: the first match in its file path (else "other").
PACKAGES = ("litellm", "openai", "httpx", "httpcore", "aiohttp", "anyio", "mcp", "pydantic_core", "pydantic",
            "atlasrun", "asyncio", "selectors", "json", "logging", "concurrent", "threading")  # fmt: skip


def package_shares(profiler) -> str:  # type: ignore[no-untyped-def]
    """The profile's self time by package (waiting in ``select`` is idle, reported apart)."""
    totals: dict[str, float] = {}
    others: dict[str, float] = {}  # files charged to "other"
    functions: dict[str, float] = {}  # self time per function (built-ins' included)

    def walk(frame, owner: str) -> None:  # type: ignore[no-untyped-def]
        path = frame.file_path or ""
        if frame.function.rpartition(".")[2] in ("select", "sleep", "poll") or "[await]" in frame.function:
            owner = "idle (select, await)"
        elif not frame.is_synthetic and not path.startswith("<"):  # built-ins: charged to the caller
            owner = next((p for p in PACKAGES if f"/{p}/" in path or path.endswith(f"/{p}.py")), "other")
        own = frame.time - sum(c.time for c in frame.children)
        totals[owner] = totals.get(owner, 0.0) + own
        if owner == "other" and not path.startswith("<"):
            others[path] = others.get(path, 0.0) + own
        if not frame.is_synthetic and owner != "idle (select, await)":
            where = f"{frame.function} ({Path(path).name})"
            functions[where] = (
                functions.get(where, 0.0) + own + sum(c.time for c in frame.children if c.is_synthetic)
            )
        for child in frame.children:
            walk(child, owner)

    root = profiler.last_session.root_frame() if profiler.last_session else None
    if root is None:
        return "no samples"
    walk(root, "other")
    idle = totals.pop("idle (select, await)", 0.0)
    busy = sum(totals.values()) or 1.0
    lines = [f"profile self time by package: busy {busy:.2f} s, idle {idle:.2f} s"]
    lines += [
        f"  {k:14} {v / busy:6.1%}  {v:.2f} s" for k, v in sorted(totals.items(), key=lambda kv: -kv[1])
    ]
    top = sorted(others.items(), key=lambda kv: -kv[1])[:8]
    lines += ["  other, by file: " + ", ".join(f"{Path(f).name} {v / busy:.1%}" for f, v in top)]
    top_functions = sorted(functions.items(), key=lambda kv: -kv[1])[:12]
    lines += ["  top functions: " + ", ".join(f"{f} {v / busy:.1%}" for f, v in top_functions)]
    return "\n".join(lines)


def make_data(root: Path) -> Path:
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "numbers.txt").write_text("12\n30\n")
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=data, env=env, check=True)
    return data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-base", required=True)
    parser.add_argument("--mode", choices=["pooled", "fresh", "respawn"], default="pooled")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument(
        "--rss", action="store_true", help="also measure memory ready (at the warm-up's last result)"
    )
    parser.add_argument("--profile", type=Path, help="write a pyinstrument profile (text) of the run here")
    args = parser.parse_args()
    if args.mode == "respawn":
        os.environ["ATLAS_FRESH"] = "respawn"
    data = make_data(args.work)
    exclude: frozenset[int] = frozenset()
    tasks = make_tasks(WARM_TASKS, "warm")
    warm = make_engine(args.api_base, "pooled", WARM_CONCURRENCY, tasks, args.work / "warm", data)
    ready: dict[str, float | None] = {"rss_ready_mb": None, "mem_ready_mb": None}
    asyncio.run(run(warm, (lambda: ready.update(memory_now(exclude))) if args.rss else None))
    engine = make_engine(
        args.api_base, args.mode, args.concurrency, make_tasks(args.tasks), args.work / "out", data
    )
    done, wall, used, counts = asyncio.run(measured(engine, args.mode, args.concurrency, args.profile))
    harness = counts.pop("harness_cpu_ms") / done
    figures = {"tps": done / wall, "cpu_ms_per_task": used / done, "harness_cpu_ms_per_task": harness}
    figures |= ready | {"wall_s": wall, "litellm_imported": "litellm" in sys.modules}
    print(json.dumps(figures | counts))


if __name__ == "__main__":
    main()
