"""What a sentence states, read without a model: quantities (with units, currencies, percentages,
number words; European and Swiss number formats read as such), dates, times of day with their zone
(``judge.zones``), identifiers, names, list items and ordinary content words. Rewrites keep every
position of the text, so a fact's place in the answer can be compared with its neighbours'.

Used by the deterministic judge on both the claim and the answer. Everything here is plain regular
expressions over normalised text, so a verdict can always name the exact token that (mis)matched.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field

from atlasrun.judge.lexicon import (
    CURRENCIES,
    MONTHS,
    NOT_NAMES,
    NUMBER_PHRASES,
    PERCENT_UNITS,
    SCALE_WORDS,
    SCALES,
    SMALL_NUMBERS,
    STOPWORDS,
    TENS,
    UNITS,
    WEEKDAYS,
)
from atlasrun.judge.numerals import text_locale
from atlasrun.judge.zones import zone_at

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


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def _blank_all(text: str, spans: list[tuple[int, int]]) -> str:
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


_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_DATE_PATTERNS = [
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)", re.I), "ymd"),
    (re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b"), "dmy/"),
    (re.compile(r"\b(\d{1,2})\.(\d{1,2})\.(\d{4})\b"), "dmy/"),  # 14.03.2025: day first
    (
        re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\.?(?:,?\s+(\d{{4}}))?\b", re.I),
        "dmy",
    ),
    (re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?", re.I), "mdy"),
    (re.compile(rf"\b({_MONTH})\.?\s+(\d{{4}})\b", re.I), "my"),
]
_TIME_12 = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*([ap])\.?\s?m\b\.?", re.I)
# Also inside ISO timestamps (2024-03-18T14:30:00); never a UTC offset (+05:30).
_TIME_24 = re.compile(
    r"(?<![\d+:-])(\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?!\d)(\s+in\s+the\s+(?:morning|afternoon|evening))?",
    re.I,
)
_ID_PATTERNS = [
    re.compile(r"#\d+\b"),
    re.compile(r"\bv?\d+(?:\.\d+){2,}\b", re.I),  # versions, IP addresses
    re.compile(r"(?<![\w.])\d{1,2}-\d{1,2}(?![\w-])"),  # scores such as 2-1
    re.compile(r"(?<![\w])/[\w.-]+(?:/[\w.-]+)*"),  # paths
    re.compile(r"(?<![\w/.#-])[A-Za-z0-9_]+(?:[-_./@][A-Za-z0-9_]+)+(?![\w-])"),  # a-b, a_b, a.b
    re.compile(r"\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{2,}\b"),  # letters and digits mixed
]
_NOT_ID = re.compile(
    r"^(?:\d[\d,.]*(?:k|m|mn|bn|b|km|kg|g|s|ms|h|hr|hrs|x|min|mins|mb|gb|tb|kb|l|ml|t|st|nd|rd|th|am|pm|"
    r"kwh|cm|mm|mi|ft|lb|lbs|pp|d)|n/a|e\.g|i\.e|and/or|[a-z]+/[a-z]+)$",
    re.I,
)
_NUMBER = re.compile(
    r"(?<![\w.#/])(-(?=[$€£]?\d))?([$€£])?\s?(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,3}(?: \d{3})+(?!\d|\.\d)|\d+(?:\.\d+)?|\.\d+)"
)
_UNIT_WORD = re.compile(r"\s?(°\s?[cf]\b|[a-z%]+(?:\s(?:cent|points?|celsius|fahrenheit))?)", re.I)
_WORD = re.compile(r"[A-Za-z][\w'&-]*")


def _dates(text: str) -> tuple[list[Date], str]:
    found: list[Date] = []
    for pattern, kind in _DATE_PATTERNS:
        spans: list[tuple[int, int]] = []  # blanked after each pattern: the next one sees them blank
        for m in pattern.finditer(text):
            if not m.group(0).strip():
                continue
            g = m.groups()
            year: int | None
            day: int | None
            try:
                if kind == "ymd":
                    year, month, day = int(g[0]), int(g[1]), int(g[2])
                elif kind == "dmy/":
                    a, b, year = int(g[0]), int(g[1]), int(g[2])
                    day, month = (b, a) if b > 12 else (a, b)
                elif kind == "dmy":
                    day, month, year = int(g[0]), MONTHS[g[1].lower()], int(g[2]) if g[2] else None
                elif kind == "mdy":
                    month, day, year = MONTHS[g[0].lower()], int(g[1]), int(g[2]) if g[2] else None
                else:
                    month, day, year = MONTHS[g[0].lower()], None, int(g[1])
            except (KeyError, ValueError):
                continue
            if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
                continue
            swappable = kind == "dmy/" and "/" in m.group(0) and day != month and max(day or 0, month) <= 12
            found.append(Date(year, month, day, m.group(0), m.start(), swappable))
            spans.append((m.start(), m.end()))
        text = _blank_all(text, spans)
    return found, text


def _times(text: str) -> tuple[list[Time], str]:
    found: list[Time] = []
    for m in _TIME_12.finditer(text):
        hour, minute = int(m.group(1)), int(m.group(2) or 0)
        if 1 <= hour <= 12 and minute < 60:
            hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
            found.append(_zoned(hour * 60 + minute, m, text))
            text = _blank(text, m.start(), m.end())
    for m in _TIME_24.finditer(text):
        hour, minute = int(m.group(1)), int(m.group(2))
        if hour < 24 and minute < 60:
            part = (m.group(3) or "").lower()
            if hour < 12 and ("afternoon" in part or "evening" in part):
                hour += 12
            found.append(_zoned(hour * 60 + minute, m, text))
            text = _blank(text, m.start(), m.end())
    return found, text


def _zoned(minutes: int, m: re.Match[str], text: str) -> Time:
    zone = zone_at(text, m.start(), m.end())
    return Time(
        minutes,
        m.group(0).strip(),
        zone.name if zone else None,
        zone.offset if zone else None,
        m.start(),
        m.end(),
    )


# Locale-aware numbers, rewritten to plain figures before anything else reads them: a decimal comma
# (3,5 km; 1.234,56; 1 234,5) and apostrophe thousands (1'234'567). "1,234" stays English thousands.
_GROUPED_DECIMAL_COMMA = re.compile(r"(?<![\w.,'/:-])(\d{1,3}(?:([. '])\d{3})(?:\2\d{3})*),(\d+)(?![\d,])")
_APOSTROPHE_THOUSANDS = re.compile(r"(?<![\d.,'])(\d{1,3}(?:'\d{3})+)(?![\d'])")
_DECIMAL_COMMA = re.compile(r"(?<![\w.,/:-])(\d+),(\d{1,2}|\d{4,})(?![\d,])")  # not in CSV rows or dates
_DOT_THOUSANDS = re.compile(r"(?<![\w.,])(\d{1,3}(?:\.\d{3}){2,})(?![\d.,])")


_COMPOUND_DURATION = re.compile(
    r"\b(\d{1,3})\s?(?:h|hrs?|hours?)\s?(?:and\s)?(\d{1,2})\s?(?:m|mins?|minutes?)\b", re.I
)


def _durations(text: str) -> str:
    """ "1h 30m", "2 hours 15 minutes": one figure in minutes, in the same place (positions kept)."""

    def total(m: re.Match[str]) -> str:
        figure = f"{int(m.group(1)) * 60 + int(m.group(2))} min"
        return figure.ljust(len(m.group(0))) if len(figure) <= len(m.group(0)) else m.group(0)

    return _COMPOUND_DURATION.sub(total, text)


def _delocalize(text: str) -> str:
    text = _GROUPED_DECIMAL_COMMA.sub(lambda m: re.sub(r"\D", "", m.group(1)) + "." + m.group(3), text)
    text = _APOSTROPHE_THOUSANDS.sub(lambda m: m.group(1).replace("'", ""), text)
    text = _DECIMAL_COMMA.sub(r"\1.\2", text)
    # 1.234.567: thousands in any text (never a decimal), but not an IPv4 address or a version
    text = _DOT_THOUSANDS.sub(
        lambda m: m.group(1) if m.group(1).count(".") == 3 else m.group(1).replace(".", ""), text
    )
    return text


def _ids(text: str) -> tuple[list[str], str]:
    found: list[str] = []
    for pattern in _ID_PATTERNS:
        spans: list[tuple[int, int]] = []  # blanked after each pattern: the next one sees them blank
        for m in pattern.finditer(text):
            token = m.group(0).rstrip(".")
            if not token.strip() or _NOT_ID.match(token):
                continue
            if pattern is _ID_PATTERNS[-2] and not re.search(r"[A-Za-z_/]", token):
                continue  # 1.5 or 3,4 is a number, not an identifier
            found.append(token.lower())
            spans.append((m.start(), m.start() + len(token)))
        text = _blank_all(text, spans)
    return found, text


_PHRASES = [(re.compile(rf"\b{phrase}\b", re.I), figure) for phrase, figure in NUMBER_PHRASES]
_FIRST_WORDS = "|".join([*SMALL_NUMBERS, *TENS])
_ALL_WORDS = "|".join([*SMALL_NUMBERS, *TENS, *SCALE_WORDS])
_COMPOUND = re.compile(
    rf"\b(?:{_FIRST_WORDS})(?:[\s-]+(?:{_ALL_WORDS}|and(?=[\s-]+(?:{_ALL_WORDS}))))*\b", re.I
)
_HAS_NUMBER_WORD = re.compile(rf"\b(?:{_ALL_WORDS}|{'|'.join(p for p, _ in NUMBER_PHRASES)})", re.I)


def _number_words(text: str) -> str:
    if not _HAS_NUMBER_WORD.search(text):
        return text
    # Figures are right-aligned in the words' place: every position in the text stays where it was.
    for pattern, figure in _PHRASES:
        text = pattern.sub(lambda m, f=figure: f.rjust(len(m.group(0))), text)  # type: ignore[misc]

    def compound(m: re.Match[str]) -> str:
        total, current = 0, 0
        for word in re.split(r"[\s-]+", m.group(0).lower()):
            if word in SMALL_NUMBERS:
                current += SMALL_NUMBERS[word]
            elif word in TENS:
                current += TENS[word]
            elif word == "hundred":
                current = max(current, 1) * 100
            elif word in SCALE_WORDS:
                total += max(current, 1) * SCALE_WORDS[word]
                current = 0
        return str(total + current).rjust(len(m.group(0)))

    first = "|".join([*SMALL_NUMBERS, *TENS])
    words = "|".join([*SMALL_NUMBERS, *TENS, *SCALE_WORDS])
    return re.sub(
        rf"\b(?:{first})(?:[\s-]+(?:{words}|and(?=[\s-]+(?:{words}))))*\b", compound, text, flags=re.I
    )


_SIGN_AFTER = re.compile(r"\s?([$€£])")  # "20 $": the currency after the figure


def _quantities(text: str) -> tuple[list[Quantity], str]:
    found: list[Quantity] = []
    for m in _NUMBER.finditer(text):
        sign, currency, digits = m.groups()
        number = float(digits.replace(",", "").replace(" ", "")) * (-1 if sign else 1)
        end = m.end()
        dim: str | None = None
        value = number
        unit = _UNIT_WORD.match(text, end)
        scaled = False
        if unit:
            word = unit.group(1)
            low = word.lower()
            scale = low if low in SCALES else None
            # lower-case "m" after a bare number is metres; after a currency sign, or "M", millions
            if scale == "m" and word == "m" and not currency:
                scale = None
            if scale == "b" and word == "b":
                scale = None
            if scale and (unit.start(1) == end or len(low) > 2 or word.isupper() or currency):
                number *= SCALES[scale]
                value = number
                end = unit.end()
                scaled = True
                unit = _UNIT_WORD.match(text, end)
        code = _CODE_BEFORE.search(text, max(0, m.start() - 5), m.start())
        money = CURRENCIES.get(currency or "") or (CURRENCIES[code.group(1).lower()] if code else None)
        sign_after = _SIGN_AFTER.match(text, end)
        if sign_after and not money:
            money, end = CURRENCIES[sign_after.group(1)], sign_after.end()
            unit = None
        if unit and unit.group(1).split(" ")[0].lower() in CURRENCIES:
            money = CURRENCIES[unit.group(1).split(" ")[0].lower()]
            end = unit.start(1) + len(unit.group(1).split(" ")[0])
            unit = None
        if unit:
            low = re.sub(r"\s+", " ", unit.group(1).lower().replace("° ", "°"))
            first = low.split(" ")[0]
            if low in PERCENT_UNITS or first in PERCENT_UNITS:
                dim, value, end = (
                    "percent",
                    number,
                    unit.end() if low in PERCENT_UNITS else unit.start(1) + len(first),
                )
            elif low in UNITS or first in UNITS:
                key = low if low in UNITS else first
                dim, factor = UNITS[key]
                if dim == "fahrenheit":
                    dim, value = "celsius", (number - 32) * 5 / 9
                else:
                    value = number * factor
                end = unit.start(1) + len(key)
                rate = _PER.match(text, end)
                if rate:  # 80 km/h is a speed, not a length
                    dim, end = f"{dim}/{rate.group(1)}", rate.end()
        before = re.findall(r"[a-z#.]+", text[max(0, m.start() - 12) : m.start()].lower())
        after = re.findall(r"[a-z]+", text[end : end + 12].lower())[:1]
        is_code = digits.isdigit() and (
            (bool(before) and before[-1].rstrip(".") in CODE_WORDS)
            or after in (["status"], ["error"], ["code"])
        )
        exact = (
            dim is None
            and not scaled
            and not money
            and digits.isdigit()
            and (is_code or 1900 <= number <= 2100)
        )
        found.append(
            Quantity(value, number, dim, exact, text[m.start() : end].strip(), m.start(), end, money)
        )
        text = _blank(text, m.start(), end)
    return found, text


_PER = re.compile(
    r"\s?(?:/|per\s)\s?(h|hr|hour|s|sec|second|min|minute|day|week|month|year|person|user)\b", re.I
)
_CODE_BEFORE = re.compile(r"\b(USD|EUR|GBP|CHF|JPY|INR|CAD|AUD)\s?$")

# A number right after one of these words is an identifier (HTTP status, port, route): no tolerance.
CODE_WORDS = {
    "status",
    "code",
    "codes",
    "port",
    "ports",
    "error",
    "route",
    "room",
    "ward",
    "line",
    "version",
    "id",
    "no",
    "number",
    "row",
    "build",
    "issue",
    "pr",
    "level",
    "gate",
    "platform",
    "bus",
    "flight",
}
# A quote opens only after a non-word character, so possessives ("Webb's") are not quotes.
_QUOTED = re.compile(r"(?<!\w)[\"'`]([^\"'`]{2,}?)[\"'`](?!\w)")
_RANGE = re.compile(r"\bbetween\s+(\S+(?:\s\S+)?)\s+and\s+", re.I)


def _list_items(claim: str) -> list[str]:
    """Plain items of an enumeration after the claim's last 'is/are/:' ("a, b, c and d")."""
    tail = re.split(r"\b(?:are|is|were|was|include|includes|needs|need)\b|:", claim)[-1]
    if "," not in tail and " and " not in tail:
        return []
    parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", tail.strip(" ."))
    if len(parts) < 2 or any(len(p.split()) > 3 for p in parts):
        return []
    return [
        stem(p.split()[-1])
        for p in parts
        if p.strip()
        and (p.strip()[0].islower() or _ACRONYM.fullmatch(p.strip()))
        and p.split()[-1].lower() not in STOPWORDS
    ]


