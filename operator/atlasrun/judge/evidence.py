"""Where in an answer a fact is stated, and whether that statement is decisive.

Helpers of the deterministic judge's abstentions: sentences (list items and table rows are
sentences too), questions and restatements, hedges in the sentence of a fact, self-corrections,
the words a value is attached to ("45 *minutes*" vs "30 minutes *last week*") and the language.
"""

from __future__ import annotations

import re

from atlasrun.judge.facts import stem
from atlasrun.judge.lexicon_quantities import SMALL_NUMBERS, TENS
from atlasrun.judge.lexicon_words import ENGLISH_MARKERS, FOREIGN_MARKERS, STOPWORDS

Span = tuple[int, int]

_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)|\n")
# An answer that sets a claim's words in a question or a report of the question asks, not states.
_ASKING = re.compile(
    r"^\W*(?:you (?:asked|want(?:ed)? to know)|the question|question:|i(?:'ll| will) (?:check|look)|"
    r"let me (?:check|look|find)|to answer (?:this|that|whether))\b|\bwhether\b",
    re.I,
)
# A speaker taking a value back: the value after the cue replaces the one before it.
CORRECTION = re.compile(
    r"\b(?:actually|correction|correcting|i mean|i meant|wait|on second thought|scratch that|sorry|"
    r"i misspoke|let me correct|should (?:be|read|have been)|corrected|in fact|not \S+ but|"
    r"now (?:says|shows|reads|is)|moved to|rescheduled(?: to)?|changed to)\b",
    re.I,
)


