"""How two values compare: quantities (MCP-Atlas tolerances: 5% for numbers, 1 point for
percentages, exact years and codes, units converted), dates, times of day in their zones, identifier
shapes; and the answer's ways of writing a claim's value (a version "v1.29.4" for 1.29, a European
"12.500" for 12,500, a bare figure whose unit is named beside it)."""

from __future__ import annotations

import re
from dataclasses import replace

from atlasrun.judge.evidence import sentence_at, sentences
from atlasrun.judge.facts import NUMBER_TOLERANCE, PERCENT_POINTS, Date, Facts, Quantity, Time
from atlasrun.judge.lexicon_quantities import UNITS
from atlasrun.judge.numerals import ambiguous, as_thousands
from atlasrun.judge.zones import zoned_after


def comparable(a: Quantity, b: Quantity) -> bool:
    if a.currency and b.currency and a.currency != b.currency:
        return False
    if "percent" in (a.dim, b.dim) and (a.currency or b.currency):
        return False  # an amount of money is never a percentage
    if a.dim == b.dim:
        return True
    if "percent" in (a.dim, b.dim):
        return (b if a.dim == "percent" else a).dim is None  # 0.12 or a bare 12 for 12%
    return a.dim is None or b.dim is None


def _written(q: Quantity) -> tuple[str, int, str]:
    """A figure as written: its digits, its count of decimals, what stands after its digits."""
    figure = re.search(r"\d[\d,]*(?:\.(\d+))?", q.text)
    decimals = len(figure.group(1) or "") if figure else 0
    return re.sub(r"\D", "", q.text), decimals, q.text[figure.end() :].strip() if figure else ""


def transposed(claim: Quantity, got: Quantity) -> bool:
    """The claim's digits in another order, both written to the same decimals in the same unit
    ("8.59 m" for "8.95 m", "0.02%" for "0.20%"): a slip or a misread row, never a rounding, so no
    tolerance covers it."""
    (a, a_decimals, a_unit), (b, b_decimals, b_unit) = _written(claim), _written(got)
    return (
        a_decimals > 0
        and a_decimals == b_decimals
        and a_unit == b_unit
        and a != b
        and sorted(a) == sorted(b)
        and claim.currency == got.currency
    )


_DEGREE_F = 5 / 9 + 1e-9  # one degree Fahrenheit, in the celsius dimension's unit


def same(claim: Quantity, got: Quantity) -> bool:
    if not comparable(claim, got) or transposed(claim, got):
        return False
    if claim.dim == "percent" or got.dim == "percent":
        c = claim.number if claim.dim == "percent" or abs(claim.number) > 1 else claim.number * 100
        g = got.number if got.dim == "percent" or abs(got.number) > 1 else got.number * 100
        return abs(c - g) <= PERCENT_POINTS + 1e-9
    c, g = (claim.value, got.value) if claim.dim == got.dim else (claim.number, got.number)
    if claim.exact or got.exact:
        return c == g
    if (c < 0) != (g < 0):
        return False
    if claim.dim == got.dim == "time" and ":" in claim.text:  # "1:58:13": a race time, to the second
        return abs(c - g) < 1
    if claim.dim == got.dim == "celsius":  # a whole degree on either scale: 1 °F is 0.56 °C
        return abs(c - g) <= max(NUMBER_TOLERANCE * abs(c), _DEGREE_F)
    return abs(c - g) <= NUMBER_TOLERANCE * abs(c) + 1e-9


_UNIT_NAMES: dict[str, list[str]] = {}
for _name, (_dim, _) in UNITS.items():
    if len(_name) > 1 or _name in ("%",):
        _UNIT_NAMES.setdefault(_dim, []).append(_name)
_UNIT_NAMES["percent"] = ["%", "percent", "per cent", "pct"]
_UNIT_NAMES["celsius"] = [*_UNIT_NAMES.get("celsius", []), "°"]


def _unit_named(dim: str, sentence: str) -> bool:
    low = sentence.lower()
    return any(
        (n in low) if not n.isalpha() else re.search(rf"\b{re.escape(n)}\b", low) is not None
        for n in _UNIT_NAMES.get("celsius" if dim == "fahrenheit" else dim, [])
    )


def unit_implied(q: Quantity, g: Quantity, answer: Facts) -> bool:
    """A bare figure in the answer carries the claim's unit only when the unit is named beside it."""
    sentence = answer.text[slice(*sentence_at(sentences(answer.text), g.start))]
    if q.dim is not None and g.dim is None:
        if q.dim == "percent" and abs(g.number) <= 1:
            return True  # 0.12 for 12%: a fraction, the labelling rules' equivalent form
        if q.dim != "multiple" and not _unit_named(q.dim, sentence):
            return False
    if q.currency and not g.currency:
        return all(o.currency in (None, q.currency) for o in answer.quantities)
    return True


