"""Whether an answer commits to a fact it states (``judge.gate``): not when a revision cue after the
statement gives another value of the fact's kind (decisive when the claim's is not restated), nor
when every statement of it is framed as an expectation, a target, a conditional or a plan ("you
expected 12 nodes", "is planned for"), where another value after a contrast is what was found.
"""

from __future__ import annotations

import re
from dataclasses import replace

from atlasrun.judge.base import Abstention, Label
from atlasrun.judge.evidence import CORRECTION, sentence_at, sentences
from atlasrun.judge.facts import Facts
from atlasrun.judge.rivals import Tally, same_thing
from atlasrun.judge.values import date_same, same, time_same

Outcome = tuple[Label, str] | Abstention | None

# Cues that take back or revise what was said before them (beyond ``evidence.CORRECTION``).
_REVISION = re.compile(
    r"\b(?:hmm|revis(?:e|ed|ing)|i was wrong|my mistake|misread|turns out|that (?:line|figure|number|"
    r"value|entry|one) (?:is|was)|that was|not quite|instead|now (?:in|at|on|set to)|was moved|has moved|"
    r"were moved|oops|never mind|on closer inspection|looking (?:again|more closely)|double[- ]check(?:ed|ing)?|"
    r"re-?check(?:ed|ing)?|(?:correct|right|actual|real) (?:figure|number|value|count|total|answer|one)|"
    r"rather than|earlier i said|previously (?:said|stated|reported))\b|\b(?:update|updated|edit|correction)\s*:",
    re.I,
)


_FROM = re.compile(r"\s+(?:\w+\s+)?from\b", re.I)


def revision_cues(text: str) -> list[tuple[int, str]]:
    found = [(m.start(), m.group(0)) for m in CORRECTION.finditer(text)]
    found += [(m.start(), m.group(0)) for m in _REVISION.finditer(text)]
    return sorted(found)


def _values_after(
    claim: Facts, answer: Facts, kind: str, after: int, until: int | None = None
) -> tuple[bool, bool]:
    """(the claim's value of ``kind`` said after ``after``, another value of its kind said there),
    up to ``until`` if given."""
    if until is not None:
        clipped = answer.text[:until]
        answer = replace(
            answer,
            quantities=[g for g in answer.quantities if g.start < until],
            dates=[g for g in answer.dates if g.start < until],
            times=[g for g in answer.times if g.start < until],
            text=clipped,
        )
    if kind == "quantity":
        later = [g for g in answer.quantities if g.start > after]
        own = [g for g in later if any(same(q, g) for q in claim.quantities)]
        other = [
            g
            for g in later
            if g not in own
            and any(
                g.dim == q.dim and g.exact == q.exact and same_thing(q, g, answer, claim)
                for q in claim.quantities
            )
        ]
        return bool(own), bool(other)
    if kind == "date":
        later_dates = [g for g in answer.dates if g.start > after]
        own_dates = [g for g in later_dates if any(date_same(d, g) for d in claim.dates)]
        return bool(own_dates), len(own_dates) < len(later_dates)
    if kind == "time":
        later_times = [g for g in answer.times if g.start > after]
        own_times = [g for g in later_times if any(time_same(t, g) for t in claim.times)]
        others = [g for g in later_times if all(time_same(t, g) is False for t in claim.times)]
        return bool(own_times), bool(others)
    return False, False


