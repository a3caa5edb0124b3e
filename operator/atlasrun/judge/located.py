"""Located evidence: the last check of a ``fulfilled`` (after ``judge.gate``), for long answers that
name many things. A pass needs every key fact said *where the claim is said*, with nothing there
that competes with it:

- a rate's period agrees ("EUR 18,500 per year" does not meet "per month": decisive), and so does
  the sign of a change said with the figure ("down 1.8%" does not meet "up 1.8%": decisive); a
  count counts the claim's thing ("37 unique rows" for "37 duplicate rows") and a precise figure is
  not met by a rough one only ("about 140,000" for 139,875): abstain (``judge.measured``);
- no other value of a matched quantity's kind or time stands in a clause that says more of the
  claim than the clauses of its matches do ("revenue came to CHF 12.5M, while costs were CHF 9.1M"
  for "revenue was CHF 9.1M"): the claim's words belong to that value (abstain);
- every word of the claim that the answer uses at all is used where its facts are (their sentence
  with its list header, heading or table header, or the sentence that leads to it): a claim word
  said only elsewhere ("reverted in 8c0d2e1 by Omar" for "the reverting commit was authored by Mei
  Lin", when Mei Lin is in the sentence of the original commit) means the facts may be of
  something else (abstain).
"""

from __future__ import annotations

import re

from atlasrun.judge.base import Abstention, Label
from atlasrun.judge.evidence import Span, clauses, in_context, sentence_at, sentences
from atlasrun.judge.facts import Facts, stem
from atlasrun.judge.lexicon_quantities import FOREIGN_NUMBER_WORDS
from atlasrun.judge.lexicon_stance import OPPOSITE_STATES
from atlasrun.judge.lexicon_words import STOPWORDS
from atlasrun.judge.measured import counts_another, disagrees, rough
from atlasrun.judge.rivals import Tally
from atlasrun.judge.slots import contested
from atlasrun.judge.values import id_shape

Outcome = tuple[Label, str] | Abstention | None

_NEGATION = re.compile(r"^(?:not|never|no|none|nothing|nor|neither|\w+n't)$")


def _terms(claim: Facts) -> set[str]:
    """The claim's own words, as stems (its names and identifiers included, figures aside)."""
    words = {stem(w) for w in claim.content if not _NEGATION.match(w) and w not in STOPWORDS}
    words |= {w.lower() for name in claim.names for w in name}
    return {w for w in words | set(claim.ids) if len(w) >= 2}


