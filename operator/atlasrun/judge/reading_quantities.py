"""Quantities in a normalised text: figures with their scale, unit (converted to the dimension's base
unit), currency or percentage; number words and phrases rewritten to figures, European and Swiss
number formats and compound durations rewritten to plain figures first (positions kept).
"""

from __future__ import annotations

import re

from atlasrun.judge.facts import Quantity, blank
from atlasrun.judge.lexicon_quantities import (
    BASIS_POINTS,
    CURRENCIES,
    CURRENCY_SIGNS,
    NUMBER_PHRASES,
    PERCENT_UNITS,
    SCALE_WORDS,
    SCALES,
    SMALL_NUMBERS,
    SUBUNITS,
    TENS,
    UNITS,
    UNSPACED_SCALES,
)

_NUMBER = re.compile(
    rf"(?<![\w.#/])(-(?=[{CURRENCY_SIGNS}]?\d))?([{CURRENCY_SIGNS}])?\s?"
    r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,3}(?: \d{3})+(?!\d|\.\d)|\d+(?:\.\d+)?|\.\d+)"
)
_UNIT_WORD = re.compile(r"\s?(°\s?[cf]\b|¢|[a-zäöüéèáíóú%]+(?:\s(?:cent|points?|celsius|fahrenheit))?)", re.I)


# Locale-aware numbers, rewritten to plain figures before anything else reads them: a decimal comma
# (3,5 km; 1.234,56; 1 234,5) and apostrophe thousands (1'234'567). "1,234" stays English thousands.
_GROUPED_DECIMAL_COMMA = re.compile(r"(?<![\w.,'/:-])(\d{1,3}(?:([. '])\d{3})(?:\2\d{3})*),(\d+)(?![\d,])")
_APOSTROPHE_THOUSANDS = re.compile(r"(?<![\d.,'])(\d{1,3}(?:'\d{3})+)(?![\d'])")
_DECIMAL_COMMA = re.compile(r"(?<![\w.,/:-])(\d+),(\d{1,2}|\d{4,})(?![\d,])")  # not in CSV rows or dates
_DOT_THOUSANDS = re.compile(r"(?<![\w.,])(\d{1,3}(?:\.\d{3}){2,})(?![\d.,])")


_AND = r"\s?,?\s?(?:and\s)?"
_COMPOUND_DURATION = re.compile(
    rf"\b(?:(\d{{1,3}})\s?(?:h|hrs?|hours?){_AND})?(\d{{1,3}})\s?(?:m|mins?|minutes?)\b"
    rf"(?:{_AND}(\d{{1,2}})\s?(?:s|secs?|seconds?)\b)?",
    re.I,
)


def merge_durations(text: str) -> str:
    """ "1h 30m", "2 hours, 15 minutes", "14 min 32 s": one figure (minutes; seconds when the
    seconds are given), in the same place (positions kept)."""

    def total(m: re.Match[str]) -> str:
        hours, minutes, seconds = (int(g) if g else None for g in m.groups())
        if hours is None and seconds is None:
            return m.group(0)
        if seconds is None:
            figure = f"{(hours or 0) * 60 + (minutes or 0)} min"
        else:
            figure = f"{((hours or 0) * 60 + (minutes or 0)) * 60 + seconds} s"
        return figure.ljust(len(m.group(0))) if len(figure) <= len(m.group(0)) else m.group(0)

    return _COMPOUND_DURATION.sub(total, text)


def read_clock_durations(text: str) -> tuple[list[Quantity], str]:
    """Durations written as a clock ("finished in 2:05:42"), read before times of day are."""
    found = []
    for m in _CLOCK_DURATION.finditer(text):
        seconds = (int(m.group(2)) * 60 + int(m.group(3))) * 60 + int(m.group(4))
        start, end = m.start(2), m.end()
        found.append(Quantity(seconds, seconds, "time", False, text[start:end], start, end))
    for q in found:
        text = blank(text, q.start, q.end)
    return found, text


# "finished in 2:05:42", "a runtime of 1:58:10": hours, minutes and seconds of a duration, not a
# time of day (that one is said "at 14:30:00", "as of 09:15:00", "arrival time: 14:30:00")
_CLOCK_DURATION = re.compile(
    r"(\b(?:in|took|takes|lasted|lasts|(?:duration|length|runtime|finish time)(?::|\sof)?):?\s)"
    r"(\d{1,2}):([0-5]\d):([0-5]\d)\b(?!\s?(?:am|pm|utc|gmt)\b)",
    re.I,
)


def delocalize(text: str) -> str:
    text = _GROUPED_DECIMAL_COMMA.sub(lambda m: re.sub(r"\D", "", m.group(1)) + "." + m.group(3), text)
    text = _APOSTROPHE_THOUSANDS.sub(lambda m: m.group(1).replace("'", ""), text)
    text = _DECIMAL_COMMA.sub(r"\1.\2", text)
    # 1.234.567: thousands in any text (never a decimal), but not an IPv4 address or a version
    text = _DOT_THOUSANDS.sub(
        lambda m: m.group(1) if m.group(1).count(".") == 3 else m.group(1).replace(".", ""), text
    )
    return text


