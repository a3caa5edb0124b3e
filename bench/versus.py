"""``make bench``: AtlasRun against the MCP-Atlas harness (the peer), same workload, same run.

One-tool-call tasks from the same scripted model (one process on 127.0.0.1) whose tool surface
spans filesystem, memory, git and calculator: the same four server binaries for both. Interleaved
repetitions: each prints its figures; then medians and paired ratios (AtlasRun / peer, per
repetition, so machine load hits both alike). Writes ``bench/out/harness.json``.

AtlasRun modes (bench/workload.py, a fresh process per repetition): pooled (servers shared like
the peer's), fresh (the catalog default: stateful servers fresh per task; pools warmed before the
clock starts, as the peer's servers are started before it). Every measurement starts once the
process tree is quiet (``proctree.wait_idle``). The peer shares one
server per kind across all tasks (no isolation) and caches calculator results.
If the peer cannot be installed or started, the reason is printed and AtlasRun's figures are
still written, with the peer's as null.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from proctree import TreeCpu, descendants, rss_mb, unique_mb, wait_idle

OUT = Path(__file__).parent / "out" / "harness.json"
# The goals, checked against the medians and paired ratios.
GOALS = {
    "atlas_fresh_c8_tps": ">= 10 tasks/s and >= peer_c8_tps",
    "ratio_c32_tps": ">= 5x the peer",
    "ratio_cpu_per_task": "<= 0.15x the peer",
    "ratio_rss_ready": "<= 0.8x the peer",
    "ratio_mem_ready": "<= 0.8x the peer",
}


def atlas_rep(
    api_base: str, mode: str, concurrency: int, tasks: int, work: Path, rss: bool, tree: Path | None = None
) -> dict[str, float]:
    """One repetition in a new process; ``tree``: run another checkout's ``atlasrun`` (its
    ``operator`` directory goes first on the import path), e.g. the commit before a change."""
    args = [sys.executable, str(Path(__file__).with_name("workload.py")), "--api-base", api_base,
            "--mode", mode, "--concurrency", str(concurrency), "--tasks", str(tasks), "--work", str(work)]  # fmt: skip
    env = dict(os.environ) | ({"PYTHONPATH": str(tree / "operator")} if tree else {})
    done = subprocess.run(
        [*args, *(["--rss"] if rss else [])], capture_output=True, text=True, check=False, env=env
    )
    if done.returncode:
        raise SystemExit(f"atlas {mode} c{concurrency} failed: {done.stderr[-2000:]}{done.stdout[-500:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def peer_rep(peer: object, concurrency: int, tasks: int) -> dict[str, float]:
    from peer import Peer

    assert isinstance(peer, Peer)
    wait_idle()  # this process's tree: the peer and the scripted model, quiet before the clock
    trees = [TreeCpu(pid) for pid in peer.pids]  # the peer's processes, not this load generator
    for tree in trees:
        tree.start()
    tps = asyncio.run(peer.run(tasks, concurrency))
    used = sum(tree.stop() for tree in trees)
    return {"tps": tps, "cpu_ms_per_task": used / tasks}


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1000)  # 200 gave 1-2 s repetitions: noisy c32 ratios
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also run AtlasRun from this checkout (e.g. `git archive <commit> operator | tar -x -C DIR`) "
        "in every repetition: before/after figures under the same load (printed as base_*)",
    )
    args = parser.parse_args()
    provider = subprocess.Popen(
        [sys.executable, "-m", "atlasrun.testing.scripted_provider"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert provider.stdout is not None and provider.stdin is not None
    api_base = provider.stdout.readline().strip()
    work = Path(tempfile.mkdtemp(prefix="atlas-versus-"))
    reps: list[dict[str, float | None]] = []
    peer_ctx = None
    peer_error = "not run (--no-peer)" if args.no_peer else None
    try:
        if not args.no_peer:
            try:
                import peer as peer_mod
                from workload import WARM_CONCURRENCY, WARM_TASKS, make_data

                peer_mod.install()
                peer_ctx = peer_mod.Peer(api_base, make_data(work / "peer"), work / "peer").__enter__()
                asyncio.run(peer_ctx.run(WARM_TASKS, WARM_CONCURRENCY))  # the same warm-up as AtlasRun's
                pids = [*peer_ctx.pids, *(d for p in peer_ctx.pids for d in descendants(p))]
                peer_rss, peer_mem = rss_mb(pids), unique_mb(pids)  # at its last result, as AtlasRun's
            except Exception as exc:  # the peer is optional: say why, keep AtlasRun's figures
                peer_error = f"{type(exc).__name__}: {exc}"
                print(f"peer not run: {peer_error}", flush=True)
        for rep in range(args.reps):
            row: dict[str, float | None] = {"load": float(load())}
            for c in (8, 32):
                a = atlas_rep(api_base, "pooled", c, args.tasks, work / f"a{rep}-{c}", rss=c == 8)
                row[f"atlas_c{c}_tps"] = a["tps"]
                if c == 8:
                    row["atlas_rss_ready_mb"] = a["rss_ready_mb"]
                    row["atlas_mem_ready_mb"] = a["mem_ready_mb"]
                else:
                    row["atlas_cpu_ms_per_task"] = a["cpu_ms_per_task"]
                if peer_ctx is not None:
                    p = peer_rep(peer_ctx, c, args.tasks)
                    row[f"peer_c{c}_tps"] = p["tps"]
                    if c == 32:
                        row["peer_cpu_ms_per_task"] = p["cpu_ms_per_task"]
            if args.baseline:
                for c in (8, 32):
                    b = atlas_rep(
                        api_base, "pooled", c, args.tasks, work / f"b{rep}-{c}", c == 8, args.baseline
                    )
                    row[f"base_c{c}_tps"] = b["tps"]
                    if c == 8:
                        row["base_rss_ready_mb"] = b["rss_ready_mb"]
                        row["base_mem_ready_mb"] = b["mem_ready_mb"]  # (measured by this bench/workload.py)
                    else:
                        row["base_cpu_ms_per_task"] = b["cpu_ms_per_task"]
                b = atlas_rep(api_base, "fresh", 8, args.tasks, work / f"bf{rep}", False, args.baseline)
                row["base_fresh_c8_tps"] = b["tps"]
                row["base_fresh_cpu_ms_per_task"] = b["cpu_ms_per_task"]
            f = atlas_rep(api_base, "fresh", 8, args.tasks, work / f"f{rep}", rss=False)
            row["atlas_fresh_c8_tps"] = f["tps"]
            row["atlas_fresh_cpu_ms_per_task"] = f["cpu_ms_per_task"]
            row["atlas_fresh_started"] = f["started"]  # server processes started during the run
            row["atlas_fresh_refresh_copies"] = f["refresh_copies"]  # refreshes that copied data
            if peer_ctx is not None:
                row["peer_rss_ready_mb"] = peer_rss
                row["peer_mem_ready_mb"] = peer_mem
            reps.append(row)
            print(
                f"rep {rep + 1}: " + "  ".join(f"{k}={v:.1f}" for k, v in row.items() if v is not None),
                flush=True,
            )
    finally:
        if peer_ctx is not None:
            peer_ctx.__exit__(None, None, None)
        provider.stdin.close()
        provider.wait(timeout=10)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    report(reps, peer_error)


def report(reps: list[dict[str, float | None]], peer_error: str | None) -> None:
    keys = ["atlas_c8_tps", "atlas_c32_tps", "peer_c8_tps", "peer_c32_tps", "atlas_fresh_c8_tps",
            "atlas_fresh_cpu_ms_per_task", "atlas_cpu_ms_per_task", "peer_cpu_ms_per_task",
            "atlas_rss_ready_mb", "peer_rss_ready_mb", "atlas_mem_ready_mb", "peer_mem_ready_mb", "load",
            "base_c8_tps", "base_c32_tps", "base_fresh_c8_tps", "base_fresh_cpu_ms_per_task",
            "base_cpu_ms_per_task", "base_rss_ready_mb", "base_mem_ready_mb",
            "atlas_fresh_started", "atlas_fresh_refresh_copies"]  # fmt: skip
    result: dict[str, object] = {}
    print("\nmedians")
    for key in keys:
        values = [float(v) for r in reps if (v := r.get(key)) is not None]
        result[key] = statistics.median(values) if values else None
        if key.startswith("base_") and not values:
            continue
        print(f"  {key:28} {result[key] if result[key] is None else round(float(result[key]), 1)}")
    pairs = {
        "ratio_c8_tps": ("atlas_c8_tps", "peer_c8_tps"),
        "ratio_c32_tps": ("atlas_c32_tps", "peer_c32_tps"),
        "ratio_fresh_c8_tps": ("atlas_fresh_c8_tps", "peer_c8_tps"),
        "ratio_cpu_per_task": ("atlas_cpu_ms_per_task", "peer_cpu_ms_per_task"),
        "ratio_rss_ready": ("atlas_rss_ready_mb", "peer_rss_ready_mb"),
        "ratio_mem_ready": ("atlas_mem_ready_mb", "peer_mem_ready_mb"),
        "base_ratio_c32_tps": ("base_c32_tps", "peer_c32_tps"),
        "base_ratio_fresh_c8_tps": ("base_fresh_c8_tps", "peer_c8_tps"),
        "base_ratio_cpu_per_task": ("base_cpu_ms_per_task", "peer_cpu_ms_per_task"),
        "base_ratio_rss_ready": ("base_rss_ready_mb", "peer_rss_ready_mb"),
        "base_ratio_mem_ready": ("base_mem_ready_mb", "peer_mem_ready_mb"),
    }
    print("paired ratios (AtlasRun / peer; median of per-repetition ratios)")
    for name, (ours, theirs) in pairs.items():
        if name.startswith("base_") and not any(r.get(ours) for r in reps):
            continue
        ratios = [float(r[ours]) / float(r[theirs]) for r in reps if r.get(ours) and r.get(theirs)]  # type: ignore[arg-type]
        result[name] = statistics.median(ratios) if ratios else None
        shown = "n/a" if result[name] is None else f"{result[name]:.2f}"
        print(f"  {name:28} {shown}   goal: {GOALS.get(name, '-')}")
    print(f"  atlas_fresh_c8_tps goal: {GOALS['atlas_fresh_c8_tps']}")
    result["peer_error"] = peer_error
    result["repetitions"] = reps
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
