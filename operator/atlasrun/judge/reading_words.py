"""The word-shaped facts of a normalised text: identifiers (versions, paths, scores, codes), name
phrases, the items of a claim's enumeration and the stems of its other content words.
"""

from __future__ import annotations

import re

from atlasrun.judge.facts import Facts, blank_all, stem
from atlasrun.judge.lexicon_calendar import MONTHS, WEEKDAYS
from atlasrun.judge.lexicon_quantities import UNITS
from atlasrun.judge.lexicon_words import NOT_NAMES, STOPWORDS

_ID_PATTERNS = [
    re.compile(r"#\d+\b"),
    re.compile(r"\bv?\d+(?:\.\d+){2,}\b", re.I),  # versions, IP addresses
    re.compile(r"(?<![\w.])\d{1,2}-\d{1,2}(?![\w-])"),  # scores such as 2-1
    re.compile(r"(?<![\w])/[\w.-]+(?:/[\w.-]+)*"),  # paths
    re.compile(r"(?<![\w/.#-])[A-Za-z0-9_]+(?:[-_./@][A-Za-z0-9_]+)+(?![\w-])"),  # a-b, a_b, a.b
    re.compile(r"\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{2,}\b"),  # letters and digits mixed
]
_NOT_ID = re.compile(
    r"^(?:\d[\d,.]*(?:k|m|mn|bn|b|km|kg|g|s|ms|h|hr|hrs|x|min|mins|mb|gb|tb|kb|l|ml|t|st|nd|rd|th|am|pm|"
    r"kwh|cm|mm|mi|ft|lb|lbs|pp|d)|n/a|e\.g|i\.e|and/or|[a-z]+/[a-z]+|"
    r"\d[\d,.]*(?:k|m|mn|bn|b|km|kg|g|mb|gb|tb|kb)?/(?:night|day|week|month|mo|year|yr|hour|hr|h|s|sec|min|"
    r"person|user|unit|share|kg|km|mi))$",  # a rate ("18k/night") is a figure, not an identifier
    re.I,
)
_WORD = re.compile(r"[A-Za-z][\w'&-]*")


def read_ids(text: str) -> tuple[list[str], str]:
    found: list[str] = []
    for pattern in _ID_PATTERNS:
        spans: list[tuple[int, int]] = []  # blanked after each pattern: the next one sees them blank
        for m in pattern.finditer(text):
            token = m.group(0).rstrip(".")
            if not token.strip() or _NOT_ID.match(token):
                continue
            if pattern is _ID_PATTERNS[-2] and not re.search(r"[A-Za-z_/]", token):
                continue  # 1.5 or 3,4 is a number, not an identifier
            found.append(token.lower())
            spans.append((m.start(), m.start() + len(token)))
        text = blank_all(text, spans)
    return found, text


def _list_items(claim: str) -> list[str]:
    """Plain items of an enumeration after the claim's last 'is/are/:' ("a, b, c and d")."""
    tail = re.split(r"\b(?:are|is|were|was|include|includes|needs|need)\b|:", claim)[-1]
    if "," not in tail and " and " not in tail:
        return []
    parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", tail.strip(" ."))
    if len(parts) < 2 or any(len(p.split()) > 3 for p in parts):
        return []
    return [
        stem(p.split()[-1])
        for p in parts
        if p.strip()
        and (p.strip()[0].islower() or _ACRONYM.fullmatch(p.strip()))
        and p.split()[-1].lower() not in STOPWORDS
    ]


# An item written as a ticker or code in capitals ("AAPL, MSFT and NVDA"): not a name, but the item.
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]{1,5}")


def _names_next(work: str, tokens: list[re.Match[str]], index: int) -> bool:
    """The token after ``index`` is a capitalised word right after it (one space between)."""
    if index + 1 >= len(tokens) or work[tokens[index].end() : tokens[index + 1].start()] != " ":
        return False
    following = tokens[index + 1].group(0)
    low = following.lower()
    return (
        following[0].isupper() and not following.isupper() and low not in STOPWORDS and low not in NOT_NAMES
    )


def names_and_content(facts: Facts, work: str, claim: bool) -> None:
    phrase: list[str] = []
    phrase_initial = False
    sentence_start = True
    last_end = 0
    tokens = list(_WORD.finditer(work))

    def close() -> None:
        nonlocal phrase
        if phrase and phrase_initial and len(phrase) > 1 and phrase[0].lower().endswith("ly"):
            phrase.pop(0)
            if len(phrase) == 1:
                facts.names.append(phrase)
                phrase = []
                return
        if phrase and (not phrase_initial or len(phrase) > 1):
            facts.names.append(phrase)
        elif phrase and phrase_initial and facts.first_name is None:
            facts.first_name = phrase[0]
        phrase = []

    for index, m in enumerate(tokens):
        word = m.group(0).rstrip("'")
        gap = work[last_end : m.start()]
        if phrase and (gap.strip() or len(gap) > 1 or "\n" in gap):
            close()
        # A sentence starts after . ! ? : ; and any blank space, or at the text's start. (Looking
        # back from the token, not searching the whole prefix: that made reading quadratic.)
        before = m.start()
        while before > 0 and work[before - 1].isspace():
            before -= 1
        if before == 0 or work[before - 1] in ".!?:;":
            sentence_start = True
        low = word.lower()
        name_like = (bool(phrase) and len(word) == 1 and word.isupper()) or (
            word[0].isupper()
            and low not in STOPWORDS
            and low not in NOT_NAMES
            and low not in MONTHS
            and low not in UNITS
            and not (word.isupper() and 2 <= len(word) <= 4 and not _names_next(work, tokens, index))
        )  # API, CEO, TLS: ordinary nouns here, but "MIT License" is a name
        if name_like:
            if not phrase:
                phrase_initial = sentence_start
            phrase.append(word[:-2] if word.endswith("'s") else word)
        else:
            close()
            if low not in STOPWORDS and len(low) > 1 and low not in UNITS and low not in WEEKDAYS:
                facts.content.append(stem(low))
        sentence_start = False
        last_end = m.end()
    close()
    if claim:
        facts.items = _list_items(facts.residual)
        facts.content = [c for c in facts.content if c not in facts.items]
    if facts.first_name:
        facts.content = [c for c in facts.content if c != stem(facts.first_name)]
        facts.content.append(stem(facts.first_name))
