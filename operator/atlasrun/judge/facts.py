"""The facts a sentence states, as the deterministic judge reads them (``judge.reading``): quantities
(with units, currencies, percentages), dates, times of day with their zone (``judge.zones``),
identifiers, names, list items and ordinary content words. Also the text primitives every reader
shares: normalising, stemming, and blanking a span in place (positions are kept, so a fact's place in
the answer can be compared with its neighbours').
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field

NUMBER_TOLERANCE = 0.05  # relative
PERCENT_POINTS = 1.0  # absolute, in percentage points


@dataclass(frozen=True)
class Quantity:
    value: float  # in the dimension's base unit (percent: in points)
    number: float  # as written, scale applied, before unit conversion
    dim: str | None  # None: a plain number; "percent"; "length", "time", ...
    exact: bool  # a year: no tolerance
    text: str
    start: int
    end: int
    currency: str | None = None  # "$", "€", "£", or an ISO code in upper case


@dataclass(frozen=True)
class Date:
    year: int | None
    month: int
    day: int | None
    text: str
    start: int
    swappable: bool = False  # 04/03/2025: day and month may be either way round


@dataclass(frozen=True)
class Time:
    minutes: int  # since midnight, on the clock as written
    text: str
    zone: str | None = None  # the zone it is stated in, if any (``judge.zones``)
    offset: int | None = None  # that zone's UTC offset in minutes, when certain
    start: int = 0
    end: int = 0

    @property
    def utc(self) -> int | None:
        return None if self.offset is None else (self.minutes - self.offset) % 1440


@dataclass
class Facts:
    text: str  # normalised original
    quantities: list[Quantity] = field(default_factory=list)
    ranges: list[Quantity] = field(default_factory=list)  # "between X and Y" endpoints: not values
    dates: list[Date] = field(default_factory=list)
    times: list[Time] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # lower case
    quoted: list[str] = field(default_factory=list)  # 'quoted phrases', lower case
    names: list[list[str]] = field(default_factory=list)  # name phrases as original-case tokens
    first_name: str | None = None  # a capitalised first word (a name or just the sentence start)
    items: list[str] = field(default_factory=list)  # stems of plain list items ("a, b and c")
    words: list[str] = field(default_factory=list)  # lower-case word tokens of the whole text
    content: list[str] = field(default_factory=list)  # stems of the remaining content words
    residual: str = ""  # the text with dates, times, ids and quantities blanked
    locale: str | None = None  # how the text as written groups and points its figures, if it shows


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text or "")
    for a, b in (
        ("\u2019", "'"),
        ("\u2018", "'"),
        ("\u201c", '"'),
        ("\u201d", '"'),
        ("**", ""),
        ("\u2013", "-"),
    ):
        text = text.replace(a, b)
    text = re.sub(r"(?<=\d)\u202f|(?<=\d)\u00a0", " ", text)
    text = re.sub(r"[^\S\n]+", " ", text)  # line breaks kept: they end list items and table rows
    return re.sub(r" ?\n[\s]*", "\n", text).strip()


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    word = word.lower().strip(".,;:!?()[]{}\"'")
    if word.endswith("'s"):
        word = word[:-2]
    for suffix in ("ies", "ied", "ing", "ed", "es", "s", "ly"):
        if len(word) - len(suffix) >= 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def blank_all(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with every span blanked, in one pass (a copy per span made long answers quadratic)."""
    if not spans:
        return text
    parts, at = [], 0
    for start, end in sorted(spans):
        start = max(start, at)
        if end > start:
            parts += [text[at:start], " " * (end - start)]
            at = end
    return "".join([*parts, text[at:]])
