"""``atlas --help`` wall time (median of 7 runs) vs. a bare interpreter start, in the same run.

Target: under 0.5 s (issue 8): building the parser imports neither the MCP SDK nor litellm.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ATLAS = Path(sys.executable).with_name("atlas")


def median_s(cmd: list[str], runs: int = 7) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    floor = median_s([sys.executable, "-c", "pass"])
    help_s = median_s([str(ATLAS), "--help"])
    verdict = "ok" if help_s < 0.5 else "OVER the 0.5 s target"
    print(f"atlas --help: {help_s * 1000:.0f} ms (bare python start: {floor * 1000:.0f} ms) - {verdict}")


if __name__ == "__main__":
    main()
