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
"""

from __future__ import annotations

import re
from dataclasses import replace

from atlasrun.judge.base import Abstention, Label
from atlasrun.judge.evidence import (
    CORRECTION,
    attached,
    clauses,
    in_context,
    sentence_at,
    sentences,
    stems_of,
    table_cell,
)
from atlasrun.judge.facts import Facts, Quantity, stem
from atlasrun.judge.lexicon import DIRECTIONS, HEDGES, IRREGULAR_VERBS, STOPWORDS
from atlasrun.judge.rivals import Tally, claim_stems, same_thing
from atlasrun.judge.values import date_same, same, time_same

Span = tuple[int, int]
Outcome = tuple[Label, str] | Abstention | None

# Cues that take back or revise what was said before them (beyond ``evidence.CORRECTION``).
_REVISION = re.compile(
    r"\b(?:hmm|revis(?:e|ed|ing)|i was wrong|my mistake|misread|turns out|that (?:line|figure|number|"
    r"value|entry|one) (?:is|was)|that was|not quite|instead|now (?:in|at|on|set to)|was moved|has moved|"
    r"were moved|oops|never mind|on closer inspection|looking (?:again|more closely)|double[- ]check(?:ed|ing)?|"
    r"re-?check(?:ed|ing)?|(?:correct|right|actual|real) (?:figure|number|value|count|total|answer|one)|"
    r"rather than|earlier i said|previously (?:said|stated|reported))\b|\b(?:update|updated|edit|correction)\s*:",
    re.I,
)
# A state the answer says has ended: what follows may not hold any more.
_FORMERLY = re.compile(
    r"\b(?:used to|formerly|no longer|any ?more|until recently|was previously)\b",
    re.I,
)
# "The limit was 100 until March": a value the sentence says has ended.
_UNTIL = re.compile(r"\b(?:was|were|had been)\b[^.;\n]{0,80}\buntil\b[^.;\n]*", re.I)
_NEGATION_TOKEN = re.compile(r"^(?:not|never|no|none|nothing|nor|neither|without|\w+n't|cannot)$")
_HEDGE = re.compile(r"(?<![\w'])(?:" + "|".join(re.escape(h) for h in HEDGES) + r")(?![\w'])", re.I)
_CLAIM_SHARE = 0.5


_FROM = re.compile(r"\s+(?:\w+\s+)?from\b", re.I)


def _cues(text: str) -> list[tuple[int, str]]:
    found = [(m.start(), m.group(0)) for m in CORRECTION.finditer(text)]
    found += [(m.start(), m.group(0)) for m in _REVISION.finditer(text)]
    return sorted(found)


def _verb_stem(word: str) -> str:
    return stem(IRREGULAR_VERBS.get(word.lower(), word.lower()))


def _values_after(
    claim: Facts, answer: Facts, kind: str, after: int, until: int | None = None
) -> tuple[bool, bool]:
    """(the claim's value of ``kind`` said after ``after``, another value of its kind said there),
    up to ``until`` if given."""
    if until is not None:
        clipped = answer.text[:until]
        answer = replace(
            answer,
            quantities=[g for g in answer.quantities if g.start < until],
            dates=[g for g in answer.dates if g.start < until],
            times=[g for g in answer.times if g.start < until],
            text=clipped,
        )
    if kind == "quantity":
        later = [g for g in answer.quantities if g.start > after]
        own = [g for g in later if any(same(q, g) for q in claim.quantities)]
        other = [
            g
            for g in later
            if g not in own
            and any(
                g.dim == q.dim and g.exact == q.exact and same_thing(q, g, answer, claim)
                for q in claim.quantities
            )
        ]
        return bool(own), bool(other)
    if kind == "date":
        later_dates = [g for g in answer.dates if g.start > after]
        own_dates = [g for g in later_dates if any(date_same(d, g) for d in claim.dates)]
        return bool(own_dates), len(own_dates) < len(later_dates)
    if kind == "time":
        later_times = [g for g in answer.times if g.start > after]
        own_times = [g for g in later_times if any(time_same(t, g) for t in claim.times)]
        others = [g for g in later_times if all(time_same(t, g) is False for t in claim.times)]
        return bool(own_times), bool(others)
    return False, False


def _correction(claim: Facts, answer: Facts, tally: Tally) -> Outcome:
    """A revision cue after a fact's statement: another value of the fact's kind after it, the
    claim's not restated, is decisive; both after it, or the fact not restated, is not."""
    cues = _cues(answer.text)
    if not cues or not tally.hits:
        return None
    first_hit = min(s for s, _, _ in tally.hits)
    text = answer.text
    # "was moved from Monday 7 Apr": what follows "from" is the old value, the one before it stands
    later = [(at, cue) for at, cue in cues if at > first_hit and not _FROM.match(text, at + len(cue))]
    if not later:
        return None  # the correction comes before the facts: they are what it corrects to
    at, cue = later[-1]
    text = answer.text
    for kind in sorted({k for _, _, k in tally.hits}):
        restated, other = _values_after(claim, answer, kind, at)
        if kind == "name":  # another full name after the cue, the claim's not said again in full
            named = {" ".join(n).lower() for n in claim.names}
            after = text[at:].lower()
            restated = any(n in after for n in named)
            other = not restated and any(
                len(n) > 1 and " ".join(n).lower() not in named and " ".join(n) in text[at:]
                for n in answer.names
            )
        elif kind == "id":
            restated = any(s > at for s, _, k in tally.hits if k == kind)
            shapes = {re.sub(r"\d", "9", i) for i in claim.ids}
            other = kind == "id" and any(
                re.sub(r"\d", "9", i) in shapes and i not in claim.ids and text.lower().rfind(i) > at
                for i in answer.ids
            )
        if other and not restated:
            return "not_fulfilled", f"the answer revises its statement ('{cue}') to another value"
        if other:
            return Abstention(kind="contradiction", reason=f"the answer revises what it said ('{cue}')")
    return None


_LIST_BLOCK = re.compile(r"[^\n]*:[ \t]*(?:\n[ \t]*(?:[-*\u2022]|\d{1,2}[.)])[^\n]*)+")


def _together(claim: Facts, answer: Facts, tally: Tally) -> tuple[Span, str] | None:
    """The sentence (with its list header) that states every kind of fact found, and the most of the
    claim's content words; None when no sentence states them together."""
    text = answer.text
    spans = sentences(text)
    counts = {
        "quantity": len(claim.quantities),
        "date": len(claim.dates),
        "time": len(claim.times),
        "id": len(claim.ids),
        "name": len(claim.names),
        "quoted": len(claim.quoted),
    }
    forms: dict[str, set[str]] = {}
    own_values = {(g.start, g.end) for g in answer.quantities if any(same(q, g) for q in claim.quantities)}
    for s, e, k in tally.hits:
        if k in counts and (k != "quantity" or (s, e) in own_values):
            forms.setdefault(k, set()).add(text[s:e].lower())
    best: tuple[float, Span, str] | None = None
    units = [(span, in_context(text, spans, i)) for i, span in enumerate(spans)]
    if max(counts.values()) >= 3:  # a claim that enumerates: a vertical list is one statement too
        units += [((m.start(), m.end()), m.group(0)) for m in _LIST_BLOCK.finditer(text)]
    for span, said in units:
        low = said.lower()
        if any(sum(1 for f in fs if f in low) < min(len(fs), counts[k]) for k, fs in forms.items()):
            continue
        share = _share(claim, said)
        if best is None or share > best[0]:
            best = (share, span, said)
    return (best[1], best[2]) if best else None


def _share(claim: Facts, text: str) -> float:
    names = {w.lower() for n in claim.names for w in n}
    content = [c for c in claim.content if c not in names and not _NEGATION_TOKEN.match(c)]
    if not content:
        return 1.0
    stems = stems_of(text) | {_verb_stem(w) for w in re.findall(r"[A-Za-z]+", text)}
    hit = sum(1 for c in content if c in stems or any(_near(c, s) for s in stems))
    return hit / len(content)


def _near(a: str, b: str) -> bool:
    return min(len(a), len(b)) >= 4 and (a.startswith(b) or b.startswith(a))


def _negated_in(sentence: str, claim: Facts) -> str | None:
    """A negation cue in the sentence, before a word of the claim within its clause."""
    own = claim_stems(claim) | {_verb_stem(w) for w in claim.words}
    tokens = re.findall(r"[\w'-]+|[.,;:!?]", sentence.lower())
    for i, token in enumerate(tokens):
        if not _NEGATION_TOKEN.match(token):
            continue
        content = [t for t in tokens[i + 1 : i + 6] if t not in STOPWORDS and not t.endswith("ly")]
        for nxt in content[:1]:
            if nxt in {",", ";", ":", ".", "but", "while", "although"}:
                break
            if stem(nxt) in own or _verb_stem(nxt) in own or any(_near(stem(nxt), o) for o in own):
                return f"{token} {nxt}"
    return None


def _rival(claim: Facts, answer: Facts, tally: Tally) -> str | None:
    """Another value of a claim quantity's kind, attached to a claim word that no match of it is
    attached to ("sessions with 48 million rows; events ... with 31 million" for "events ... 48
    million rows"): the claim's words may belong to that value."""
    text = answer.text
    spans = sentences(text)
    own = claim_stems(claim)
    cues = _cues(text)
    for q in claim.quantities:
        hits = [g for g in answer.quantities if same(q, g)]
        if not hits:
            continue
        hit_words: set[str] = set()
        for g in hits:
            hit_words |= attached(text, g.start, g.end, sentence_at(spans, g.start)) & own
        after = re.findall(r"[A-Za-z][\w'-]*", claim.text[q.end : q.end + 40])
        noun = {stem(w) for w in after if w.lower() not in STOPWORDS}  # what the figure counts
        noun = {next(iter(noun))} if len(noun) == 1 else set(stem(w) for w in after[:1])
        hit_words |= noun
        for g in answer.quantities:
            line_before = text[: g.end].rstrip("0123456789").rsplit("\n", 1)[-1]
            if not line_before.strip() and text[g.end : g.end + 1] in (".", ")"):
                continue  # "2. test_login": a list's numbering
            if g in hits or g.dim != q.dim or g.exact != q.exact or any(same(c, g) for c in claim.quantities):
                continue
            if table_cell(text, g.start) is not None:
                continue  # table rows: compared by row (``matching``)
            if any(g.end <= at < h.start for at, _ in cues for h in hits):
                continue  # corrected away: the match comes after a correction of it
            words = attached(text, g.start, g.end, sentence_at(spans, g.start)) & own
            if words - hit_words and not _of_something_else(claim, answer, g, hit_words):
                return f"'{g.text}' is said with '{sorted(words - hit_words)[0]}', its match is not"
    return None


_AGGREGATE = re.compile(r"\b(?:altogether|in total|total|combined|overall|in all|sum)\b", re.I)
_YEAR = re.compile(r"\b(?:19|20)\d{2}\b")


def _of_something_else(claim: Facts, answer: Facts, value: Quantity, hit_nouns: set[str]) -> bool:
    """The other value is visibly a value of something else, not a rival reading of the claim's:
    its clause names another entity (a name, an id or a year the claim does not), it counts another
    thing (the noun after it is no word of the claim's), or it is a total where the claim is not."""
    text = answer.text
    span = next(
        c for c in clauses(text, sentence_at(sentences(text), value.start)) if c[0] <= value.start <= c[1]
    )
    clause = text[span[0] : span[1]]
    claim_low = claim.text.lower()
    names = {" ".join(n).lower() for n in answer.names}
    if any(n in clause.lower() and n not in claim_low for n in names):
        return True
    if any(i in clause.lower() and i not in claim.ids for i in answer.ids):
        return True
    around = text[span[0] : value.start] + " " + text[value.end : span[1]]  # the clause but the value
    if any(y not in claim.text for y in _YEAR.findall(around)):
        return True
    after = [
        w for w in re.findall(r"[A-Za-z][\w'-]*", text[value.end : span[1]]) if w.lower() not in STOPWORDS
    ]
    own = claim_stems(claim)
    if (
        after
        and stem(after[0]) not in own
        and stem(after[0]) not in hit_nouns
        and not _near_any(stem(after[0]), own)
    ):
        return True
    return bool(_AGGREGATE.search(clause)) and not _AGGREGATE.search(claim.text)


def _near_any(word: str, stems: set[str]) -> bool:
    return any(_near(word, s) for s in stems)


_UP = DIRECTIONS[0][0] | {"growth", "gain", "gains", "up"}
_DOWN = DIRECTIONS[0][1] | {"decline", "declines", "loss", "losses", "down"}


def _signed_against(claim: Facts, text: str) -> str | None:
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


def _opposite(claim: Facts, text: str) -> str | None:
    """A word of the opposite direction to one of the claim's (public/private), anywhere."""
    claim_words = _direction_words(claim.text)
    words = _direction_words(text)
    for up, down in DIRECTIONS:
        for mine, other in ((up, down), (down, up)):
            if mine & claim_words and other & words:
                return sorted(other & words)[0]
    return None


# Words that set a value as someone's expectation, a plan or a hypothesis, not as what was found.
_UNASSERTED = re.compile(
    r"\b(?:you(?: had)? (?:said|mentioned|expected|asked|thought|wrote|noted|claimed|assumed|quoted|listed)|"
    r"(?<!as )expect(?:ed|s|ing)?|supposed to|target(?:ed|s)?|goal|would(?: be| have)?|should (?:be|have)|"
    r"assum(?:e|ed|ing)|intended|hoped|planned for|asked for|requested|required)\b",
    re.I,
)
# A fact said as not done yet, wherever in its sentence ("the migration to 16 is planned for next sprint").
_PENDING = re.compile(
    r"\b(?:(?:is|are) planned|planned for|(?:is|are) going to|not yet)\b",
    re.I,
)
_CONTRAST = re.compile(
    r"\b(?:but|however|whereas|instead|actually|in reality|in fact|currently|only)\b", re.I
)


def _unasserted(claim: Facts, answer: Facts, tally: Tally) -> Outcome:
    """Every statement of a fact framed as an expectation, a target or a conditional ("you expected
    12 nodes, but ...", "the bucket would hold 1,200 objects"): not decisive; another value of the
    fact's kind after a contrast there ("... but the cluster has 9 nodes") is what was found."""
    text = answer.text
    spans = sentences(text)
    claim_low = claim.text.lower()
    framed: dict[str, str] = {}  # what is said framed, by kind of fact
    plain: set[str] = set()  # kinds of fact said plainly somewhere
    for start, end, kind in tally.hits:
        span = sentence_at(spans, start)
        head = text[span[0] : start]
        cues = [m.group(0) for m in _UNASSERTED.finditer(head)] + [
            m.group(0) for m in _PENDING.finditer(text, span[0], span[1])
        ]
        cue = next((c for c in cues if c.lower() not in claim_low), None)
        said = text[start:end].lower()
        if cue is None:
            plain.add(kind)
            continue
        framed.setdefault(kind, f"'{cue}' frames {said}")
        # what was found: after a contrast in the sentence, or in the sentence that follows it
        following = next((s for s in spans if s[0] >= span[1]), (len(text), len(text)))
        contrast = _CONTRAST.search(text, end, span[1])
        after = contrast.start() if contrast else following[0]
        if kind in ("quantity", "date", "time"):
            restated, other = _values_after(claim, answer, kind, after, until=following[1])
            if other and not restated:
                where = f"after '{contrast.group(0)}'" if contrast else "next"
                return "not_fulfilled", f"'{cue}' frames {said}; the answer gives another value {where}"
    # the subject (a name, an id) restated with the question, its values said plainly: an answer
    values_plain = bool(plain)
    unframed = [
        why
        for kind, why in framed.items()
        if kind not in plain and not (values_plain and kind in ("id", "name"))
    ]
    if unframed:
        return Abstention(kind="hedged", reason=f"{unframed[0]}: an expectation or a conditional")
    return None


def doubt(claim: Facts, answer: Facts, tally: Tally, resolved: bool = False) -> Outcome:
    """Why a ``fulfilled`` the rules reached is not decisive (an abstention or a decisive
    ``not_fulfilled``), or None when it stands."""
    corrected = _correction(claim, answer, tally)
    if corrected:
        return corrected
    claim_negated = any(_NEGATION_TOKEN.match(w) for w in claim.words)
    formerly = _FORMERLY.search(answer.text) or next(
        (m for m in _UNTIL.finditer(answer.text) if any(m.start() <= h < m.end() for h, _, _ in tally.hits)),
        None,
    )
    if formerly:
        return Abstention(kind="contradiction", reason=f"a past state ('{formerly.group(0)}')")
    if not tally.hits:  # no figure to anchor the claim: its words decide, read over the whole answer
        opposite = _opposite(claim, answer.text)
        if opposite:
            return Abstention(kind="negation", reason=f"the answer also says '{opposite}'")
        negated = None if claim_negated else _negated_in(answer.text, claim)
        if negated:
            return Abstention(kind="negation", reason=f"'{negated}' in the answer")
        hedge = _HEDGE.search(answer.text)
        if hedge:
            return Abstention(kind="hedged", reason=f"answer hedges ('{hedge.group(0)}')")
        return None
    framed = _unasserted(claim, answer, tally)
    if framed:
        return framed
    rival = None if resolved else _rival(claim, answer, tally)  # ``resolved``: ``judge.slots`` placed them
    if rival:
        return Abstention(kind="contradiction", reason=rival)
    against = _signed_against(claim, answer.text)
    if against:
        return Abstention(kind="contradiction", reason=against)
    found = _together(claim, answer, tally)
    rivalled = any(k in ("name", "id") for _, _, k in tally.rivals) or (
        bool(tally.candidates) and not resolved
    )  # another entity or value the relation may be of
    if found is None and (rivalled or tally.rivals):
        return Abstention(kind="relation", reason="the claim's facts are not stated together in one sentence")
    said = found[1] if found else answer.text
    share = _share(claim, said)
    if share < _CLAIM_SHARE and rivalled:
        return Abstention(
            kind="relation", reason=f"the sentence of the facts says {share:.0%} of the claim's words"
        )
    opposite = _opposite(claim, said) if found and not claim_negated else None  # "did not finish": "failed"
    if opposite:
        return Abstention(kind="negation", reason=f"the sentence of the facts also says '{opposite}'")
    if not claim_negated:
        negation = _negated_in(said, claim)
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
        if _share(claim, said) < _CLAIM_SHARE:
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
