"""Each key fact of a claim looked up in an answer: matched (where), contradicted, missing, or not
comparable (the judge must abstain).

Values compare with MCP-Atlas tolerances (5% for numbers, 1 point for percentages, years and codes
exact, units converted). Stricter than a plain lookup on purpose: a bare number does not meet a claim
with a unit unless the unit is named in the same sentence; a currency must agree; a time stated in a
zone is compared in UTC; a multi-word name needs all its words; a commit-hash prefix of 7+ hex
characters meets the full hash. A matched value is also checked against every other value for the
*same* quantity in the answer (same kind, and attached to no word the claim lacks): after a
self-correction cue it is contradicted, otherwise it is a contradiction candidate. A figure that
reads both ways (12.500) is read as the answer's own figures say (``judge.numerals``), a slash date
with day and month both <= 12 either way round; either, when nothing says which, is not comparable.
Another value contradicts only when it is a value of the same thing (``same_thing``), and another
name only where it stands in a sentence that says the claim (a long answer names many things). A
decimal of the claim met as a version ("1.29" by "v1.29.4") is matched; a coarser date ("March 2024"
for 2024-03-12) is missing, not contradicted. Values in list items under another heading or label
than the claim's, where another item names the claim's, are that item's ("- staging: 3 workers").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from atlasrun.judge.base import AbstentionKind
from atlasrun.judge.evidence import (
    attached,
    clauses,
    correction_between,
    heading_of,
    headings,
    label_of,
    sentence_at,
    sentences,
    stems_of,
    table_cell,
)
from atlasrun.judge.facts import NUMBER_TOLERANCE, PERCENT_POINTS, Date, Facts, Quantity, Time, stem
from atlasrun.judge.lexicon import UNITS
from atlasrun.judge.numerals import ambiguous, as_thousands
from atlasrun.judge.zones import zoned_after

_CUE_STEMS = {
    stem(w) for w in ("actually", "correction", "wait", "sorry", "mean", "meant", "corrected", "fact")
}
Hit = tuple[int, int, str]  # (start, end, kind of fact) in the answer's text
_HEX = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")
_SOFT_ID = re.compile(r"[a-z]+(?:-[a-z]+)+")


@dataclass
class Tally:
    matched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    contradicted: list[str] = field(default_factory=list)
    dumps: list[str] = field(default_factory=list)  # matched only inside a list of candidate values
    hits: list[Hit] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)  # another value for the same quantity
    candidate_spans: list[Hit] = field(default_factory=list)  # where those other values are
    rivals: list[Hit] = field(default_factory=list)  # values of the claim's kinds the claim does not state
    undecided: list[tuple[AbstentionKind, str]] = field(default_factory=list)

    def add(self, what: str, ok: bool, contradiction: str | None) -> None:
        if ok:
            self.matched.append(what)
        elif contradiction:
            self.contradicted.append(f"{what} (answer: {contradiction})")
        else:
            self.missing.append(what)

    @property
    def facts(self) -> int:
        return len(self.matched) + len(self.missing) + len(self.contradicted) + len(self.dumps)


def comparable(a: Quantity, b: Quantity) -> bool:
    if a.currency and b.currency and a.currency != b.currency:
        return False
    if a.dim == b.dim:
        return True
    if "percent" in (a.dim, b.dim):
        return (b if a.dim == "percent" else a).dim is None  # 0.12 or a bare 12 for 12%
    return a.dim is None or b.dim is None


def same(claim: Quantity, got: Quantity) -> bool:
    if not comparable(claim, got):
        return False
    if claim.dim == "percent" or got.dim == "percent":
        c = claim.number if claim.dim == "percent" or abs(claim.number) > 1 else claim.number * 100
        g = got.number if got.dim == "percent" or abs(got.number) > 1 else got.number * 100
        return abs(c - g) <= PERCENT_POINTS + 1e-9
    c, g = (claim.value, got.value) if claim.dim == got.dim else (claim.number, got.number)
    if claim.exact or got.exact:
        return c == g
    if (c < 0) != (g < 0):
        return False
    return abs(c - g) <= NUMBER_TOLERANCE * abs(c) + 1e-9


_UNIT_NAMES: dict[str, list[str]] = {}
for _name, (_dim, _) in UNITS.items():
    if len(_name) > 1 or _name in ("%",):
        _UNIT_NAMES.setdefault(_dim, []).append(_name)
_UNIT_NAMES["percent"] = ["%", "percent", "per cent", "pct"]
_UNIT_NAMES["celsius"] = [*_UNIT_NAMES.get("celsius", []), "°"]


def _unit_named(dim: str, sentence: str) -> bool:
    low = sentence.lower()
    return any(
        (n in low) if not n.isalpha() else re.search(rf"\b{re.escape(n)}\b", low) is not None
        for n in _UNIT_NAMES.get("celsius" if dim == "fahrenheit" else dim, [])
    )


def _unit_implied(q: Quantity, g: Quantity, answer: Facts) -> bool:
    """A bare figure in the answer carries the claim's unit only when the unit is named beside it."""
    sentence = answer.text[slice(*sentence_at(sentences(answer.text), g.start))]
    if q.dim is not None and g.dim is None:
        if q.dim == "percent" and abs(g.number) <= 1:
            return True  # 0.12 for 12%: a fraction, the labelling rules' equivalent form
        if q.dim != "multiple" and not _unit_named(q.dim, sentence):
            return False
    if q.currency and not g.currency:
        return all(o.currency in (None, q.currency) for o in answer.quantities)
    return True


