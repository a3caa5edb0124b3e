"""Who did what to whom: the roles of two terms of a claim, read from the sentence's structure.

For each neighbouring pair of role terms (names, identifiers) of the claim, the relation between
them and its voice give an agent and a patient (``A manages B``: A; ``B is managed by A``: A). The
same is read from the answer's sentence that holds both terms. Same relation, other agent: the roles
are swapped (decisive). A plain list (``A, B and C``) has no roles; a converse relation (``B reports
to A`` for ``A manages B``) with the roles reversed agrees. A reversed order under a relation the
judge cannot relate to the claim's is not decisive: the judge abstains.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from atlasrun.judge.evidence import sentence_at, sentences
from atlasrun.judge.facts import Facts, stem
from atlasrun.judge.lexicon_words import CONVERSES, IRREGULAR_VERBS, STOPWORDS

_LIST_ONLY = re.compile(r"[\s,;/&]*(?:(?:and|or|as well as|plus)[\s,;/&]*)?")
# Passive voice between two terms: the first is the patient, the second (after "by", or an adjunct
# such as "fixed in PR #482") is not the subject.
_PASSIVE = re.compile(
    r"^\W*(?:(?:has|have|had)\s+been|is|are|was|were|been|being|be|get|got|gets)\s+(?:\w+ly\s+)?"
    r"(?:\w+(?:ed|en|wn|ne|lt|ght|de|ut)|made|held|led|sold|paid|built|sent|won|run|set|put|read)\b"
)
_MAX_GAP_WORDS = 10


@dataclass(frozen=True)
class RoleFinding:
    reason: str
    decisive: bool  # True: the roles are swapped; False: the judge cannot tell


def _roles(claim: Facts) -> list[str]:
    """The claim's role-bearing terms (names and ids) in order of appearance."""
    low = claim.text.lower()
    terms = [" ".join(n).lower() for n in claim.names] + list(claim.ids)
    if claim.first_name:
        terms.append(claim.first_name.lower())
    located = sorted((low.find(t), t) for t in terms if low.find(t) >= 0)
    if len(located) < 2:
        content = [w.rstrip(".") for w in re.findall(r"[\w./#-]+", low) if w not in STOPWORDS]
        if len(content) >= 3:
            located = sorted({(low.find(content[-1]), content[-1]), *located})
    return [t for _, t in located]


def _copular(between: str) -> bool:
    words = re.findall(r"[a-z]+", between)
    if not words or words[0] not in ("is", "are", "was", "were", "be", "been"):
        return False
    rest = [w for w in words[1:] if w not in STOPWORDS]
    return not rest or not rest[0].endswith(("ed", "en"))


def _find(term: str, text: str) -> tuple[int, int] | None:
    m = re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text)
    if m is None and " " in term:  # "Maria Lopez" written "Lopez"
        m = re.search(rf"(?<![\w-]){re.escape(term.split()[-1])}(?![\w-])", text)
    return (m.start(), m.end()) if m else None


