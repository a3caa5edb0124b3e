"""Local scale: N one-call tasks (scripted model, pooled servers) in one run.

Prints throughput and RSS of the harness process tree per thousand results, then the first
against the last thousand (goal: flat). ``python bench/scale.py --tasks 10000``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from proctree import descendants, rss_mb
from workload import make_data, make_engine, make_tasks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--mode", choices=["pooled", "fresh"], default="pooled")
    parser.add_argument("--block", type=int, default=1000)
    args = parser.parse_args()
    provider = subprocess.Popen(
        [sys.executable, "-m", "atlasrun.testing.scripted_provider"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert provider.stdout is not None and provider.stdin is not None
    api_base = provider.stdout.readline().strip()
    work = Path(tempfile.mkdtemp(prefix="atlas-scale-"))
    blocks: list[tuple[float, float]] = []  # (tasks/s, RSS MB) per block
    try:
        engine = make_engine(
            api_base, args.mode, args.concurrency, make_tasks(args.tasks), work / "out", make_data(work)
        )
        count, mark, failed = 0, time.perf_counter(), 0

        def on_result(result: Any) -> None:
            nonlocal count, mark, failed
            count += 1
            if result.status != "scored" or not result.passed:
                failed += 1
                if failed <= 3:
                    print(f"task {result.task_id} {result.status}: {result.reason}", flush=True)
            if count % args.block == 0:
                now = time.perf_counter()
                rss = rss_mb([os.getpid(), *descendants(os.getpid(), frozenset({provider.pid}))])
                blocks.append((args.block / (now - mark), rss))
                mark = now
                load = Path("/proc/loadavg").read_text().split()[0]
                print(
                    f"{count:>7} done  {blocks[-1][0]:6.1f} tasks/s  RSS {rss:6.0f} MB  failed {failed}  load {load}",
                    flush=True,
                )

        engine.on_result = on_result
        asyncio.run(engine.run(engine.items({})))
    finally:
        provider.stdin.close()
        provider.wait(timeout=10)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    if len(blocks) >= 2:
        (first_tps, first_rss), (last_tps, last_rss) = blocks[0], blocks[-1]
        print(
            f"first vs last {args.block}: {first_tps:.1f} -> {last_tps:.1f} tasks/s "
            f"({last_tps / first_tps:.2f}x), RSS {first_rss:.0f} -> {last_rss:.0f} MB ({last_rss / first_rss:.2f}x)"
        )


if __name__ == "__main__":
    main()
