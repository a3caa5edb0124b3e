"""What a claim is about and what it says of it: its *topic* (the key facts of its subject, before
its verb: "Headcount at the end of **Q2 FY2025** was 4,610"; "The CEO of **OpenAI** is Sam Altman")
and its *assertion* (the key facts after the verb: 4,610; Sam Altman).

MCP-Atlas counts a claim partially fulfilled when the answer "covers some but not all key details".
Naming the claim's subject is not covering a detail of it: an answer that says only what the claim
is about ("The Louvre is open every day" for "The Louvre is closed on Tuesdays") gives none of what
the claim states, so it is not fulfilled. The other way round, an answer that gives every asserted
value but does not repeat the subject's name ("The image is 142 MB" for "The Docker image size is
142 MB") has covered the claim, as long as it names no other entity the value could belong to.

The verb is found without a parser: the first auxiliary, copula or common irregular verb, or the
first lower-case word ending in -s or -ed. Finding it too early ("The **sales** numbers rose")
leaves fewer facts in the topic, so the two rules here apply less often, never wrongly more often;
where a fact found must be one the claim *states* (a refusal then leaves the claim partly covered,
``judge.rules``), a word in -s does not count as the verb (``verb_at(sure=True)``). A name before
an action verb is its doer, part of what the claim states (``in_topic``).
"""

from __future__ import annotations

import re

from atlasrun.judge.cues import has_stem, word_stems
from atlasrun.judge.evidence import foreign, sentence_at, sentences
from atlasrun.judge.facts import Facts
from atlasrun.judge.rivals import Tally

_AUXILIARIES = (
    "is", "are", "was", "were", "has", "have", "had", "will", "would", "can", "could", "should",
    "must", "may", "might", "does", "do", "did", "became", "becomes", "remains", "remained",
    "stands", "stood", "beat", "won", "lost", "led", "rose", "fell", "grew", "hit", "ran", "took",
    "made", "cost", "sold", "paid", "spent", "held", "kept", "left", "met", "sent", "got", "gave",
    "saw", "began", "built", "brought", "bought", "went", "came", "shut", "set", "put",
)  # fmt: skip
_SURE_VERB = re.compile(r"(?<![\w'/.#-])(?:" + "|".join(_AUXILIARIES) + r"|[a-z]{2,}ed)(?![\w'/.#-])")
_COPULAS = {"is", "are", "was", "were", "has", "have", "had", "will", "would", "remains", "remained"}
_VERB = re.compile(
    r"(?<![\w'/.#-])(?:"
    + "|".join(_AUXILIARIES)
    + r"|[a-z]{2,}ed|[a-z]{2,}(?<!ss)(?<!us)(?<!is)s)(?![\w'/.#-])"
)


def verb_at(claim: Facts, *, sure: bool = False) -> int | None:
    """Where the claim's verb starts, or None when none is found (then neither rule applies).
    ``sure``: only an auxiliary, a listed verb or a word in -ed, not a word in -s ("The sum of the
    **numbers** in numbers.txt is 42"), for the reading that says a fact is *stated*."""
    m = (_SURE_VERB if sure else _VERB).search(claim.text)
    return m.start() if m else None


def _place(claim: Facts, fact: str) -> int | None:
    at = claim.text.lower().find(fact.strip("'").lower())
    return at if at >= 0 else None


def _named(claim: Facts, fact: str) -> bool:
    """A name or an identifier, not a value (a quantity, date, time, quoted phrase or list item)."""
    return fact in claim.ids or any(" ".join(n) == fact for n in claim.names)


def in_topic(claim: Facts, fact: str, *, sure: bool = False) -> bool | None:
    """True: said before the claim's verb; False: after it; None: not placed. A name before an action
    verb is its doer ("Alice Nguyen leads Project Falcon"), part of what the claim states; it is the
    topic before a copula or "has", or where it names what a noun after it is ("the Redis cache
    holds", "the US Treasury yield closed")."""
    verb, at = verb_at(claim, sure=sure), _place(claim, fact)
    if verb is None or at is None:
        return None
    if at < verb and any(" ".join(n) == fact for n in claim.names):
        word = re.match(r"\w+", claim.text[verb:])
        modifies = re.search(r"\b[a-z]{3,}\b", claim.text[at + len(fact) : verb])  # "the Redis cache"
        if not modifies and (word is None or word.group(0) not in _COPULAS):
            return None
    return at < verb


def only_topic(claim: Facts, answer: Facts, tally: Tally) -> str | None:
    """The facts found are all the claim's topic, every one missing is its assertion, and the
    sentences of the facts found say none of the assertion's words either ("UA901 is delayed" says
    some of "UA901 is delayed by 45 minutes"): the answer does not say what the claim states (the
    reason for a not-fulfilled verdict), else None."""
    if not tally.matched or not tally.missing or tally.contradicted or tally.dumps or foreign(answer.text):
        return None
    if not all(in_topic(claim, f) is True for f in tally.matched) or not all(
        in_topic(claim, f) is False for f in tally.missing
    ):
        return None
    spans = sentences(answer.text)
    said = word_stems(" ".join(answer.text[slice(*sentence_at(spans, start))] for start, _, _ in tally.hits))
    if any(has_stem(said, word) for word in _asserted_words(claim)):
        return None
    return f"only what the claim is about is said ({', '.join(tally.matched[:3])}), not what it states"


def _asserted_words(claim: Facts) -> list[str]:
    """The claim's content words after its verb (the verb itself too, unless an auxiliary)."""
    verb = verb_at(claim) or 0
    after = word_stems(claim.text[verb:])
    return [c for c in claim.content if c in after and c not in _AUXILIARIES]


def unnamed_topic(claim: Facts, tally: Tally) -> bool:
    """Every missing fact is a name or id of the claim's topic, every value it asserts is found, and the
    answer names no other entity of those kinds: the answer covered the claim without repeating its
    subject."""
    if not tally.missing or tally.contradicted or tally.dumps or tally.undecided:
        return False
    if any(kind in ("name", "id") for _, _, kind in tally.rivals):
        return False
    asserted = [f for f in tally.matched if in_topic(claim, f) is False]
    return bool(asserted) and all(in_topic(claim, f) is True and _named(claim, f) for f in tally.missing)
