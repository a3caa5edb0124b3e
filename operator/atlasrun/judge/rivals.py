"""Whose value is it: another value in the answer of a claim value's kind is a rival for the same
quantity only when it is said of the same thing (attached to the claim's words, in the claim's table
row and column, list section, year and owner); after a self-correction cue it replaces the match, a
move ("changed from <value> to <other>") leaves the claim's value behind. The ``Tally`` of a claim's
key facts records the outcome."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from atlasrun.judge.base import AbstentionKind
from atlasrun.judge.evidence import (
    attached,
    clauses,
    correction_between,
    heading_of,
    headings,
    label_of,
    sentence_at,
    sentences,
    stems_of,
    table_cell,
)
from atlasrun.judge.facts import Facts, Quantity, stem
from atlasrun.judge.values import id_shape

_CUE_STEMS = {
    stem(w) for w in ("actually", "correction", "wait", "sorry", "mean", "meant", "corrected", "fact")
}
Hit = tuple[int, int, str]  # (start, end, kind of fact) in the answer's text


@dataclass
class Tally:
    matched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    contradicted: list[str] = field(default_factory=list)
    dumps: list[str] = field(default_factory=list)  # matched only inside a list of candidate values
    hits: list[Hit] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)  # another value for the same quantity
    candidate_spans: list[Hit] = field(default_factory=list)  # where those other values are
    rivals: list[Hit] = field(default_factory=list)  # values of the claim's kinds the claim does not state
    undecided: list[tuple[AbstentionKind, str]] = field(default_factory=list)

    def add(self, what: str, ok: bool, contradiction: str | None) -> None:
        if ok:
            self.matched.append(what)
        elif contradiction:
            self.contradicted.append(f"{what} (answer: {contradiction})")
        else:
            self.missing.append(what)

    @property
    def facts(self) -> int:
        return len(self.matched) + len(self.missing) + len(self.contradicted) + len(self.dumps)


def claim_stems(claim: Facts) -> set[str]:
    return stems_of(claim.text) | {w.lower() for n in claim.names for w in n}


def other_cell(text: str, pos: int, claim: Facts, columns: bool = True) -> bool:
    """A table cell in a row (or, with ``columns``, a column) the claim does not speak of: a column
    header such as "Amount" may be a word the claim lacks, so a match is only ruled out by its row."""
    cell = table_cell(text, pos)
    if cell is None:
        return False
    header, row = cell
    own = claim_stems(claim)
    names = {w.lower() for n in claim.names for w in n} | {(claim.first_name or "").lower()} - {""}
    row_words = stems_of(row) | {w.lower() for w in re.findall(r"\w+", row)}
    other_row = bool(row_words) and not row_words & own and bool(names) and not row_words & names
    return other_row or (columns and bool(stems_of(header)) and not stems_of(header) & own)


_YEAR_AFTER = re.compile(r"\D{0,12}?\b(1[89]\d\d|20\d\d)\b")
_YEAR_BEFORE = re.compile(r"\b(1[89]\d\d|20\d\d)\b\D{0,12}$")


def other_section(text: str, pos: int, claim: Facts) -> bool:
    """A list item under a heading that is not the claim's, in an answer with a section that is
    ("**worker**" above "- replicas: 4" where the claim is about api and "**api**" heads another)."""
    label, heading = label_of(text, pos), heading_of(text, pos)
    if not label and not heading:
        return False
    aside = text.rfind("(", text.rfind("\n", 0, pos) + 1, pos)
    if aside >= 0 and ")" not in text[aside:pos] and _mentions(text[aside:pos], claim):
        return False  # its own aside says what it is: "38 PRs (median time to merge: 2.4 days)"
    all_headings, all_labels = headings(text)
    return any(
        said is not None and not _mentions(said, claim) and any(_mentions(o, claim) for o in others)
        for said, others in ((label, all_labels), (heading, all_headings))
    )


def _mentions(heading: str, claim: Facts) -> bool:
    words = {w.lower() for w in re.findall(r"[\w.-]+", heading)}
    names = {w.lower() for n in claim.names for w in n}
    return bool(stems_of(heading) & claim_stems(claim) or words & names or words & set(claim.ids))


def _other_year(text: str, start: int, end: int, claim: Facts) -> bool:
    """The value is qualified by another year than the claim's ("3,271,575 in 2023")."""
    years = {str(int(q.value)) for q in claim.quantities if q.exact} | {
        str(d.year) for d in claim.dates if d.year
    }
    after, before = _YEAR_AFTER.match(text, end), _YEAR_BEFORE.search(text, max(0, start - 20), start)
    return bool(years) and any(m and m.group(1) not in years for m in (after, before))