def sentences(text: str) -> list[Span]:
    spans: list[Span] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        if text[start : m.end()].strip():
            spans.append((start, m.end()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans or [(0, len(text))]


def sentence_at(spans: list[Span], pos: int) -> Span:
    for span in spans:
        if span[0] <= pos < span[1]:
            return span
    return spans[-1]


def with_header(text: str, span: Span) -> str:
    """The sentence, after the header of the list it continues ("Recent commits: A - x; B - y")."""
    start = max(text.rfind(c, 0, span[0]) for c in ".!?\n") + 1
    colon = text.rfind(":", start, span[0])
    return (text[start : colon + 1] + " " if colon >= 0 else "") + text[span[0] : span[1]]


# A sentence that continues the one before: it opens with a pronoun, or with a definite description
# of a role that names nothing new ("The account manager is Hannah Cole." after a sentence on the
# account), lower-case words up to its verb.
_PRONOUN_START = re.compile(
    r"^\W*(?:(?i:it|this|that|these|they|he|she|its|their|his|her)\b"
    r"|(?:The|the)\s+(?:[a-z][\w-]*\s+){1,3}(?:is|was|are|were|has|had)\b)"
)


_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s")
_HEADING = re.compile(r"^\s*(?:#{1,6}\s+)?[^.!?|\n]{1,60}$")
_LABEL = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s+([^:\n]{1,40}?):\s")


def _line(text: str, pos: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return start, text[start : end if end >= 0 else len(text)]


def heading_of(text: str, pos: int) -> str | None:
    """The heading of the list a line at ``pos`` is an item of ("api" or "### payments" or "Worker
    pool:" above "- replicas: 4"), or None."""
    line_start, line = _line(text, pos)
    if not _ITEM.match(line):
        return None
    for above in reversed(text[:line_start].split("\n")[:-1]):
        if not above.strip() or _ITEM.match(above) or above.startswith(("  ", "\t")):
            continue
        return above.strip() if _HEADING.match(above) else None
    return None


def label_of(text: str, pos: int) -> str | None:
    """The label of a "- label: value" list item, for a position in its value."""
    line_start, line = _line(text, pos)
    m = _LABEL.match(line)
    return m.group(1).strip() if m and line_start + m.end(1) < pos else None


def headings(text: str) -> tuple[set[str], set[str]]:
    """Every list heading, and every item label, of the answer."""
    lines = [m for m in re.finditer(r"(?m)^.*$", text)]
    return (
        {h for m in lines if (h := heading_of(text, m.start()))},
        {label for m in lines if (label := label_of(text, m.end()))},
    )


def in_context(text: str, spans: list[Span], i: int) -> str:
    """A sentence with what it continues: its list header, a table's header row, the sentence before
    when it opens with a pronoun ("It was authored by ...")."""
    span = spans[i]
    said = with_header(text, span)
    heading = heading_of(text, span[0] + len(text[span[0] : span[1]]) - len(text[span[0] : span[1]].lstrip()))
    if heading and heading not in said:
        said = f"{heading} {said}"
    line_start = text.rfind("\n", 0, span[0]) + 1
    if text[line_start : span[1]].lstrip().startswith("|"):
        header = line_start
        while header > 0:
            above = text.rfind("\n", 0, header - 1) + 1
            if not text[above:header].lstrip().startswith("|"):
                break
            header = above
        said = text[header : text.find("\n", header) if "\n" in text[header:] else len(text)] + " " + said
    if i and _PRONOUN_START.match(text[span[0] : span[1]]):
        said = text[spans[i - 1][0] : spans[i - 1][1]] + " " + said
    return said


def asks(text: str, span: Span) -> bool:
    """The sentence asks or reports the question rather than answering it."""
    sentence = text[span[0] : span[1]].strip()
    return sentence.endswith("?") or bool(_ASKING.search(sentence))


def stems_of(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[A-Za-z][\w'-]*", text) if w.lower() not in STOPWORDS}


def attached(text: str, start: int, end: int, span: Span, *, after_too: bool = True) -> set[str]:
    """The content stems nearest a value in its sentence (two before, two after): what the value is a
    value *of*."""
    # Only within its clause: up to the next figure, comma, bracket or "and" either way; the words
    # beyond belong to the next value ("1,209 orders are pending, 16,870 are completed").
    head = _CLAUSE_EDGE.split(text[span[0] : start])[-1]
    tail = _CLAUSE_EDGE.split(text[end : span[1]])[0]
    before = [w for w in re.findall(r"[A-Za-z][\w'-]*", head) if w.lower() not in _NOT_ATTACHED]
    after = [w for w in re.findall(r"[A-Za-z][\w'-]*", tail) if w.lower() not in _NOT_ATTACHED]
    return {stem(w) for w in before[-2:] + (after[:2] if after_too else [])}


_NOT_ATTACHED = STOPWORDS | set(SMALL_NUMBERS) | set(TENS)  # "the five regions": a count, not a word
_CLAUSE_EDGE = re.compile(r"\d|[,;()\[\]|]|\s(?:and|but|while|whereas)\s")


def clauses(text: str, span: Span) -> list[Span]:
    """The clauses of a sentence: split at commas, semicolons and conjunctions."""
    found: list[Span] = []
    start = span[0]
    for m in re.finditer(r"[,;]\s|\s(?:and|but|while|whereas)\s", text[span[0] : span[1]]):
        found.append((start, span[0] + m.start()))
        start = span[0] + m.end()
    return [*found, (start, span[1])]


def correction_between(text: str, start: int, end: int) -> str | None:
    m = CORRECTION.search(text, start, end) if start < end else None
    return m.group(0) if m else None


def foreign(text: str) -> str | None:
    """Why ``text`` is not English, or None (short texts and figures alone count as English)."""
    letters = [c for c in text if c.isalpha()]
    if letters and sum(1 for c in letters if ord(c) > 0x24F) / len(letters) > 0.3:
        return "non-Latin script"
    words = re.findall(r"[^\W\d_]+", text.lower())
    if len(words) < 5:
        return None
    english = sum(1 for w in words if w in ENGLISH_MARKERS)
    other = sum(1 for w in words if w in FOREIGN_MARKERS)
    if other >= 2 and other > 2 * english:
        return f"{other} function words of another language, {english} English"
    return None


def table_cell(text: str, pos: int) -> tuple[str, str] | None:
    """(column header, row label) of a Markdown table cell at ``pos``, or None outside a table."""
    line_start = text.rfind("\n", 0, pos) + 1
    line_end = text.find("\n", pos)
    line = text[line_start : line_end if line_end >= 0 else len(text)]
    if not line.lstrip().startswith("|"):
        return None
    lines = text[:line_start].split("\n")[:-1]
    header = line
    for above in reversed(lines):
        if not above.lstrip().startswith("|"):
            break
        header = above
    column = text[line_start:pos].count("|") - 1
    headers = [c.strip() for c in header.strip().strip("|").split("|")]
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if header == line or not 0 <= column < len(headers):
        return None
    return headers[column], cells[0] if cells else ""