_PHRASES = [(re.compile(rf"\b{phrase}\b", re.I), figure) for phrase, figure in NUMBER_PHRASES]
_FIRST_WORDS = "|".join([*SMALL_NUMBERS, *TENS])
_ALL_WORDS = "|".join([*SMALL_NUMBERS, *TENS, *SCALE_WORDS])
_COMPOUND = re.compile(
    rf"\b(?:{_FIRST_WORDS})(?:[\s-]+(?:{_ALL_WORDS}|and(?=[\s-]+(?:{_ALL_WORDS}))))*\b", re.I
)
_HAS_NUMBER_WORD = re.compile(rf"\b(?:{_ALL_WORDS}|{'|'.join(p for p, _ in NUMBER_PHRASES)})", re.I)


def rewrite_number_words(text: str) -> str:
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

    return _COMPOUND.sub(compound, text)


_SIGN_AFTER = re.compile(rf"\s?([{CURRENCY_SIGNS}])")  # "20 $": the currency after the figure


def read_quantities(text: str) -> tuple[list[Quantity], str]:
    found: list[Quantity] = []
    in_euros = bool(re.search(r"€|\beuros?\b", text, re.I))  # before any figure is blanked
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
            if scale and (unit.start(1) == end or low not in UNSPACED_SCALES or word.isupper() or currency):
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
        sub = unit.group(1).split(" ")[0].lower() if unit else ""
        if sub in SUBUNITS and not money:  # "24 cents": $0.24
            money = "EUR" if SUBUNITS[sub] == "USD" and in_euros else SUBUNITS[sub]
            number /= 100
            value, end, unit = number, unit.start(1) + len(sub), None  # type: ignore[union-attr]
        if unit and unit.group(1).split(" ")[0].lower() in CURRENCIES:
            money = CURRENCIES[unit.group(1).split(" ")[0].lower()]
            end = unit.start(1) + len(unit.group(1).split(" ")[0])
            unit = None
        if unit:
            low = re.sub(r"\s+", " ", unit.group(1).lower().replace("° ", "°"))
            first = low.split(" ")[0]
            if low in BASIS_POINTS or first in BASIS_POINTS:  # "3 bps": 0.03%
                key = low if low in BASIS_POINTS else first
                number = value = number / 100
                dim, end = "percent", unit.start(1) + len(key)
            elif low in PERCENT_UNITS or first in PERCENT_UNITS:
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
                    per = UNITS.get(rate.group(1).lower(), ("", 0.0))
                    if dim == "length" and per[0] == "time" and per[1] <= 3600:  # 6.7 m/s, 15 mph: one speed
                        dim, value = "length/h", value * 3600 / per[1]
                    else:
                        dim = f"{dim}/{rate.group(1)}"
                    end = rate.end()
        before = re.findall(r"[a-z#.]+", text[max(0, m.start() - 16) : m.start()].lower())
        after = re.findall(r"[a-z]+", text[end : end + 12].lower())[:1]
        is_code = digits.isdigit() and (
            (bool(before) and before[-1].rstrip(".") in CODE_WORDS)
            or after in (["status"], ["error"], ["code"])
        )
        release = (
            bool(before) and before[-1].rstrip(".") in RELEASE_WORDS and bool(_RELEASE.fullmatch(digits))
        )
        exact = (
            dim is None
            and not scaled
            and not money
            and ((digits.isdigit() and (is_code or 1900 <= number <= 2100)) or release)
        )
        found.append(
            Quantity(value, number, dim, exact, text[m.start() : end].strip(), m.start(), end, money)
        )
        text = blank(text, m.start(), end)
    return found, text


_PER = re.compile(
    r"\s?(?:/|per\s)\s?(h|hr|hour|s|sec|second|min|minute|day|week|month|year|person|user)\b", re.I
)
_RELEASE = re.compile(r"\d{1,2}\.\d{1,2}")  # "Python 3.12": a release, named, never measured
RELEASE_WORDS = {
    "version", "v", "release", "python", "node", "node.js", "nodejs", "java", "jdk", "go", "golang",
    "rust", "ruby", "php", "perl", "kubernetes", "k8s", "ios", "ipados", "macos", "android", "windows",
    "ubuntu", "debian", "fedora", "rhel", "centos", "postgres", "postgresql", "mysql", "mariadb", "redis",
    "django", "rails", "react", "angular", "vue", "typescript", "swift", "kotlin", "scala", "elixir",
    "gcc", "clang", "llvm", "openssl", "nginx", "helm", "terraform", "gradle", "numpy", "pandas",
    "pytorch", "torch", "tensorflow", "chrome", "firefox", "safari", "spark", "kafka", "elasticsearch",
    "bash", "zsh", "git", "docker", "cuda", "dotnet", ".net", "laravel", "spring", "flask", "fastapi",
}  # fmt: skip
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
