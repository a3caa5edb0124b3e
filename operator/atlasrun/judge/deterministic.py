"""A deterministic claims judge, conservative by construction: a verdict only on decisive evidence,
otherwise an abstention with its reason (``ClaimVerdict.abstained``).

For offline runs and as a cross-check of LLM judges. The claim is read into key facts
(``judge.reading``: quantities with units and currencies, dates, zoned times, identifiers, names,
list items) and content words; each key fact is matched in the answer (``judge.matching``; values
compared in ``judge.values``, other values placed in ``judge.rivals``; MCP-Atlas tolerances: numbers
5%, percentages 1 point, years exact, units converted). The rules themselves are ``judge.rules``
(cue words in ``judge.cues``, the sentences of the facts in ``judge.support``).

Decisive, strictest first: an empty answer, a contradicted fact (a wrong value, or the right value
corrected to another), a value only in a dump of candidates, a refusal, the answer negating the claim
in the sentence of its facts, an opposite direction word (rose/fell), swapped roles -> not fulfilled.
No key fact found -> not fulfilled; some -> partially; all, but hedged where they are said ("might be
4.2.1") -> partially. All found, said together with the claim's words, nothing uncertain ->
fulfilled. A compound claim ("X has 12 nodes and runs 1.29"; "Q1 was A; Q2 was B") failed for a
wrong or negated value is partially fulfilled when one of its statements, judged alone, is met. A
claim without key facts is fulfilled only when one declarative sentence carries all its content
words.

Also decisive: two facts of the claim never said in one clause while the clause of one holds another
value in the other's place ("Marcus Webb ... in Austin" for "Marcus Webb is in Berlin").

Abstained (a false pass is the worst error a judge can make): another candidate value for a matched
quantity (same kind, attached to the claim's words, or standing in the sentence that says most of
the claim), a negated claim the answer does not negate, roles under an unknown relation or another
agent the claim does not name, a bare number for a claim with a unit, a time whose zone is not
certain, a name given only in part, a hedge or a question in the sentence of the facts, facts not
said with the claim's words, a claim without key facts and no decisive sentence, and text in a
language the word lists do not cover. The claim's words may sit in the plain sentence before the
facts' ("I checked the orders database. The last backup finished on ...") or in the heading of
their list.

Every ``fulfilled`` then goes through ``judge.gate``, which reads the whole answer for what a pass
needs besides the facts (no later revision, the facts said together and of the claim's relation,
no negation, opposite word or hedge there) and abstains (or fails a revised value) otherwise. A
claim figure not found where the answer gives other figures with the claim's words is not a decisive
fail either (``gate.unreadable``: "400 GB of 500 GB" for 80%); a restated question with nothing
else is. A pass that survives the gate must also have *located* evidence (``judge.located``): a
rate's period and a change's sign as the claim's, no other value said with more of the claim's
subject, no claim word said only in a sentence about something else; and *placed* evidence
(``judge.placed``): no match said only as a past state or another period's value, no from/to swapped,
no name taken back; a compound claim passes only when each of its statements does
(``judge.compound``).

Whose value is it (``judge.slots``): a claim value the answer says of something else while the
claim's subject holds another value ("Osaka expects a high of 26 °C ... the high [in Tokyo] will be
23 °C") is a decisive fail, whatever else is uncertain; another value that is clearly another
subject's lifts a rival-value abstention. A negated claim is read against the sentences that name
its subject ("did not finish" met by "failed"). The answer's structure (``judge.attributed``, since
``deterministic/7``): a claim figure said in a table row, table column or list item only of another
subject than the claim's, while the claim's own record holds another value ("| 2024-03-14 | ... |
172.62 |" for "closed at $172.62 on March 15"; "- Control sample: 7.4"), is a decisive fail, and an
abstention when the claim's record holds none; so is a name given as the first of a ranked list
that is a later item ("Top customers by lifetime spend: 1. ... 2. Jorge Castillo"). In another Latin-script language, a claim figure
stated nowhere is a decisive fail; anything else there is abstained on.

What the claim is about (``judge.topic``, since ``deterministic/8``): the key facts before the claim's
verb are its topic, those after it what it states. Finding only the topic, with none of the
statement's words said there, is not fulfilled ("Gate B12 is in Terminal 2" for "Gate B12 closes at
18:40"), not partially; every stated value found with only the topic's name left unsaid, and no other
entity named, is a full match ("The cache holds 2.4 GB" for "The Redis cache holds 2.4 GB").
Since ``deterministic/9``, not saying is not denying: "the email doesn't include the hotel name" or
"I couldn't load the rest" reports a detail missing (partially fulfilled when what the claim states
of its subject is given), unless the negated verb is the claim's own or the sentence holds the
claim's own facts ("the timetable didn't return any Split-Hvar sailings").

Since ``deterministic/10``, figures are read as answers write them (``judge.reading_quantities``):
durations to the second ("14 min 32 s", "finished in 2:05:42": a clock-written claim is met to the
second), a currency's hundredths ("24 cents"), "bn"/"Millionen" scales, basis points, one speed in
m/s, km/h or mph, a release number after a product name ("Python 3.11") compared exactly; a bare
figure is no rival of a measure ("magnitude 6.4" and "10 km"). Other languages' month names (day
first), counts (in the absent-figure check) and place names (``judge.lexicon_places``) are read, and an
answer in another Latin-script language is passed when the English rules pass it on a figure, date,
time or id of the claim, no other value is said of the claim's subject and no negation or reversal
of that language stands in the sentences of its facts (``_read_anyway``); else it stays abstained. A
qualifier of the claim said right before the match only ("p95 was 182 ms") keeps another value from a
decisive fail; one said only with another value, while the match is said with a word the claim does
not have ("the median was $84.17, the mean $97.60"), makes the pass uncertain (``judge.slots``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from atlasrun.judge import slots
from atlasrun.judge.attributed import attributed
from atlasrun.judge.base import Abstention, ClaimVerdict, JudgeInfo, Label
from atlasrun.judge.compound import Outcome, claim_parts, every_part, label_of
from atlasrun.judge.facts import NUMBER_TOLERANCE, PERCENT_POINTS, Facts
from atlasrun.judge.gate import doubt
from atlasrun.judge.lexicon_words import FOREIGN_NEGATIONS
from atlasrun.judge.located import located
from atlasrun.judge.matching import tally_facts
from atlasrun.judge.placed import placed
from atlasrun.judge.reading import read
from atlasrun.judge.rules import PART_WRONG, WRONG, verdict
from atlasrun.judge.support import Evidence

VERSION = "deterministic/10"
__all__ = ["NUMBER_TOLERANCE", "PERCENT_POINTS", "VERSION", "DeterministicJudge", "key_facts", "ungrounded"]


def key_facts(claim: str, text: str) -> tuple[list[str], list[str]]:
    """(found, not found) key facts of ``claim`` in ``text`` as this judge reads them; a value seen
    only in a list of candidates counts as found (for checking that claims are grounded in data)."""
    tally = tally_facts(read(claim, claim=True), read(text))
    return tally.matched + tally.dumps, tally.missing + tally.contradicted


def ungrounded(claim: str, text: str) -> list[str]:
    """The claim's key facts that ``text`` (e.g. tool outputs: data, not an answer) does not
    support: every figure written in the claim must be there; names and ids only need to be there
    when nothing else is. A count spelled out in words ("the three files") frames the claim and
    is not required."""
    found, missing = key_facts(claim, text)
    figures = [m for m in missing if m[:1].isdigit() and m.split()[0] in claim]
    return missing if missing and not found else figures


class DeterministicJudge:
    can_abstain = True

    def __init__(self, name: str = "deterministic") -> None:
        self.info = JudgeInfo(name=name, kind="deterministic", version=VERSION)

    async def judge(self, claim: str, response: str) -> ClaimVerdict:
        """``judge_sync``; a fault in the rules on some text is this claim's judge failure (reported,
        never scored), not the run's."""
        try:
            return self.judge_sync(claim, response)
        except Exception as exc:  # any fault of the rules, named in the verdict
            return ClaimVerdict.failed(claim, f"deterministic judge fault: {type(exc).__name__}: {exc}")

    def judge_sync(self, claim: str, response: str) -> ClaimVerdict:
        outcome = self._gated(claim, response)
        if isinstance(outcome, tuple) and outcome[0] == "not_fulfilled" and outcome[1].startswith(PART_WRONG):
            right = [p for p in claim_parts(claim) if label_of(self._gated(p, response)) == "fulfilled"]
            if right:  # "Q1 was $2.1M and Q2 was $2.6M", Q2 wrong: some key details covered
                outcome = "partially_fulfilled", f"part right ('{right[0]}'), part wrong: {outcome[1]}"
        elif isinstance(outcome, tuple) and outcome[0] == "fulfilled":
            outcome = every_part(claim, response, outcome, self._gated)
        if isinstance(outcome, Abstention):
            return ClaimVerdict.abstained(claim, outcome.kind, outcome.reason)
        return ClaimVerdict.labelled(claim, outcome[0], outcome[1], 1.0)

    def _gated(self, claim: str, response: str) -> Outcome:
        """The rules' verdict; a pass must survive the gate. Other values of a claim value's kind make
        it uncertain, unless ``judge.slots`` finds them clearly another subject's (or the claim's
        value clearly another subject's: a decisive fail)."""
        outcome = self._checked(claim, response, resolved=False)
        if isinstance(outcome, Abstention) and outcome.kind == "language":
            return _read_anyway(outcome, claim, response, self._checked)
        if isinstance(outcome, Abstention) or outcome[0] == "fulfilled":
            claim_facts, answer = read(claim, claim=True), read(response)
            elsewhere = slots.outslotted(claim_facts, answer)
            if elsewhere:  # the claim's subject holds another value: decisive whatever else is unsure
                return "not_fulfilled", f"{WRONG}: {elsewhere}"
            structural = attributed(claim_facts, answer)
            if isinstance(structural, tuple):
                return structural[0], f"{WRONG}: {structural[1]}"
            if structural is not None and not isinstance(outcome, Abstention):
                return structural
            if (
                isinstance(outcome, Abstention)
                and outcome.kind == "contradiction"
                and not any(cue in outcome.reason for cue in _NOT_RIVALS)
                and slots.resolved(claim_facts, answer)
            ):
                outcome = self._checked(claim, response, resolved=True)
        return outcome

    def _checked(self, claim: str, response: str, resolved: bool, any_language: bool = False) -> Outcome:
        outcome = verdict(claim, response, resolved, any_language)
        if isinstance(outcome, tuple) and outcome[0] == "fulfilled":
            claim_facts, answer = read(claim, claim=True), read(response)
            doubted = doubt(claim_facts, answer, tally_facts(claim_facts, answer), resolved)
            if isinstance(doubted, tuple):
                outcome = doubted[0], f"{doubted[1]}; {outcome[1]}"
            elif doubted is not None:
                outcome = Abstention(kind=doubted.kind, reason=f"{doubted.reason}; {outcome[1]}")
            else:
                outcome = _located(outcome, claim_facts, answer, resolved)
        return outcome


