"""Deterministic judge speed per claim over the shipped labelled pairs (goal: < 1 ms).

    .venv/bin/python bench/judge_speed.py

Prints CPU time of this thread (fair on a shared machine) and wall time; the facts cache is
emptied before every claim, so nothing read for one pair is reused for the next.
"""

from __future__ import annotations

import time
from pathlib import Path

from atlasrun.judge.deterministic import DeterministicJudge
from atlasrun.judge.facts import read
from atlasrun.scoring.judge_eval import load_labels

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def main() -> None:
    pairs = load_labels(DATA / "judge_labels.jsonl") + load_labels(DATA / "judge_labels_holdout.jsonl")
    judge = DeterministicJudge()
    for p in pairs[:50]:  # warm-up: regex compilation caches
        judge.judge_sync(p.claim, p.answer)
    for clock in (time.thread_time, time.perf_counter):
        samples = []
        for _ in range(3):
            for p in pairs:
                read.cache_clear()
                began = clock()
                judge.judge_sync(p.claim, p.answer)
                samples.append(clock() - began)
        samples.sort()
        mean = sum(samples) / len(samples)
        p99 = samples[int(0.99 * len(samples))]
        print(f"{clock.__name__}: {len(samples)} claims, mean {mean * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us")


if __name__ == "__main__":
    main()
