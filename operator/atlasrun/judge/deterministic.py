"""A deterministic claims judge: numbers and entities, with the MCP-Atlas tolerance rules.

For offline runs and as a cross-check of LLM judges. A claim is split into key
facts (numbers, quoted phrases, entity-like tokens such as names, file names,
dates and versions) and ordinary content words. Numbers match within 5%
(percentages within 1 point, ``0.5`` = ``50%``); years, small integers and
identifiers must match exactly. A claim with figures none of which appear is not
fulfilled. Otherwise: all key facts present -> fulfilled (partially if
the claim's wording is mostly absent), at least half -> partially, else not.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from atlasrun.judge.base import ClaimVerdict, JudgeInfo, Label

VERSION = "deterministic/1"
NUMBER_TOLERANCE = 0.05
PERCENT_POINTS = 1.0

_ID_TOKEN = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[t ]\d{2}:\d{2}(?::\d{2})?)?|\d+(?:\.\d+){2,}|\d{1,2}:\d{2}(?::\d{2})?"
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
)  # dates, versions, times, commit hashes
_NUMBER = re.compile(
    r"(?<![\w.])(-)?\$?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)\s*(%|percent\b|k\b|thousand\b|m\b|million\b|"
    r"bn\b|billion\b)?"
)
# A quote opens only after a non-word character, so possessives ("Webb's") are not quotes.
_QUOTED = re.compile(r"(?<!\w)[\"'`]([^\"'`]{2,}?)[\"'`](?!\w)")
_WORD = re.compile(r"[\w@^~./+#-]+")
_SCALE = {"k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}
_STOP = set(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "not",
        "no",
        "as",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "it's",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "why",
        "how",
        "than",
        "then",
        "there",
        "their",
        "they",
        "them",
        "he",
        "she",
        "his",
        "her",
        "has",
        "have",
        "had",
        "do",
        "does",
        "did",
        "will",
        "would",
        "can",
        "could",
        "should",
        "may",
        "might",
        "must",
        "shall",
        "into",
        "over",
        "under",
        "about",
        "after",
        "before",
        "between",
        "both",
        "each",
        "all",
        "any",
        "some",
        "such",
        "only",
        "own",
        "same",
        "so",
        "too",
        "very",
        "just",
        "also",
        "per",
        "via",
        "one",
        "most",
        "more",
        "less",
        "least",
        "fewest",
        "many",
        "much",
        "few",
        "out",
        "up",
        "down",
        "off",
        "again",
        "further",
        "once",
        "here",
        "both",
        "either",
        "neither",
        "nor",
        "if",
        "else",
        "while",
        "during",
        "total",
        "value",
        "values",
        "number",
        "numbers",
        "named",
        "called",
        "respectively",
    ]
)


@dataclass(frozen=True)
class _Num:
    value: float
    percent: bool
    exact: bool  # years, small integers, identifiers: no tolerance


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"').replace("**", "")
    return re.sub(r"\s+", " ", text).strip()


def _numbers(text: str) -> list[_Num]:
    text = _ID_TOKEN.sub(" ", text.lower())
    found = []
    for match in _NUMBER.finditer(text):
        sign, digits, unit = match.groups()
        value = float(digits.replace(",", "")) * (-1 if sign else 1)
        percent = unit in ("%", "percent")
        if unit in _SCALE:
            value *= _SCALE[unit]
        is_int = "." not in digits
        exact = is_int and not unit and (abs(value) < 20 or (1900 <= value <= 2100 and "," not in digits))
        found.append(_Num(value, percent, exact))
    return found


def _num_match(claim: _Num, response: list[_Num]) -> bool:
    for r in response:
        if claim.percent and r.percent:
            if abs(claim.value - r.value) <= PERCENT_POINTS:
                return True
        elif claim.percent and not r.percent and 0 <= r.value <= 1:
            if abs(claim.value - r.value * 100) <= PERCENT_POINTS:
                return True
        elif not claim.percent and r.percent and 0 <= claim.value <= 1:
            if abs(claim.value * 100 - r.value) <= PERCENT_POINTS:
                return True
        elif claim.exact:
            if claim.value == r.value:
                return True
        elif abs(r.value - claim.value) <= NUMBER_TOLERANCE * abs(claim.value):
            return True
    return False


def _stem(word: str) -> str:
    word = word.lower().strip(".,;:!?()[]{}\"'")
    for suffix in ("ies", "es", "s"):
        if len(word) > 4 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _facts(claim: str) -> tuple[list[str], list[str], list[_Num]]:
    """(key phrases, content words, numbers) of a claim."""
    keys = [q.strip().lower() for q in _QUOTED.findall(claim)]
    keys += [t.lower() for t in _ID_TOKEN.findall(claim.lower())]
    rest = _ID_TOKEN.sub(" ", _QUOTED.sub(" ", claim))
    rest = _NUMBER.sub(" ", rest)
    content = []
    for i, raw in enumerate(_WORD.findall(rest)):
        token = raw.strip(".,;:!?()[]{}\"'-")
        if not token or token.lower() in _STOP or len(token) < 2:
            continue
        entity_like = (
            any(ch in token for ch in "._/@^~#+")
            or any(ch.isdigit() for ch in token)
            or (i > 0 and token[0].isupper())
            or (token.isupper() and len(token) > 1)
        )
        (keys if entity_like else content).append(token.lower() if entity_like else _stem(token))
    return keys, content, _numbers(claim)


class DeterministicJudge:
    def __init__(self, name: str = "deterministic") -> None:
        self.info = JudgeInfo(name=name, kind="deterministic", version=VERSION)

    async def judge(self, claim: str, response: str) -> ClaimVerdict:
        return self.judge_sync(claim, response)

    def judge_sync(self, claim: str, response: str) -> ClaimVerdict:
        claim_n, response_n = _normalize(claim), _normalize(response)
        low = response_n.lower()
        keys, content, numbers = _facts(claim_n)
        response_numbers = _numbers(response_n)
        response_stems = {_stem(w) for w in _WORD.findall(low)}
        missing = [k for k in keys if k not in low]
        missing_numbers = [_fmt(n) for n in numbers if not _num_match(n, response_numbers)]
        missing += missing_numbers
        total_keys = len(keys) + len(numbers)
        content_hit = sum(
            1
            for w in content
            if w in response_stems or any(s.startswith(w) for s in response_stems if len(w) >= 5)
        )
        content_ratio = content_hit / len(content) if content else 1.0
        label: Label
        if numbers and len(missing_numbers) == len(numbers):
            label = "not_fulfilled"  # the claim's figures are its core: none present, nothing fulfilled
        elif total_keys:
            key_ratio = (total_keys - len(missing)) / total_keys
            if key_ratio == 1.0:
                label = "fulfilled" if content_ratio >= 0.34 else "partially_fulfilled"
            elif key_ratio >= 0.5:
                label = "partially_fulfilled"
            else:
                label = "not_fulfilled"
        else:
            label = (
                "fulfilled"
                if content_ratio >= 0.8
                else "partially_fulfilled"
                if content_ratio >= 0.5
                else "not_fulfilled"
            )
        reason = (
            f"matched {total_keys - len(missing)}/{total_keys} key facts, "
            f"{content_hit}/{len(content)} content words"
        )
        if missing:
            reason += "; missing: " + ", ".join(missing[:8])
        return ClaimVerdict.labelled(claim, label, reason, 1.0)


def _fmt(n: _Num) -> str:
    text = f"{n.value:g}"
    return text + "%" if n.percent else text
