"""Cue words the rules read in a text: negations of the claim's terms, hedges, refusals,
affirmations, direction words (rose/fell); and how much of the claim's wording a sentence holds."""

from __future__ import annotations

import re
from collections.abc import Sequence

from atlasrun.judge.evidence import Span, asks, sentences
from atlasrun.judge.facts import Facts, stem
from atlasrun.judge.lexicon_stance import DIRECTIONS, HEDGES, OPPOSITE_STATES, REFUSALS
from atlasrun.judge.lexicon_words import STOPWORDS

NEGATION = re.compile(r"^(?:not|never|no|none|nothing|nor|neither|zero|0|\w+n't)$")  # "0 failed": none
HEDGE_PHRASES = re.compile(
    r"\b(?:not sure|not certain|could(?: not|n't) (?:verify|confirm)|cannot confirm|can't confirm)\b"
)
# Not knowing is not denying: "could not retrieve the version" negates nothing the claim says.
_UNABLE = re.compile(
    r"\b(?:could(?: not|n't)|cannot|can't|(?:was |were )?unable to|(?:was|were)(?: not|n't) able to|"
    r"failed to|did(?: not|n't) manage to) "
    r"(?:retrieve|find|get|access|determine|load|read|open|reach|fetch|check|look up|run|execute|verify|"
    r"confirm|test|see|query|inspect|log in)\b"
)
# Not saying is not denying either: "the email doesn't include the hotel name", "I didn't note the
# line number", "I don't know the total" report information missing, unless the verb is the claim's
# own ("doesn't include the refund" for "includes the refund") or the sentence holds a fact of the
# claim ("the search didn't return any Paris-Brussels services": the claim's own journey).
_UNSAID = re.compile(
    r"\b(?:did(?: not|n't)|does(?: not|n't)|do(?: not|n't)|could(?: not|n't)|cannot|can't|"
    r"(?:was|were)(?: not|n't))(?: \w+)? "
    r"(know|tell|say|show|include|return|list|note|mention|give|provide|report|break|specify|state|"
    r"record|store|expose)\b"
)
# A failure the answer reports of something else ("psycopg2 could not compile"), not of its own
# attempt ("I could not", "the tool could not open it", "could not reach the API"): it still answers.
OTHERS_FAILING = re.compile(
    r"(?<![\w'])(?!(?:i|we|tool|api|request|call|query|endpoint|lookup|search|page)\b)[a-z][\w.-]*[`'\")\]]? "
    r"(?:could not|couldn't|cannot|can't) (?=[a-z])"
)
# "right away", "the right context": no affirmation; "Right, ..." and "that's right" are
AFFIRMS = re.compile(
    r"\b(?:yes|yep|correct|indeed|confirmed|that's it|exactly|that's right)\b|^\W*right\b", re.I | re.M
)
# A word under a negation ("does not open", "isn't yet public"): never a direction word of its own.
NEGATED_WORD = re.compile(r"\b(?:not|never|\w+n't)\s+(?:(?:be|been|yet)\s+)?\w+", re.I)
_CLAUSE_BREAK = {".", ",", ";", ":", "!", "?", "but", "though", "although", "however", "while"}
RELATION_SHARE = 0.5  # of the claim's content words, said in the sentences of its facts


def claim_terms(claim: Facts) -> set[str]:
    terms = {stem(w) for w in claim.words if w not in STOPWORDS}
    terms |= {w.lower() for phrase in claim.names for w in phrase}
    return terms | set(claim.ids)


def first_negation(text: str, terms: set[str]) -> tuple[str, Span] | None:
    """The first negation cue in ``text`` that applies to one of the claim's terms, and its sentence."""
    found = negations_of(text, terms)
    return found[0] if found else None


def negations_of(
    text: str, terms: set[str], counts: bool = True, facts_at: Sequence[int] = ()
) -> list[tuple[str, Span]]:
    """Every sentence of ``text`` with a negation cue applying to one of the claim's terms (``counts``:
    "0 failed" and "zero errors" negate too; not for a claim with figures, compared as figures)."""
    found: list[tuple[str, Span]] = []
    opposed = _opposites(terms)
    for span in sentences(text):
        sentence = _UNABLE.sub(" unable ", HEDGE_PHRASES.sub(" hedge ", text[span[0] : span[1]].lower()))
        if not any(span[0] <= at < span[1] for at in facts_at):
            sentence = _UNSAID.sub(
                lambda m: m.group(0) if stem(m.group(1)) in terms else " unable ", sentence
            )
        tokens = re.findall(r"[\w'./#-]+|[.,;:!?]", sentence)
        for i, token in enumerate(tokens):
            if not NEGATION.match(token) or (not counts and token in ("0", "zero")):
                continue
            cue = (
                "no longer" if token == "no" and i + 1 < len(tokens) and tokens[i + 1] == "longer" else token
            )
            for nxt in tokens[i + 1 : i + 6]:
                if nxt in _CLAUSE_BREAK or stem(nxt) in opposed:  # "does not open": closed, as claimed
                    break
                if nxt in terms or has_stem(terms, stem(nxt)):
                    found.append((f"{cue} {nxt}", span))
                    break
            if found and found[-1][1] == span:
                break
    return found


def _opposites(terms: set[str]) -> set[str]:
    """Stems of the words opposite to a claim term ("open" for "closed"): negated, they affirm it."""
    found: set[str] = set()
    for a, b in (*DIRECTIONS, *OPPOSITE_STATES):
        for side, other in ((a, b), (b, a)):
            if any(" " not in w and stem(w) in terms for w in side):
                found |= {stem(w) for w in other if " " not in w}
    return found - terms


_DIRECTION_OF: dict[str, list[tuple[int, int]]] = {}
for _i, _pair in enumerate(DIRECTIONS):
    for _side, _group in enumerate(_pair):
        for _word in _group:
            _DIRECTION_OF.setdefault(_word, []).append((_i, _side))
_DIRECTION_PHRASES = [w for w in _DIRECTION_OF if " " in w]


def direction_words(words: list[str], text: str) -> set[tuple[int, int]]:
    """(pair index, side) of every direction word in the text."""
    low = f" {text.lower()} "
    found = [d for w in set(words) for d in _DIRECTION_OF.get(w, [])]
    return set(found + [d for p in _DIRECTION_PHRASES if f" {p} " in low for d in _DIRECTION_OF[p]])


def cue_pattern(cues: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w'])(?:{'|'.join(re.escape(c) for c in cues)})(?![\w'])")


HEDGE_CUES, REFUSAL_CUES = cue_pattern(HEDGES), cue_pattern(REFUSALS)


def cue_in(text: str, cues: re.Pattern[str]) -> str | None:
    m = cues.search(text.lower())
    return m.group(0) if m else None


def has_stem(stems: set[str], c: str) -> bool:
    return c in stems or any(
        c in s or s.startswith(c) or c.startswith(s) for s in stems if min(len(s), len(c)) >= 4
    )


def word_stems(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[\w'./#-]+", text.lower())}


def claim_share(claim: Facts, sentence: str) -> float:
    if not claim.content:
        return 0.0
    stems = word_stems(sentence)
    return sum(1 for c in claim.content if has_stem(stems, c)) / len(claim.content)


def says_whole(claim: Facts, text: str) -> bool:
    """One declarative sentence of ``text`` holds every content word of the claim (its negation aside)."""
    content = [c for c in claim.content if not NEGATION.match(c)]
    for start, end in sentences(text):
        stems = word_stems(text[start:end])
        if content and all(has_stem(stems, c) for c in content) and not asks(text, (start, end)):
            return True
    return False
