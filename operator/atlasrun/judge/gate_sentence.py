"""The sentence that states a claim's facts (``judge.gate``): the one (with its list header, or a
vertical list for a claim that enumerates) that says every kind of fact found and the most of the
claim's content words; the share of those words a text says; a negation of a claim word in it.
"""

from __future__ import annotations

import re

from atlasrun.judge.evidence import in_context, sentences, stems_of
from atlasrun.judge.facts import Facts, stem
from atlasrun.judge.lexicon_words import IRREGULAR_VERBS, STOPWORDS
from atlasrun.judge.rivals import Tally, claim_stems
from atlasrun.judge.values import same

Span = tuple[int, int]
NEGATION_TOKEN = re.compile(r"^(?:not|never|no|none|nothing|nor|neither|without|\w+n't|cannot)$")


def _verb_stem(word: str) -> str:
    return stem(IRREGULAR_VERBS.get(word.lower(), word.lower()))


_LIST_BLOCK = re.compile(r"[^\n]*:[ \t]*(?:\n[ \t]*(?:[-*\u2022]|\d{1,2}[.)])[^\n]*)+")


def together(claim: Facts, answer: Facts, tally: Tally) -> tuple[Span, str] | None:
    """The sentence (with its list header) that states every kind of fact found, and the most of the
    claim's content words; None when no sentence states them together."""
    text = answer.text
    spans = sentences(text)
    counts = {
        "quantity": len(claim.quantities),
        "date": len(claim.dates),
        "time": len(claim.times),
        "id": len(claim.ids),
        "name": len(claim.names),
        "quoted": len(claim.quoted),
    }
    forms: dict[str, set[str]] = {}
    own_values = {(g.start, g.end) for g in answer.quantities if any(same(q, g) for q in claim.quantities)}
    for s, e, k in tally.hits:
        if k in counts and (k != "quantity" or (s, e) in own_values):
            forms.setdefault(k, set()).add(text[s:e].lower())
    best: tuple[float, Span, str] | None = None
    units = [(span, in_context(text, spans, i)) for i, span in enumerate(spans)]
    if max(counts.values()) >= 3:  # a claim that enumerates: a vertical list is one statement too
        units += [((m.start(), m.end()), m.group(0)) for m in _LIST_BLOCK.finditer(text)]
    for span, said in units:
        low = said.lower()
        if any(sum(1 for f in fs if f in low) < min(len(fs), counts[k]) for k, fs in forms.items()):
            continue
        share = claim_share(claim, said)
        if best is None or share > best[0]:
            best = (share, span, said)
    return (best[1], best[2]) if best else None


def claim_share(claim: Facts, text: str) -> float:
    names = {w.lower() for n in claim.names for w in n}
    content = [c for c in claim.content if c not in names and not NEGATION_TOKEN.match(c)]
    if not content:
        return 1.0
    stems = stems_of(text) | {_verb_stem(w) for w in re.findall(r"[A-Za-z]+", text)}
    hit = sum(1 for c in content if c in stems or any(near(c, s) for s in stems))
    return hit / len(content)


def near(a: str, b: str) -> bool:
    return min(len(a), len(b)) >= 4 and (a.startswith(b) or b.startswith(a))


def negated_in(sentence: str, claim: Facts) -> str | None:
    """A negation cue in the sentence, before a word of the claim within its clause."""
    own = claim_stems(claim) | {_verb_stem(w) for w in claim.words}
    tokens = re.findall(r"[\w'-]+|[.,;:!?]", sentence.lower())
    for i, token in enumerate(tokens):
        if not NEGATION_TOKEN.match(token):
            continue
        content = [t for t in tokens[i + 1 : i + 6] if t not in STOPWORDS and not t.endswith("ly")]
        for nxt in content[:1]:
            if nxt in {",", ";", ":", ".", "but", "while", "although"}:
                break
            if stem(nxt) in own or _verb_stem(nxt) in own or any(near(stem(nxt), o) for o in own):
                return f"{token} {nxt}"
    return None
