"""Whose value is it, read from the answer's structure (``judge.layout``): a claim figure counts only
where the answer attaches it to the claim's subject.

In a group of sibling records (a table's rows or columns, a run of list items) the claim's subject
is the one record whose key the claim names (every word of the key is the claim's, a dated key has
the claim's date). A claim figure (a quantity, date or time) said only in other records of that
group is said of another subject ("| 2024-03-14 | 172.91 | 172.62 |" for "closed at $172.62 on
March 15"; "- Control sample: 7.4" for "the buffered sample had a pH of 7.4"): when the subject's
record holds another value in the same slot (its row's cell in the figure's column), that is the
subject's value and the claim fails; when it holds none, or a dated table has no row of the claim's
date, the judge abstains. A figure said exactly elsewhere is preferred to one within the tolerance
(a table's neighbouring close is no rounding of the claim's). A column header names a subject only
as a proper name or a date ("Close" and "Change" are what is said), and only a record of the
subject's kind (both dated, or neither) is another subject.

Ranked lists: a claim that names the first ("the nearest pharmacy is X") fails when X is a later
item of a list whose heading ranks by the claim's word ("Closest pharmacies:").
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from atlasrun.judge.base import Abstention, Label
from atlasrun.judge.evidence import Span, heading_of
from atlasrun.judge.facts import Date, Facts, stem
from atlasrun.judge.layout import Group, Layout, Record, trimmed
from atlasrun.judge.lexicon_words import STOPWORDS
from atlasrun.judge.values import comparable, date_same, same, time_same

Outcome = tuple[Label, str] | Abstention | None
_WORD = re.compile(r"[A-Za-z][\w'-]*|\d[\w.]*")
# Words that name the first of a ranked list, by the order the list's heading gives it.
_FIRSTS = (
    frozenset({"top", "highest", "most", "largest", "biggest", "best", "leading", "greatest"}),
    frozenset({"nearest", "closest"}),
    frozenset({"lowest", "least", "fewest", "smallest", "cheapest"}),
)
# A claim about another rank than the first, or one that denies a rank.
_OTHER_RANK = re.compile(
    r"\b(?:second|third|fourth|fifth|2nd|3rd|4th|5th|runner-up|one of|among|not|never|no longer)\b|n't\b",
    re.I,
)


def _places(claim: Facts, answer: Facts) -> Iterator[tuple[str, list[Span], list[Span]]]:
    """(a claim figure, where the answer says it, where the answer says other values of its kind)."""
    text = answer.text
    for q in (q for q in claim.quantities if not q.exact):
        kin = [g for g in answer.quantities if comparable(q, g) and g.exact == q.exact]
        matches = [g for g in kin if same(q, g)]
        exact = [g for g in matches if g.value == q.value] or matches
        yield (
            q.text,
            [trimmed(text, (g.start, g.end)) for g in exact],
            [trimmed(text, (g.start, g.end)) for g in kin if g not in exact],
        )
    for d in claim.dates:
        dated = [(trimmed(text, (g.start, g.start + len(g.text))), date_same(d, g)) for g in answer.dates]
        yield d.text, [s for s, ok in dated if ok], [s for s, ok in dated if not ok]
    for t in claim.times:
        timed = [(trimmed(text, (a.start, a.end)), time_same(t, a)) for a in answer.times]
        yield t.text, [s for s, ok in timed if ok], [s for s, ok in timed if ok is False]


def _names_subject(claim: Facts, answer: Facts, key: Span, across: bool) -> bool | None:
    """Whether the claim names the subject of a record with this key; None: the key names nothing
    the claim could (no word, no date). ``across``: a column header, named only by a name or an id."""
    dates = _dates_in(answer, key)
    if dates:
        return any(date_same(c, d) for c in claim.dates for d in dates) if claim.dates else None
    words = [w for w in _WORD.findall(answer.text[key[0] : key[1]]) if w.lower() not in STOPWORDS]
    if not words:
        return None
    names = {w.lower() for name in claim.names for w in name} | set(claim.ids)
    if across:
        return all(w.lower() in names for w in words)
    return all(_said(w, {stem(w) for w in claim.words} | names) for w in words)


def _dates_in(answer: Facts, key: Span) -> list[Date]:
    return [d for d in answer.dates if key[0] <= d.start < key[1]]


def _said(word: str, own: set[str]) -> bool:
    s, low = stem(word), word.lower()
    return (
        s in own
        or low in own
        or (
            s.isalpha()
            and len(s) >= 4
            and any(len(o) >= 4 and (o.startswith(s) or s.startswith(o)) for o in own)
        )
    )


def _in(place: Span, span: Span) -> bool:
    return span[0] <= place[0] and place[1] <= span[1]


def _judged(
    claim: Facts, answer: Facts, group: Group, what: str, hits: list[Span], others: list[Span]
) -> Outcome:
    """The verdict one sibling group gives on a claim figure, or None when it says nothing."""
    records = group.records
    if any(_in(h, r.key) for h in hits for r in records):
        return None  # the figure names a record (a dated row): it is a subject, not a value
    held = [(r, slot) for r in records for h in hits if (slot := r.slot_of(h)) is not None]
    if not held or len(held) < len(hits):
        return None  # not said in this group, or said elsewhere too (prose is the other rules')
    named = [_names_subject(claim, answer, r.key, group.across) for r in records]
    subjects = [r for r, says in zip(records, named, strict=True) if says]
    owners = "; ".join(dict.fromkeys(_key(answer, r) for r, _ in held))
    if not subjects and claim.dates and all(_dates_in(answer, r.key) for r in records):
        return Abstention(
            kind="relation", reason=f"{what} is said only of {owners!r}, the claim's date has no row"
        )
    if len(subjects) != 1 or any(r is subjects[0] for r, _ in held):
        return None  # no one record is the claim's subject, or the figure is said of it
    if any(named[records.index(r)] is None for r, _ in held):
        return None  # a record whose key names nothing: no other subject is named either
    subject = subjects[0]
    if any(bool(_dates_in(answer, r.key)) != bool(_dates_in(answer, subject.key)) for r, _ in held):
        return None  # "Change" beside "Oct 2024": what is said, not another subject
    rival = _rival(subject, {slot for _, slot in held}, others)
    if rival is not None:
        return "not_fulfilled", (
            f"{what} is said of {owners!r}, not of {_key(answer, subject)!r}, "
            f"which has {answer.text[rival[0] : rival[1]].strip()!r}"
        )
    return Abstention(
        kind="relation", reason=f"{what} is said only of {owners!r}, not of {_key(answer, subject)!r}"
    )


def _rival(subject: Record, slots: set[int], others: list[Span]) -> Span | None:
    """Another value of the figure's kind in the subject's record, in a slot the figure stands in."""
    return next((o for o in others if subject.slot_of(o) in slots), None)


def _key(answer: Facts, record: Record) -> str:
    return answer.text[record.key[0] : record.key[1]].strip()


def _ranked(claim: Facts, answer: Facts, group: Group) -> tuple[Label, str] | None:
    """A claim that names the first of a ranked list ("the nearest pharmacy is X") while X is a
    later item of a list whose heading ranks by the claim's word ("Closest pharmacies:")."""
    if group.across or _OTHER_RANK.search(claim.text):
        return None
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", claim.text)}
    first = group.records[0]
    heading = heading_of(answer.text, first.key[0])
    if heading is None:
        return None
    said = {w.lower() for w in re.findall(r"[A-Za-z]+", heading)}
    if not any(words & firsts and said & firsts for firsts in _FIRSTS):
        return None
    keys = [_key(answer, r) for r in group.records]
    for name in claim.names:
        token = re.compile(r"\b" + r"\W+".join(map(re.escape, name)) + r"\b", re.I)
        ranks = [i for i, key in enumerate(keys) if token.search(key)]
        if ranks and 0 not in ranks:
            return "not_fulfilled", (
                f"{' '.join(name)} is item {ranks[0] + 1} of {heading.rstrip(':')!r}, whose first is {keys[0]!r}"
            )
    return None


def attributed(claim: Facts, answer: Facts) -> Outcome:
    """A decisive fail (the claim's subject holds another value), an abstention (a claim figure said
    only of another subject), or None: the answer's tables and lists do not tell."""
    if "|" not in answer.text and "\n" not in answer.text:
        return None
    groups = Layout(answer.text).groups
    ranked = next((r for g in groups if (r := _ranked(claim, answer, g))), None)
    if ranked:
        return ranked
    found: Outcome = None
    for what, hits, others in _places(claim, answer):
        if not hits:
            continue
        for group in groups:
            outcome = _judged(claim, answer, group, what, hits, others)
            if isinstance(outcome, tuple):
                return outcome
            found = found or outcome
    return found