def date_same(a: Date, b: Date) -> bool:
    if a.month != b.month:
        return False
    if a.day is not None and b.day is not None and a.day != b.day:
        return False
    if a.day is not None and b.day is None:
        return False
    return a.year is None or b.year is None or a.year == b.year


def _coarser(claim: Date, got: Date) -> bool:
    """ "June 2024" for 2024-06-01: the answer says less than the claim, it does not contradict it."""
    return got.day is None and claim.day is not None and date_same(replace(claim, day=None), got)


def in_dump(span: tuple[int, int], spans: list[tuple[int, int]], text: str) -> bool:
    """True when the span sits in a run of 4+ values separated only by commas (a list of candidates);
    a line break ends a run (table rows are not candidates)."""
    ordered = sorted(set(spans))
    i = ordered.index(span)
    run = 1
    for step in (-1, 1):
        j = i
        while 0 <= j + step < len(ordered):
            (_, a_end), (b_start, _) = sorted((ordered[j], ordered[j + step]))
            if not re.fullmatch(r"[ \t,;/|$€£]*(?:and|or)?[ \t,;/|$€£]*", text[a_end:b_start]):
                break
            run += 1
            j += step
    return run >= 4


def id_shape(identifier: str) -> str:
    """An identifier's shape: digit runs as 9, letter runs as a ("INC-4471" -> "a-9")."""
    return re.sub(r"[a-z]+", "a", re.sub(r"\d+", "9", identifier.lower()))


def _id_span(identifier: str, text: str) -> tuple[int, int] | None:
    body = re.escape(identifier)
    if _SOFT_ID.fullmatch(identifier):  # highest-priority == highest priority
        body = body.replace(r"\-", r"[-\s]")
    version = "v?" if re.fullmatch(r"\d+(?:\.\d+)+", identifier) else ""  # "v1.29.6" for 1.29.6
    m = re.search(rf"(?<![\w-]){version}{body}(?![\w-]|\.\w)", text, re.I)
    if m is None and re.fullmatch(r"[0-9a-f]{7,40}", identifier):  # a commit hash or a prefix of it
        m = next((h for h in _HEX.finditer(text.lower()) if _hex_agree(h.group(0), identifier)), None)
    if m is None and "/" in identifier.strip("/"):
        return _path_span(identifier, text)
    return (m.start(), m.end()) if m else None


