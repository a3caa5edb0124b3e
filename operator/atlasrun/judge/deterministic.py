"""A deterministic claims judge, conservative by construction: a verdict only on decisive evidence,
otherwise an abstention with its reason (``ClaimVerdict.abstained``).

For offline runs and as a cross-check of LLM judges. The claim is read into key facts
(``judge.facts``: quantities with units and currencies, dates, zoned times, identifiers, names,
list items) and content words; each key fact is matched in the answer (``judge.matching``, MCP-Atlas
tolerances: numbers 5%, percentages 1 point, years exact, units converted).

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
subject, no claim word said only in a sentence about something else; a compound claim passes only
when each of its statements does (``judge.compound``).

Whose value is it (``judge.slots``): a claim value the answer says of something else while the
claim's subject holds another value ("Osaka expects a high of 26 °C ... the high [in Tokyo] will be
23 °C") is a decisive fail, whatever else is uncertain; another value that is clearly another
subject's lifts a rival-value abstention. A negated claim is read against the sentences that name
its subject ("did not finish" met by "failed"). In another Latin-script language, a claim figure
stated nowhere is a decisive fail; anything else there is abstained on.
"""

from __future__ import annotations

import re

from atlasrun.judge import slots
from atlasrun.judge.base import Abstention, ClaimVerdict, JudgeInfo, Label
from atlasrun.judge.compound import claim_parts, every_part, label_of
from atlasrun.judge.evidence import (
    Span,
    asks,
    attached,
    clauses,
    foreign,
    in_context,
    sentence_at,
    sentences,
    stems_of,
)
from atlasrun.judge.facts import NUMBER_TOLERANCE, PERCENT_POINTS, Facts, read, stem
from atlasrun.judge.gate import doubt, unreadable
from atlasrun.judge.lexicon import DIRECTIONS, HEDGES, REFUSALS, STOPWORDS
from atlasrun.judge.located import absent_figures, located, negated_claim, of_another
from atlasrun.judge.matching import Tally, claim_stems, tally_facts
from atlasrun.judge.roles import agent_check, role_conflict

VERSION = "deterministic/4"
__all__ = ["NUMBER_TOLERANCE", "PERCENT_POINTS", "VERSION", "DeterministicJudge", "key_facts", "ungrounded"]

_NEGATION = re.compile(r"^(?:not|never|no|none|nothing|nor|neither|zero|0|\w+n't)$")  # "0 failed": none
_HEDGE_PHRASES = re.compile(
    r"\b(?:not sure|not certain|could(?: not|n't) (?:verify|confirm)|cannot confirm|can't confirm)\b"
)
# Not knowing is not denying: "could not retrieve the version" negates nothing the claim says.
_UNABLE = re.compile(
    r"\b(?:could(?: not|n't)|cannot|can't|(?:was |were )?unable to|(?:was|were)(?: not|n't) able to|"
    r"failed to|did(?: not|n't) manage to) "
    r"(?:retrieve|find|get|access|determine|load|read|open|reach|fetch|check|look up|run|execute|verify|"
    r"confirm|test|see|query|inspect|log in)\b"
)
# A failure the answer reports of something else ("psycopg2 could not compile"), not of its own
# attempt ("I could not", "the tool could not open it", "could not reach the API"): it still answers.
_OTHERS_FAILING = re.compile(
    r"(?<![\w'])(?!(?:i|we|tool|api|request|call|query|endpoint|lookup|search|page)\b)[a-z][\w.-]*[`'\")\]]? "
    r"(?:could not|couldn't|cannot|can't) (?=[a-z])"
)
# "right away", "the right context": no affirmation; "Right, ..." and "that's right" are
_AFFIRMS = re.compile(
    r"\b(?:yes|yep|correct|indeed|confirmed|that's it|exactly|that's right)\b|^\W*right\b", re.I | re.M
)
_CLAUSE_BREAK = {".", ",", ";", ":", "!", "?", "but", "though", "although", "however", "while"}
_RELATION_SHARE = 0.5  # of the claim's content words, said in the sentences of its facts


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


def _claim_terms(claim: Facts) -> set[str]:
    terms = {stem(w) for w in claim.words if w not in STOPWORDS}
    terms |= {w.lower() for phrase in claim.names for w in phrase}
    return terms | set(claim.ids)


def _negated(text: str, terms: set[str]) -> tuple[str, Span] | None:
    """The first negation cue in ``text`` that applies to one of the claim's terms, and its sentence."""
    found = _negations(text, terms)
    return found[0] if found else None


