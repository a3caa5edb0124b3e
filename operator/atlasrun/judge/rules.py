"""The rules' verdict on a claim before the gate: decisive evidence, strictest first (an empty
answer, a contradicted value, a dump of candidates, a refusal, a negation, an opposite direction,
swapped roles), then what the facts found and the claim's words said with them decide."""

from __future__ import annotations

import re

from atlasrun.judge.base import Abstention
from atlasrun.judge.compound import Outcome
from atlasrun.judge.cues import (
    AFFIRMS,
    HEDGE_CUES,
    HEDGE_PHRASES,
    NEGATED_WORD,
    NEGATION,
    OTHERS_FAILING,
    REFUSAL_CUES,
    RELATION_SHARE,
    claim_share,
    claim_terms,
    cue_in,
    direction_words,
    first_negation,
    has_stem,
    negations_of,
    says_whole,
    word_stems,
)
from atlasrun.judge.evidence import Span, asks, foreign, sentences
from atlasrun.judge.facts import Facts
from atlasrun.judge.gate import unreadable
from atlasrun.judge.lexicon_stance import DIRECTIONS
from atlasrun.judge.located import absent_figures, negated_claim, of_another
from atlasrun.judge.matching import tally_facts
from atlasrun.judge.reading import read
from atlasrun.judge.rivals import Tally
from atlasrun.judge.roles import agent_check, role_conflict
from atlasrun.judge.support import Evidence, unpaired_facts
from atlasrun.judge.topic import in_topic, only_topic, unnamed_topic

WRONG, NEGATES = "contradicted", "answer negates the claim"
PART_WRONG = (WRONG, NEGATES)  # verdicts on one part of a claim: another part may still be met


def verdict(claim_text: str, response: str, resolved: bool = False, any_language: bool = False) -> Outcome:
    """The rules' verdict; ``any_language``: read an answer in another Latin-script language with the
    English rules too (``DeterministicJudge`` keeps only a pass from that reading)."""
    if not response.strip() or response.strip().lower() in ("n/a", "none", "-"):
        return "not_fulfilled", "empty answer"
    claim, answer = read(claim_text, claim=True), read(response)
    tally = tally_facts(claim, answer)
    summary = _summary(claim, answer, tally)
    for who, text in (("claim", claim_text), ("answer", response)):
        language = foreign(text)
        if language and not (any_language and who == "answer" and "script" not in language):
            absent = absent_figures(claim, answer, tally) if who == "answer" else []
            if absent and "script" not in language:  # a figure is a figure in any Latin-script language
                return (
                    "not_fulfilled",
                    f"{', '.join(absent)} nowhere in the answer ({language}); {summary}",
                )
            return Abstention(kind="language", reason=f"the {who} is not in English ({language})")
    if tally.contradicted:
        return "not_fulfilled", f"{WRONG}: {'; '.join(tally.contradicted[:4])}; {summary}"
    if tally.dumps:
        return "not_fulfilled", f"{', '.join(tally.dumps)} only in a list of candidate values; {summary}"
    refusal = cue_in(OTHERS_FAILING.sub(" ", HEDGE_PHRASES.sub(" ", answer.text.lower())), REFUSAL_CUES)
    answered = any(k in ("quantity", "date", "time") for _, _, k in tally.hits) or any(
        in_topic(claim, f, sure=True) is False for f in tally.matched
    )  # a value, or what the claim states of its subject: the rest reported not found is missing
    if refusal and (tally.missing or not tally.facts) and not answered:
        return "not_fulfilled", f"answer refuses or reports a failure ('{refusal}'); {summary}"
    evidence = Evidence(claim, answer, tally)
    terms = claim_terms(claim)
    negations = negations_of(
        answer.text, terms, counts=not claim.quantities, facts_at=[h[0] for h in tally.hits]
    )
    claim_negated = first_negation(claim.text, terms)
    negation = negations[0] if negations else None
    if claim_negated and not negation:
        by_state = negated_claim(claim, answer, tally)
        if by_state:
            return by_state[0], f"{by_state[1]}; {summary}"
        if says_whole(claim, answer.text):
            return (
                "not_fulfilled",
                f"the answer affirms what the claim negates ('{claim_negated[0]}'); {summary}",
            )
        return Abstention(
            kind="negation",
            reason=f"the claim is negated ('{claim_negated[0]}'), the answer is not; {summary}",
        )
    if negations and not claim_negated:
        found = _negation_verdict(claim, answer, tally, evidence, negations, summary)
        if found:
            return found
    direction = _direction_conflict(claim, answer, evidence if tally.matched else None)
    if direction and not claim_negated:
        return "not_fulfilled", f"opposite direction: {direction}; {summary}"
    roles = role_conflict(claim, answer)
    _, evidence.roles_agree = agent_check(claim, answer)
    if roles and roles.decisive:
        return "not_fulfilled", f"{roles.reason}; {summary}"
    if roles:
        return Abstention(kind="role", reason=f"{roles.reason}; {summary}")
    if tally.facts:
        return _with_facts(claim, tally, evidence, summary, resolved)
    return _without_facts(claim, answer, summary)


