"""Keep secrets out of everything AtlasRun writes: one redaction for every write boundary.

A secret is the value of an environment variable that a run declares (models' and judges'
``apiKeyEnv``, servers' ``secrets``; see ``declare``) or whose name looks like one
(``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ...). Each value is masked in the forms
it takes on the way to disk: raw, JSON-escaped (once and twice: a provider's JSON error body
quoted inside a JSON record), URL-encoded and HTML-escaped; and in the forms task code may give
it (``transforms``): base64 and base64url (also inside a longer encoded text, at any of the three
byte alignments), hex, reversed, every byte percent-encoded. The writers (results, transcripts,
diagnoses, summaries, the report, S3 objects, the CLI's own output) call ``scrub`` last.
Masking cannot catch what is not one of these forms (docs/security.md, "Secrets").
"""

from __future__ import annotations

import base64
import binascii
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


def _base64_cores(raw: bytes, encode: Callable[[bytes], bytes]) -> set[str]:
    """The characters of ``raw``'s encoding that are the same wherever it sits in a longer text:
    one per byte alignment (0, 1, 2 bytes before it), without the characters shared with its
    neighbours and without padding."""
    cores = set()
    for shift in range(3):
        text = encode(b"\0" * shift + raw).decode()
        cores.add(text[-(-8 * shift // 6) : 8 * (shift + len(raw)) // 6])
    return cores


def _percent_all(raw: bytes, digits: str) -> str:
    return "".join(f"%{byte:{digits}}" for byte in raw)


def transforms(secret: str) -> set[str]:
    """Forms task code may give a secret (base64, base64url, hex, reversed, percent-encoded),
    beside the secret itself; those shorter than ``MIN_SECRET_LEN`` are left out."""
    raw = secret.encode()
    hexed = binascii.hexlify(raw).decode()
    quoted = urllib.parse.quote(secret, safe="")
    forms = {
        secret[::-1],
        hexed,
        hexed.upper(),
        _percent_all(raw, "02X"),
        _percent_all(raw, "02x"),
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quoted),
        base64.b64encode(raw).decode(),  # whole, padded: nothing of it left beside the mask
        base64.urlsafe_b64encode(raw).decode(),
        *_base64_cores(raw, base64.b64encode),
        *_base64_cores(raw, base64.urlsafe_b64encode),
    }
    return {form for form in forms if len(form) >= MIN_SECRET_LEN} - {secret}


def variants(secret: str, depth: int = 2) -> set[str]:
    """The secret, its ``transforms``, and the forms each takes after up to ``depth`` encodings
    (JSON, URL, HTML)."""
    found = {secret, *transforms(secret)}
    frontier = set(found)
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
