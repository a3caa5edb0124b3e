"""Whose value is it? A claim value found in the answer, but said of something else, while the
claim's own subject is given another value ("Osaka expects a high of 26 °C" and "the high [in
Tokyo] will be 23 °C" for "the high in Tokyo will be 26 °C"; "the previous release came out on
2024-08-30" and "Latest release: published on 2024-09-17" for "the latest release was published on
August 30").

Each value of a claim fact's kind (a quantity of its dimension, a date, a time, a commit hash) is
scored by how much of the claim's subject is said with it: the claim's words in its clause (with
its list label) plus those in its sentence (with its list heading or table header; a table cell is
said with its column header and row label only). When another value outscores every match of the
claim's value by a clear margin, the claim's subject holds that other value: a decisive fail.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from atlasrun.judge.evidence import (
    Span,
    correction_between,
    in_context,
    label_of,
    sentence_at,
    sentences,
    table_cell,
)
from atlasrun.judge.facts import Facts, stem
from atlasrun.judge.lexicon_calendar import MONTHS, WEEKDAYS
from atlasrun.judge.lexicon_words import ABBREVIATIONS, STOPWORDS
from atlasrun.judge.values import date_same, same, time_same

MARGIN = 2
MONTH_WORDS = (
    set(MONTHS) | WEEKDAYS
)  # claim words by which another value must be said more with the claim's subject
_NEGATION = re.compile(r"^(?:not|never|no|none|nothing|nor|neither|\w+n't)$")
_VERSION = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+){2,3})(?![\w]|\.\d)")
_HEX = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")

Place = tuple[int, int]  # where a value is said in the answer


def _terms(claim: Facts, value_text: str) -> set[str]:
    """The claim's words about its subject: content words, names and ids, not the value's own (nor a
    time's zone: "2 PM Tokyo time")."""
    zones = " ".join(f"{t.zone or ''} time local" for t in claim.times)
    own = {stem(w) for w in re.findall(r"[A-Za-z]+", f"{value_text} {zones}")} | {
        w.lower() for w in f"{value_text} {zones}".split()
    }
    words = {stem(w) for w in claim.content if not _NEGATION.match(w) and w not in STOPWORDS}
    words |= {w.lower() for name in claim.names for w in name}
    words |= {i for i in claim.ids if i not in value_text.lower()}
    return {w for w in words - own if len(w) >= 2}


def _stems(text: str) -> set[str]:
    words = re.findall(r"[\w'./#-]+", text.lower()) + [w.lower() for w in re.findall(r"[A-Za-z][\w-]*", text)]
    return (
        {stem(w) for w in words} | set(words) | {stem(ABBREVIATIONS[w]) for w in words if w in ABBREVIATIONS}
    )


def _said(terms: set[str], text: str) -> set[str]:
    stems = _stems(text)
    return {
        t
        for t in terms
        if t in stems
        or (
            len(t) >= 4
            and t.isalpha()
            and any(len(s) >= 4 and (s.startswith(t) or t.startswith(s)) for s in stems)
        )
    }


def _count(terms: set[str], text: str) -> int:
    return len(_said(terms, text))


_CLAUSE = re.compile(r"[,;]\s|\s(?:and|but|while|whereas)\s")
_WORD = re.compile(r"[A-Za-z][\w'-]*|\d[\w.,:]*")


def _bounds(masked: str, start: int, end: int, pos: int) -> Span:
    for m in _CLAUSE.finditer(masked, start, end):
        if m.end() <= pos:
            start = m.end()
        elif m.start() > pos:
            return start, m.start()
    return start, end


class _Clause:
    """The clause of a sentence around a position: split at commas, semicolons and conjunctions, a
    bracketed aside blanked out (for a value inside one: the aside, and the clause it stands in when
    the aside is a bare figure), with
    the label that heads the sentence's list ("Integration tests: 57 passed, 2 failed") and, for a
    clause without a subject of its own ("..., which I could open, was $4,415.20"), the sentence's
    first clause."""

    def __init__(self, text: str, span: Span, pos: int) -> None:
        masked = text[: span[1]]
        inside: Span | None = None
        for m in re.finditer(r"\([^()]*\)|\[[^\[\]]*\]", text[span[0] : span[1]]):
            a, b = span[0] + m.start(), span[0] + m.end()
            if a < pos < b:
                inside = (a + 1, b - 1)
            masked = masked[:a] + " " * (b - a) + masked[b:]
        start, end = _bounds(text if inside else masked, *(inside or span), pos)
        aside = text[start:end] if inside else ""
        head = (text if inside else masked).rfind(": ", start, pos)
        self.before = (text if inside else masked)[head + 2 if head >= 0 else start : pos]
        self.after = (text if inside else masked)[pos:end]
        if inside and not re.search(r"[A-Za-z]{2}", text[slice(*inside)]):  # "(64.5%)": the figure before
            start, end = _bounds(masked, *span, inside[0] - 1)
        self.item = label_of(text, pos) or ""
        colon = masked.rfind(": ", span[0], start)
        self.label = masked[span[0] : colon] if colon >= 0 else ""
        if _SUBJECTLESS.match(masked[start:end]):  # the subject: in the sentence's first or the last clause
            self.label += " " + masked[slice(*_bounds(masked, *span, span[0]))]
            if start > span[0]:
                self.label += " " + masked[slice(*_bounds(masked, span[0], start, start - 3))]
        elif _RELATIVE.match(masked[start:end]) and start > span[0]:  # "..., where conversion went ..."
            self.label += " " + masked[slice(*_bounds(masked, span[0], start, start - 3))]
        self.text = f"{aside} {masked[start:end]}"


_RELATIVE = re.compile(r"\s*(?:where|which|who|whose|whom)\b", re.I)
_SUBJECTLESS = re.compile(
    r"\s*(?:is|was|are|were|has|had|have|will|would|costs?|totals?|includes?|contains?|holds?|runs?|uses?|"
    r"reached|came|went|rose|fell|grew|dropped|returned|shows?|lists?|takes?|took|expects?|reports?|says|"
    r"gives?|reads?|puts?|sees?|saw|forecasts?|predicts?)\b",
    re.I,
)
# A value said as a former one: "up from 187 last month", "Last quarter's share was 58%".
_FORMER_BEFORE = re.compile(r"\bfrom\s*$|\b(?:last|previous|prior)\s+(?:\w+'s\s+)?(?:\w+\s+){0,3}$", re.I)
_FORMER_AFTER = re.compile(
    r"^\s*\S*\s*(?:last|a|one)\s+(?:week|month|quarter|year)|^\s*\S*\s*(?:ago|before|earlier|previously)\b",
    re.I,
)
_FORMER_CLAIM = re.compile(r"\b(?:from|last|previous|prior|ago|before|earlier|previously|was|were)\b", re.I)


def _near(clause: _Clause, place: Place, *, after: bool = True) -> str:
    """The words right around a value in its clause (three before, two after, or the label it is the
    value of: "- Completed: 29 points"): what it is a value of."""
    before = _WORD.findall(clause.before)[-3:] or _WORD.findall(clause.item or clause.label)[-3:]
    following = _WORD.findall(clause.after[place[1] - place[0] :])[:2] if after else []
    return " ".join(before + following)


def _foreign_ids(claim: Facts, said: str) -> int:
    """Identifiers of the shape of a claim's own that the claim does not name ("p50" for "p99")."""
    shapes = {re.sub(r"\d+", "9", i) for i in claim.ids}
    parts = {p for i in claim.ids if "-" in i for p in i.split("-")}
    found = {w.lower() for w in re.findall(r"\b[A-Za-z]+\d+\b|\b[A-Za-z]+(?:-[A-Za-z]+)+\b", said)}
    return sum(
        1
        for w in found
        if w not in claim.ids
        and (re.sub(r"\d+", "9", w) in shapes or ("-" in w and set(w.split("-")) & parts))
    )


def _strange(terms: set[str], near: str) -> int:
    """Content words right by a value that the claim does not have ("an *average* temperature of")."""
    words = [w for w in re.findall(r"\S+", near) if w.isalpha() and w.lower() not in STOPWORDS | MONTH_WORDS]
    return sum(1 for w in words if len(w) > 2 and not _count(terms, w))


def _subject(claim: Facts) -> set[str]:
    """The words that name the claim's subject: its names, and identifiers like paths or services."""
    names = {w.lower() for name in claim.names for w in name}
    if claim.first_name:  # "West had ...": a name, or just the sentence's first word (as the answer has it)
        names.add(claim.first_name.lower())
    return names | {i for i in claim.ids if re.search(r"[-/._]", i) and len(i) >= 4}


def _trimmed(text: str, place: Place) -> Place:
    """The place without the blanks a figure's span may start with (at least one character)."""
    start = place[0] + len(text[place[0] : place[1]]) - len(text[place[0] : place[1]].lstrip())
    return start, max(place[1], start + 1)


def _said_before(text: str, spans: list[Span], place: Place, *, whole: bool = False) -> str:
    """The words a value is said right after in its clause (three; ``whole``: all of the clause before
    it): "p95 was" in "..., p95 was 182 ms". None in a table: a cell's header and row say the whole
    subject, not a qualifier."""
    place = _trimmed(text, place)
    if table_cell(text, place[1] - 1) is not None:
        return ""
    clause = _Clause(text, sentence_at(spans, place[0]), place[0])
    return " ".join(_WORD.findall(clause.before)) if whole else _near(clause, place, after=False)


def _clause_text(text: str, spans: list[Span], place: Place) -> str:
    place = _trimmed(text, place)
    pos = place[1] - 1
    cell = table_cell(text, pos)
    if cell is not None:
        return " ".join(cell)
    clause = _Clause(text, sentence_at(spans, place[0]), place[0])
    return f"{label_of(text, pos) or ''} {clause.label} {clause.text}"


def _score(claim: Facts, text: str, spans: list[Span], place: Place, terms: set[str]) -> int:
    """How much of the claim's subject is said with the value at ``place``."""
    place = _trimmed(text, place)
    return _said_with(claim, text, spans, place, terms)


def _said_with(claim: Facts, text: str, spans: list[Span], place: Place, terms: set[str]) -> int:
    if not terms:
        return 0
    pos = place[1] - 1
    cell = table_cell(text, pos)
    if cell is not None:
        return 3 * _count(terms, " ".join(cell))
    span = sentence_at(spans, place[0])
    clause = _Clause(text, span, place[0])
    said = f"{label_of(text, pos) or ''} {clause.label} {clause.text}"
    near = _near(clause, place, after=False)
    former = _FORMER_BEFORE.search(clause.before) or _FORMER_AFTER.match(clause.after[place[1] - place[0] :])
    return (
        2 * _count(terms, _near(clause, place))
        - _strange(terms, near)
        + _count(terms, said)
        + _count(terms, in_context(text, spans, spans.index(span)))
        - 4 * _foreign_ids(claim, said)
        - 2 * _foreign_names(claim, f"{clause.label} {clause.text}", text[span[0] : span[1]])
        - (4 if former and not _FORMER_CLAIM.search(claim.text) else 0)
    )


def _foreign_names(claim: Facts, clause: str, sentence: str) -> int:
    """1 when the claim names its subject and the clause names another one instead ("Osaka expects
    a high of 26 °C" for Tokyo's high)."""
    own = {w.lower() for name in claim.names for w in name}
    if not own or any(w.lower() in own for w in re.findall(r"[A-Za-z]+", clause)):
        return 0
    capitalised = re.findall(r"(?<=[\w,;:)] )[A-Z][a-z]{2,}", clause)
    leading = re.match(r"\s*([A-Z][a-z]{2,})(?=,|\s\()", sentence)  # "Porto, further north, expects"
    if leading and leading.group(1) in clause:
        capitalised.append(leading.group(1))
    return int(any(w.strip().lower() not in STOPWORDS | MONTH_WORDS for w in capitalised))


_PERIOD = re.compile(r"\b(?:past|last|over|within|every|per|next|for)\s*$", re.I)
_DELTA = re.compile(
    r"(?:\bby|\b(?:increase|decrease|drop|rise|gain|growth|change|fall|decline) of|\bup|\bdown|[+\u2212])\s*$",
    re.I,
)


def _delta(text: str, start: int) -> bool:
    """The value is a change ("rose by 0.7 points", "an increase of 12%"), not a level."""
    return bool(_DELTA.search(text[max(0, start - 20) : start]))


def _places(claim: Facts, answer: Facts) -> list[tuple[str, str, list[Place], list[Place]]]:
    """(the claim value, its text, where it is matched, where other values of its kind are)."""
    found: list[tuple[str, str, list[Place], list[Place]]] = []
    for q in (q for q in claim.quantities if not q.exact):  # a year qualifies a claim, it is no slot
        hits = [(g.start, g.end) for g in answer.quantities if same(q, g)]
        others = [
            (g.start, g.end)
            for g in answer.quantities
            if g.dim == q.dim
            and g.exact == q.exact
            and (g.currency or None) == (q.currency or None)
            and not any(same(c, g) for c in claim.quantities)
            and _delta(answer.text, g.start) == _delta(claim.text, q.start)  # a change is no level
        ]
        found.append((q.text, q.text, hits, others))
    for d in claim.dates if not claim.times else []:  # a time in another zone may fall on another day
        place = [(g.start, g.start + len(g.text)) for g in answer.dates]
        hits = [p for g, p in zip(answer.dates, place, strict=True) if date_same(d, g)]
        others = [
            p
            for g, p in zip(answer.dates, place, strict=True)
            if not any(date_same(c, g) for c in claim.dates) and g.day is not None and d.day is not None
        ]
        found.append((d.text, d.text, hits, others))
    zones = {a.zone for a in answer.times if a.zone}
    for t in claim.times if not zones and not any(c.zone for c in claim.times) else []:  # zones: ``matching``
        hits = [(a.start, a.end) for a in answer.times if time_same(t, a)]
        others = [
            (a.start, a.end) for a in answer.times if all(time_same(c, a) is False for c in claim.times)
        ]
        found.append((t.text, t.text, hits, others))
    low = answer.text.lower()
    versions = [(m.start(1), m.end(1), m.group(1)) for m in _VERSION.finditer(low)]
    for i in claim.ids:
        if _VERSION.fullmatch(i):  # "web-02 runs Node.js 20.11.1": another version is a rival
            mine = i.lstrip("v")
            hits = [(s, e) for s, e, v in versions if v == mine or v.startswith(mine + ".")]
            others = [
                (s, e)
                for s, e, v in versions
                if v.count(".") == mine.count(".") and not any(v == c.lstrip("v") for c in claim.ids)
            ]
            found.append((i, i, hits, others))
        if not _HEX.fullmatch(i):
            continue
        hexes = [(m.start(), m.end(), m.group(0)) for m in _HEX.finditer(low) if not m.group(0).isdigit()]
        hits = [(s, e) for s, e, h in hexes if h.startswith(i) or i.startswith(h)]
        others = [
            (s, e) for s, e, h in hexes if not any(h.startswith(c) or c.startswith(h) for c in claim.ids)
        ]
        found.append((i, i, hits, others))
    return found


class _Contest(NamedTuple):
    what: str  # the claim's value
    other: str  # the other value that contests it
    hit: int  # the best score of the claim value's matches
    rival: int  # the other value's score
    qualifier: str = ""  # a word of the claim said with the other value, not with any match


def _contests(claim: Facts, answer: Facts) -> list[_Contest]:
    """For each claim value found with other values of its kind: the best other value against the
    best match. A match said right after a word of the claim that the other value is not said with
    ("p95 was 182 ms" beside "average response time was 128 ms") is no clear loser: the best match
    then counts as high as the other. A value the claim's qualifier goes with instead
    (``_requalified``) is one more contest, even: uncertain, never a decisive fail."""
    text = answer.text
    spans = sentences(text)
    found: list[_Contest] = []
    for what, value_text, hits, others in _places(claim, answer):
        if not hits or not others:
            continue
        terms = _terms(claim, value_text)
        if len(terms) < 2:
            continue
        digits = {re.sub(r"\D", "", text[h[0] : h[1]]) for h in hits}
        others = [
            o
            for o in others
            if re.sub(r"\D", "", text[o[0] : o[1]]) not in digits  # the same figure read another way
            and re.search(r"\d", text[o[0] : o[1]])  # "the four teams": a count framing the claim
            and not _PERIOD.search(text[max(0, o[0] - 12) : o[0]])  # "over the past 7 days": a period
            and not any(h[0] >= o[1] and correction_between(text, o[1], h[0]) for h in hits)  # taken back
        ]
        named = _subject(claim)
        if any(
            _count(named, _clause_text(text, spans, h)) for h in hits
        ):  # the claim's named subject is there
            others = [o for o in others if _count(named, _clause_text(text, spans, o))]
        if not others:
            continue
        best_hit = max(_score(claim, text, spans, p, terms) for p in hits)
        best_other, where = max((_score(claim, text, spans, p, terms), p) for p in others)
        other_said = _said(terms, _clause_text(text, spans, where))
        if any(_said(terms, _said_before(text, spans, h)) - other_said for h in hits):
            best_hit = max(best_hit, best_other)  # a qualifier of the claim only the match has
        hit_clauses = {_clause_text(text, spans, h) for h in hits}
        if any(_clause_text(text, spans, o) in hit_clauses for o in others):
            best_hit = min(best_hit, best_other)  # side by side in one clause ("312 of 480"): not placed
        found.append(_Contest(what, text[where[0] : where[1]], best_hit, best_other))
        requalified = _requalified(text, spans, terms, hits, others)
        if requalified:
            found.append(_Contest(what, requalified[0], best_hit, best_hit, requalified[1]))
    return found


def _requalified(
    text: str, spans: list[Span], terms: set[str], hits: list[Place], others: list[Place]
) -> tuple[str, str] | None:
    """Another value said right after a word of the claim that no match is said with, while every
    match is said right after a word the claim does not have ("the *median* order value was $84.17,
    while the *mean* was $97.60" for a mean of $84.17; "*produced* 484,500 and *delivered* 494,900").
    """
    if not all(_strange(terms, _said_before(text, spans, h, whole=True)) for h in hits):
        return None
    for o in others:
        own = _said(terms, _said_before(text, spans, o, whole=True))
        unmatched = [own - _said(terms, _clause_text(text, spans, h)) for h in hits]
        if own and all(unmatched):
            return text[o[0] : o[1]].strip(), sorted(set.intersection(*unmatched) or unmatched[0])[0]
    return None


def outslotted(claim: Facts, answer: Facts) -> str | None:
    """Why a claim value found in the answer is another subject's value, or None."""
    for c in _contests(claim, answer):
        if c.rival >= c.hit + MARGIN:
            return f"{c.what} is said of something else; '{c.other}' is said with more of the claim's subject"
    return None


def contested(claim: Facts, answer: Facts) -> str | None:
    """Another value said with more of the claim's subject than every match of the claim's value, or
    with a word of the claim none of them is said with."""
    for c in _contests(claim, answer):
        if c.qualifier:
            return f"'{c.other}' is said with the claim's '{c.qualifier}', {c.what} is not"
        if c.rival > c.hit:
            return f"'{c.other}' is said with more of the claim's subject than {c.what}"
    return None


def resolved(claim: Facts, answer: Facts) -> bool:
    """Every other value of a claim value's kind is clearly another subject's: each match is said with
    more of the claim's subject than any of them, by the margin."""
    contests = _contests(claim, answer)
    return bool(contests) and all(c.hit >= c.rival + MARGIN for c in contests)
