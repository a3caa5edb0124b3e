"""Placed evidence: read after ``judge.located`` for a pass. Finding the claim's value is not enough;
the answer must say it in the claim's place, not as something the value was, or the other end of a
change, or a value it then takes back:

- every match of a claim value marked as a past state or a baseline ("(previously 6.87% a month
  ago)", "(2023: 58%)", a table column headed "Sep 2024" for a claim about October 2024) does not
  meet a claim in the present or of another period: decisive when the answer states the claim's
  period elsewhere or another value of the kind unmarked, otherwise uncertain;
- a value the claim puts after "from" that the answer puts only after "to", or the reverse ("moved
  from Tuesday" for "moved from Wednesday to Tuesday"): decisive;
- a part and its whole given the other way round ("5 of 3 replicas" for "3 of 5 replicas", "7/12"
  for "12/7" is not read: a slash may be a date): decisive;
- a name followed by a self-correction cue and another name ("Daniel Osei — sorry, I misread ...
  it's Mei Tanaka"): uncertain.
"""

from __future__ import annotations

import re

from atlasrun.judge.base import Abstention, Label
from atlasrun.judge.evidence import CORRECTION, sentence_at, sentences, table_cell
from atlasrun.judge.facts import Date, Facts
from atlasrun.judge.reading import read
from atlasrun.judge.rivals import Tally
from atlasrun.judge.support import slot_before
from atlasrun.judge.values import comparable, same

Outcome = tuple[Label, str] | Abstention | None

# Marks a value as what something was, or the baseline of a comparison ("up from 4,610"); not a
# reporting period ("traffic last month: mobile 62.4%" still says what mobile's share is).
_PAST = re.compile(
    r"\b(?:previously|formerly|prior|earlier|ago|"
    r"(?:up|down|rising|falling|increased|decreased|grew|fell|rose|dropped|climbed) from)\b",
    re.I,
)
_SEGMENT_EDGE = re.compile(r"[(),;\n]|\s[-–—]\s")
_YEAR = re.compile(r"\b(?:19|20)\d\d\b")
_SWAPPED = {"from": "to", "to": "from"}
_PART_OF = re.compile(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?) (?:of|out of) (\d[\d,]*(?:\.\d+)?)(?![\w.,]*\d)")


def _segment(text: str, start: int, end: int) -> str:
    """The stretch of text a value stands in: its bracket, or its clause up to a comma or dash."""
    span = sentence_at(sentences(text), start)
    before = [m.end() for m in _SEGMENT_EDGE.finditer(text, span[0], start)]
    after = _SEGMENT_EDGE.search(text, end, span[1])
    return text[before[-1] if before else span[0] : after.start() if after else span[1]]


def _periods(claim: Facts) -> tuple[list[Date], set[str]]:
    years = {str(d.year) for d in claim.dates if d.year} | {q.text for q in claim.quantities if q.exact}
    return claim.dates, years


def _other_period(claim: Facts, label: str) -> bool:
    """The label (a column header, a bracket) names a period, none of them the claim's."""
    dates, years = _periods(claim)
    said = read(label)
    said_years = set(_YEAR.findall(label))
    if dates and said.dates:
        return not any(
            d.month == c.month and (d.year is None or c.year is None or d.year == c.year)
            for d in said.dates
            for c in dates
        )
    return bool(years and said_years and not said_years & years)


def _past_marked(claim: Facts, answer: Facts, start: int, end: int) -> bool:
    text = answer.text
    cell = table_cell(text, start)
    if cell is not None:
        return _other_period(claim, cell[0])
    segment = _segment(text, start, end)
    if _PAST.search(segment) and not _PAST.search(claim.text):
        return True
    value_free = segment.replace(text[start:end], " ")
    return _other_period(claim, value_free)


def _baseline(claim: Facts, answer: Facts, tally: Tally) -> Outcome:
    """A claim figure whose every match is marked as a past or another period's value: the matches
    written as the claim writes it decide when there are any ("previously 6.87%" beside a current
    6.42% is no current 6.87%, though within a point of it)."""
    starts = {s for s, _, k in tally.hits if k == "quantity"}
    for q in claim.quantities:
        found = [g for g in answer.quantities if g.start in starts and same(q, g)]
        exact = [g for g in found if g.number == q.number]
        if not found or not all(_past_marked(claim, answer, g.start, g.end) for g in exact or found):
            continue
        unmarked = [
            g
            for g in answer.quantities
            if comparable(q, g) and g not in found and not _past_marked(claim, answer, g.start, g.end)
        ]
        period_said = any(
            any(d.month == c.month and d.year == c.year for c in claim.dates) for d in answer.dates
        )
        why = f"{q.text} is said as a past or another period's value"
        if unmarked and (period_said or not claim.dates):
            return "not_fulfilled", why
        return Abstention(kind="contradiction", reason=why)
    return None


def _from_to(claim: Facts, answer: Facts, tally: Tally) -> str | None:
    low_claim = claim.text.lower()
    preps: dict[str, set[str]] = {}
    for s, e, _ in tally.hits:
        preps.setdefault(answer.text[s:e].lower(), set()).add(slot_before(answer.text, s))
    for said, found in preps.items():
        at = low_claim.find(said)
        wanted = slot_before(claim.text, at) if at >= 0 else ""
        if wanted in _SWAPPED and _SWAPPED[wanted] in found and wanted not in found:
            return f"the claim has '{wanted} {said}', the answer '{_SWAPPED[wanted]} {said}'"
    return None


def _part_of(claim: Facts, answer: Facts) -> str | None:
    said = {(m.group(1), m.group(2)) for m in _PART_OF.finditer(answer.text)}
    for m in _PART_OF.finditer(claim.text):
        part, whole = m.group(1), m.group(2)
        if part != whole and (whole, part) in said and (part, whole) not in said:
            return f"the claim has '{part} of {whole}', the answer '{whole} of {part}'"
    return None


def _revised_name(claim: Facts, answer: Facts, tally: Tally) -> str | None:
    text = answer.text
    spans = sentences(text)
    claim_names = {" ".join(n).lower() for n in claim.names}
    others = [n for n in answer.names if len(n) > 1 and " ".join(n).lower() not in claim_names]
    for s, e, kind in tally.hits:
        if kind != "name":
            continue
        i = spans.index(sentence_at(spans, s))
        window_end = spans[min(i + 1, len(spans) - 1)][1]
        cue = CORRECTION.search(text, e, window_end)
        if cue is None:
            continue
        after = text[cue.end() : window_end]
        if any(re.search(r"\W+".join(re.escape(w) for w in n), after) for n in others):
            return f"'{text[s:e]}' is followed by '{cue.group(0)}' and another name"
    return None


def placed(claim: Facts, answer: Facts, tally: Tally) -> Outcome:
    """Why a pass whose facts are located is still not decisive, or None when it stands."""
    baseline = _baseline(claim, answer, tally)
    if baseline is not None:
        return baseline
    swapped = _from_to(claim, answer, tally) or _part_of(claim, answer)
    if swapped:
        return "not_fulfilled", swapped
    revised = _revised_name(claim, answer, tally)
    if revised:
        return Abstention(kind="contradiction", reason=revised)
    return None