def _other_owner(answer: Facts, pos: int, claim: Facts) -> bool:
    """The value's clause names another entity of the claim's kind ("invoice INV-1057 (April) totals
    €3,985.50" beside the claim's INV-1042): it is that entity's value."""
    text = answer.text
    clause = [c for c in clauses(text, sentence_at(sentences(text), pos)) if c[0] <= pos][-1]
    said = text[clause[0] : clause[1]]
    shapes = {id_shape(i) for i in claim.ids}
    ids = [i for i in answer.ids if i not in claim.ids and id_shape(i) in shapes and i in said.lower()]
    return bool(ids) and not any(i in said.lower() for i in claim.ids)


_MOVED_FROM = re.compile(
    r"\b(?:moved|changed|switched|rescheduled|shifted|updated|raised|lowered|increased|decreased|rose|fell|"
    r"dropped|went|bumped|reduced|scaled|grew|shrank|expanded|upgraded|downgraded|migrated|renamed)\b"
    r"[^.;]{0,30}\bfrom\s+$",
    re.I,
)


def _moved_away(text: str, start: int, end: int, claim: Facts) -> str | None:
    """ "moved from <value> to <other>": the claim's value is the one left behind."""
    if not _MOVED_FROM.search(text, max(0, start - 50), start):
        return None  # "runs from 14:00 to 15:30" is a range, not a move
    m = re.match(r"(?:\s+[A-Za-z]+){0,2}?\s+(?:to|->|\u2192)\s+([\w$€£:.,/-]*\w)", text[end : end + 60])
    if m is None or m.group(1).lower() in claim.text.lower():
        return None
    return m.group(1)


def _says_all(sentence: str, claim: Facts) -> bool:
    """Every content word, name and identifier of the claim is in the sentence (values aside)."""
    low = sentence.lower()
    names = all(" ".join(n).lower() in low for n in claim.names)
    return names and all(i in low for i in claim.ids) and set(claim.content) <= stems_of(sentence)


def check_rivals(
    tally: Tally,
    what: str,
    hits: list[tuple[int, int]],
    rivals: list[tuple[str, int, int]],
    answer: Facts,
    claim: Facts,
    kind: str,
) -> None:
    """Another value for the same quantity: after a correction cue it replaces the match (decisive);
    otherwise it makes the match uncertain. A value of something else (attached to words the claim
    lacks, in another table row or column) is no rival."""
    text = answer.text
    spans = sentences(text)
    own = claim_stems(claim)
    hit_sentences = {sentence_at(spans, s) for s, _ in hits}
    after_too = kind == "quantity"  # "1,209 orders": a count's noun follows it; "joined on <date>" not
    hit_windows = [attached(text, s, e, sentence_at(spans, s), after_too=after_too) for s, e in hits]
    hit_words = set().union(*(w & own for w in hit_windows))
    hits_elsewhere = all(w - own for w in hit_windows)  # every match is a value of something else
    for rival, start, end in rivals:
        tally.rivals.append((start, end, kind))
        before = [h for h in hits if h[1] <= start]
        after = [h for h in hits if h[0] >= end]
        if after and correction_between(text, end, after[0][0]):
            tally.hits.append((start, end, kind))  # the corrected sentence also carries the claim
            continue  # corrected to the claim's value
        if before and not after:
            cue = correction_between(text, before[-1][1], start)
            if cue:
                tally.contradicted.append(f"{what} (answer corrects it to {rival}: '{cue}')")
                continue
        if (
            other_cell(text, start, claim)
            or other_section(text, start, claim)
            or _other_year(text, start, end, claim)
            or _other_owner(answer, start, claim)
        ):
            continue
        sentence = sentence_at(spans, start)
        words = attached(text, start, end, sentence, after_too=after_too) - _CUE_STEMS
        restated = sentence not in hit_sentences and _says_all(text[slice(*sentence)], claim)
        same_words = bool(words & own) and not words - own and (words & own >= hit_words or hits_elsewhere)
        if not same_words and not restated:
            continue  # a value of something else ("30 minutes last week", "112 closed issues", "salary of")
        tally.candidates.append(f"{what} (also {rival})")
        tally.candidate_spans.append((start, end, kind))


def same_thing(q: Quantity, g: Quantity, answer: Facts, claim: Facts) -> bool:
    """Another value contradicts the claim's only when it is a value of the same thing: of the
    claim's dimension or currency, or said with the claim's words ("3 availability zones" does not
    contradict "Kubernetes 1.29")."""
    if (q.dim is not None and g.dim == q.dim) or (q.currency and g.currency == q.currency) or q.exact:
        return True
    own = claim_stems(claim)
    cell = table_cell(answer.text, g.start)
    if cell:  # a table cell is a value of its row and its column
        return bool((stems_of(cell[0]) | stems_of(cell[1]) | {w.lower() for w in cell[1].split()}) & own)
    span = sentence_at(sentences(answer.text), g.start)
    return bool(attached(answer.text, g.start, g.end, span) & own)


def check_moves(tally: Tally, answer: Facts, claim: Facts) -> None:
    for start, end, _ in tally.hits:
        other = _moved_away(answer.text, start, end, claim)
        if other:
            tally.contradicted.append(f"{answer.text[start:end]} (answer: changed from it to {other})")
            return
