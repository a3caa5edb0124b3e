"""Dates (ISO, day-first with slashes or dots, written months) and times of day (12- and 24-hour, with
their zone from ``judge.zones``) in a normalised text, each blanked once read.
"""

from __future__ import annotations

import re

from atlasrun.judge.facts import Date, Time, blank, blank_all
from atlasrun.judge.lexicon_calendar import FOREIGN_MONTHS, MONTHS
from atlasrun.judge.zones import zone_at

_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_FOREIGN_MONTH = "|".join(sorted(FOREIGN_MONTHS, key=len, reverse=True))
_DATE_PATTERNS = [
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)", re.I), "ymd"),
    (re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b"), "dmy/"),
    (re.compile(r"\b(\d{1,2})\.(\d{1,2})\.(\d{4})\b"), "dmy/"),  # 14.03.2025: day first
    (
        re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\.?(?:,?\s+(\d{{4}}))?\b", re.I),
        "dmy",
    ),
    (re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?", re.I), "mdy"),
    (re.compile(rf"\b({_MONTH})\.?\s+(\d{{4}})\b", re.I), "my"),
    (
        re.compile(
            rf"\b(\d{{1,2}})(?:\.|er)?\s+(?:de\s+)?({_FOREIGN_MONTH})\b(?:\s+(?:de\s+)?(\d{{4}})\b)?", re.I
        ),
        "dmy*",
    ),
]
_TIME_12 = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*([ap])\.?\s?m\b\.?", re.I)
# Also inside ISO timestamps (2024-03-18T14:30:00); never a UTC offset (+05:30).
_TIME_24 = re.compile(
    r"(?<![\d+:-])(\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?!\d)(\s+in\s+the\s+(?:morning|afternoon|evening))?",
    re.I,
)


def read_dates(text: str) -> tuple[list[Date], str]:
    found: list[Date] = []
    for pattern, kind in _DATE_PATTERNS:
        spans: list[tuple[int, int]] = []  # blanked after each pattern: the next one sees them blank
        for m in pattern.finditer(text):
            if not m.group(0).strip():
                continue
            g = m.groups()
            year: int | None
            day: int | None
            try:
                if kind == "ymd":
                    year, month, day = int(g[0]), int(g[1]), int(g[2])
                elif kind == "dmy/":
                    a, b, year = int(g[0]), int(g[1]), int(g[2])
                    day, month = (b, a) if b > 12 else (a, b)
                elif kind == "dmy":
                    day, month, year = int(g[0]), MONTHS[g[1].lower()], int(g[2]) if g[2] else None
                elif kind == "dmy*":
                    day, month, year = int(g[0]), FOREIGN_MONTHS[g[1].lower()], int(g[2]) if g[2] else None
                elif kind == "mdy":
                    month, day, year = MONTHS[g[0].lower()], int(g[1]), int(g[2]) if g[2] else None
                else:
                    month, day, year = MONTHS[g[0].lower()], None, int(g[1])
            except (KeyError, ValueError):
                continue
            if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
                continue
            swappable = kind == "dmy/" and "/" in m.group(0) and day != month and max(day or 0, month) <= 12
            found.append(Date(year, month, day, m.group(0), m.start(), swappable))
            spans.append((m.start(), m.end()))
        text = blank_all(text, spans)
    return found, text


def read_times(text: str) -> tuple[list[Time], str]:
    found: list[Time] = []
    for m in _TIME_12.finditer(text):
        hour, minute = int(m.group(1)), int(m.group(2) or 0)
        if 1 <= hour <= 12 and minute < 60:
            hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
            found.append(_zoned(hour * 60 + minute, m, text))
            text = blank(text, m.start(), m.end())
    for m in _TIME_24.finditer(text):
        hour, minute = int(m.group(1)), int(m.group(2))
        if hour < 24 and minute < 60:
            part = (m.group(3) or "").lower()
            if hour < 12 and ("afternoon" in part or "evening" in part):
                hour += 12
            found.append(_zoned(hour * 60 + minute, m, text))
            text = blank(text, m.start(), m.end())
    return found, text


def _zoned(minutes: int, m: re.Match[str], text: str) -> Time:
    zone = zone_at(text, m.start(), m.end())
    return Time(
        minutes,
        m.group(0).strip(),
        zone.name if zone else None,
        zone.offset if zone else None,
        m.start(),
        m.end(),
    )
