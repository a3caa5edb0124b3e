"""Reading a claim or an answer into its ``judge.facts``, without a model. European and Swiss number
formats and compound durations are rewritten to plain figures first; then a claim's quoted phrases,
dates and times (``judge.reading_dates``), identifiers (``judge.reading_words``), number words and
quantities (``judge.reading_quantities``) are read and blanked in turn, and what remains gives the
names, list items and content words (``judge.reading_words``).

Used by the deterministic judge on both the claim and the answer. Everything here is plain regular
expressions over normalised text, so a verdict can always name the exact token that (mis)matched.
"""

from __future__ import annotations

import functools
import re

from atlasrun.judge.facts import Facts, Quantity, blank, normalize
from atlasrun.judge.numerals import text_locale
from atlasrun.judge.reading_dates import read_dates, read_times
from atlasrun.judge.reading_quantities import (
    delocalize,
    merge_durations,
    read_clock_durations,
    read_quantities,
    rewrite_number_words,
)
from atlasrun.judge.reading_words import names_and_content, read_ids

# A quote opens only after a non-word character, so possessives ("Webb's") are not quotes.
_QUOTED = re.compile(r"(?<!\w)[\"'`]([^\"'`]{2,}?)[\"'`](?!\w)")
_RANGE = re.compile(r"\bbetween\s+(\S+(?:\s\S+)?)\s+and\s+", re.I)


@functools.lru_cache(maxsize=256)
def read(text: str, *, claim: bool = False) -> Facts:
    """The facts of a claim or an answer (cached: one answer is read once for all its claims)."""
    return _read(text, claim)


def _read(text: str, claim: bool) -> Facts:
    facts = Facts(text=normalize(text))
    facts.locale = text_locale(facts.text)
    work = facts.text = merge_durations(delocalize(facts.text))  # every position below is in this text
    if claim:  # a quoted phrase in a claim must appear as written; an answer's quotes are just text
        for m in _QUOTED.finditer(work):
            facts.quoted.append(m.group(1).strip().lower())
            work = blank(work, m.start(), m.end())
    durations, work = read_clock_durations(work)
    facts.dates, work = read_dates(work)
    facts.times, work = read_times(work)
    facts.ids, work = read_ids(work)
    work = rewrite_number_words(work)
    range_spans = [(m.start(), m.end() + 40) for m in _RANGE.finditer(work)]
    quantities, work = read_quantities(work)
    for q in sorted(durations + quantities, key=lambda q: q.start):
        in_range = any(s <= q.start < e for s, e in range_spans)
        (facts.ranges if in_range else facts.quantities).append(q)
    for d in facts.dates:
        if d.year is not None and not claim:  # "12 August 2019" also states the year 2019
            facts.quantities.append(Quantity(d.year, d.year, None, True, str(d.year), d.start, d.start))
    facts.residual = work
    facts.words = [w.lower().strip(".,;:!?'\"()") for w in re.findall(r"[\w'./#-]+", facts.text)]
    names_and_content(facts, work, claim)
    return facts
