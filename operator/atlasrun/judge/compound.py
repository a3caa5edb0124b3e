"""Claims that join independent statements ("X has 12 nodes and runs 1.29"; "Q1 was A; Q2 was B"):
each statement judged alone decides between fulfilled and partially fulfilled (MCP-Atlas: "covers
some but not all key details")."""

from __future__ import annotations

import re
from collections.abc import Callable

from atlasrun.judge.base import Abstention, Label
from atlasrun.judge.facts import Facts, stem
from atlasrun.judge.reading import read

Outcome = tuple[Label, str] | Abstention


def label_of(outcome: Outcome) -> Label | None:
    return None if isinstance(outcome, Abstention) else outcome[0]


_PART_BREAK = re.compile(r";\s+|,?\s+and\s+(?!(?:then|so)\b)")


def every_part(
    claim: str, response: str, passed: tuple[Label, str], judge: Callable[[str, str], Outcome]
) -> Outcome:
    """A compound claim passes only when each of its statements, judged alone, is met: one not met,
    or uncertain with some of its words said nowhere ("began at 02:14 UTC and was caused by a network
    partition", no cause given), makes it partial; an uncertain one makes the whole uncertain."""
    said = {stem(w) for w in re.findall(r"[\w'./#-]+", response.lower())}
    for part in claim_parts(claim):
        found = judge(part, response)
        facts = read(part, claim=True)
        if isinstance(found, Abstention) and not _has_facts(facts):  # its words are all it has
            unsaid = [c for c in facts.content if not _said(c, said)]
            if 2 * len(unsaid) >= len(facts.content):  # "an expired certificate": no cause given at all
                return "partially_fulfilled", f"part '{part}' not said ('{unsaid[0]}' missing); {passed[1]}"
            return Abstention(kind=found.kind, reason=f"part '{part}': {found.reason}")
        if isinstance(found, Abstention) and found.kind not in ("relation", "no_key_facts"):
            return Abstention(kind=found.kind, reason=f"part '{part}': {found.reason}")
        if isinstance(found, Abstention):
            continue
        if found[0] == "not_fulfilled":
            return "partially_fulfilled", f"part '{part}' not met ({found[1]}); {passed[1]}"
    return passed


def _has_facts(facts: Facts) -> bool:
    return bool(facts.quantities or facts.dates or facts.times or facts.ids or facts.names)


def _said(word: str, stems: set[str]) -> bool:
    return word in stems or any(
        min(len(word), len(s)) >= 4 and (s.startswith(word) or word.startswith(s)) for s in stems
    )


def claim_parts(claim: str) -> list[str]:
    """The statements a compound claim joins ("X has 12 nodes and runs 1.29"; "Q1 was A; Q2 was B"),
    each with words of its own and a key fact (or two content words); [] for one statement or a list
    ("A, B and C")."""
    parts = [p.strip(" .") for p in _PART_BREAK.split(claim)]
    if len(parts) < 2:
        return []
    for part in parts:
        facts = read(part, claim=True)
        if (
            len(re.findall(r"[\w$€£.:/-]+", part)) < 3
            or not facts.content
            or not (_has_facts(facts) or len(facts.content) >= 2)
        ):
            return []
    return parts
