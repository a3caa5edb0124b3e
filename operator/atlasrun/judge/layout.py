"""The structure of an answer: its Markdown tables and lists, read as groups of sibling records.

A record is what one subject is given: a table row (its key is the first cell), a table column (its
key is the header cell: a transposed table lists subjects across), or a list item (its key is the
label before ":", a dash or a comma: "- Buffered sample: 7.1", "2. Nimbus floor lamp — 2,988").
Records of one table's rows, one table's columns or one run of list lines are siblings: each says
the same thing of another subject. ``judge.attributed`` uses them to ask whose value a figure is.
Positions are in the text as given (the answer's normalised text, ``Facts.text``).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from atlasrun.judge.evidence import Span

_TABLE_LINE = re.compile(r"^\s*\|")
_RULE_LINE = re.compile(r"^[\s|:\-]+$")  # |---|:--:|
_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s+", re.M)
# Where an item's label ends: a colon, a dash between spaces, an em dash, a comma, a bracket.
_LABEL_END = re.compile(r":\s|\s[-\u2014]\s|\u2014|,\s|\s\(")


def trimmed(text: str, span: Span) -> Span:
    """A span without the blanks at its ends."""
    part = text[span[0] : span[1]]
    start = span[0] + len(part) - len(part.lstrip())
    return start, max(start, span[0] + len(part.rstrip()))


@dataclass(frozen=True)
class Record:
    key: Span  # the words that name the record's subject
    cells: tuple[Span, ...]  # what is said of it, by slot (a table column or row; an item: one)

    def slot_of(self, place: Span) -> int | None:
        """The slot a value at ``place`` stands in, or None when it is not in one."""
        return next((i for i, (a, b) in enumerate(self.cells) if a <= place[0] and place[1] <= b), None)


@dataclass(frozen=True)
class Group:
    """Sibling records: the same thing said of several subjects."""

    records: tuple[Record, ...]
    # A table's columns: their headers are most often what is said ("Close", "Change") and name a
    # subject only as a proper name or a date ("| Metric | Tokyo | Osaka |").
    across: bool = False


class Layout:
    """An answer's tables and lists as groups of sibling records (a group has two or more)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.groups: list[Group] = []
        lines = [(m.start(), m.end()) for m in re.finditer(r"(?m)^.*$", text)]
        run: list[Span] = []
        items: list[Span] = []
        for line in lines:
            row = text[line[0] : line[1]]
            if _TABLE_LINE.match(row):
                run.append(line)
                continue
            self._table(run)
            run = []
            if _ITEM.match(row):
                items.append(line)
            else:
                self._items(items)
                items = []
        self._table(run)
        self._items(items)

    def _cells(self, line: Span) -> list[Span]:
        """The cells of a table line between its bars, each without its blanks."""
        bars = [line[0] + m.start() for m in re.finditer(r"\|", self.text[line[0] : line[1]])]
        if self.text[line[0] : line[1]].rstrip()[-1:] != "|":
            bars.append(line[1])
        return [trimmed(self.text, (a + 1, b)) for a, b in itertools.pairwise(bars)]

    def _table(self, lines: list[Span]) -> None:
        rows = [self._cells(line) for line in lines if not _RULE_LINE.match(self.text[line[0] : line[1]])]
        if len(rows) < 3:  # a header and two rows at least: siblings to tell apart
            return
        header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
        if len(body) >= 2:
            self.groups.append(Group(tuple(Record(r[0], tuple(r)) for r in body)))
        columns = [Record(header[j], tuple(r[j] for r in body)) for j in range(1, len(header))]
        if len(columns) >= 2:
            self.groups.append(Group(tuple(columns), across=True))

    def _items(self, lines: list[Span]) -> None:
        records = []
        for start, end in lines:
            opening = _ITEM.match(self.text, start, end)
            assert opening is not None  # only item lines are gathered
            label_end = _LABEL_END.search(self.text, opening.end(), end)
            if label_end is None:  # "- web" or "1. Farmacia Centrale": all of it names the subject
                records.append(Record((opening.end(), end), ((opening.end(), end),)))
            else:
                records.append(Record((opening.end(), label_end.start()), ((label_end.end(), end),)))
        if len(records) >= 2:
            self.groups.append(Group(tuple(records)))