def _negations(text: str, terms: set[str], counts: bool = True) -> list[tuple[str, Span]]:
    """Every sentence of ``text`` with a negation cue applying to one of the claim's terms (``counts``:
    "0 failed" and "zero errors" negate too; not for a claim with figures, compared as figures)."""
    found: list[tuple[str, Span]] = []
    for span in sentences(text):
        sentence = _UNABLE.sub(" unable ", _HEDGE_PHRASES.sub(" hedge ", text[span[0] : span[1]].lower()))
        tokens = re.findall(r"[\w'./#-]+|[.,;:!?]", sentence)
        for i, token in enumerate(tokens):
            if not _NEGATION.match(token) or (not counts and token in ("0", "zero")):
                continue
            cue = (
                "no longer" if token == "no" and i + 1 < len(tokens) and tokens[i + 1] == "longer" else token
            )
            for nxt in tokens[i + 1 : i + 6]:
                if nxt in _CLAUSE_BREAK:
                    break
                if nxt in terms or _has_stem(terms, stem(nxt)):
                    found.append((f"{cue} {nxt}", span))
                    break
            if found and found[-1][1] == span:
                break
    return found


_DIRECTION_OF: dict[str, list[tuple[int, int]]] = {}
for _i, _pair in enumerate(DIRECTIONS):
    for _side, _group in enumerate(_pair):
        for _word in _group:
            _DIRECTION_OF.setdefault(_word, []).append((_i, _side))
_DIRECTION_PHRASES = [w for w in _DIRECTION_OF if " " in w]


def _direction_words(words: list[str], text: str) -> set[tuple[int, int]]:
    """(pair index, side) of every direction word in the text."""
    low = f" {text.lower()} "
    found = [d for w in set(words) for d in _DIRECTION_OF.get(w, [])]
    return set(found + [d for p in _DIRECTION_PHRASES if f" {p} " in low for d in _DIRECTION_OF[p]])


def _negation_verdict(
    claim: Facts,
    answer: Facts,
    tally: Tally,
    evidence: _Evidence,
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
        return "not_fulfilled", f"{_NEGATES} ('{(near or negations)[0][0]}'); {summary}"
    shares = [(_share(claim, answer.text[slice(*s)]), c) for c, s in negations]
    best, cue = max(shares)
    if best == 1.0:
        return "not_fulfilled", f"{_NEGATES} ('{cue}'); {summary}"
    if best >= _RELATION_SHARE:
        return Abstention(kind="negation", reason=f"'{cue}' in another sentence than the facts; {summary}")
    return None


def _direction_conflict(claim: Facts, answer: Facts, evidence: _Evidence | None) -> str | None:
    """An opposite direction word, in the sentences of the facts when there are any."""
    text = answer.text
    if evidence:  # the sentences of the facts that also name the claim's subject, if it has one
        subject = [" ".join(n).lower() for n in claim.names]
        first = claim.first_name or ""
        if first and re.search(rf"(?<![.!?\n]\s)(?<![.!?\n])(?<!^)\b{re.escape(first)}\b", answer.text):
            subject.append(first.lower())  # "North's revenue": a name, as the answer writes it too
        about = [s for s in evidence.sentences if all(n in s.lower() for n in subject if n)]
        text = " ".join(about)
    words = [w.lower().strip(".,;:!?'\"()") for w in re.findall(r"[\w'./#-]+", text)]
    answer_dirs = _direction_words(words, text)
    for pair, side in sorted(_direction_words(claim.words, claim.text)):
        if (pair, 1 - side) in answer_dirs and (pair, side) not in answer_dirs:
            up, down = DIRECTIONS[pair]
            said = [w for w in sorted((down, up)[side]) if f" {w} " in f" {' '.join(words)} "]
            meant = [w for w in sorted((up, down)[side]) if f" {w} " in f" {' '.join(claim.words)} "]
            return f"claim says {meant[0] if meant else '?'}, answer says {said[0] if said else '?'}"
    return None


def _cue_pattern(cues: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w'])(?:{'|'.join(re.escape(c) for c in cues)})(?![\w'])")


_HEDGE_CUES, _REFUSAL_CUES = _cue_pattern(HEDGES), _cue_pattern(REFUSALS)


def _cue(text: str, cues: re.Pattern[str]) -> str | None:
    m = cues.search(text.lower())
    return m.group(0) if m else None


def _has_stem(stems: set[str], c: str) -> bool:
    return c in stems or any(
        c in s or s.startswith(c) or c.startswith(s) for s in stems if min(len(s), len(c)) >= 4
    )