def date_same(a: Date, b: Date) -> bool:
    if a.month != b.month:
        return False
    if a.day is not None and b.day is not None and a.day != b.day:
        return False
    if a.day is not None and b.day is None:
        return False
    return a.year is None or b.year is None or a.year == b.year


def coarser(claim: Date, got: Date) -> bool:
    """ "June 2024" for 2024-06-01: the answer says less than the claim, it does not contradict it."""
    return got.day is None and claim.day is not None and date_same(replace(claim, day=None), got)


def in_dump(span: tuple[int, int], spans: list[tuple[int, int]], text: str) -> bool:
    """True when the span sits in a run of 4+ values separated only by commas (a list of candidates);
    a line break ends a run (table rows are not candidates)."""
    ordered = sorted(set(spans))
    i = ordered.index(span)
    run = 1
    for step in (-1, 1):
        j = i
        while 0 <= j + step < len(ordered):
            (_, a_end), (b_start, _) = sorted((ordered[j], ordered[j + step]))
            if not re.fullmatch(r"[ \t,;/|$€£]*(?:and|or)?[ \t,;/|$€£]*", text[a_end:b_start]):
                break
            run += 1
            j += step
    return run >= 4


def id_shape(identifier: str) -> str:
    """An identifier's shape: digit runs as 9, letter runs as a ("INC-4471" -> "a-9")."""
    return re.sub(r"[a-z]+", "a", re.sub(r"\d+", "9", identifier.lower()))


def version_spans(q: Quantity, text: str) -> list[tuple[int, int]]:
    """Where the answer writes a decimal of the claim as a version of it: with a "v" or a further
    ".N" ("v1.29", "1.29.4"); never as a figure of its own."""
    if q.dim is not None or q.currency or not re.fullmatch(r"\d+\.\d+", q.text):
        return []
    pattern = rf"(?<![\w.])(?:v{re.escape(q.text)}(?:\.\d+)*|{re.escape(q.text)}(?:\.\d+)+)(?![\w]|\.\d)"
    return [(m.start(), m.end()) for m in re.finditer(pattern, text)]


def locale_readings(q: Quantity, answer: Facts, found: list[Quantity]) -> list[Quantity] | str:
    """The answer's figures that meet ``q`` read as thousands ("12.500" for 12,500) in a European
    text; "undecided" where a figure meets the claim in one reading only and the text does not say
    which reading is its own; [] where nothing turns on the reading."""
    shape = [g for g in answer.quantities if ambiguous(g)]
    as_decimal = [g for g in found if g in shape]
    as_grouped = [g for g in shape if same(q, as_thousands(g))]
    if not as_decimal and not as_grouped:
        return []
    locale = answer.locale
    if locale == "european":
        return [as_thousands(g) for g in as_grouped] if as_grouped else ("undecided" if as_decimal else [])
    if locale == "english" or (as_decimal and len(as_decimal) < len(found)):
        return []
    return "undecided"


def _seconds(time: Time) -> str | None:
    written = re.search(r"\d:\d{2}:(\d{2})", time.text)
    return written.group(1) if written else None


def time_same(claim: Time, got: Time) -> bool | None:
    """Same time of day (to the second where both say seconds: "2:05:24" is not "2:05:42"); None
    when a zone makes it impossible to tell."""
    if None not in (_seconds(claim), _seconds(got)) and _seconds(claim) != _seconds(got):
        return False
    if claim.zone is None:
        return claim.minutes == got.minutes
    if claim.offset is None or got.zone is None or got.offset is None:
        if got.zone is not None and claim.zone.lower() == got.zone.lower():
            return claim.minutes == got.minutes
        return None
    return claim.utc == got.utc


def time_same_here(claim: Time, got: Time, text: str, spans: list[tuple[int, int]]) -> bool | None:
    """``time_same``, and where the zone is not comparable, the clock when the answer's sentence names
    the claim's zone before the time ("In New York (EDT) that's 7:00 PM" for "7 PM New York time")."""
    same_time = time_same(claim, got)
    if same_time is None and claim.zone and not zoned_after(text, got.end):
        start = sentence_at(spans, got.start)[0]
        if re.search(rf"\b{re.escape(claim.zone)}\b", text[start : got.start], re.I):
            return claim.minutes == got.minutes
    return same_time
