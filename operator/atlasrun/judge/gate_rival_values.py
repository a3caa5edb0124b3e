"""Another value of a claim quantity's kind in the answer, said with a claim word its match is not said
with (``judge.gate``): unless it is visibly a value of something else, the claim's words may belong
to it.
"""

from __future__ import annotations

import re

from atlasrun.judge.evidence import attached, clauses, sentence_at, sentences, table_cell
from atlasrun.judge.facts import Facts, Quantity, stem
from atlasrun.judge.gate_commitment import revision_cues
from atlasrun.judge.gate_sentence import near
from atlasrun.judge.lexicon_words import STOPWORDS
from atlasrun.judge.rivals import Tally, claim_stems
from atlasrun.judge.values import same


def rival_value(claim: Facts, answer: Facts, tally: Tally) -> str | None:
    """Another value of a claim quantity's kind, attached to a claim word that no match of it is
    attached to ("sessions with 48 million rows; events ... with 31 million" for "events ... 48
    million rows"): the claim's words may belong to that value."""
    text = answer.text
    spans = sentences(text)
    own = claim_stems(claim)
    cues = revision_cues(text)
    for q in claim.quantities:
        hits = [g for g in answer.quantities if same(q, g)]
        if not hits:
            continue
        hit_words: set[str] = set()
        for g in hits:
            hit_words |= attached(text, g.start, g.end, sentence_at(spans, g.start)) & own
        after = re.findall(r"[A-Za-z][\w'-]*", claim.text[q.end : q.end + 40])
        noun = {stem(w) for w in after if w.lower() not in STOPWORDS}  # what the figure counts
        noun = {next(iter(noun))} if len(noun) == 1 else set(stem(w) for w in after[:1])
        hit_words |= noun
        for g in answer.quantities:
            line_before = text[: g.end].rstrip("0123456789").rsplit("\n", 1)[-1]
            if not line_before.strip() and text[g.end : g.end + 1] in (".", ")"):
                continue  # "2. test_login": a list's numbering
            if g in hits or g.dim != q.dim or g.exact != q.exact or any(same(c, g) for c in claim.quantities):
                continue
            if table_cell(text, g.start) is not None:
                continue  # table rows: compared by row (``matching``)
            if any(g.end <= at < h.start for at, _ in cues for h in hits):
                continue  # corrected away: the match comes after a correction of it
            words = attached(text, g.start, g.end, sentence_at(spans, g.start)) & own
            if words - hit_words and not _of_something_else(claim, answer, g, hit_words):
                return f"'{g.text}' is said with '{sorted(words - hit_words)[0]}', its match is not"
    return None


_AGGREGATE = re.compile(r"\b(?:altogether|in total|total|combined|overall|in all|sum)\b", re.I)
_YEAR = re.compile(r"\b(?:19|20)\d{2}\b")


def _of_something_else(claim: Facts, answer: Facts, value: Quantity, hit_nouns: set[str]) -> bool:
    """The other value is visibly a value of something else, not a rival reading of the claim's:
    its clause names another entity (a name, an id or a year the claim does not), it counts another
    thing (the noun after it is no word of the claim's), or it is a total where the claim is not."""
    text = answer.text
    at = value.start + len(text[value.start : value.end]) - len(text[value.start : value.end].lstrip())
    parts = clauses(text, sentence_at(sentences(text), at))  # a figure's span may open with a space
    span = next((c for c in parts if c[0] <= at <= c[1]), parts[-1])
    clause = text[span[0] : span[1]]
    claim_low = claim.text.lower()
    names = {" ".join(n).lower() for n in answer.names}
    if any(n in clause.lower() and n not in claim_low for n in names):
        return True
    if any(i in clause.lower() and i not in claim.ids for i in answer.ids):
        return True
    around = text[span[0] : value.start] + " " + text[value.end : span[1]]  # the clause but the value
    if any(y not in claim.text for y in _YEAR.findall(around)):
        return True
    after = [
        w for w in re.findall(r"[A-Za-z][\w'-]*", text[value.end : span[1]]) if w.lower() not in STOPWORDS
    ]
    own = claim_stems(claim)
    if (
        after
        and stem(after[0]) not in own
        and stem(after[0]) not in hit_nouns
        and not _near_any(stem(after[0]), own)
    ):
        return True
    return bool(_AGGREGATE.search(clause)) and not _AGGREGATE.search(claim.text)


def _near_any(word: str, stems: set[str]) -> bool:
    return any(near(word, s) for s in stems)