def _relation(between: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[a-z]+", between) if w not in STOPWORDS and w != "by"}


def _converse(a: set[str], b: set[str]) -> bool:
    return any(frozenset((x, y)) in _CONVERSE for x in a for y in b)


_BE = {"is", "are", "was", "were", "be", "been", "being", "get", "got", "gets"}
_AUX = _BE | {"has", "have", "had", "will", "would", "also", "then", "just", "already", "did", "does"}
_PARTICIPLE = re.compile(
    r"\w+(?:ed|en|wn|ne|lt|ght|de|ut)|made|held|led|sold|paid|built|sent|won|run|set|put|read"
)
Agents = dict[str, set[str]]
# What can be a verb here: an inflected form (approves, approved, written) or a common irregular one.
_VERB = re.compile(
    r"[a-z]+(?:[^s]s|ed|en|wn)|wrote|made|sent|led|held|sold|paid|built|won|ran|gave|took|bought|brought|"
    r"taught|beat|met|left|set|put|read|got|did|said|told|found|kept|hit|lost|chose|drove|began"
)
_NOT_VERB = STOPWORDS - {"called", "named"}
_PREPOSITIONS = {"for", "in", "at", "on", "to", "from", "with", "into", "during", "under", "via", "over"}


def _verb(word: str) -> str:
    return stem(IRREGULAR_VERBS.get(word, word))


_CONVERSE = {frozenset((_verb(a), _verb(b))) for a, b in CONVERSES}


_BY_AFTER_RECIPIENT = re.compile(r"\b([a-z][\w-]*)[ \t]+(?:to|for|from)[ \t]+(?:[\w-]+[ \t]+){1,3}by[ \t]+$")


def _agents(text: str, terms: list[str]) -> tuple[Agents, Agents]:
    """(verb stem -> its agents, verb stem -> its patients) among ``terms`` in lower-case ``text``:
    "A approved" and "approved by A" make A an agent; "A was approved" and "approved A" a patient."""
    agent: Agents = {}
    patient: Agents = {}
    for term in terms:
        for m in re.finditer(rf"(?<![\w-]){re.escape(term)}(?![\w-])(?!'s)", text):
            after = re.match(r"[ \t]*((?:[a-z][\w-]*[ \t]+){0,4})", text[m.end() : m.end() + 80])
            words = after.group(1).split() if after else []
            i, passive = 0, False
            while i < len(words) and (words[i] in _AUX or words[i].endswith("ly")):
                passive = passive or words[i] in _BE
                i += 1
            if i < len(words) and words[i] not in _NOT_VERB and _VERB.fullmatch(words[i]):
                # "the room booked for the review": a participle before a preposition is passive
                reduced = i + 1 < len(words) and words[i + 1] in _PREPOSITIONS and words[i].endswith("ed")
                if not passive and not reduced:
                    agent.setdefault(_verb(words[i]), set()).add(term)
                elif _PARTICIPLE.fullmatch(words[i]) and (passive or words[i + 1] != "by"):
                    patient.setdefault(_verb(words[i]), set()).add(term)
            before = re.search(r"([a-z][\w-]*)[ \t]+(by[ \t]+)?$", text[max(0, m.start() - 40) : m.start()])
            if before and before.group(1) not in _NOT_VERB and _VERB.fullmatch(before.group(1)):
                (agent if before.group(2) else patient).setdefault(_verb(before.group(1)), set()).add(term)
            # "was sent to Carlos Mendes by Aisha Bello": the agent after "by", past a recipient
            past = _BY_AFTER_RECIPIENT.search(text[max(0, m.start() - 80) : m.start()])
            if past and past.group(1) not in _NOT_VERB and _VERB.fullmatch(past.group(1)):
                agent.setdefault(_verb(past.group(1)), set()).add(term)
    return agent, patient


def agent_check(claim: Facts, answer: Facts) -> tuple[RoleFinding | None, bool]:
    """(a swap, whether the answer says the claim's relation with the claim's roles) from verbs and
    their agents: another agent for the claim's verb (the right entity in the wrong relation), the
    claim's agent as the patient, or the agent of a converse verb."""
    terms = [t for t in _roles(claim) if t in {" ".join(n).lower() for n in claim.names} | set(claim.ids)]
    if not terms:
        return None, False
    others = [" ".join(n).lower() for n in answer.names if len(n) > 1]
    c_agent, c_patient = _agents(claim.text.lower(), terms)
    a_agent, a_patient = _agents(answer.text.lower(), list(dict.fromkeys(terms + others)))
    agreed = False
    for verb, who in c_agent.items():
        if who & a_patient.get(verb, set()):
            return RoleFinding(
                f"roles swapped: '{sorted(who)[0]}' is what is {verb}ed in the answer", True
            ), False
        said = a_agent.get(verb, set())
        swapped = bool(said & set(terms))
        if said and not who & said:
            # the claim's other party doing it is a swap, unless its sentence is about another event
            # (then unclear, never a pass); someone the claim does not name in another event: no role
            other_event = _other_event(answer.text, claim.text, sorted(said)[0], sorted(who)[0], verb)
            if swapped or not other_event:
                found = RoleFinding(
                    f"another agent of '{verb}': '{sorted(said)[0]}', not '{sorted(who)[0]}'",
                    swapped and not other_event,
                )
                return found, False
        agreed = agreed or bool(who & said)  # the claim's verb with the claim's agent
        for other, by in a_agent.items():
            if _converse({verb}, {other}) and who & by:
                return RoleFinding(f"roles swapped: '{sorted(who)[0]}' {other} in the answer", True), False
            agreed = agreed or (_converse({verb}, {other}) and bool(c_patient.get(verb, set()) & by))
    for verb, who in c_patient.items():
        if who & a_agent.get(verb, set()):
            return RoleFinding(f"roles swapped: '{sorted(who)[0]}' {verb} in the answer", True), False
    return None, agreed


def _other_event(answer: str, claim: str, agent: str, claim_agent: str, verb: str) -> bool:
    """The sentence where another agent does the claim's verb has its own figures (another date,
    amount or id than the claim's): another event ("Globex renews first, on 2024-06-15"). Not when
    it also names the claim's agent, or a figure of the claim: the same event, other roles ("SUP-2291
    was escalated by Hannah Cole to Rafael Ortiz at 10:42")."""
    low = answer.lower()
    spans = sentences(low)
    said = [low[slice(*span)] for span in spans if agent in low[slice(*span)]]
    if not said:
        return False
    acting = re.compile(
        rf"{re.escape(agent)}[ \t]+(?:\w+[ \t]+){{0,3}}?{re.escape(verb)}(?:e?[sd]|ing)?\b|"
        rf"{re.escape(verb)}\w*\s+by\s+{re.escape(agent)}"
    )
    sentence = next((s for s in said if acting.search(s)), said[0])  # where the agent does the verb
    figures = re.findall(r"\d[\d,.:/-]*\d|\d", sentence)
    if claim_agent in sentence or any(f in claim for f in figures if len(f) >= 3):
        return False
    return any(figure not in claim for figure in figures)


def role_conflict(claim: Facts, answer: Facts) -> RoleFinding | None:
    found, agreed = agent_check(claim, answer)
    if found or agreed:
        return found
    roles = _roles(claim)
    real = {" ".join(n).lower() for n in claim.names} | set(claim.ids)  # not a fallback content word
    low_c, low_a = claim.text.lower(), answer.text.lower()
    spans = sentences(low_a)
    for a, b in itertools.pairwise(roles):
        ca, cb = low_c.find(a), low_c.find(b)
        between = low_c[ca + len(a) : cb]
        if _copular(between) or _LIST_ONLY.fullmatch(between):
            continue  # "A is the B of C", "A, B and C are members of D": no agent/patient order
        claim_agent = b if _PASSIVE.search(between) else a
        found_a, found_b = _find(a, low_a), _find(b, low_a)
        if found_a is None or found_b is None or found_a == found_b:
            continue
        if sentence_at(spans, found_a[0]) != sentence_at(spans, found_b[0]):
            continue
        (first, (_, end1)), (second, (start2, _)) = sorted(((a, found_a), (b, found_b)), key=lambda t: t[1])
        said = low_a[end1:start2]
        if _LIST_ONLY.fullmatch(said) or len(re.findall(r"\w+", said)) > _MAX_GAP_WORDS:
            continue  # a reordered list, or too far apart to be one relation
        answer_agent = second if _PASSIVE.search(said) else first
        claim_rel, answer_rel = _relation(between), _relation(said)
        where = f"'{first}' ... '{second}' around '{said.strip()}'"
        if claim_rel & answer_rel:
            if answer_agent != claim_agent:
                return RoleFinding(f"roles swapped: {where} (claim: '{between.strip()}')", True)
            continue
        if claim_rel and answer_rel and _converse(claim_rel, answer_rel):
            if answer_agent == claim_agent:
                return RoleFinding(f"roles swapped: {where} is the converse of '{between.strip()}'", True)
            continue
        if first != a and {a, b} <= real:
            return RoleFinding(f"roles unclear: {where} for '{between.strip()}'", False)
    return None