def _negation_verdict(
    claim: Facts,
    answer: Facts,
    tally: Tally,
    evidence: Evidence,
    negations: list[tuple[str, Span]],
    summary: str,
) -> Outcome | None:
    """An answer negating the claim's words: decisive in the sentence of the facts, in a short answer
    or where the negated sentence says the whole claim; uncertain where it says half of it; beside the
    point elsewhere (a negation about something else in a long answer)."""
    hedge = evidence.hedge() if tally.matched else None
    if hedge:
        return Abstention(kind="hedged", reason=f"answer hedges ('{hedge}'); {summary}")
    negations = [n for n in negations if not of_another(claim, answer.text[slice(*n[1])])]
    if not negations:
        return None
    near = [n for n in negations if n[1] in evidence.spans]
    if not tally.matched or near or len(sentences(answer.text)) <= 2:
        return "not_fulfilled", f"{NEGATES} ('{(near or negations)[0][0]}'); {summary}"
    shares = [(claim_share(claim, answer.text[slice(*s)]), c) for c, s in negations]
    best, cue = max(shares)
    if best == 1.0:
        return "not_fulfilled", f"{NEGATES} ('{cue}'); {summary}"
    if best >= RELATION_SHARE:
        return Abstention(kind="negation", reason=f"'{cue}' in another sentence than the facts; {summary}")
    return None


def _direction_conflict(claim: Facts, answer: Facts, evidence: Evidence | None) -> str | None:
    """An opposite direction word, in the sentences of the facts when there are any."""
    text = answer.text
    if evidence:  # the sentences of the facts that also name the claim's subject, if it has one
        subject = [" ".join(n).lower() for n in claim.names]
        first = claim.first_name or ""
        if first and re.search(rf"(?<![.!?\n]\s)(?<![.!?\n])(?<!^)\b{re.escape(first)}\b", answer.text):
            subject.append(first.lower())  # "North's revenue": a name, as the answer writes it too
        about = [s for s in evidence.sentences if all(n in s.lower() for n in subject if n)]
        text = " ".join(about)
    text = NEGATED_WORD.sub(" ", text)  # "does not open": no opposite of "closed"
    words = [w.lower().strip(".,;:!?'\"()") for w in re.findall(r"[\w'./#-]+", text)]
    answer_dirs = direction_words(words, text)
    for pair, side in sorted(direction_words(claim.words, claim.text)):
        if (pair, 1 - side) in answer_dirs and (pair, side) not in answer_dirs:
            up, down = DIRECTIONS[pair]
            said = [w for w in sorted((down, up)[side]) if f" {w} " in f" {' '.join(words)} "]
            meant = [w for w in sorted((up, down)[side]) if f" {w} " in f" {' '.join(claim.words)} "]
            return f"claim says {meant[0] if meant else '?'}, answer says {said[0] if said else '?'}"
    return None


