"""Keep secrets out of everything a run writes.

Secrets are known by the env var names a run declares (models' and judges'
``apiKeyEnv``, servers' ``secrets``); their values are replaced wherever they
would appear in a result, transcript or log line written by the runner.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

MASK = "[REDACTED]"
MIN_SECRET_LEN = 6  # shorter values would mask ordinary text


class Redactor:
    def __init__(self, env_names: Iterable[str]) -> None:
        values = {os.environ.get(name, "") for name in env_names if name}
        self._values = sorted((v for v in values if len(v) >= MIN_SECRET_LEN), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, MASK)
        return text