def _path_span(path: str, text: str) -> tuple[int, int] | None:
    """A path met by its file name where the answer also names its folder ("q3.csv in /data/sales"
    for /data/sales/q3.csv) and gives that file name no other folder."""
    folder, _, base = path.rstrip("/").rpartition("/")
    if len(base) < 3 or not re.search(r"[._]", base) or folder.strip("/").lower() not in text.lower():
        return None
    found = list(re.finditer(rf"(?<![\w.-])([\w./-]*/)?{re.escape(base)}(?![\w-]|\.\w)", text, re.I))
    if not found or any(
        m.group(1) and m.group(1).strip("/").lower() != folder.strip("/").lower() for m in found
    ):
        return None
    return found[0].start(), found[0].end()


def _hex_agree(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


def _original(identifier: str, text: str) -> str:
    m = re.search(re.escape(identifier), text, re.I)
    return m.group(0) if m else identifier


def _name_span(name: list[str], answer: Facts) -> tuple[tuple[int, int] | None, bool]:
    """(where the name is, whether it is there whole). A one-letter last word ("Store A") must
    match in case; a multi-word name met by its last word alone is there only in part."""
    text, last = answer.text, name[-1]
    if len(last) <= 2:
        m = re.search(rf"\b{re.escape(' '.join(name))}\b", text)
        return ((m.start(), m.end()) if m else None), True
    words = [re.escape(w) for w in name]
    if len(name) > 1 and len(last) >= 4:
        words[-1] += r"\w*"  # "Acme Corp": "Acme Corporation"
    whole = re.search(r"(?<![^\W_])" + r"\W+".join(words) + r"(?![^\W_])", text, re.I)
    if whole:
        return (whole.start(), whole.end()), True
    if len(name) > 1:  # "J. Smith" for "John Smith"
        initials = r"\W+".join([rf"{re.escape(w[0])}\.?" for w in name[:-1]] + [re.escape(last)])
        m = re.search(rf"(?<![^\W_]){initials}(?![^\W_])", text)
        if m:
            return (m.start(), m.end()), True
    m = re.search(rf"(?<![^\W_]){re.escape(last)}(?![^\W_])", text, re.I)  # also inside "Asia/Tokyo"
    if m is None and len(last) >= 4:
        m = re.search(rf"(?<![^\W_]){re.escape(last)}\w*", text, re.I)
    return ((m.start(), m.end()) if m else None), len(name) == 1


def _every(text: str, span: tuple[int, int]) -> list[tuple[int, int]]:
    """Every place the text found at ``span`` occurs (a name or id said again later)."""
    found = re.escape(text[span[0] : span[1]])
    return [(m.start(), m.end()) for m in re.finditer(rf"(?<![\w-]){found}(?![\w-])", text, re.I)] or [span]


def _rival_first_name(name: list[str], span: tuple[int, int], text: str) -> str | None:
    """ "Bob Smith" where the claim says "Alice Smith": another capitalised word right before."""
    m = re.search(r"([A-Z][a-z]+)\s+$", text[: span[0]])
    if (
        m
        and m.group(1) not in name
        and m.group(1).lower() not in {"the", "and", "by", "to", "mr", "ms", "dr"}
    ):
        return f"{m.group(1)} {text[span[0] : span[1]]}"
    return None


def claim_stems(claim: Facts) -> set[str]:
    return stems_of(claim.text) | {w.lower() for n in claim.names for w in n}


def _other_cell(text: str, pos: int, claim: Facts, columns: bool = True) -> bool:
    """A table cell in a row (or, with ``columns``, a column) the claim does not speak of: a column
    header such as "Amount" may be a word the claim lacks, so a match is only ruled out by its row."""
    cell = table_cell(text, pos)
    if cell is None:
        return False
    header, row = cell
    own = claim_stems(claim)
    names = {w.lower() for n in claim.names for w in n} | {(claim.first_name or "").lower()} - {""}
    row_words = stems_of(row) | {w.lower() for w in re.findall(r"\w+", row)}
    other_row = bool(row_words) and not row_words & own and bool(names) and not row_words & names
    return other_row or (columns and bool(stems_of(header)) and not stems_of(header) & own)


_YEAR_AFTER = re.compile(r"\D{0,12}?\b(1[89]\d\d|20\d\d)\b")
_YEAR_BEFORE = re.compile(r"\b(1[89]\d\d|20\d\d)\b\D{0,12}$")


def other_section(text: str, pos: int, claim: Facts) -> bool:
    """A list item under a heading that is not the claim's, in an answer with a section that is
    ("**worker**" above "- replicas: 4" where the claim is about api and "**api**" heads another)."""
    label, heading = label_of(text, pos), heading_of(text, pos)
    if not label and not heading:
        return False
    all_headings, all_labels = headings(text)
    return any(
        said is not None and not _mentions(said, claim) and any(_mentions(o, claim) for o in others)
        for said, others in ((label, all_labels), (heading, all_headings))
    )


def _mentions(heading: str, claim: Facts) -> bool:
    words = {w.lower() for w in re.findall(r"[\w.-]+", heading)}
    names = {w.lower() for n in claim.names for w in n}
    return bool(stems_of(heading) & claim_stems(claim) or words & names or words & set(claim.ids))


def _other_year(text: str, start: int, end: int, claim: Facts) -> bool:
    """The value is qualified by another year than the claim's ("3,271,575 in 2023")."""
    years = {str(int(q.value)) for q in claim.quantities if q.exact} | {
        str(d.year) for d in claim.dates if d.year
    }
    after, before = _YEAR_AFTER.match(text, end), _YEAR_BEFORE.search(text, max(0, start - 20), start)
    return bool(years) and any(m and m.group(1) not in years for m in (after, before))


def _other_owner(answer: Facts, pos: int, claim: Facts) -> bool:
    """The value's clause names another entity of the claim's kind ("invoice INV-1057 (April) totals
    €3,985.50" beside the claim's INV-1042): it is that entity's value."""
    text = answer.text
    clause = [c for c in clauses(text, sentence_at(sentences(text), pos)) if c[0] <= pos][-1]
    said = text[clause[0] : clause[1]]
    shapes = {id_shape(i) for i in claim.ids}
    ids = [i for i in answer.ids if i not in claim.ids and id_shape(i) in shapes and i in said.lower()]
    return bool(ids) and not any(i in said.lower() for i in claim.ids)


_MOVED_FROM = re.compile(
    r"\b(?:moved|changed|switched|rescheduled|shifted|updated|raised|lowered|increased|decreased|rose|fell|"
    r"dropped|went|bumped|reduced|scaled|grew|shrank|expanded|upgraded|downgraded|migrated|renamed)\b"
    r"[^.;]{0,30}\bfrom\s+$",
    re.I,
)


def _moved_away(text: str, start: int, end: int, claim: Facts) -> str | None:
    """ "moved from <value> to <other>": the claim's value is the one left behind."""
    if not _MOVED_FROM.search(text, max(0, start - 50), start):
        return None  # "runs from 14:00 to 15:30" is a range, not a move
    m = re.match(r"(?:\s+[A-Za-z]+){0,2}?\s+(?:to|->|\u2192)\s+([\w$€£:.,/-]*\w)", text[end : end + 60])
    if m is None or m.group(1).lower() in claim.text.lower():
        return None
    return m.group(1)


def _says_all(sentence: str, claim: Facts) -> bool:
    """Every content word, name and identifier of the claim is in the sentence (values aside)."""
    low = sentence.lower()
    names = all(" ".join(n).lower() in low for n in claim.names)
    return names and all(i in low for i in claim.ids) and set(claim.content) <= stems_of(sentence)


def _check_rivals(
    tally: Tally,
    what: str,
    hits: list[tuple[int, int]],
    rivals: list[tuple[str, int, int]],
    answer: Facts,
    claim: Facts,
    kind: str,
) -> None:
    """Another value for the same quantity: after a correction cue it replaces the match (decisive);
    otherwise it makes the match uncertain. A value of something else (attached to words the claim
    lacks, in another table row or column) is no rival."""
    text = answer.text
    spans = sentences(text)
    own = claim_stems(claim)
    hit_sentences = {sentence_at(spans, s) for s, _ in hits}
    after_too = kind == "quantity"  # "1,209 orders": a count's noun follows it; "joined on <date>" not
    hit_windows = [attached(text, s, e, sentence_at(spans, s), after_too=after_too) for s, e in hits]
    hit_words = set().union(*(w & own for w in hit_windows))
    hits_elsewhere = all(w - own for w in hit_windows)  # every match is a value of something else
    for rival, start, end in rivals:
        tally.rivals.append((start, end, kind))
        before = [h for h in hits if h[1] <= start]
        after = [h for h in hits if h[0] >= end]
        if after and correction_between(text, end, after[0][0]):
            tally.hits.append((start, end, kind))  # the corrected sentence also carries the claim
            continue  # corrected to the claim's value
        if before and not after:
            cue = correction_between(text, before[-1][1], start)
            if cue:
                tally.contradicted.append(f"{what} (answer corrects it to {rival}: '{cue}')")
                continue
        if (
            _other_cell(text, start, claim)
            or other_section(text, start, claim)
            or _other_year(text, start, end, claim)
            or _other_owner(answer, start, claim)
        ):
            continue
        sentence = sentence_at(spans, start)
        words = attached(text, start, end, sentence, after_too=after_too) - _CUE_STEMS
        restated = sentence not in hit_sentences and _says_all(text[slice(*sentence)], claim)
        same_words = bool(words & own) and not words - own and (words & own >= hit_words or hits_elsewhere)
        if not same_words and not restated:
            continue  # a value of something else ("30 minutes last week", "112 closed issues", "salary of")
        tally.candidates.append(f"{what} (also {rival})")
        tally.candidate_spans.append((start, end, kind))


def _quantities(tally: Tally, claim: Facts, answer: Facts) -> None:
    spans = [(g.start, g.end) for g in answer.quantities]
    for q in claim.quantities:
        release = _release(q, answer.text)
        if release:  # "Kubernetes 1.29" met by "v1.29.4": a version, not a decimal
            tally.add(q.text, True, None)
            tally.hits.extend((s, e, "id") for s, e in release)
            continue
        looked_up = _table_lookup(q, claim, answer)
        if looked_up and not any(same(q, g) for g in looked_up):  # the claim's row and column disagree
            tally.add(q.text, False, f"{looked_up[0].text} in its table row")
            continue
        found = [
            g
            for g in answer.quantities
            if same(q, g)
            and not _other_cell(answer.text, g.start, claim, False)
            and not other_section(answer.text, g.start, claim)
        ]
        hits = [g for g in found if _unit_implied(q, g, answer)]
        readings = _locale_readings(q, answer, found)
        if isinstance(readings, str):  # "undecided"
            tally.undecided.append(
                ("unit", f"{q.text}: a figure that reads both ways, in a text that does not say which")
            )
            tally.matched.append(q.text)
            continue
        if readings:
            found = hits = [g for g in readings if _unit_implied(q, g, answer)] or readings
        if found and all(in_dump((h.start, h.end), spans, answer.residual) for h in found):
            tally.dumps.append(q.text)
            continue
        if found and not hits:
            tally.undecided.append(("unit", f"{q.text}: the answer gives {found[0].text} without the unit"))
            tally.matched.append(q.text)
            continue
        others = [
            g
            for g in answer.quantities + answer.ranges
            if comparable(q, g) and g.exact == q.exact and not any(same(c, g) for c in claim.quantities)
        ]
        others = [g for g in others if same_thing(q, g, answer, claim)]
        tally.add(q.text, bool(hits), others[0].text if others and not hits else None)
        if hits:
            tally.hits.extend((h.start, h.end, "quantity") for h in hits)
            rivals = [(g.text, g.start, g.end) for g in others if g.dim == q.dim and g in answer.quantities]
            _check_rivals(tally, q.text, [(h.start, h.end) for h in hits], rivals, answer, claim, "quantity")


def _table_lookup(q: Quantity, claim: Facts, answer: Facts) -> list[Quantity]:
    """The answer's table cells in the claim's row (it names the claim's one name or id, or has its
    one date) and column (its header says a word of the claim; or the row's only cell of the
    figure's unit or currency), with a value comparable to ``q``: where the table states the
    claim's figure ("| billing-api | 5/5 | 5 |" under "Replicas")."""
    keys = {" ".join(n).lower() for n in claim.names} | set(claim.ids)
    if len(keys) + len(claim.dates) != 1:
        return []  # no row to look up, or several (each figure of "Q1 was A and Q2 was B" has its own)
    own = claim_stems(claim)
    text = answer.text
    rows: dict[int, list[Quantity]] = {}
    for g in answer.quantities:
        if table_cell(text, g.start) is None or not comparable(q, g) or g.exact != q.exact:
            continue
        start, end = text.rfind("\n", 0, g.start) + 1, text.find("\n", g.start) % (len(text) + 1)
        row = text[start:end].lower()
        dated = any(
            start <= d.start < end and any(date_same(c, d) for c in claim.dates) for d in answer.dates
        )
        if dated or any(k in row for k in keys):
            rows.setdefault(start, []).append(g)
    found = []
    for cells in rows.values():
        named = [g for g in cells if stems_of((table_cell(text, g.start) or ("", ""))[0]) & own]
        unit_only = [g for g in cells if g.dim or g.currency]
        found += named or (unit_only if len(cells) == len(unit_only) == 1 else [])
    return found


def _release(q: Quantity, text: str) -> list[tuple[int, int]]:
    """Where the answer writes a decimal of the claim as a version of it: with a "v" or a further
    ".N" ("v1.29", "1.29.4"); never as a figure of its own."""
    if q.dim is not None or q.currency or not re.fullmatch(r"\d+\.\d+", q.text):
        return []
    pattern = rf"(?<![\w.])(?:v{re.escape(q.text)}(?:\.\d+)*|{re.escape(q.text)}(?:\.\d+)+)(?![\w]|\.\d)"
    return [(m.start(), m.end()) for m in re.finditer(pattern, text)]


def _locale_readings(q: Quantity, answer: Facts, found: list[Quantity]) -> list[Quantity] | str:
    """The answer's figures that meet ``q`` read as thousands ("12.500" for 12,500) in a European
    text; "undecided" where a figure meets the claim in one reading only and the text does not say
    which reading is its own; [] where nothing turns on the reading."""
    shape = [g for g in answer.quantities if ambiguous(g)]
    as_decimal = [g for g in found if g in shape]
    as_grouped = [g for g in shape if same(q, as_thousands(g))]
    if not as_decimal and not as_grouped:
        return []
    locale = answer.locale
    if locale == "european":
        return [as_thousands(g) for g in as_grouped] if as_grouped else ("undecided" if as_decimal else [])
    if locale == "english" or (as_decimal and len(as_decimal) < len(found)):
        return []
    return "undecided"


def same_thing(q: Quantity, g: Quantity, answer: Facts, claim: Facts) -> bool:
    """Another value contradicts the claim's only when it is a value of the same thing: of the
    claim's dimension or currency, or said with the claim's words ("3 availability zones" does not
    contradict "Kubernetes 1.29")."""
    if (q.dim is not None and g.dim == q.dim) or (q.currency and g.currency == q.currency) or q.exact:
        return True
    own = claim_stems(claim)
    cell = table_cell(answer.text, g.start)
    if cell:  # a table cell is a value of its row and its column
        return bool((stems_of(cell[0]) | stems_of(cell[1]) | {w.lower() for w in cell[1].split()}) & own)
    span = sentence_at(sentences(answer.text), g.start)
    return bool(attached(answer.text, g.start, g.end, span) & own)


def _dates(tally: Tally, claim: Facts, answer: Facts) -> None:
    date_spans = [(g.start, g.start + len(g.text)) for g in answer.dates]
    for d in claim.dates:
        hits = [g for g in answer.dates if date_same(d, g)]
        if hits and all(in_dump((h.start, h.start + len(h.text)), date_spans, answer.text) for h in hits):
            tally.dumps.append(d.text)
            continue
        others = [
            g for g in answer.dates if not any(date_same(c, g) for c in claim.dates) and not _coarser(d, g)
        ]
        swapped = [
            g for g in others if g.swappable and date_same(d, replace(g, day=g.month, month=g.day or 0))
        ]
        if swapped and not hits:
            tally.undecided.append(("unit", f"{d.text}: {swapped[0].text} reads day/month or month/day"))
            tally.matched.append(d.text)
            continue
        tally.add(d.text, bool(hits), others[0].text if others and not hits else None)
        if hits:
            tally.hits.extend((h.start, h.start + len(h.text), "date") for h in hits)
            rivals = [(g.text, g.start, g.start + len(g.text)) for g in others if g.day is not None]
            spans = [(h.start, h.start + len(h.text)) for h in hits]
            _check_rivals(tally, d.text, spans, rivals, answer, claim, "date")


def time_same(claim: Time, got: Time) -> bool | None:
    """Same time of day; None when a zone makes it impossible to tell."""
    if claim.zone is None:
        return claim.minutes == got.minutes
    if claim.offset is None or got.zone is None or got.offset is None:
        if got.zone is not None and claim.zone.lower() == got.zone.lower():
            return claim.minutes == got.minutes
        return None
    return claim.utc == got.utc


def _time_same_here(claim: Time, got: Time, text: str, spans: list[tuple[int, int]]) -> bool | None:
    """``time_same``, and where the zone is not comparable, the clock when the answer's sentence names
    the claim's zone before the time ("In New York (EDT) that's 7:00 PM" for "7 PM New York time")."""
    same_time = time_same(claim, got)
    if same_time is None and claim.zone and not zoned_after(text, got.end):
        start = sentence_at(spans, got.start)[0]
        if re.search(rf"\b{re.escape(claim.zone)}\b", text[start : got.start], re.I):
            return claim.minutes == got.minutes
    return same_time


def _times(tally: Tally, claim: Facts, answer: Facts) -> None:
    spans = sentences(answer.text)
    for t in claim.times:
        verdicts = [(g, _time_same_here(t, g, answer.text, spans)) for g in answer.times]
        placed = [g for g, ok in verdicts if ok and g.offset is not None]
        if t.offset is None and t.zone and placed:  # "In Chicago (CDT) that is 8:00 AM": Chicago is CDT
            t = replace(t, offset=placed[0].offset)
            verdicts = [(g, _time_same_here(t, g, answer.text, spans)) for g in answer.times]
        hits = [g for g, ok in verdicts if ok]
        unknown = [g for g, ok in verdicts if ok is None]
        if not hits and unknown:
            tally.undecided.append(
                ("time_zone", f"{t.text} {t.zone}: the zone of {unknown[0].text} is not certain")
            )
            tally.matched.append(t.text)
            continue
        others = [
            g for g, ok in verdicts if ok is False and all(time_same(c, g) is False for c in claim.times)
        ]
        tally.add(t.text, bool(hits), others[0].text if others and not hits else None)
        tally.hits.extend((h.start, h.end, "time") for h in hits)
        if hits:  # "originally 10:00 ..., now 15:00": a later time for the same event
            later = others + [g for g in unknown if g.minutes != t.minutes]
            rivals = [(g.text, g.start, g.end) for g in later]
            _check_rivals(tally, t.text, [(h.start, h.end) for h in hits], rivals, answer, claim, "time")


def _ids(tally: Tally, claim: Facts, answer: Facts) -> None:
    low = answer.text.lower()
    claim_shapes = {id_shape(i) for i in claim.ids}
    answer_ids = [
        i
        for i in answer.ids
        if re.search(r"[\d_./#]", i) or any(ch.isupper() for ch in _original(i, answer.text))
    ]
    for ident in claim.ids:
        span = _id_span(ident, answer.text)
        if span is None and _SOFT_ID.fullmatch(ident) and _original(ident, claim.text).islower():
            continue  # "second-highest": an English compound as likely as a name; its absence proves nothing
        hexish = re.fullmatch(r"[0-9a-f]{7,40}", ident) is not None
        rivals = [
            i
            for i in answer_ids
            if id_shape(i) == id_shape(ident)
            and i not in claim.ids
            and id_shape(i) in claim_shapes
            and not (hexish and _hex_agree(i, ident))
        ]
        tally.add(ident, span is not None, rivals[0] if rivals and span is None else None)
        if span:
            tally.hits += [(*s, "id") for s in _every(answer.text, span)]
            for rival in rivals:  # "v2.14.0 (previously v2.13.2)": compared where they stand
                tally.rivals += [
                    (*s, "id") for s in _every(answer.text, _id_span(rival, answer.text) or (0, 0))
                ]
            if hexish:  # another commit: a rival wherever it is
                tally.rivals += [
                    (h.start(), h.end(), "id")
                    for h in _HEX.finditer(low)
                    if not _hex_agree(h.group(0), ident)
                ]


def _names(tally: Tally, claim: Facts, answer: Facts) -> None:
    claim_words = {w.lower() for phrase in claim.names for w in phrase} | {stem(w) for w in claim.words}
    rival_names = sorted(
        n
        for n in {w.lower() for phrase in answer.names for w in phrase}
        if n not in claim_words and stem(n) not in claim_words
    )
    zones = {t.zone.lower() for t in claim.times if t.zone}
    claim_names = {" ".join(n).lower() for n in claim.names}
    person_like = any(len(n) > 1 for n in claim.names)
    for phrase in answer.names:
        if person_like and len(phrase) > 1 and " ".join(phrase).lower() not in claim_names:
            m = re.search(r"\W+".join(re.escape(w) for w in phrase), answer.text)
            if m:
                tally.rivals.append((m.start(), m.end(), "name"))
    for name in claim.names:
        if " ".join(name).lower() in zones:
            continue  # "15:00 in Tokyo": the time's zone, compared with the time
        span, whole = _name_span(name, answer)
        what = " ".join(name)
        if span and not whole:
            rival = _rival_first_name(name, span, answer.text)
            if rival:
                tally.contradicted.append(f"{what} (answer: {rival})")
            else:
                tally.undecided.append(("name", f"{what} given only as '{answer.text[span[0] : span[1]]}'"))
                tally.matched.append(what)
            continue
        rival = _slot_rival(rival_names, tally, answer, claim) if span is None else None
        if span and all(other_section(answer.text, s, claim) for s, _ in _every(answer.text, span)):
            span, rival = None, "said in another item"  # "- search: Kim Park" for Kim Park owning billing
        tally.add(what, span is not None, rival)
        if span:
            tally.hits += [(*s, "name") for s in _every(answer.text, span)]


def _slot_rival(rival_names: list[str], tally: Tally, answer: Facts, claim: Facts) -> str | None:
    """Another name where the claim's is missing, in a sentence that says the claim (a fact of it, or
    half its words): a long answer names many things ("all Ready") that take no claim's place."""
    text = answer.text
    spans = sentences(text)
    if len(spans) == 1:
        return rival_names[0] if rival_names else None
    content = set(claim.content)
    for name in rival_names:
        for m in re.finditer(rf"\b{re.escape(name)}\b", text, re.I):
            span = sentence_at(spans, m.start())
            said = stems_of(text[slice(*span)])
            if any(span[0] <= h < span[1] for h, _, _ in tally.hits) or (
                content and len(content & said) * 2 >= len(content)
            ):
                return name
    return None


def _check_moves(tally: Tally, answer: Facts, claim: Facts) -> None:
    for start, end, _ in tally.hits:
        other = _moved_away(answer.text, start, end, claim)
        if other:
            tally.contradicted.append(f"{answer.text[start:end]} (answer: changed from it to {other})")
            return


def tally_facts(claim: Facts, answer: Facts) -> Tally:
    tally = Tally()
    _quantities(tally, claim, answer)
    _dates(tally, claim, answer)
    _times(tally, claim, answer)
    _ids(tally, claim, answer)
    _names(tally, claim, answer)
    low = answer.text.lower()
    for phrase in claim.quoted:
        at = low.find(phrase)
        tally.add(f"'{phrase}'", at >= 0, None)
        if at >= 0:
            tally.hits.append((at, at + len(phrase), "quoted"))
    for item in claim.items:
        m = re.search(rf"(?<![^\W_]){re.escape(item)}", low)
        tally.add(item, m is not None, None)
        if m:
            tally.hits.append((m.start(), m.end(), "item"))
    _check_moves(tally, answer, claim)
    return tally