def _with_facts(claim: Facts, tally: Tally, evidence: Evidence, summary: str, resolved: bool) -> Outcome:
    if not tally.matched or (tally.missing and len(tally.matched) == len(tally.undecided)):
        derived = unreadable(claim, evidence.answer, tally)
        if derived:
            return Abstention(kind="unit", reason=f"{derived}; {summary}")
        return "not_fulfilled", summary  # nothing found for sure (an uncertain match cannot lift it)
    unpaired = unpaired_facts(claim, tally, evidence.answer)
    if unpaired:
        return "not_fulfilled", f"{unpaired}; {summary}"
    if evidence.outdone and not resolved:
        return Abstention(kind="contradiction", reason=f"{evidence.outdone}; {summary}")
    if tally.candidates and not resolved:
        return Abstention(
            kind="contradiction",
            reason=f"another value for the same quantity: {'; '.join(tally.candidates[:3])}",
        )
    if evidence.all_asking():
        if not AFFIRMS.search(evidence.answer.text):  # nothing but the question: nothing stated
            return "not_fulfilled", f"the facts appear only in a question or its restatement; {summary}"
        return Abstention(
            kind="restated", reason=f"the facts appear only in a question, then an affirmation; {summary}"
        )
    hedge = evidence.hedge()
    if hedge and not tally.undecided:  # the right value given uncommitted: some, not all, of the claim
        return "partially_fulfilled", f"answer hedges ('{hedge}') where it gives the facts; {summary}"
    if hedge:
        return Abstention(kind="hedged", reason=f"answer hedges ('{hedge}'); {summary}")
    topic_only = only_topic(claim, evidence.answer, tally)
    if topic_only:
        return "not_fulfilled", f"{topic_only}; {summary}"
    if tally.missing and not unnamed_topic(claim, tally):
        return "partially_fulfilled", summary  # some found, some missing: whatever the uncertain ones are
    if tally.undecided:
        kind, why = tally.undecided[0]
        return Abstention(kind=kind, reason=f"{why}; {summary}")
    share = evidence.content_share(claim)
    if (
        len(claim.content) >= 2
        and evidence.says_more(claim)
        and (share == 0 or (share < RELATION_SHARE and evidence.long))
        and not evidence.roles_agree
    ):
        return Abstention(
            kind="relation", reason=f"{share:.0%} of the claim's words said with its facts; {summary}"
        )
    return "fulfilled", summary


def _without_facts(claim: Facts, answer: Facts, summary: str) -> Outcome:
    if not claim.content:
        return Abstention(kind="no_key_facts", reason=f"nothing to look up in the claim; {summary}")
    content = [c for c in claim.content if not NEGATION.match(c)]  # negation is checked apart
    whole = word_stems(answer.text)
    share = sum(1 for c in content if has_stem(whole, c)) / max(len(content), 1)
    if share < 0.25:
        return "not_fulfilled", f"no key facts in the claim; {summary}"
    for start, end in sentences(answer.text):
        sentence = answer.text[start:end]
        stems = word_stems(sentence)
        if all(has_stem(stems, c) for c in content) and not asks(sentence, (0, len(sentence))):
            hedge = cue_in(sentence, HEDGE_CUES)
            if hedge:
                return Abstention(kind="hedged", reason=f"answer hedges ('{hedge}'); {summary}")
            return "fulfilled", f"no key facts in the claim; every content word in one sentence; {summary}"
    return Abstention(
        kind="no_key_facts", reason=f"no key facts and no sentence says the claim whole; {summary}"
    )


def _summary(claim: Facts, answer: Facts, tally: Tally) -> str:
    text = f"matched {len(tally.matched)}/{tally.facts} key facts" + (
        f" ({', '.join(tally.matched[:6])})" if tally.matched else ""
    )
    if claim.content:
        stems = word_stems(answer.text)
        hit = sum(1 for c in claim.content if has_stem(stems, c))
        text += f", {hit}/{len(claim.content)} content words"
    if tally.missing:
        text += f"; missing: {', '.join(tally.missing[:6])}"
    return text
