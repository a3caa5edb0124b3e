"""Time zones of clock times: which zone a time is stated in, as a fixed UTC offset when one is certain.

A zone is read right after the time (``14:00 UTC``, ``2 PM CEST``, ``17:30 Asia/Tokyo time``,
``09:00+02:00``, ``T08:30Z``) or, failing that, as the nearest zone named earlier in the same
sentence (``in Bangalore (Asia/Kolkata) that is 14:00``). An offset is *certain* for UTC, numeric
offsets, the abbreviations below and IANA zones without daylight saving; zones with daylight saving
(``Europe/London``, ``ET``) and ambiguous abbreviations (``IST``, ``CST``) have no certain offset,
so the judge abstains on them rather than guess.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass
from datetime import datetime

# Abbreviation -> minutes east of UTC; None: ambiguous or daylight-saving dependent.
ABBREVIATIONS: dict[str, int | None] = {
    "utc": 0,
    "gmt": 0,
    "z": 0,
    "wet": 0,
    "west": 60,
    "bst": 60,
    "cet": 60,
    "cest": 120,
    "eet": 120,
    "eest": 180,
    "msk": 180,
    "gst": 240,
    "pkt": 300,
    "hkt": 480,
    "sgt": 480,
    "awst": 480,
    "jst": 540,
    "kst": 540,
    "aest": 600,
    "aedt": 660,
    "nzst": 720,
    "nzdt": 780,
    "est": -300,
    "edt": -240,
    "cdt": -300,
    "mst": -420,
    "mdt": -360,
    "pst": -480,
    "pdt": -420,
    "akst": -540,
    "hst": -600,
    "ist": None,  # India, Ireland or Israel
    "cst": None,  # US Central or China
    "et": None,
    "ct": None,
    "mt": None,
    "pt": None,
    "eastern": None,  # US zone names: daylight saving decides the offset
    "central": None,
    "mountain": None,
    "pacific": None,
}
CITIES: dict[str, str] = {
    "tokyo": "Asia/Tokyo",
    "osaka": "Asia/Tokyo",
    "seoul": "Asia/Seoul",
    "bangalore": "Asia/Kolkata",
    "bengaluru": "Asia/Kolkata",
    "mumbai": "Asia/Kolkata",
    "delhi": "Asia/Kolkata",
    "new delhi": "Asia/Kolkata",
    "kolkata": "Asia/Kolkata",
    "singapore": "Asia/Singapore",
    "hong kong": "Asia/Hong_Kong",
    "shanghai": "Asia/Shanghai",
    "beijing": "Asia/Shanghai",
    "dubai": "Asia/Dubai",
    "moscow": "Europe/Moscow",
    "london": "Europe/London",
    "dublin": "Europe/Dublin",
    "lisbon": "Europe/Lisbon",
    "paris": "Europe/Paris",
    "berlin": "Europe/Berlin",
    "madrid": "Europe/Madrid",
    "rome": "Europe/Rome",
    "amsterdam": "Europe/Amsterdam",
    "zurich": "Europe/Zurich",
    "new york": "America/New_York",
    "toronto": "America/Toronto",
    "chicago": "America/Chicago",
    "denver": "America/Denver",
    "phoenix": "America/Phoenix",
    "los angeles": "America/Los_Angeles",
    "san francisco": "America/Los_Angeles",
    "seattle": "America/Los_Angeles",
    "sydney": "Australia/Sydney",
    "auckland": "Pacific/Auckland",
}


@dataclass(frozen=True)
class Zone:
    name: str
    offset: int | None  # minutes east of UTC; None: not certain


@functools.lru_cache(maxsize=512)
def _iana(name: str) -> Zone | None:
    try:
        tz = zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
    offsets = {tz.utcoffset(datetime(2024, month, 1)) for month in (1, 7)}
    if len(offsets) != 1:
        return Zone(name, None)  # daylight saving: the offset depends on the date
    (delta,) = offsets
    return Zone(name, None if delta is None else int(delta.total_seconds() // 60))


def _numeric(sign: str, hours: str, minutes: str | None) -> int:
    value = int(hours) * 60 + int(minutes or 0)
    return -value if sign in "-\u2212" else value


_CITY = "|".join(sorted((re.escape(c) for c in CITIES), key=len, reverse=True))
_ABBR = "|".join(sorted((a for a in ABBREVIATIONS if a != "z"), key=len, reverse=True))
_OFFSET = r"(?:UTC|GMT)?\s?([+\-\u2212])(\d{1,2})(?::?(\d{2}))?"
ZONE = re.compile(
    rf"(?P<iana>\b[A-Z][a-z]+/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?\b)"
    rf"|(?P<gmt>\b(?:UTC|GMT)\s?[+\-\u2212]\d{{1,2}}(?::?\d{{2}})?)"
    rf"|(?P<abbr>\b(?:{_ABBR.upper()})\b)"
    rf"|(?P<city>\b(?:{_CITY})\b)",
    re.I,
)
# Right after a time: an offset (+02:00), a Z, or a zone word; at most a bracket or space apart.
_AFTER = re.compile(
    rf"\s?\(?\s?(?:in\s+)?(?:(?P<z>Z\b)|(?P<off>[+\-\u2212]\d{{2}}:?\d{{2}}\b)|(?={ZONE.pattern}))", re.I
)


def _zone_of(m: re.Match[str]) -> Zone | None:
    text = m.group(0)
    if m.group("iana"):
        return _iana(text)
    if m.group("gmt"):
        g = re.match(_OFFSET, text)
        return Zone(text, _numeric(g.group(1), g.group(2), g.group(3))) if g else None
    if m.group("abbr"):
        spelled = text.lower() in ("eastern", "central", "mountain", "pacific") and text[0].isupper()
        if not text.isupper() and not spelled:  # "et", "pt", "est" in lower case are words, not zones
            return None
        return Zone(text, ABBREVIATIONS[text.lower()])
    city = CITIES.get(text.lower())
    zone = _iana(city) if city else None
    return Zone(text, zone.offset) if zone else None


_RANGE_END = re.compile(r"\s*(?:to|until|till|-|\u2013|\u2014)\s*\d{1,2}(?::\d{2})?(?:\s?[ap]\.?m\.?)?", re.I)


def zoned_after(text: str, end: int) -> bool:
    """A zone is stated right after the time that ends at ``end`` ("15:00 CET")."""
    after = _AFTER.match(text, end)
    return bool(after and (after.group("z") or after.group("off") or ZONE.match(text, after.end())))


def zone_at(text: str, start: int, end: int) -> Zone | None:
    """The zone of the time at ``text[start:end]``: stated right after it, else the nearest one named
    before it in the same sentence."""
    after = _AFTER.match(text, end)
    if not after:  # "from 23:00 to 01:00 UTC": the zone after a range is that of both its ends
        to = _RANGE_END.match(text, end)
        after = _AFTER.match(text, to.end()) if to else None
    if after:
        if after.group("z"):
            return Zone("Z", 0)
        if after.group("off"):
            g = re.match(_OFFSET, after.group("off"))
            if g:
                return Zone(after.group("off"), _numeric(g.group(1), g.group(2), g.group(3)))
        m = ZONE.match(text, after.end())
        zone = _zone_of(m) if m else None
        if zone:
            return zone
    sentence_start = max(text.rfind(c, 0, start) for c in ".!?;\n") + 1
    found = None
    for m in ZONE.finditer(text, sentence_start, start):
        found = _zone_of(m) or found
    return found