# An item written as a ticker or code in capitals ("AAPL, MSFT and NVDA"): not a name, but the item.
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]{1,5}")


@functools.lru_cache(maxsize=256)
def read(text: str, *, claim: bool = False) -> Facts:
    """The facts of a claim or an answer (cached: one answer is read once for all its claims)."""
    return _read(text, claim)


def _read(text: str, claim: bool) -> Facts:
    facts = Facts(text=normalize(text))
    facts.locale = text_locale(facts.text)
    work = facts.text = _durations(_delocalize(facts.text))  # every position below is in this text
    if claim:  # a quoted phrase in a claim must appear as written; an answer's quotes are just text
        for m in _QUOTED.finditer(work):
            facts.quoted.append(m.group(1).strip().lower())
            work = _blank(work, m.start(), m.end())
    facts.dates, work = _dates(work)
    facts.times, work = _times(work)
    facts.ids, work = _ids(work)
    work = _number_words(work)
    range_spans = [(m.start(), m.end() + 40) for m in _RANGE.finditer(work)]
    quantities, work = _quantities(work)
    for q in quantities:
        in_range = any(s <= q.start < e for s, e in range_spans)
        (facts.ranges if in_range else facts.quantities).append(q)
    for d in facts.dates:
        if d.year is not None and not claim:  # "12 August 2019" also states the year 2019
            facts.quantities.append(Quantity(d.year, d.year, None, True, str(d.year), d.start, d.start))
    facts.residual = work
    facts.words = [w.lower().strip(".,;:!?'\"()") for w in re.findall(r"[\w'./#-]+", facts.text)]
    _names_and_content(facts, work, claim)
    return facts


