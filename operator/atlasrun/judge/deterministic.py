"""A deterministic claims judge: the claim's facts looked up in the answer, MCP-Atlas tolerances.

For offline runs and as a cross-check of LLM judges. The claim is read into key facts
(``judge.facts``: quantities with units, dates, times, identifiers, names, list items) and content
words. Each key fact is *matched* in the answer, *contradicted* (the answer states another value of
the same kind: another number, date, time, same-shaped id or name) or *missing*. Numbers match within
5%, percentages within 1 percentage point (``0.5`` = ``50%`` = ``half``), years exactly, units
converted (``10 km`` = ``6.2 miles``).

Verdict, strictest first: an empty answer, a contradicted fact, negation (``not``, ``never``,
``no longer``, ``unpaid``), an opposite direction word (rose/fell, more/fewer), swapped roles
(``B reports to A``), or the value found only in a dump of candidate numbers -> not fulfilled. All key
facts matched -> fulfilled, unless the answer hedges (``might``, ``either``) -> partially. Some
matched -> partially; none -> not fulfilled (also for refusals). A claim with no key facts is judged
on its content words. Every reason names what matched and what did not.
"""

from __future__ import annotations

import itertools
import re

from atlasrun.judge.base import ClaimVerdict, JudgeInfo, Label
from atlasrun.judge.facts import (
    NUMBER_TOLERANCE,
    PERCENT_POINTS,
    Date,
    Facts,
    Quantity,
    read,
    stem,
)
from atlasrun.judge.lexicon import DIRECTIONS, HEDGES, REFUSALS, STOPWORDS

VERSION = "deterministic/2"
__all__ = ["NUMBER_TOLERANCE", "PERCENT_POINTS", "VERSION", "DeterministicJudge", "key_facts", "ungrounded"]

_NEGATION = re.compile(r"^(?:not|never|no|none|nothing|nor|neither|\w+n't)$")
_HEDGE_PHRASES = re.compile(
    r"\b(?:not sure|not certain|could(?: not|n't) (?:verify|confirm)|cannot confirm|can't confirm)\b"
)
_CLAUSE_BREAK = {".", ",", ";", ":", "!", "?", "but", "though", "although", "however", "while"}


def _comparable(a: Quantity, b: Quantity) -> bool:
    if a.dim == b.dim:
        return True
    if "percent" in (a.dim, b.dim):
        return (b if a.dim == "percent" else a).dim is None  # 0.12 or a bare 12 for 12%
    return a.dim is None or b.dim is None


def _same(claim: Quantity, got: Quantity) -> bool:
    if not _comparable(claim, got):
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
    return abs(c - g) <= NUMBER_TOLERANCE * abs(c) + 1e-9


def _date_same(a: Date, b: Date) -> bool:
    if a.month != b.month:
        return False
    if a.day is not None and b.day is not None and a.day != b.day:
        return False
    if a.day is not None and b.day is None:
        return False
    return a.year is None or b.year is None or a.year == b.year


def _shape(identifier: str) -> str:
    return re.sub(r"[a-z]+", "a", re.sub(r"\d+", "9", identifier.lower()))


_SOFT_ID = re.compile(r"[a-z]+(?:-[a-z]+)+")


def _id_in(identifier: str, text: str) -> bool:
    body = re.escape(identifier)
    if _SOFT_ID.fullmatch(identifier):  # highest-priority == highest priority
        body = body.replace(r"\-", r"[-\s]")
    return re.search(rf"(?<![\w-]){body}(?![\w-]|\.\w)", text, re.I) is not None


def _name_in(name: list[str], answer: Facts) -> bool:
    last = name[-1]
    if len(last) <= 2:  # "Store A": a one-letter name must match in case
        return re.search(rf"\b{re.escape(' '.join(name))}\b", answer.text) is not None
    low = last.lower()
    if re.search(rf"(?<![^\W_]){re.escape(low)}(?![^\W_])", answer.text.lower()):
        return True  # also inside "Asia/Tokyo" or "Webb's"
    return any(len(low) >= 4 and w.startswith(low) for w in answer.words)


def _answer_names(answer: Facts) -> set[str]:
    return {w.lower() for phrase in answer.names for w in phrase}


class _Tally:
    def __init__(self) -> None:
        self.matched: list[str] = []
        self.missing: list[str] = []
        self.contradicted: list[str] = []

    def add(self, what: str, ok: bool, contradiction: str | None) -> None:
        if ok:
            self.matched.append(what)
        elif contradiction:
            self.contradicted.append(f"{what} (answer: {contradiction})")
        else:
            self.missing.append(what)


