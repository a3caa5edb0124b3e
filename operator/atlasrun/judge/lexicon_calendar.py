"""Word lists for reading dates: month names with their abbreviations (and in German, French,
Spanish, Italian, Portuguese and Dutch), and the days of the week."""

from __future__ import annotations

MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
WEEKDAYS = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}

# Read only day first ("12 maggio 2025", "4. März", "22 de marzo de 2025"): "Mars" and "Mai" are words too.
FOREIGN_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("januar", "janvier", "enero", "gennaio", "janeiro", "januari"),
            ("februar", "février", "fevrier", "febrero", "febbraio", "fevereiro", "februari"),
            ("märz", "maerz", "mars", "marzo", "março", "maart"),
            ("avril", "abril", "aprile"),
            ("mai", "mayo", "maggio", "maio", "mei"),
            ("juni", "juin", "junio", "giugno", "junho"),
            ("juli", "juillet", "julio", "luglio", "julho"),
            ("august", "août", "aout", "agosto", "augustus"),
            ("september", "septembre", "septiembre", "settembre", "setembro"),
            ("oktober", "octobre", "octubre", "ottobre", "outubro"),
            ("november", "novembre", "noviembre", "novembro"),
            ("dezember", "décembre", "decembre", "diciembre", "dicembre", "dezembro", "december"),
        ]
    )
    for name in names
}
