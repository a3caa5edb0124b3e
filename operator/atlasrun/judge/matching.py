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
from dataclasses import replace

from atlasrun.judge.evidence import sentence_at, sentences, stems_of, table_cell
from atlasrun.judge.facts import Facts, Quantity, stem
from atlasrun.judge.lexicon_places import OTHER_NAMES
from atlasrun.judge.rivals import (
    Tally,
    check_moves,
    check_rivals,
    claim_stems,
    other_cell,
    other_section,
    same_thing,
)
from atlasrun.judge.topic import in_topic
from atlasrun.judge.values import (
    coarser,
    comparable,
    date_same,
    id_shape,
    in_dump,
    locale_readings,
    same,
    time_same,
    time_same_here,
    unit_implied,
    version_spans,
)

_HEX = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")
_SOFT_ID = re.compile(r"[a-z]+(?:-[a-z]+)+")


def _id_span(identifier: str, text: str) -> tuple[int, int] | None:
    body = re.escape(identifier)
    if _SOFT_ID.fullmatch(identifier):  # highest-priority == highest priority
        body = body.replace(r"\-", r"[-\s]")
    version = "v?" if re.fullmatch(r"\d+(?:\.\d+)+", identifier) else ""  # "v1.29.6" for 1.29.6
    if re.fullmatch(r"\d+-\d+", identifier):  # a score: "2-1" written "2 - 1"
        body = body.replace(r"\-", r"\s?-\s?")
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


_STREET_WORDS = {
    w: rf"(?:{a}\.?|{b})"
    for a, b in (("st", "street"), ("ave", "avenue"), ("rd", "road"), ("blvd", "boulevard"), ("sq", "square"))
    for w in (a, b)
}


def _name_span(name: list[str], answer: Facts) -> tuple[tuple[int, int] | None, bool]:
    """(where the name is, whether it is there whole). A one-letter last word ("Store A") must
    match in case; a multi-word name met by its last word alone is there only in part."""
    text, last = answer.text, name[-1]
    if len(name) > 1 and last.rstrip(".").lower() in _STREET_WORDS:  # "Main St" is "Main Street"
        spelled = (
            r"\W+".join(re.escape(w) for w in name[:-1]) + r"\W+" + _STREET_WORDS[last.rstrip(".").lower()]
        )
        m = re.search(rf"(?<![^\W_]){spelled}(?![^\W_])", text, re.I)
        if m:
            return (m.start(), m.end()), True
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
    for other in OTHER_NAMES.get(" ".join(name).lower(), ()):  # "München" for Munich
        m = re.search(rf"(?<![^\W_]){re.escape(other)}(?![^\W_])", text, re.I)
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


def _quantities(tally: Tally, claim: Facts, answer: Facts) -> None:
    spans = [(g.start, g.end) for g in answer.quantities]
    for q in claim.quantities:
        if claim.items and q.dim is None and not q.currency and q.number == len(claim.items):
            continue  # "the three largest are A, B and C": the count frames the items, the items are the facts
        release = version_spans(q, answer.text)
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
            and not other_cell(answer.text, g.start, claim, False)
            and not other_section(answer.text, g.start, claim)
            and not _nearer_claim_value(q, g, claim)
        ]
        hits = [g for g in found if unit_implied(q, g, answer)]
        readings = locale_readings(q, answer, found)
        if isinstance(readings, str):  # "undecided"
            tally.undecided.append(
                ("unit", f"{q.text}: a figure that reads both ways, in a text that does not say which")
            )
            tally.matched.append(q.text)
            continue
        if readings:
            found = hits = [g for g in readings if unit_implied(q, g, answer)] or readings
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
        # a bare figure ("a magnitude of 6.4", "3 nodes") is not contradicted by a measure ("10 km")
        others = [g for g in others if same_thing(q, g, answer, claim) and not (q.dim is None and g.dim)]
        tally.add(q.text, bool(hits), others[0].text if others and not hits else None)
        if hits:
            tally.hits.extend((h.start, h.end, "quantity") for h in hits)
            rivals = [(g.text, g.start, g.end) for g in others if g.dim == q.dim and g in answer.quantities]
            check_rivals(tally, q.text, [(h.start, h.end) for h in hits], rivals, answer, claim, "quantity")


def _nearer_claim_value(q: Quantity, g: Quantity, claim: Facts) -> bool:
    """The answer's figure meets another of the claim's figures more closely: one figure never
    stands for two ("dropped from 4.1% to 3.9%" is not met by a lone 3.9%; "88 and 92" by a 92)."""
    return any(
        c is not q and c.number != q.number and same(c, g) and abs(c.value - g.value) < abs(q.value - g.value)
        for c in claim.quantities
    )


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


def _dates(tally: Tally, claim: Facts, answer: Facts) -> None:
    date_spans = [(g.start, g.start + len(g.text)) for g in answer.dates]
    for d in claim.dates:
        hits = [g for g in answer.dates if date_same(d, g)]
        if hits and all(in_dump((h.start, h.start + len(h.text)), date_spans, answer.text) for h in hits):
            tally.dumps.append(d.text)
            continue
        others = [
            g for g in answer.dates if not any(date_same(c, g) for c in claim.dates) and not coarser(d, g)
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
            check_rivals(tally, d.text, spans, rivals, answer, claim, "date")


def _times(tally: Tally, claim: Facts, answer: Facts) -> None:
    spans = sentences(answer.text)
    for t in claim.times:
        verdicts = [(g, time_same_here(t, g, answer.text, spans)) for g in answer.times]
        placed = [g for g, ok in verdicts if ok and g.offset is not None]
        if t.offset is None and t.zone and placed:  # "In Chicago (CDT) that is 8:00 AM": Chicago is CDT
            t = replace(t, offset=placed[0].offset)
            verdicts = [(g, time_same_here(t, g, answer.text, spans)) for g in answer.times]
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
            check_rivals(tally, t.text, [(h.start, h.end) for h in hits], rivals, answer, claim, "time")


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
        letters = [n for n in rival_names if len(n) == 1] if len(what) == 1 else rival_names
        rival = _slot_rival(letters, tally, answer, claim) if span is None else None  # "E": "W", not "Berlin"
        if rival and in_topic(claim, what) and len(what) > 2 and not _named_in_part(name, answer.text):
            # the subject not named at all: another capitalised word there may be its name ("Jezero
            # Crater" for Mars, "Strategy workspace" for a Notion page), not proof of another subject
            tally.undecided.append(("name", f"{what} not named; '{rival}' stands where it could be"))
            continue
        if span and all(other_section(answer.text, s, claim) for s, _ in _every(answer.text, span)):
            span, rival = None, "said in another item"  # "- search: Kim Park" for Kim Park owning billing
        tally.add(what, span is not None, rival)
        if span:
            tally.hits += [(*s, "name") for s in _every(answer.text, span)]


def _named_in_part(name: list[str], text: str) -> bool:
    return any(re.search(rf"(?<!\w){re.escape(w)}(?!\w)", text, re.I) for w in name if len(w) > 2)


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
    check_moves(tally, answer, claim)
    return tally