def _in_dump(span: tuple[int, int], spans: list[tuple[int, int]], text: str) -> bool:
    """True when the span sits in a run of 4+ values separated only by commas (a list of candidates)."""
    ordered = sorted(set(spans))
    i = ordered.index(span)
    run = 1
    for step in (-1, 1):
        j = i
        while 0 <= j + step < len(ordered):
            (_, a_end), (b_start, _) = sorted((ordered[j], ordered[j + step]))
            if not re.fullmatch(r"[\s,;/|$€£]*(?:and|or)?[\s,;/|$€£]*", text[a_end:b_start]):
                break
            run += 1
            j += step
    return run >= 4


def _tally(claim: Facts, answer: Facts) -> tuple[_Tally, list[str]]:
    tally, dumps = _Tally(), []
    claim_values = claim.quantities
    for q in claim_values:
        hits = [g for g in answer.quantities if _same(q, g)]
        spans = [(g.start, g.end) for g in answer.quantities]
        if hits and all(_in_dump((h.start, h.end), spans, answer.residual) for h in hits):
            dumps.append(q.text)
            continue
        others = [
            g.text
            for g in answer.quantities + answer.ranges
            if _comparable(q, g) and g.exact == q.exact and not any(_same(c, g) for c in claim_values)
        ]
        tally.add(q.text, bool(hits), others[0] if others and not hits else None)
    for d in claim.dates:
        same_dates = [g for g in answer.dates if _date_same(d, g)]
        date_spans = [(g.start, g.start + len(g.text)) for g in answer.dates]
        if same_dates and all(
            _in_dump((h.start, h.start + len(h.text)), date_spans, answer.text) for h in same_dates
        ):
            dumps.append(d.text)
            continue
        others = [g.text for g in answer.dates if not any(_date_same(c, g) for c in claim.dates)]
        tally.add(d.text, bool(same_dates), others[0] if others and not same_dates else None)
    for t in claim.times:
        ok = any(t.minutes == g.minutes for g in answer.times)
        others = [g.text for g in answer.times if all(g.minutes != c.minutes for c in claim.times)]
        tally.add(t.text, ok, others[0] if others and not ok else None)
    claim_shapes = {_shape(i) for i in claim.ids}
    answer_ids = [
        i
        for i in answer.ids
        if re.search(r"[\d_./#]", i) or any(ch.isupper() for ch in _original(i, answer.text))
    ]
    for ident in claim.ids:
        ok = _id_in(ident, answer.text)
        if not ok and _SOFT_ID.fullmatch(ident):
            continue  # "second-highest": an English compound as likely as a name; its absence proves nothing
        rivals = [
            i
            for i in answer_ids
            if _shape(i) == _shape(ident) and i not in claim.ids and _shape(i) in claim_shapes
        ]
        tally.add(ident, ok, rivals[0] if rivals and not ok else None)
    claim_words = {w.lower() for phrase in claim.names for w in phrase} | {stem(w) for w in claim.words}
    rival_names = sorted(
        n for n in _answer_names(answer) if n not in claim_words and stem(n) not in claim_words
    )
    for name in claim.names:
        ok = _name_in(name, answer)
        tally.add(" ".join(name), ok, rival_names[0] if rival_names and not ok else None)
    for phrase in claim.quoted:
        tally.add(f"'{phrase}'", phrase in answer.text.lower(), None)
    answer_stems = {stem(w) for w in answer.words}
    for item in claim.items:
        tally.add(
            item,
            item in answer_stems or any(s.startswith(item) for s in answer_stems if len(item) >= 4),
            None,
        )
    return tally, dumps


def key_facts(claim: str, text: str) -> tuple[list[str], list[str]]:
    """(found, not found) key facts of ``claim`` in ``text`` as this judge reads them; a value seen
    only in a list of candidates counts as found (for checking that claims are grounded in data)."""
    tally, dumps = _tally(read(claim, claim=True), read(text))
    return tally.matched + dumps, tally.missing + tally.contradicted


def ungrounded(claim: str, text: str) -> list[str]:
    """The claim's key facts that ``text`` (e.g. tool outputs: data, not an answer) does not
    support: every figure written in the claim must be there; names and ids only need to be there
    when nothing else is. A count spelled out in words ("the three files") frames the claim and
    is not required."""
    found, missing = key_facts(claim, text)
    figures = [m for m in missing if m[:1].isdigit() and m.split()[0] in claim]
    return missing if missing and not found else figures


