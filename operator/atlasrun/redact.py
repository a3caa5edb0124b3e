"""Keep secrets out of everything AtlasRun writes: one redaction for every write boundary.

A secret is the value of an environment variable that a run declares (models' and judges'
``apiKeyEnv``, servers' ``secrets``; see ``declare``) or whose name looks like one
(``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ...). Each value is masked in the forms
it takes on the way to disk: raw, JSON-escaped (once and twice: a provider's JSON error body
quoted inside a JSON record), URL-encoded and HTML-escaped. The writers (results, transcripts,
diagnoses, summaries, the report, S3 objects, the CLI's own output) call ``scrub`` last.
"""

from __future__ import annotations

import functools
import html
import io
import json
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable
from typing import TextIO

MASK = "[REDACTED]"
MIN_SECRET_LEN = 6  # shorter declared values would mask ordinary text
MIN_GUESSED_LEN = 8  # values of variables that only look secret by name
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)

_declared: set[str] = set()


def declare(env_names: Iterable[str | None]) -> None:
    """Env var names whose values are secrets for the rest of this process (e.g. ``apiKeyEnv``)."""
    _declared.update(name for name in env_names if name)


def _json_escaped(value: str) -> str:
    return json.dumps(value)[1:-1]


def _json_escaped_ascii(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)[1:-1]


_ENCODINGS: tuple[Callable[[str], str], ...] = (
    _json_escaped,
    _json_escaped_ascii,
    lambda v: urllib.parse.quote(v, safe=""),
    lambda v: urllib.parse.quote_plus(v, safe=""),
    lambda v: html.escape(v, quote=True),
    lambda v: html.escape(v, quote=False),
)


def variants(secret: str, depth: int = 2) -> set[str]:
    """The secret and the forms it takes after up to ``depth`` encodings (JSON, URL, HTML)."""
    found = {secret}
    frontier = {secret}
    for _ in range(depth):
        frontier = {encode(v) for v in frontier for encode in _ENCODINGS} - found
        found |= frontier
    return found


@functools.lru_cache(maxsize=32)
def _pattern(values: frozenset[str]) -> re.Pattern[str] | None:
    forms = {form for value in values for form in variants(value)}
    if not forms:
        return None
    return re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))


def secret_values(env_names: Iterable[str] = ()) -> frozenset[str]:
    """Current values of the declared and the secret-looking variables (too-short ones skipped)."""
    named = _declared | {n for n in env_names if n}
    return frozenset(
        value
        for name, value in os.environ.items()
        if (name in named and len(value) >= MIN_SECRET_LEN)
        or (SECRET_NAME.search(name) and _looks_secret(value))
    )


def _looks_secret(value: str) -> bool:
    """A guessed secret (by its variable's name) is long enough and not a path, number or flag."""
    return len(value) >= MIN_GUESSED_LEN and not value.startswith(("/", "~")) and not value.isdigit()


class Redactor:
    """Masks the secrets of ``env_names`` (plus every declared or secret-looking variable)."""

    def __init__(self, env_names: Iterable[str | None] = ()) -> None:
        self._names = tuple(n for n in env_names if n)

    def __call__(self, text: str) -> str:
        pattern = _pattern(secret_values(self._names))
        return pattern.sub(MASK, text) if pattern else text


def scrub(text: str) -> str:
    """``text`` with every known secret masked (in every encoded form)."""
    return Redactor()(text)


class ScrubbingStream(io.TextIOBase):
    """A text stream that masks secrets in everything written to it (the CLI's stdout and stderr)."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(scrub(text))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding
