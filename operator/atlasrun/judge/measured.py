"""What a matched figure measures, read around it in the claim and in the answer: the period of a
rate ("per hour", "the monthly fee"), the sign of a change ("down 1.8%"), what a count counts ("37
duplicate rows"), and how precisely it is given ("about 140,000" for 139,875). ``judge.located``
turns a disagreement here into a fail or an abstention."""

from __future__ import annotations

import re

from atlasrun.judge.evidence import sentence_at, sentences, stems_of
from atlasrun.judge.facts import Facts, Quantity, stem
from atlasrun.judge.lexicon_quantities import UNITS
from atlasrun.judge.lexicon_words import STOPWORDS
from atlasrun.judge.values import same

_PERIODS = {
    "second": "second",
    "sec": "second",
    "minute": "minute",
    "min": "minute",
    "hour": "hour",
    "hr": "hour",
    "h": "hour",
    "hourly": "hour",
    "day": "day",
    "daily": "day",
    "week": "week",
    "weekly": "week",
    "month": "month",
    "mo": "month",
    "monthly": "month",
    "quarter": "quarter",
    "quarterly": "quarter",
    "year": "year",
    "yr": "year",
    "annum": "year",
    "annually": "year",
    "yearly": "year",
    "annual": "year",
}
_PERIOD_NOUN = r"(second|sec|minute|min|hour|hr|h|day|week|month|mo|quarter|year|yr|annum)\b"
_PERIOD_ADJECTIVE = r"(hourly|daily|weekly|monthly|quarterly|yearly|annually|annual)\b"
# "per hour" right after the figure, or after the few words of what it counts ("5,000 requests per
# minute"); an adverb right after it ("$40 monthly").
_PERIOD_AFTER = re.compile(
    rf"^\s*(?:(?:per|a|an|each|every|/)\s*{_PERIOD_NOUN}|(?:[a-z][\w-]*\s+){{1,3}}(?:per|each|every)\s+"
    rf"{_PERIOD_NOUN}|{_PERIOD_ADJECTIVE})",
    re.I,
)
_PERIOD_WORD = re.compile(rf"\b{_PERIOD_ADJECTIVE}", re.I)
_SIGN_BEFORE = re.compile(r"\b(up|down|rose|fell|grew|dropped|gained|lost)\s+(?:by\s+)?$", re.I)
_SIGN_OF = {"up": "+", "rose": "+", "grew": "+", "gained": "+", "down": "-", "fell": "-", "dropped": "-"}
_SIGN_OF["lost"] = "-"


def _period(text: str, end: int) -> str | None:
    m = _PERIOD_AFTER.match(text[end : end + 40])
    return _PERIODS[next(g for g in m.groups() if g).lower()] if m else None


def _periods(facts: Facts, q: Quantity) -> set[str]:
    """The periods a figure is said per: "per hour" after it, else the period adjectives of its
    sentence when it is the sentence's only figure ("the monthly payment is $1,896.20")."""
    period = _period(facts.text, q.end)
    if period:
        return {period}
    start, end = sentence_at(sentences(facts.text), q.start)
    if any(start <= g.start < end for g in facts.quantities if g is not q):
        return set()
    return {_PERIODS[w.lower()] for w in _PERIOD_WORD.findall(facts.text[start:end])}


def _sign(text: str, start: int) -> str | None:
    m = _SIGN_BEFORE.search(text[max(0, start - 20) : start])
    return _SIGN_OF[m.group(1).lower()] if m else None


def _matches(claim: Facts, answer: Facts) -> list[tuple[Quantity, Quantity]]:
    return [(q, g) for q in claim.quantities for g in answer.quantities if same(q, g)]


def disagrees(claim: Facts, answer: Facts) -> str | None:
    """A matched figure whose rate period or signed direction is another than the claim's, at every
    match of it."""
    pairs = _matches(claim, answer)
    for q in claim.quantities:
        found = [g for c, g in pairs if c is q]
        if not found:
            continue
        periods = _periods(claim, q)
        if len(periods) == 1 and all(
            _periods(answer, g) and not periods & _periods(answer, g) for g in found
        ):
            return f"{q.text} per {min(periods)}: the answer gives it per {min(_periods(answer, found[0]))}"
        sign = _sign(claim.text, q.start)
        if sign and all(_sign(answer.text, g.start) not in (None, sign) for g in found):
            return f"{q.text}: the answer gives the change in the other direction"
    return None