def _original(identifier: str, text: str) -> str:
    m = re.search(re.escape(identifier), text, re.I)
    return m.group(0) if m else identifier


def _claim_terms(claim: Facts) -> set[str]:
    terms = {stem(w) for w in claim.words if w not in STOPWORDS}
    terms |= {w.lower() for phrase in claim.names for w in phrase}
    return terms | set(claim.ids)


def _negated(text: str, terms: set[str]) -> str | None:
    """The negation cue in ``text`` that applies to one of the claim's terms, if any."""
    text = _HEDGE_PHRASES.sub(" hedge ", text.lower())
    tokens = re.findall(r"[\w'./#-]+|[.,;:!?]", text)
    for i, token in enumerate(tokens):
        if not _NEGATION.match(token):
            continue
        cue = "no longer" if token == "no" and i + 1 < len(tokens) and tokens[i + 1] == "longer" else token
        for nxt in tokens[i + 1 : i + 6]:
            if nxt in _CLAUSE_BREAK:
                break
            if stem(nxt) in terms or nxt in terms:
                return f"{cue} {nxt}"
    return None


_DIRECTION_OF: dict[str, list[tuple[int, int]]] = {}
for _i, _pair in enumerate(DIRECTIONS):
    for _side, _group in enumerate(_pair):
        for _word in _group:
            _DIRECTION_OF.setdefault(_word, []).append((_i, _side))
_DIRECTION_PHRASES = [w for w in _DIRECTION_OF if " " in w]


def _direction_words(words: list[str], text: str) -> list[tuple[int, int]]:
    """(pair index, side) of every direction word in the text."""
    low = f" {text.lower()} "
    found = [d for w in set(words) for d in _DIRECTION_OF.get(w, [])]
    return found + [d for p in _DIRECTION_PHRASES if f" {p} " in low for d in _DIRECTION_OF[p]]


def _direction_conflict(claim: Facts, answer: Facts) -> str | None:
    claim_dirs = set(_direction_words(claim.words, claim.text))
    answer_dirs = set(_direction_words(answer.words, answer.text))
    for pair, side in sorted(claim_dirs):
        if (pair, 1 - side) in answer_dirs and (pair, side) not in answer_dirs:
            up, down = DIRECTIONS[pair]
            said = [
                w
                for w in sorted((down, up)[side])
                if w in answer.words or f" {w} " in f" {answer.text.lower()} "
            ]
            meant = [
                w
                for w in sorted((up, down)[side])
                if w in claim.words or f" {w} " in f" {claim.text.lower()} "
            ]
            return f"claim says {meant[0] if meant else '?'}, answer says {said[0] if said else '?'}"
    return None


def _roles(claim: Facts) -> list[str]:
    """The claim's role-bearing terms (names and ids) in order of appearance."""
    low = claim.text.lower()
    terms = [" ".join(n).lower() for n in claim.names] + list(claim.ids)
    if claim.first_name:
        terms.append(claim.first_name.lower())
    located = sorted((low.find(t), t) for t in terms if low.find(t) >= 0)
    if len(located) < 2:
        words = [w for w in re.findall(r"[\w./#-]+", low)]
        content = [w for w in words if w not in STOPWORDS]
        if len(content) >= 3:
            located = sorted({(low.find(content[-1]), content[-1]), *located})
            if claim.ids and claim.ids[0] != content[-1]:
                pass
    return [t for _, t in located]


def _swapped(claim: Facts, answer: Facts) -> str | None:
    roles = _roles(claim)
    low_c, low_a = claim.text.lower(), answer.text.lower()
    for a, b in itertools.pairwise(roles):
        ca, cb = low_c.find(a), low_c.find(b)
        between = low_c[ca + len(a) : cb]
        relation = {stem(w) for w in re.findall(r"[a-z]+", between) if w not in STOPWORDS}
        ka, kb = a.split()[-1], b.split()[-1]
        pa, pb = _find_word(ka, low_a), _find_word(kb, low_a)
        if pa < 0 or pb < 0 or pb > pa:
            continue
        if _copular(between):
            continue  # "A is the B of C", "A, B and C are members of D": no agent/patient order
        said = low_a[pb + len(kb) : pa]
        said_words = re.findall(r"[a-z]+", said)
        if "by" in said_words or "'s" in said or len(said_words) > 8:
            continue  # passive voice or a possessive: roles kept
        if relation and relation & {stem(w) for w in said_words}:
            return f"'{b}' comes before '{a}' around '{between.strip()}'"
        if not relation and said.strip() and said.strip() == between.strip():
            return f"'{b}' comes before '{a}' around '{between.strip()}'"
    return None