def correction(claim: Facts, answer: Facts, tally: Tally) -> Outcome:
    """A revision cue after a fact's statement: another value of the fact's kind after it, the
    claim's not restated, is decisive; both after it, or the fact not restated, is not."""
    cues = revision_cues(answer.text)
    if not cues or not tally.hits:
        return None
    first_hit = min(s for s, _, _ in tally.hits)
    text = answer.text
    # "was moved from Monday 7 Apr": what follows "from" is the old value, the one before it stands
    later = [(at, cue) for at, cue in cues if at > first_hit and not _FROM.match(text, at + len(cue))]
    if not later:
        return None  # the correction comes before the facts: they are what it corrects to
    at, cue = later[-1]
    text = answer.text
    for kind in sorted({k for _, _, k in tally.hits}):
        restated, other = _values_after(claim, answer, kind, at)
        if kind == "name":  # another full name after the cue, the claim's not said again in full
            named = {" ".join(n).lower() for n in claim.names}
            after = text[at:].lower()
            restated = any(n in after for n in named)
            other = not restated and any(
                len(n) > 1 and " ".join(n).lower() not in named and " ".join(n) in text[at:]
                for n in answer.names
            )
        elif kind == "id":
            restated = any(s > at for s, _, k in tally.hits if k == kind)
            shapes = {re.sub(r"\d", "9", i) for i in claim.ids}
            other = kind == "id" and any(
                re.sub(r"\d", "9", i) in shapes and i not in claim.ids and text.lower().rfind(i) > at
                for i in answer.ids
            )
        if other and not restated:
            return "not_fulfilled", f"the answer revises its statement ('{cue}') to another value"
        if other:
            return Abstention(kind="contradiction", reason=f"the answer revises what it said ('{cue}')")
    return None


# Words that set a value as someone's expectation, a plan or a hypothesis, not as what was found.
_UNASSERTED = re.compile(
    r"\b(?:you(?: had)? (?:said|mentioned|expected|asked|thought|wrote|noted|claimed|assumed|quoted|listed)|"
    r"(?<!as )expect(?:ed|s|ing)?|supposed to|target(?:ed|s)?|goal|would(?: be| have)?|should (?:be|have)|"
    r"assum(?:e|ed|ing)|intended|hoped|planned for|asked for|requested|required)\b",
    re.I,
)
# A fact said as not done yet, wherever in its sentence ("the migration to 16 is planned for next sprint").
_PENDING = re.compile(
    r"\b(?:(?:is|are) planned|planned for|(?:is|are) going to|not yet)\b",
    re.I,
)
_CONTRAST = re.compile(
    r"\b(?:but|however|whereas|instead|actually|in reality|in fact|currently|only)\b", re.I
)


def unasserted(claim: Facts, answer: Facts, tally: Tally) -> Outcome:
    """Every statement of a fact framed as an expectation, a target or a conditional ("you expected
    12 nodes, but ...", "the bucket would hold 1,200 objects"): not decisive; another value of the
    fact's kind after a contrast there ("... but the cluster has 9 nodes") is what was found."""
    text = answer.text
    spans = sentences(text)
    claim_low = claim.text.lower()
    framed: dict[str, str] = {}  # what is said framed, by kind of fact
    plain: set[str] = set()  # kinds of fact said plainly somewhere
    for start, end, kind in tally.hits:
        span = sentence_at(spans, start)
        head = text[span[0] : start]
        cues = [m.group(0) for m in _UNASSERTED.finditer(head)] + [
            m.group(0) for m in _PENDING.finditer(text, span[0], span[1])
        ]
        cue = next((c for c in cues if c.lower() not in claim_low), None)
        said = text[start:end].lower()
        if cue is None:
            plain.add(kind)
            continue
        framed.setdefault(kind, f"'{cue}' frames {said}")
        # what was found: after a contrast in the sentence, or in the sentence that follows it
        following = next((s for s in spans if s[0] >= span[1]), (len(text), len(text)))
        contrast = _CONTRAST.search(text, end, span[1])
        after = contrast.start() if contrast else following[0]
        if kind in ("quantity", "date", "time"):
            restated, other = _values_after(claim, answer, kind, after, until=following[1])
            if other and not restated:
                where = f"after '{contrast.group(0)}'" if contrast else "next"
                return "not_fulfilled", f"'{cue}' frames {said}; the answer gives another value {where}"
    # the subject (a name, an id) restated with the question, its values said plainly: an answer
    values_plain = bool(plain)
    unframed = [
        why
        for kind, why in framed.items()
        if kind not in plain and not (values_plain and kind in ("id", "name"))
    ]
    if unframed:
        return Abstention(kind="hedged", reason=f"{unframed[0]}: an expectation or a conditional")
    return None