def _names_next(work: str, tokens: list[re.Match[str]], index: int) -> bool:
    """The token after ``index`` is a capitalised word right after it (one space between)."""
    if index + 1 >= len(tokens) or work[tokens[index].end() : tokens[index + 1].start()] != " ":
        return False
    following = tokens[index + 1].group(0)
    low = following.lower()
    return (
        following[0].isupper() and not following.isupper() and low not in STOPWORDS and low not in NOT_NAMES
    )


def _names_and_content(facts: Facts, work: str, claim: bool) -> None:
    phrase: list[str] = []
    phrase_initial = False
    sentence_start = True
    last_end = 0
    tokens = list(_WORD.finditer(work))

    def close() -> None:
        nonlocal phrase
        if phrase and phrase_initial and len(phrase) > 1 and phrase[0].lower().endswith("ly"):
            phrase.pop(0)
            if len(phrase) == 1:
                facts.names.append(phrase)
                phrase = []
                return
        if phrase and (not phrase_initial or len(phrase) > 1):
            facts.names.append(phrase)
        elif phrase and phrase_initial and facts.first_name is None:
            facts.first_name = phrase[0]
        phrase = []

    for index, m in enumerate(tokens):
        word = m.group(0).rstrip("'")
        gap = work[last_end : m.start()]
        if phrase and (gap.strip() or len(gap) > 1 or "\n" in gap):
            close()
        # A sentence starts after . ! ? : ; and any blank space, or at the text's start. (Looking
        # back from the token, not searching the whole prefix: that made reading quadratic.)
        before = m.start()
        while before > 0 and work[before - 1].isspace():
            before -= 1
        if before == 0 or work[before - 1] in ".!?:;":
            sentence_start = True
        low = word.lower()
        name_like = (bool(phrase) and len(word) == 1 and word.isupper()) or (
            word[0].isupper()
            and low not in STOPWORDS
            and low not in NOT_NAMES
            and low not in MONTHS
            and low not in UNITS
            and not (word.isupper() and 2 <= len(word) <= 4 and not _names_next(work, tokens, index))
        )  # API, CEO, TLS: ordinary nouns here, but "MIT License" is a name
        if name_like:
            if not phrase:
                phrase_initial = sentence_start
            phrase.append(word[:-2] if word.endswith("'s") else word)
        else:
            close()
            if low not in STOPWORDS and len(low) > 1 and low not in UNITS and low not in WEEKDAYS:
                facts.content.append(stem(low))
        sentence_start = False
        last_end = m.end()
    close()
    if claim:
        facts.items = _list_items(facts.residual)
        facts.content = [c for c in facts.content if c not in facts.items]
    if facts.first_name:
        facts.content = [c for c in facts.content if c != stem(facts.first_name)]
        facts.content.append(stem(facts.first_name))
