"""The judge's reading of one claim/answer pair as a fixed row of numbers, for
``judge_separability.py``: which rule decided, how the claim's key facts fared, how much of the
claim's wording the answer holds and where, hedges, negations, refusals, language and size.

Every figure is one the rules already compute (``judge.matching``, ``judge.support``, ``judge.cues``);
nothing here decides a verdict. The rule that decided is read from the verdict's reason, whose
opening phrases the rules write (``judge.rules``, ``judge.gate``, ``judge.located``, ...).
"""

from __future__ import annotations

import math
import re

from atlasrun.judge.compound import claim_parts
from atlasrun.judge.cues import (
    HEDGE_CUES,
    REFUSAL_CUES,
    claim_terms,
    cue_in,
    first_negation,
    has_stem,
    negations_of,
    word_stems,
)
from atlasrun.judge.evidence import CORRECTION, foreign, sentences
from atlasrun.judge.facts import Facts
from atlasrun.judge.matching import tally_facts
from atlasrun.judge.reading import read
from atlasrun.judge.rivals import Tally
from atlasrun.judge.support import Evidence

# The rule that decided, by a phrase of the reason it wrote (first match wins; none: the facts tally).
RULE_PHRASES: tuple[tuple[str, str], ...] = (
    ("rule_empty", "empty answer"),
    ("rule_part_right", "part right"),
    ("rule_part_unmet", r"not met \("),
    ("rule_contradicted", "contradicted"),
    ("rule_candidates", "only in a list of candidate"),
    ("rule_foreign_figure", "nowhere in the answer"),
    ("rule_refusal", "refuses or reports a failure"),
    ("rule_negation", "negates"),
    ("rule_direction", "opposite"),
    ("rule_roles", "roles swapped|another agent"),
    ("rule_clause_slot", "stands in the clause"),
    ("rule_revision", "revises"),
    ("rule_question", "in a question"),
    ("rule_hedge", "hedges"),
    ("rule_no_key_facts", "no key facts in the claim"),
    ("rule_placed", "frames|a past or another period"),
)
_RULES = [(name, re.compile(phrase)) for name, phrase in RULE_PHRASES]
# The answer turning from one statement to another: where a grader may read a value as not the claim's.
_CONTRAST = re.compile(r"\b(?:but|however|although|though|whereas|while|instead|rather|not the)\b", re.I)
_LIST_LINE = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s", re.M)

FEATURES: tuple[str, ...] = (
    *(name for name, _ in RULE_PHRASES),
    "facts",
    "facts_matched_share",
    "facts_missing",
    "facts_contradicted",
    "facts_candidates",
    "facts_undecided",
    "facts_rivals",
    "facts_values_matched",
    "claim_quantities",
    "claim_dates_times",
    "claim_ids",
    "claim_names",
    "claim_items",
    "claim_content_words",
    "claim_compound",
    "claim_negated",
    "content_share_answer",
    "content_share_with_facts",
    "claim_in_one_sentence",
    "hedge_with_facts",
    "hedge_anywhere",
    "negation_of_claim_terms",
    "refusal_cue",
    "answer_log_chars",
    "answer_log_sentences",
    "answer_foreign",
    "answer_table",
    "answer_list_lines",
    "answer_contrasts",
    "answer_corrections",
)


def decided_by(reason: str) -> str | None:
    """The rule feature a verdict's reason names, or None for a verdict of the facts' tally."""
    return next((name for name, pattern in _RULES if pattern.search(reason)), None)


def evidence_features(claim_text: str, response: str, reason: str) -> list[float]:
    """The row of ``FEATURES`` for one pair and the reason of the verdict the rules gave it."""
    claim, answer = read(claim_text, claim=True), read(response)
    tally = tally_facts(claim, answer)
    evidence = Evidence(claim, answer, tally)
    terms = claim_terms(claim)
    rule = decided_by(reason)
    stems = {w for w in re.findall(r"[\w'./#-]+", answer.text.lower())}
    content_found = sum(1 for c in claim.content if any(s.startswith(c) for s in stems))
    row = {name: float(rule == name) for name, _ in RULE_PHRASES}
    row |= {
        "facts": float(tally.facts),
        "facts_matched_share": len(tally.matched) / tally.facts if tally.facts else 0.0,
        "facts_missing": float(len(tally.missing)),
        "facts_contradicted": float(len(tally.contradicted)),
        "facts_candidates": float(len(tally.candidates)),
        "facts_undecided": float(len(tally.undecided)),
        "facts_rivals": math.log1p(len(tally.rivals)),
        "facts_values_matched": math.log1p(
            sum(1 for _, _, kind in tally.hits if kind in ("quantity", "date", "time"))
        ),
        "claim_quantities": float(len(claim.quantities)),
        "claim_dates_times": float(len(claim.dates) + len(claim.times)),
        "claim_ids": float(len(claim.ids)),
        "claim_names": float(len(claim.names)),
        "claim_items": float(len(claim.items)),
        "claim_content_words": float(len(claim.content)),
        "claim_compound": float(bool(claim_parts(claim_text))),
        "claim_negated": float(first_negation(claim.text, terms) is not None),
        "content_share_answer": content_found / len(claim.content) if claim.content else 1.0,
        "content_share_with_facts": evidence.content_share(claim) if tally.hits else 0.0,
        "claim_in_one_sentence": _in_one_sentence(claim, answer, tally),
        "hedge_with_facts": float(evidence.hedge() is not None),
        "hedge_anywhere": float(cue_in(answer.text, HEDGE_CUES) is not None),
        "negation_of_claim_terms": float(bool(negations_of(answer.text, terms))),
        "refusal_cue": float(cue_in(answer.text, REFUSAL_CUES) is not None),
        "answer_log_chars": math.log1p(len(answer.text)),
        "answer_log_sentences": math.log1p(len(sentences(answer.text))),
        "answer_foreign": float(foreign(response) is not None),
        "answer_table": float("|" in answer.text and "\n" in answer.text),
        "answer_list_lines": math.log1p(len(_LIST_LINE.findall(answer.text))),
        "answer_contrasts": math.log1p(len(_CONTRAST.findall(answer.text))),
        "answer_corrections": math.log1p(len(CORRECTION.findall(answer.text))),
    }
    return [row[name] for name in FEATURES]


def _in_one_sentence(claim: Facts, answer: Facts, tally: Tally) -> float:
    """The largest share of the claim's content words and matched facts that one sentence of the
    answer holds (a value said in one place and the claim's words in another is a weaker pass)."""
    wanted = len(claim.content) + tally.facts
    best = 0
    for start, end in sentences(answer.text):
        stems = word_stems(answer.text[start:end])
        words = sum(1 for c in claim.content if has_stem(stems, c))
        facts = len({(s, e) for s, e, _ in tally.hits if start <= s < end})
        best = max(best, words + min(facts, len(tally.matched)))
    return best / wanted if wanted else 0.0