def _stems(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[\w'./#-]+", text.lower())}


class _Evidence:
    """The answer's sentences that carry the claim's facts."""

    def __init__(self, claim: Facts, answer: Facts, tally: Tally) -> None:
        spans = sentences(answer.text)
        self.answer = answer
        self.spans = {sentence_at(spans, s) for s, _, _ in tally.hits}
        self.sentences = sorted(
            {in_context(answer.text, spans, spans.index(sentence_at(spans, s))) for s, _, _ in tally.hits}
        )
        self.long = len(spans) > 1  # several sentences: facts may sit apart from the claim's words
        self.before = [  # the sentence before a fact's, when it names nothing the claim could be of
            answer.text[slice(*spans[i - 1])]
            for i in sorted({spans.index(span) for span in self.spans})
            if i and _plain(claim, answer, spans[i - 1])
        ]
        self.roles_agree = False  # the answer gives the claim's verb to the claim's agent
        self.outdone = _outdone(claim, tally, answer.text, spans)

    def hedge(self) -> str | None:
        """A hedge in a sentence of the facts itself (not in the one before it that it continues)."""
        said = [self.answer.text[slice(*span)] for span in self.spans]
        return next((c for s in said if (c := _cue(s, _HEDGE_CUES))), None)

    def all_asking(self) -> bool:
        return bool(self.sentences) and all(asks(s, (0, len(s))) for s in self.sentences)

    def says_more(self, claim: Facts) -> bool:
        """The sentences say something besides the facts (not a bare "Ana, Ben and Eli.")."""
        known = stems_of(claim.text) | {w.lower() for n in claim.names for w in n} | set(claim.items)
        return bool(stems_of(" ".join(self.sentences)) - known)

    def content_share(self, claim: Facts) -> float:
        """The share of the claim's content words said with its facts (or in the plain sentence that
        leads to them: "I checked the orders database. The last backup finished on 2024-05-14.")."""
        if not claim.content:
            return 1.0
        stems = _stems(" ".join(self.sentences + self.before))
        return sum(1 for c in claim.content if _has_stem(stems, c)) / len(claim.content)


Outcome = tuple[Label, str] | Abstention


def _plain(claim: Facts, answer: Facts, span: Span) -> bool:
    """The sentence states no value, identifier or name that is not the claim's, and asks nothing."""
    start, end = span
    said = answer.text[start:end].lower()
    if asks(answer.text, span):
        return False  # a question leads to nothing
    claim_names = {" ".join(n).lower() for n in claim.names}
    return not (
        any(
            start <= at < end for at in [v.start for v in answer.quantities] + [d.start for d in answer.dates]
        )
        or any(start <= t.start < end for t in answer.times)
        or any(i in said and i not in claim.ids for i in answer.ids)
        or any(" ".join(n).lower() in said and " ".join(n).lower() not in claim_names for n in answer.names)
    )


class DeterministicJudge:
    can_abstain = True

    def __init__(self, name: str = "deterministic") -> None:
        self.info = JudgeInfo(name=name, kind="deterministic", version=VERSION)

    async def judge(self, claim: str, response: str) -> ClaimVerdict:
        return self.judge_sync(claim, response)

    def judge_sync(self, claim: str, response: str) -> ClaimVerdict:
        outcome = self._gated(claim, response)
        if (
            isinstance(outcome, tuple)
            and outcome[0] == "not_fulfilled"
            and outcome[1].startswith(_PART_WRONG)
        ):
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
            return outcome
        if isinstance(outcome, Abstention) or outcome[0] == "fulfilled":
            claim_facts, answer = read(claim, claim=True), read(response)
            elsewhere = slots.outslotted(claim_facts, answer)
            if elsewhere:  # the claim's subject holds another value: decisive whatever else is unsure
                return "not_fulfilled", f"{_WRONG}: {elsewhere}"
            if (
                isinstance(outcome, Abstention)
                and outcome.kind == "contradiction"
                and not any(cue in outcome.reason for cue in _NOT_RIVALS)
                and slots.resolved(claim_facts, answer)
            ):
                outcome = self._checked(claim, response, resolved=True)
        return outcome

    def _checked(self, claim: str, response: str, resolved: bool) -> Outcome:
        outcome = self._verdict(claim, response, resolved)
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

    def _verdict(self, claim_text: str, response: str, resolved: bool = False) -> Outcome:
        if not response.strip() or response.strip().lower() in ("n/a", "none", "-"):
            return "not_fulfilled", "empty answer"
        claim, answer = read(claim_text, claim=True), read(response)
        tally = tally_facts(claim, answer)
        summary = _summary(claim, answer, tally)
        for who, text in (("claim", claim_text), ("answer", response)):
            language = foreign(text)
            if language:
                absent = absent_figures(claim, answer, tally) if who == "answer" else []
                if absent and "script" not in language:  # a figure is a figure in any Latin-script language
                    return (
                        "not_fulfilled",
                        f"{', '.join(absent)} nowhere in the answer ({language}); {summary}",
                    )
                return Abstention(kind="language", reason=f"the {who} is not in English ({language})")
        if tally.contradicted:
            return "not_fulfilled", f"{_WRONG}: {'; '.join(tally.contradicted[:4])}; {summary}"
        if tally.dumps:
            return "not_fulfilled", f"{', '.join(tally.dumps)} only in a list of candidate values; {summary}"
        refusal = _cue(_OTHERS_FAILING.sub(" ", _HEDGE_PHRASES.sub(" ", answer.text.lower())), _REFUSAL_CUES)
        answered = any(k in ("quantity", "date", "time") for _, _, k in tally.hits)  # a value, not a subject
        if refusal and (tally.missing or not tally.facts) and not answered:
            return "not_fulfilled", f"answer refuses or reports a failure ('{refusal}'); {summary}"
        evidence = _Evidence(claim, answer, tally)
        terms = _claim_terms(claim)
        negations = _negations(answer.text, terms, counts=not claim.quantities)
        claim_negated = _negated(claim.text, terms)
        negation = negations[0] if negations else None
        if claim_negated and not negation:
            by_state = negated_claim(claim, answer, tally)
            if by_state:
                return by_state[0], f"{by_state[1]}; {summary}"
            if _says_whole(claim, answer.text):
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


def _located(passed: tuple[Label, str], claim: Facts, answer: Facts, resolved: bool) -> Outcome:
    """A pass that survived the gate, unless its evidence is not located (``judge.located``)."""
    found = located(claim, answer, tally_facts(claim, answer), resolved)
    if isinstance(found, tuple):
        return found[0], f"{found[1]}; {passed[1]}"
    if found is not None:
        return Abstention(kind=found.kind, reason=f"{found.reason}; {passed[1]}")
    return passed


# Contradiction abstentions that no placing of the other values resolves: a revision, a past state.
_NOT_RIVALS = ("revises", "a past state", "signed against")
_WRONG, _NEGATES = "contradicted", "answer negates the claim"
_PART_WRONG = (_WRONG, _NEGATES)  # verdicts on one part of a claim: another part may still be met


def _with_facts(claim: Facts, tally: Tally, evidence: _Evidence, summary: str, resolved: bool) -> Outcome:
    if not tally.matched or (tally.missing and len(tally.matched) == len(tally.undecided)):
        derived = unreadable(claim, evidence.answer, tally)
        if derived:
            return Abstention(kind="unit", reason=f"{derived}; {summary}")
        return "not_fulfilled", summary  # nothing found for sure (an uncertain match cannot lift it)
    unpaired = _unpaired(claim, tally, evidence.answer)
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
        if not _AFFIRMS.search(evidence.answer.text):  # nothing but the question: nothing stated
            return "not_fulfilled", f"the facts appear only in a question or its restatement; {summary}"
        return Abstention(
            kind="restated", reason=f"the facts appear only in a question, then an affirmation; {summary}"
        )
    hedge = evidence.hedge()
    if hedge and not tally.undecided:  # the right value given uncommitted: some, not all, of the claim
        return "partially_fulfilled", f"answer hedges ('{hedge}') where it gives the facts; {summary}"
    if hedge:
        return Abstention(kind="hedged", reason=f"answer hedges ('{hedge}'); {summary}")
    if tally.missing:
        return "partially_fulfilled", summary  # some found, some missing: whatever the uncertain ones are
    if tally.undecided:
        kind, why = tally.undecided[0]
        return Abstention(kind=kind, reason=f"{why}; {summary}")
    share = evidence.content_share(claim)
    if (
        len(claim.content) >= 2
        and evidence.says_more(claim)
        and (share == 0 or (share < _RELATION_SHARE and evidence.long))
        and not evidence.roles_agree
    ):
        return Abstention(
            kind="relation", reason=f"{share:.0%} of the claim's words said with its facts; {summary}"
        )
    return "fulfilled", summary


def _outdone(claim: Facts, tally: Tally, text: str, sentence_spans: list[Span]) -> str | None:
    """Another value of a matched fact's kind stands where the claim is said: in the sentence that
    says most of the claim (none of the fact's matches there), or in the same sentence as the match
    but closer to the claim's words (identifiers: "commit 8c0d2e1, which reverted 3e1f9a7"). The
    match may be about something else."""
    own = claim_stems(claim)
    for start, end, kind in tally.rivals:
        hits = [(s, e) for s, e, k in tally.hits if k == kind]
        if not hits:
            continue
        span = sentence_at(sentence_spans, start)
        hit_spans = {sentence_at(sentence_spans, s) for s, _ in hits}
        if span in hit_spans:
            if kind != "id":
                continue  # values and names side by side in one sentence: the words around them decide
            near = len(attached(text, start, end, span) & own)
            same = [(s, e) for s, e in hits if sentence_at(sentence_spans, s) == span]
            if near and all(not attached(text, s, e, span) & own for s, e in same):
                return f"another {kind} stands closer to the claim's words than its match"
            continue
        best_hit = max(_share(claim, text[slice(*s)]) for s in hit_spans)
        share = _share(claim, text[slice(*span)])
        if share > best_hit and share >= _RELATION_SHARE:
            return f"another {kind} is in the sentence that says most of the claim, its match is not"
    return None


_SLOTS = {"in", "at", "from", "to", "for", "on", "as", "by", "with", "via"}


def _unpaired(claim: Facts, tally: Tally, answer: Facts) -> str | None:
    """Two facts of the claim found, but never in one clause, while a clause of one holds another
    value in the other's place: a rival of its kind, or a name after the same preposition ("Priya ...
    in Berlin and Marcus Webb ... in Austin" for "Marcus Webb is in Berlin"). The answer may pair
    them differently."""
    text = answer.text
    spans = sentences(text)

    def clause_at(pos: int) -> Span:
        return [c for c in clauses(text, sentence_at(spans, pos)) if c[0] <= pos][-1]

    facts: dict[Span, set[str]] = {}
    for start, end, _ in tally.hits:
        facts.setdefault(clause_at(start), set()).add(text[start:end].lower())
    found = {text[s:e].lower() for s, e, _ in tally.hits}
    if len(found) < 2 or any(len(f) >= 2 for f in facts.values()):
        return None  # one fact only, or some clause states two of them together
    slots = {_slot(text, s) for s, _, k in tally.hits if k == "name"} & _SLOTS
    named = {" ".join(n).lower() for n in claim.names}
    others = [(s, e) for s, e, _ in tally.candidate_spans]
    for phrase in answer.names:
        if " ".join(phrase).lower() in named:
            continue
        for m in re.finditer(r"\W+".join(re.escape(w) for w in phrase), text):
            if _slot(text, m.start()) in slots:
                others.append((m.start(), m.end()))
    for start, end in others:
        clause = clause_at(start)
        if clause in facts:
            return f"'{text[start:end]}' stands in the clause of '{sorted(facts[clause])[0]}' where the claim has another fact"
    return None


def _slot(text: str, start: int) -> str:
    """The preposition (or other word) right before a position, skipping articles."""
    words = [
        w
        for w in re.findall(r"[a-z]+", text[max(0, start - 30) : start].lower())
        if w not in ("a", "an", "the")
    ]
    return words[-1] if words else ""


def _share(claim: Facts, sentence: str) -> float:
    if not claim.content:
        return 0.0
    stems = _stems(sentence)
    return sum(1 for c in claim.content if _has_stem(stems, c)) / len(claim.content)


def _says_whole(claim: Facts, text: str) -> bool:
    """One declarative sentence of ``text`` holds every content word of the claim (its negation aside)."""
    content = [c for c in claim.content if not _NEGATION.match(c)]
    for start, end in sentences(text):
        stems = _stems(text[start:end])
        if content and all(_has_stem(stems, c) for c in content) and not asks(text, (start, end)):
            return True
    return False


def _without_facts(claim: Facts, answer: Facts, summary: str) -> Outcome:
    if not claim.content:
        return Abstention(kind="no_key_facts", reason=f"nothing to look up in the claim; {summary}")
    content = [c for c in claim.content if not _NEGATION.match(c)]  # negation is checked apart
    whole = _stems(answer.text)
    share = sum(1 for c in content if _has_stem(whole, c)) / max(len(content), 1)
    if share < 0.25:
        return "not_fulfilled", f"no key facts in the claim; {summary}"
    for start, end in sentences(answer.text):
        sentence = answer.text[start:end]
        stems = _stems(sentence)
        if all(_has_stem(stems, c) for c in content) and not asks(sentence, (0, len(sentence))):
            hedge = _cue(sentence, _HEDGE_CUES)
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
        stems = _stems(answer.text)
        hit = sum(1 for c in claim.content if _has_stem(stems, c))
        text += f", {hit}/{len(claim.content)} content words"
    if tally.missing:
        text += f"; missing: {', '.join(tally.missing[:6])}"
    return text