def _stems(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[\w'./#-]+", text.lower())} | {
        w.lower() for w in re.findall(r"[A-Za-z]+", text)
    }


def _has(stems: set[str], term: str) -> bool:
    if term in stems:
        return True
    # a prefix either way ("restart"/"restarts"), but a word is no match for a hyphenated or dotted
    # term it only begins ("checkout" for "checkout-worker")
    whole = term.isalpha()
    return len(term) >= 4 and any(
        len(s) >= 4 and (s.startswith(term) or (whole and term.startswith(s))) for s in stems
    )


def _share(terms: set[str], text: str) -> int:
    stems = _stems(text)
    return sum(1 for t in terms if _has(stems, t))


def _units_of(text: str, pos: int, spans: list[Span]) -> str:
    """What a fact at ``pos`` is said with: its sentence in context, and the sentence leading to it."""
    i = spans.index(sentence_at(spans, pos))
    lead = ""
    if i and "\n\n" not in text[spans[i - 1][0] : spans[i][0]]:  # a new paragraph: a new subject
        lead = text[spans[i - 1][0] : spans[i - 1][1]]
    return f"{lead} {in_context(text, spans, i)}"


# Verbs that carry no relation of their own ("made the change", "the listing shows").
_LIGHT = {
    stem(w)
    for w in [
        "made",
        "make",
        "do",
        "did",
        "done",
        "got",
        "get",
        "set",
        "give",
        "given",
        "take",
        "taken",
        "show",
        "shows",
        "showed",
        "say",
        "says",
        "said",
        "list",
        "listed",
        "report",
        "reported",
        "use",
        "used",
        "have",
        "has",
    ]
}


def _stray(claim: Facts, answer: Facts, tally: Tally) -> str | None:
    """A word of the claim the answer says, but only away from every statement of its facts, in
    sentences about something else: that name another entity, or hold another value of a fact's kind
    ("It was reverted in 8c0d2e1 by Omar Haddad" for "the reverting commit was authored by Mei Lin")."""
    text = answer.text
    spans = sentences(text)
    said = " ".join(_units_of(text, at, spans) for s, e, _ in tally.hits for at in {s, max(s, e - 1)})
    anywhere, there = _stems(text), _stems(said)
    for term in sorted(_terms(claim) - _LIGHT):
        if _has(anywhere, term) and not _has(there, term):
            elsewhere = [span for span in spans if _has(_stems(text[slice(*span)]), term)]
            if any(_about_another(claim, answer, tally, span) for span in elsewhere):
                return f"'{term}' is said in the answer, but not where the claim's facts are"
    return None


def _about_another(claim: Facts, answer: Facts, tally: Tally, span: Span) -> bool:
    low = answer.text[slice(*span)].lower()
    names = {" ".join(n).lower() for n in claim.names}
    if any(" ".join(n).lower() in low and " ".join(n).lower() not in names for n in answer.names):
        return True
    if any(
        i in low and i not in claim.ids and not any(i in c or c in i for c in claim.ids) for i in answer.ids
    ):
        return True
    kinds = {k for _, _, k in tally.hits}
    hits = {s for s, _, _ in tally.hits}
    values = [(q.start, "quantity") for q in answer.quantities] + [(t.start, "time") for t in answer.times]
    values += [(d.start, "date") for d in answer.dates]
    return any(span[0] <= at < span[1] and kind in kinds and at not in hits for at, kind in values)


def located(claim: Facts, answer: Facts, tally: Tally, resolved: bool = False) -> Outcome:
    """Why a ``fulfilled`` is not decisive, or None when its evidence is located."""
    if not tally.hits:
        return None
    disagree = disagrees(claim, answer)
    if disagree:
        return "not_fulfilled", disagree
    rival = None if resolved else contested(claim, answer)
    if rival:
        return Abstention(kind="contradiction", reason=rival)
    rough_figure = rough(claim, answer)
    if rough_figure:
        return Abstention(kind="hedged", reason=rough_figure)
    counted = counts_another(claim, answer)
    if counted:
        return Abstention(kind="relation", reason=counted)
    stray = _stray(claim, answer, tally)
    if stray:
        return Abstention(kind="relation", reason=stray)
    return None


_NEGATED_WORD = re.compile(
    r"\b(?:not|never|\w+n't)\s+(?:(?:fully|yet|currently|always|be|been|being|have|get|got)\s+)*([a-z][\w-]*)"
)
_NEGATION_IN = re.compile(r"\b(?:not|never|no|none|\w+n't)\b")
_OPPOSITES = [({stem(w) for w in a}, {stem(w) for w in b}) for a, b in OPPOSITE_STATES]


def _clause_of(text: str, spans: list[Span], pos: int) -> str:
    """The clause of a position, lower case ("`legacy_sync` has been disabled since 1 August", not the
    flags enabled before it in the sentence)."""
    span = sentence_at(spans, pos)
    clause = [c for c in clauses(text, span) if c[0] <= pos][-1]
    return text[clause[0] : clause[1]].lower()


def negated_claim(claim: Facts, answer: Facts, tally: Tally) -> tuple[Label, str] | None:
    """A negated claim ("etl-orders did not finish") read in the sentences that name its subject
    (its identifiers and names): the negated word's opposite there, nothing negated ("etl-orders
    failed"), meets it; the negated word itself there, not negated ("sync-crm timed out" for "did
    not time out"), contradicts it. None when those sentences say neither, or negate something."""
    m = _NEGATED_WORD.search(claim.text.lower())
    if not m:
        return None
    word = stem(m.group(1))
    opposite = set().union(*(b for a, b in _OPPOSITES if word in a), *(a for a, b in _OPPOSITES if word in b))
    spans = sentences(answer.text)
    said = [_clause_of(answer.text, spans, s) for s, _, k in tally.hits if k in ("id", "name")]
    if not said or any(_NEGATION_IN.search(s) for s in said):
        return None
    words = set().union(*({stem(w) for w in re.findall(r"[a-z][\w-]*", s)} for s in said))
    raw = set().union(*(re.findall(r"[a-z][\w-]*", s) for s in said))
    negated = m.group(1)
    if word in words or any(w[:4] == negated[:4] and abs(len(w) - len(negated)) <= 2 for w in raw):
        return "not_fulfilled", f"the answer affirms '{m.group(1)}', which the claim negates"
    if opposite & words:
        return "fulfilled", f"the answer says '{sorted(opposite & words)[0]}', the opposite of '{m.group(1)}'"
    return None


def of_another(claim: Facts, sentence: str) -> bool:
    """The sentence names another identifier of the shape of the claim's, and none of the claim's:
    what it negates is said of that ("It is not deployed in ap-southeast-2" for eu-west-1)."""
    low = sentence.lower()
    if not claim.ids or any(i in low for i in claim.ids):
        return False
    shapes = {id_shape(i) for i in claim.ids}
    return any(id_shape(w) in shapes for w in re.findall(r"[\w./-]+", low) if w not in claim.ids)


def absent_figures(claim: Facts, answer: Facts, tally: Tally) -> list[str]:
    """The claim's figures (numbers, versions, codes with digits) that the answer states nowhere, in
    no reading: language-independent evidence of absence. Empty when one is matched uncertainly."""
    if tally.undecided or tally.dumps:
        return []
    wrong = [w.split(" (answer")[0] for w in tally.contradicted]
    absent = [w for w in tally.missing + wrong if re.search(r"\d", w)]
    digits = re.sub(r"\D", "", answer.text)
    words = set(re.findall(r"[^\W\d_]+", answer.text.lower()))

    def stated(figure: str) -> bool:
        figure = re.sub(r"\b(\d{1,2}):00\b", r"\1", figure)  # 19:00 as "19 h", "19 Uhr"
        count = re.fullmatch(r"\D*(\d+)\D*", figure)
        spelled = FOREIGN_NUMBER_WORDS.get(int(count.group(1)), ()) if count else ()
        return re.sub(r"\D", "", figure) in digits or bool(words.intersection(spelled))

    return [w for w in absent if not stated(w)]
