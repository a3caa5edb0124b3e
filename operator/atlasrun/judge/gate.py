"""The last check before the deterministic judge says ``fulfilled``: every key fact found is not
enough, the answer must also *commit* to the claim, read over the whole answer (not only the
sentence of the first match). A pass stands only when:

- no revision cue ("Update:", "Hmm, that line is ...", "on closer inspection") follows a fact's
  statement with another value of the fact's kind after it; when the claim's value is not restated
  after it, that is decisive (not fulfilled), when it is, uncertain;
- no past state ("used to", "no longer", "was 100 until March") is reported;
- the facts are not all framed as an expectation, a target, a conditional or a plan ("you expected
  12 nodes", "would hold", "is planned for"); another value of the kind right after such a frame
  ("..., but the cluster has 9 nodes") is what was found (not fulfilled);
- no other value of a claim quantity's kind is said with a claim word its match is not said with
  ("sessions with 48 million rows; events ... 31 million" for "events with 48 million rows");
- the facts are stated together, in one sentence (with its list header, its table's header row, the
  sentence before when it opens with a pronoun; a vertical list for a claim that enumerates),
  wherever another entity or value could take the claim's place, and that sentence carries at least
  half of the claim's other content words where another name or id could (the right entity in
  another relation is not the claim);
- that sentence holds no word of the opposite direction, no negation of a word of the claim (unless
  the claim is negated too) and no hedge.

Otherwise the judge abstains: these are the places where a rule reading of free text is weakest.

The checks: revisions and framing in ``judge.gate_commitment``, other values of a claim quantity's
kind in ``judge.gate_rival_values``, direction words and signs in ``judge.gate_direction``, the
sentence of the facts (with its negations) in ``judge.gate_sentence``.
"""

from __future__ import annotations

import re

from atlasrun.judge.base import Abstention
from atlasrun.judge.evidence import in_context, sentences
from atlasrun.judge.facts import Facts
from atlasrun.judge.gate_commitment import Outcome, correction, unasserted
from atlasrun.judge.gate_direction import opposite_word, signed_against
from atlasrun.judge.gate_rival_values import rival_value
from atlasrun.judge.gate_sentence import NEGATION_TOKEN, claim_share, negated_in, together
from atlasrun.judge.lexicon_stance import HEDGES
from atlasrun.judge.rivals import Tally

# A state the answer says has ended: what follows may not hold any more.
_FORMERLY = re.compile(
    r"\b(?:used to|formerly|no longer|any ?more|until recently|was previously)\b",
    re.I,
)
# "The limit was 100 until March": a value the sentence says has ended.
_UNTIL = re.compile(r"\b(?:was|were|had been)\b[^.;\n]{0,80}\buntil\b[^.;\n]*", re.I)
_HEDGE = re.compile(r"(?<![\w'])(?:" + "|".join(re.escape(h) for h in HEDGES) + r")(?![\w'])", re.I)
_CLAIM_SHARE = 0.5


def doubt(claim: Facts, answer: Facts, tally: Tally, resolved: bool = False) -> Outcome:
    """Why a ``fulfilled`` the rules reached is not decisive (an abstention or a decisive
    ``not_fulfilled``), or None when it stands."""
    corrected = correction(claim, answer, tally)
    if corrected:
        return corrected
    claim_negated = any(NEGATION_TOKEN.match(w) for w in claim.words)
    formerly = _FORMERLY.search(answer.text) or next(
        (m for m in _UNTIL.finditer(answer.text) if any(m.start() <= h < m.end() for h, _, _ in tally.hits)),
        None,
    )
    if formerly:
        return Abstention(kind="contradiction", reason=f"a past state ('{formerly.group(0)}')")
    if not tally.hits:  # no figure to anchor the claim: its words decide, read over the whole answer
        opposite = opposite_word(claim, answer.text)
        if opposite:
            return Abstention(kind="negation", reason=f"the answer also says '{opposite}'")
        negated = None if claim_negated else negated_in(answer.text, claim)
        if negated:
            return Abstention(kind="negation", reason=f"'{negated}' in the answer")
        hedge = _HEDGE.search(answer.text)
        if hedge:
            return Abstention(kind="hedged", reason=f"answer hedges ('{hedge.group(0)}')")
        return None
    framed = unasserted(claim, answer, tally)
    if framed:
        return framed
    rival = (
        None if resolved else rival_value(claim, answer, tally)
    )  # ``resolved``: ``judge.slots`` placed them
    if rival:
        return Abstention(kind="contradiction", reason=rival)
    against = signed_against(claim, answer.text)
    if against:
        return Abstention(kind="contradiction", reason=against)
    found = together(claim, answer, tally)
    rivalled = any(k in ("name", "id") for _, _, k in tally.rivals) or (
        bool(tally.candidates) and not resolved
    )  # another entity or value the relation may be of
    if found is None and (rivalled or tally.rivals):
        return Abstention(kind="relation", reason="the claim's facts are not stated together in one sentence")
    said = found[1] if found else answer.text
    share = claim_share(claim, said)
    if share < _CLAIM_SHARE and rivalled:
        return Abstention(
            kind="relation", reason=f"the sentence of the facts says {share:.0%} of the claim's words"
        )
    opposite = (
        opposite_word(claim, said) if found and not claim_negated else None
    )  # "did not finish": "failed"
    if opposite:
        return Abstention(kind="negation", reason=f"the sentence of the facts also says '{opposite}'")
    if not claim_negated:
        negation = negated_in(said, claim)
        if negation:
            return Abstention(kind="negation", reason=f"'{negation}' in the sentence of the facts")
    own = answer.text[slice(*found[0])] if found else said  # not the sentence it continues
    hedge = _HEDGE.search(own) or _HEDGE.search(
        _bare(answer.text) if len(sentences(answer.text)) <= 3 else ""
    )
    if hedge:
        return Abstention(kind="hedged", reason=f"answer hedges ('{hedge.group(0)}')")
    return None


def _bare(text: str) -> str:
    """The sentences that state no figure and no name of their own: a hedge there ("I'm not sure.")
    covers the whole of a short answer; one said with its own values ("it might be 2.3 million")
    covers those."""
    spans = sentences(text)
    return " ".join(text[a:b] for a, b in spans if not re.search(r"\d|(?<=[a-z,;] )[A-Z][a-z]", text[a:b]))


def unreadable(claim: Facts, answer: Facts, tally: Tally) -> str | None:
    """A claim figure not found, where a sentence that says the claim's words holds other figures or
    times: it may be given in a form the rules do not derive ("400 GB of 500 GB" for 80%, "from
    10:00 to 11:30" for 90 minutes). Not decisive for a ``not_fulfilled``."""
    missing = [q for q in claim.quantities if q.text in tally.missing]
    if not missing:
        return None
    spans = sentences(answer.text)
    derivable: list[str] = []
    for i, span in enumerate(spans):
        said = in_context(answer.text, spans, i)
        if claim_share(claim, said) < _CLAIM_SHARE:
            continue
        here = [g for g in answer.quantities if span[0] <= g.start < span[1]]
        if any(g.dim == q.dim or (g.currency and q.currency) for g in here for q in missing):
            return (
                None  # the same dimension (or another currency) said with the claim's words: a contradiction
            )
        derivable += [g.text for g in here] + [t.text for t in answer.times if span[0] <= t.start < span[1]]
    if derivable:  # only other dimensions or times: the figure may be given in a form not derived
        return f"{missing[0].text} not found as such; the answer gives {', '.join(derivable[:3])} there"
    return None
