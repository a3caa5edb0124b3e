"""Direction words of an answer against the claim's (``judge.gate``): a word of the opposite direction
("public" for "private"), or a figure signed against the claim's direction ("West -1%" where it grew).
"""

from __future__ import annotations

import re

from atlasrun.judge.cues import NEGATED_WORD
from atlasrun.judge.facts import Facts
from atlasrun.judge.lexicon_stance import DIRECTIONS

_UP = DIRECTIONS[0][0] | {"growth", "gain", "gains", "up"}
_DOWN = DIRECTIONS[0][1] | {"decline", "declines", "loss", "losses", "down"}


def signed_against(claim: Facts, text: str) -> str | None:
    """A name of the claim followed by a figure signed against the claim's direction ("West -1%"
    where the claim says West grew; "+3%" where it says fell)."""
    words = set(claim.words)
    sign = "-" if words & _UP else "+" if words & _DOWN else None
    if sign is None:
        return None
    for name in claim.names:
        pattern = re.escape(" ".join(name)) + r"[^\w\n.;]{0,12}?(?:by |at |of )?\s*([+\-\u2212])\s?\d"
        for m in re.finditer(pattern, text):
            if (m.group(1) == "+") == (sign == "+"):
                return f"'{m.group(0).strip()}' is signed against the claim's direction"
    return None


def _direction_words(text: str) -> set[str]:
    """The lower-case words of ``text`` that can be read as directions: a compass word written
    capitalised ("North +104,950, South +29,625") names a region, it is no direction."""
    return {
        w.lower() for w in re.findall(r"[A-Za-z]+", text) if not (w[0].isupper() and w.lower() in _COMPASS)
    }


_COMPASS = {"north", "northern", "south", "southern", "east", "eastern", "west", "western"}


def opposite_word(claim: Facts, text: str) -> str | None:
    """A word of the opposite direction to one of the claim's (public/private), anywhere."""
    claim_words = _direction_words(claim.text)
    words = _direction_words(NEGATED_WORD.sub(" ", text))
    for up, down in DIRECTIONS:
        for mine, other in ((up, down), (down, up)):
            if mine & claim_words and other & words:
                return sorted(other & words)[0]
    return None
