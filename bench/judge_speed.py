"""Deterministic judge speed per claim over the shipped labelled pairs (goal: < 1 ms), then how
reading one answer scales with its length (goal: time per KB at 100 KB within 1.5x of at 10 KB;
700 KB is shown, not held to it: blanking each figure found still copies the text once. A
quadratic reader took 188 s on a 688 KB answer).

    .venv/bin/python bench/judge_speed.py

Prints CPU time of this thread (fair on a shared machine) and wall time; the facts cache is
emptied before every claim, so nothing read for one pair is reused for the next.
"""

from __future__ import annotations

import time
from pathlib import Path

from atlasrun.judge.deterministic import DeterministicJudge
from atlasrun.judge.reading import read
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
    scaling(" ".join(p.answer for p in pairs))


def scaling(corpus: str) -> None:
    """CPU time to read one answer of 10 KB to 700 KB cut from the labelled answers."""
    print("answer KB | read CPU s | ms per KB | vs 10 KB")
    base = 0.0
    for kb in (10, 100, 700):
        text = (corpus * (kb * 1024 // len(corpus) + 1))[: kb * 1024]
        read.cache_clear()
        began = time.thread_time()
        read(text)
        spent = time.thread_time() - began
        per_kb = spent / kb
        base = base or per_kb
        print(f"{kb:9} | {spent:10.2f} | {per_kb * 1e3:9.2f} | {per_kb / base:7.2f}x")


if __name__ == "__main__":
    main()