def _copular(between: str) -> bool:
    words = re.findall(r"[a-z]+", between)
    if not words or words[0] not in ("is", "are", "was", "were", "be", "been"):
        return False
    rest = [w for w in words[1:] if w not in STOPWORDS]
    return not rest or not rest[0].endswith(("ed", "en"))


def _find_word(word: str, text: str) -> int:
    m = re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text)
    return m.start() if m else -1


def _cue_pattern(cues: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w'])(?:{'|'.join(re.escape(c) for c in cues)})(?![\w'])")


_HEDGE_CUES, _REFUSAL_CUES = _cue_pattern(HEDGES), _cue_pattern(REFUSALS)


def _cue(text: str, cues: re.Pattern[str]) -> str | None:
    m = cues.search(text.lower())
    return m.group(0) if m else None


class DeterministicJudge:
    def __init__(self, name: str = "deterministic") -> None:
        self.info = JudgeInfo(name=name, kind="deterministic", version=VERSION)

    async def judge(self, claim: str, response: str) -> ClaimVerdict:
        return self.judge_sync(claim, response)

    def judge_sync(self, claim: str, response: str) -> ClaimVerdict:
        label, reason = self._verdict(claim, response)
        return ClaimVerdict.labelled(claim, label, reason, 1.0)

    def _verdict(self, claim_text: str, response: str) -> tuple[Label, str]:
        if not response.strip() or response.strip().lower() in ("n/a", "none", "-"):
            return "not_fulfilled", "empty answer"
        claim, answer = read(claim_text, claim=True), read(response)
        tally, dumps = _tally(claim, answer)
        answer_stems = {stem(w) for w in answer.words}
        content_hit = [
            c
            for c in claim.content
            if c in answer_stems
            or any(
                c in s or s.startswith(c) or c.startswith(s) for s in answer_stems if min(len(s), len(c)) >= 4
            )
        ]
        facts = len(tally.matched) + len(tally.missing) + len(tally.contradicted) + len(dumps)
        summary = f"matched {len(tally.matched)}/{facts} key facts" + (
            f" ({', '.join(tally.matched[:6])})" if tally.matched else ""
        )
        if claim.content:
            summary += f", {len(content_hit)}/{len(claim.content)} content words"
        if tally.missing:
            summary += f"; missing: {', '.join(tally.missing[:6])}"
        if tally.contradicted:
            return "not_fulfilled", f"contradicted: {'; '.join(tally.contradicted[:4])}; {summary}"
        if dumps:
            return "not_fulfilled", f"{', '.join(dumps)} only in a list of candidate values; {summary}"
        negation = _negated(answer.text, _claim_terms(claim))
        if negation and not _negated(claim.text, _claim_terms(claim)):
            return "not_fulfilled", f"answer negates the claim ('{negation}'); {summary}"
        direction = _direction_conflict(claim, answer)
        if direction:
            return "not_fulfilled", f"opposite direction: {direction}; {summary}"
        swapped = _swapped(claim, answer)
        if swapped:
            return "not_fulfilled", f"roles swapped: {swapped}; {summary}"
        hedge = _cue(answer.text, _HEDGE_CUES)
        refusal = _cue(_HEDGE_PHRASES.sub(" ", answer.text.lower()), _REFUSAL_CUES)
        if refusal and (tally.missing or not facts):
            return "not_fulfilled", f"answer refuses or reports a failure ('{refusal}'); {summary}"
        if facts:
            if tally.missing:
                label: Label = "partially_fulfilled" if tally.matched else "not_fulfilled"
                return label, summary
            if hedge:
                return "partially_fulfilled", f"answer hedges ('{hedge}'); {summary}"
            if claim.content and len(claim.content) >= 3 and len(content_hit) / len(claim.content) < 0.25:
                return "partially_fulfilled", f"claim's wording mostly absent; {summary}"
            return "fulfilled", summary
        ratio = len(content_hit) / len(claim.content) if claim.content else 0.0
        label = "fulfilled" if ratio >= 0.75 else "partially_fulfilled" if ratio >= 0.4 else "not_fulfilled"
        if label == "fulfilled" and hedge:
            return "partially_fulfilled", f"answer hedges ('{hedge}'); {summary}"
        return label, f"no key facts in the claim; {summary}"