def _read_anyway(
    abstained: Abstention, claim: str, response: str, checked: Callable[..., Outcome]
) -> Outcome:
    """An answer in another Latin-script language, read by the English rules: only a pass that
    survives every check counts, on language-independent evidence (a figure, date, time or id of the
    claim found, with no other value of its kind said of the claim's subject), in sentences without a
    negation or reversal of that language; the language's grammar is not read, so anything else
    stays an abstention."""
    if "answer" not in abstained.reason or "script" in abstained.reason:
        return abstained
    outcome = checked(claim, response, resolved=False, any_language=True)
    if not (isinstance(outcome, tuple) and outcome[0] == "fulfilled"):
        return abstained
    claim_facts, answer = read(claim, claim=True), read(response)
    tally = tally_facts(claim_facts, answer)
    if all(kind == "name" for _, _, kind in tally.hits):
        return abstained
    if slots.outslotted(claim_facts, answer) or slots.contested(claim_facts, answer):
        return abstained
    said = " ".join(answer.text[slice(*span)] for span in Evidence(claim_facts, answer, tally).spans)
    if FOREIGN_NEGATIONS & set(re.findall(r"[^\W\d_]+", said.lower())):
        return abstained
    return "fulfilled", f"{outcome[1]} (answer in another language: its figures and names read)"


def _located(passed: tuple[Label, str], claim: Facts, answer: Facts, resolved: bool) -> Outcome:
    """A pass that survived the gate, unless its evidence is not located (``judge.located``) or not
    placed as the claim's (``judge.placed``)."""
    tally = tally_facts(claim, answer)
    found = located(claim, answer, tally, resolved) or placed(claim, answer, tally)
    if isinstance(found, tuple):
        return found[0], f"{found[1]}; {passed[1]}"
    if found is not None:
        return Abstention(kind=found.kind, reason=f"{found.reason}; {passed[1]}")
    return passed


# Contradiction abstentions that no placing of the other values resolves: a revision, a past state.
_NOT_RIVALS = ("revises", "a past state", "signed against")
