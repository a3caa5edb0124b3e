"""Which way a text writes its numbers, for the one figure shape that reads both ways.

``12.500`` is twelve and a half in English and twelve thousand five hundred in German; ``reading``
reads it the English way unless the text shows otherwise. The judge compares the claim with both
readings: where they disagree about a match, the text's own other figures decide (a decimal comma,
dot-grouped thousands: European; comma thousands or a decimal point with other than three digits:
English), and when they do not, the judge cannot compare the figure and abstains.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from atlasrun.judge.facts import Quantity

Locale = Literal["european", "english"]

_AMBIGUOUS = re.compile(r"^[$€£]?\s?[1-9]\d{0,2}\.\d{3}$")  # never 0.042
_EUROPEAN = re.compile(
    r"(?<![\d.,])\d+,\d{1,2}(?![\d,])|\d\.\d{3},\d|(?<![\d.])\d{1,3}(?:\.\d{3}){2,}(?![\d.])"
)
_ENGLISH = re.compile(r"\d,\d{3}(?:\.\d|(?![\d,]))|(?<![\d.,])\d+\.(?:\d{1,2}|\d{4,})(?![\d.,])")


def text_locale(raw: str) -> Locale | None:
    """How ``raw`` (the answer as written, before ``reading`` rewrote it) writes numbers, if it shows."""
    european, english = bool(_EUROPEAN.search(raw)), bool(_ENGLISH.search(raw))
    if european != english:
        return "european" if european else "english"
    return None


def ambiguous(q: Quantity) -> bool:
    """A figure such as 12.500: a decimal in English, thousands in German or French."""
    return bool(_AMBIGUOUS.match(q.text.split(" ")[0])) and q.dim != "percent"


def as_thousands(q: Quantity) -> Quantity:
    """The other reading of an ambiguous figure."""
    return replace(q, value=q.value * 1000, number=q.number * 1000, exact=False)
