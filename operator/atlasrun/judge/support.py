"""The answer's sentences that carry a claim's facts (``Evidence``), and two readings of where
those facts stand: another value where the claim is said (``_outdone``), and two facts never said
together while a clause of one holds another value in the other's place (``unpaired_facts``)."""

from __future__ import annotations

import re

from atlasrun.judge.cues import HEDGE_CUES, RELATION_SHARE, claim_share, cue_in, has_stem, word_stems
from atlasrun.judge.evidence import (
    Span,
    asks,
    attached,
    clauses,
    in_context,
    sentence_at,
    sentences,
    stems_of,
)
from atlasrun.judge.facts import Facts, stem
from atlasrun.judge.rivals import Tally, claim_stems


class Evidence:
    """The answer's sentences that carry the claim's facts."""

    def __init__(self, claim: Facts, answer: Facts, tally: Tally) -> None:
        spans = sentences(answer.text)
        self.answer = answer
        self.spans = {sentence_at(spans, s) for s, _, _ in tally.hits}
        valued = {sentence_at(spans, s) for s, _, kind in tally.hits if kind in _VALUE_KINDS}
        self.value_spans = valued or self.spans  # where the claim's figures, dates and times are said
        self.sentences = sorted(
            {in_context(answer.text, spans, spans.index(sentence_at(spans, s))) for s, _, _ in tally.hits}
        )
        self.long = len(spans) > 1  # several sentences: facts may sit apart from the claim's words
        self.before = [  # the sentence before a fact's, when it names nothing the claim could be of
            answer.text[slice(*spans[i - 1])]
            for i in sorted({spans.index(span) for span in self.spans})
            if i and _plain(claim, answer, spans[i - 1])
        ]
        self.roles_agree = False  # the answer gives the claim's verb to the claim's agent
        self.outdone = _outdone(claim, tally, answer.text, spans)

    def hedge(self) -> str | None:
        """A hedge in a sentence of the facts itself (not in the one before it that it continues): of
        its values when it has any ("Revenue was probably $742M. Gross margin was 61.8%." does not
        hedge the margin, though both sentences name the quarter)."""
        said = [self.answer.text[slice(*span)] for span in self.value_spans]
        return next((c for s in said if (c := cue_in(s, HEDGE_CUES))), None)

    def all_asking(self) -> bool:
        return bool(self.sentences) and all(asks(s, (0, len(s))) for s in self.sentences)

    def says_more(self, claim: Facts) -> bool:
        """The sentences say something besides the facts (not a bare "Ana, Ben and Eli.")."""
        known = stems_of(claim.text) | {w.lower() for n in claim.names for w in n} | set(claim.items)
        return bool(stems_of(" ".join(self.sentences)) - known)

    def content_share(self, claim: Facts) -> float:
        """The share of the claim's content words said with its facts (or in the plain sentence that
        leads to them: "I checked the orders database. The last backup finished on 2024-05-14.")."""
        if not claim.content:
            return 1.0
        stems = word_stems(" ".join(self.sentences + self.before))
        return sum(1 for c in claim.content if has_stem(stems, c)) / len(claim.content)


_VALUE_KINDS = ("quantity", "date", "time")


def _plain(claim: Facts, answer: Facts, span: Span) -> bool:
    """The sentence states no value, identifier or name that is not the claim's, and asks nothing."""
    start, end = span
    said = answer.text[start:end].lower()
    if asks(answer.text, span):
        return False  # a question leads to nothing
    claim_names = {" ".join(n).lower() for n in claim.names}
    return not (
        any(
            start <= at < end for at in [v.start for v in answer.quantities] + [d.start for d in answer.dates]
        )
        or any(start <= t.start < end for t in answer.times)
        or any(i in said and i not in claim.ids for i in answer.ids)
        or any(" ".join(n).lower() in said and " ".join(n).lower() not in claim_names for n in answer.names)
    )


def _outdone(claim: Facts, tally: Tally, text: str, sentence_spans: list[Span]) -> str | None:
    """Another value of a matched fact's kind stands where the claim is said: in the sentence that
    says most of the claim (none of the fact's matches there), or in the same sentence as the match
    but closer to the claim's words (identifiers: "commit 8c0d2e1, which reverted 3e1f9a7"). The
    match may be about something else."""
    own = claim_stems(claim)
    for start, end, kind in tally.rivals:
        hits = [(s, e) for s, e, k in tally.hits if k == kind]
        if not hits:
            continue
        span = sentence_at(sentence_spans, start)
        hit_spans = {sentence_at(sentence_spans, s) for s, _ in hits}
        if span in hit_spans:
            if kind != "id":
                continue  # values and names side by side in one sentence: the words around them decide
            near = len(attached(text, start, end, span) & own)
            same = [(s, e) for s, e in hits if sentence_at(sentence_spans, s) == span]
            if near and all(not attached(text, s, e, span) & own for s, e in same):
                return f"another {kind} stands closer to the claim's words than its match"
            continue
        best_hit = max(claim_share(claim, text[slice(*s)]) for s in hit_spans)
        share = claim_share(claim, text[slice(*span)])
        if share > best_hit and share >= RELATION_SHARE:
            return f"another {kind} is in the sentence that says most of the claim, its match is not"
    return None


_SLOTS = {"in", "at", "from", "to", "for", "on", "as", "by", "with", "via"}


def unpaired_facts(claim: Facts, tally: Tally, answer: Facts) -> str | None:
    """Two facts of the claim found, but never in one clause, while a clause of one holds another
    value in the other's place: a rival of its kind, or a name after the same preposition ("Priya ...
    in Berlin and Marcus Webb ... in Austin" for "Marcus Webb is in Berlin"). The answer may pair
    them differently."""
    text = answer.text
    spans = sentences(text)

    def clause_at(pos: int) -> Span:
        return [c for c in clauses(text, sentence_at(spans, pos)) if c[0] <= pos][-1]

    facts: dict[Span, set[str]] = {}
    for start, end, _ in tally.hits:
        facts.setdefault(clause_at(start), set()).add(text[start:end].lower())
    found = {text[s:e].lower() for s, e, _ in tally.hits}
    if len(found) < 2 or any(len(f) >= 2 for f in facts.values()):
        return None  # one fact only, or some clause states two of them together
    slots = {slot_before(text, s) for s, _, k in tally.hits if k == "name"} & _SLOTS
    named = {" ".join(n).lower() for n in claim.names}
    named |= {stem(n) for n in named}
    others = [(s, e) for s, e, _ in tally.candidate_spans]
    for phrase in answer.names:
        if " ".join(phrase).lower() in named or stem(" ".join(phrase).lower()) in named:
            continue  # the claim's own name ("Sunday" for "Sundays")
        for m in re.finditer(r"\W+".join(re.escape(w) for w in phrase), text):
            if slot_before(text, m.start()) in slots:
                others.append((m.start(), m.end()))
    hit_spans = [(s, e) for s, e, _ in tally.hits]
    for start, end in others:
        clause = clause_at(start)
        if any(start <= s and e <= end for s, e in hit_spans):
            continue  # the fact's own longer name ("München Hbf" around "München")
        if clause in facts:
            return f"'{text[start:end]}' stands in the clause of '{sorted(facts[clause])[0]}' where the claim has another fact"
    return None


def slot_before(text: str, start: int) -> str:
    """The preposition (or other word) right before a position, skipping articles."""
    words = [
        w
        for w in re.findall(r"[a-z]+", text[max(0, start - 30) : start].lower())
        if w not in ("a", "an", "the")
    ]
    return words[-1] if words else ""
