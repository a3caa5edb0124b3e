"""Retries of failing passes, as a controller does them: per run, exponential with jitter.

The n-th consecutive failure of a run waits ``initial * 2**(n-1)`` seconds, capped at ``max``,
scaled by a random factor in [0.5, 1] (never below ``initial``): runs that fail together do not
retry in lockstep. A successful pass resets the run's count.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from atlasrun.cluster.operator.settings import RetrySettings


class Backoff:
    def __init__(self, settings: RetrySettings, jitter: Callable[[], float] = random.random) -> None:
        self.settings = settings
        self.jitter = jitter  # uniform in [0, 1)
        self.failures: dict[str, int] = {}

    def failed(self, key: str) -> tuple[int, float]:
        """Count a failure of ``key``: (consecutive failures, seconds to wait before the retry)."""
        n = self.failures[key] = self.failures.get(key, 0) + 1
        ceiling = min(self.settings.max_s, self.settings.initial_s * 2.0 ** min(n - 1, 32))
        return n, max(self.settings.initial_s, ceiling * (0.5 + 0.5 * self.jitter()))

    def succeeded(self, key: str) -> None:
        self.failures.pop(key, None)