_ROUGHLY = re.compile(
    r"\b(?:about|around|roughly|approximately|approx\.?|nearly|almost|some|just (?:over|under)|close to|~)\s*[$€£]?$",
    re.I,
)


def _significant(q: Quantity) -> int:
    figure = re.search(r"\d[\d,]*(?:\.\d+)?", q.text)
    digits = re.sub(r"\D", "", figure.group(0)) if figure else ""
    return len(digits.rstrip("0").lstrip("0"))  # "87.40" as "87.4": a price's cents add no precision


def rough(claim: Facts, answer: Facts) -> str | None:
    """A precise claim figure (4+ significant digits) met only by a rough one said as such ("about
    140,000" for 139,875): the answer does not confirm the precision the claim states."""
    for q, matches in _by_claim_figure(claim, answer):
        if q.exact or _significant(q) < 4:
            continue
        if all(
            _significant(g) <= 2 and _ROUGHLY.search(answer.text[max(0, g.start - 20) : g.start])
            for g in matches
        ):
            return f"{q.text}: the answer gives only a rough {matches[0].text}"
    return None


_CODE_BEFORE = re.compile(r"\b[A-Z]{1,4}[\s-]?$")
_COUNTED = re.compile(r"^\s*((?:[a-z][a-z-]*\s*){1,3})")


def _counted(text: str, end: int) -> list[str]:
    """What a bare figure counts: the words right after it, up to a function word ("37 duplicate
    rows", "602 million monthly active users")."""
    m = _COUNTED.match(text[end : end + 60].lower())
    words: list[str] = []
    for word in m.group(1).split() if m else []:
        if word in STOPWORDS or word in UNITS:
            break
        words.append(stem(word))
    return words


def counts_another(claim: Facts, answer: Facts) -> str | None:
    """A matched count that counts something else at every match: the answer gives the claim's
    words for what it counts to another figure ("9 rows and 1,248 columns" for "1,248 rows and 9
    columns"), or the same thing with another qualifier where the claim's is not said ("37 unique
    rows" for "37 duplicate rows")."""
    for q, matches in _by_claim_figure(claim, answer):
        counted = _counted(claim.text, q.end)
        if (
            q.dim is not None
            or q.currency
            or q.exact
            or not counted
            or _CODE_BEFORE.search(claim.text[: q.start])
        ):
            continue  # "LH 455 departs": a code's number counts nothing
        given_elsewhere = {
            w for g in answer.quantities if not same(q, g) for w in _counted(answer.text, g.end)
        }
        if all(
            _counts_other(counted, _counted(answer.text, g.end), given_elsewhere, answer, g) for g in matches
        ):
            return f"{q.text} {' '.join(counted)}: the answer's {q.text} counts {' '.join(_counted(answer.text, matches[0].end))}"
    return None


def _counts_other(
    counted: list[str], words: list[str], given_elsewhere: set[str], answer: Facts, g: Quantity
) -> bool:
    participle = re.match(r"\s*[a-z]+ed\b", answer.text[g.end : g.end + 30]) is not None
    if not words or counted[-1] in words or participle or words[-1] == "one":
        # a participle says what befell the counted things ("5 findings: 3 fixed"); "ones" are them
        if len(counted) < 2 or len(words) < 2 or counted[-1] != words[-1] or counted[:-1] == words[:-1]:
            return False
        start, end = sentence_at(sentences(answer.text), g.start)
        sentence = stems_of(answer.text[start:end])
        return not any(w in sentence for w in counted[:-1])  # another qualifier, the claim's unsaid
    return counted[-1] in given_elsewhere  # the claim's thing is another figure's


def _by_claim_figure(claim: Facts, answer: Facts) -> list[tuple[Quantity, list[Quantity]]]:
    pairs = _matches(claim, answer)
    grouped = [(q, [g for c, g in pairs if c is q]) for q in claim.quantities]
    return [(q, found) for q, found in grouped if found]
