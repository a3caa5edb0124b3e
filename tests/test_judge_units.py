"""Since ``deterministic/10``: figures read the way answers write them (durations to the second, a
currency's hundredths, scale words after a space or in another language, basis points, speeds in any
unit, release numbers as names), other languages' dates, counts and place names, and an answer in
another language passed on its figures alone when nothing there reads against them. Also two placing
classes: a qualifier of the claim said only with the match, or only with another value."""

from __future__ import annotations

import pytest

from atlasrun.judge.deterministic import VERSION
from atlasrun.judge.reading import read
from judge_cases import Cases, check_case, each_case


def test_version() -> None:
    assert VERSION == "deterministic/10"


@pytest.mark.parametrize(
    ("text", "value", "dim", "currency"),
    [
        ("after 14 min 32 s.", 872, "time", None),
        ("in 2 hours, 5 minutes and 42 seconds", 7542, "time", None),
        ("finished in 2:05:42.", 7542, "time", None),
        ("a dividend of 24 cents per share", 0.24, None, "USD"),
        ("Room rate: ¥18k/night", 18_000, None, "JPY"),
        ("Market cap: 560.3 bn USD", 560.3e9, None, "USD"),
        ("a fee of 3 bps", 0.03, "percent", None),
        ("Spotify hat 602 Millionen Nutzer", 602e6, None, None),
        ("dauert 4,5 Stunden", 16_200, "time", None),
        ("wind 6.7 m/s", 6.7 * 3600, "length/h", None),
        ("open around the clock", 86_400, "time", None),
    ],
)
def test_figures_as_answers_write_them(
    text: str, value: float, dim: str | None, currency: str | None
) -> None:
    [figure] = read(text).quantities
    assert figure.value == pytest.approx(value) and figure.dim == dim and figure.currency == currency


def test_a_clock_time_and_a_release_keep_their_kind() -> None:
    for said in ("at 14:30:00 UTC", "as of 14:30:00, the queue", "arrival time: 14:30:00"):
        assert [t.text for t in read(said).times] == ["14:30:00"], said  # a time of day
    assert read("removed in Python 3.11").quantities[0].exact  # a release is named, never measured
    assert not read("the BMI is 24.2").quantities[0].exact
    assert [(d.day, d.month, d.year) for d in read("lunedì 12 maggio 2025").dates] == [(12, 5, 2025)]
    assert [(d.day, d.month) for d in read("el 22 de marzo").dates] == [(22, 3)]
    assert read("landed on Mars on 18 February").dates[0].month == 2  # "Mars" only after a day


CASES: Cases = {
    "a duration to the second": [
        ("Pipeline run #18422 took about 15 minutes.", "Run #18422 finished after 14 min 32 s.", "fulfilled"),
        (
            "The winner finished in 2:05:42.",
            "The winner finished in 2 hours, 5 minutes and 42 seconds.",
            "fulfilled",
        ),
        ("The race was won in 1:58:13.", "The winner crossed the line in 1:58:31.", "not_fulfilled"),
    ],
    "a currency's hundredths and scales": [
        (
            "The quarterly dividend is $0.24 per share.",
            "The quarterly dividend is 24 cents per share.",
            "fulfilled",
        ),
        ("The room costs ¥18,000 per night.", "Room rate: ¥18k/night, breakfast not included.", "fulfilled"),
        ("Tesla's market cap is about $560 billion.", "Tesla's market cap: 560.3 bn USD.", "fulfilled"),
        ("Tesla's market cap is about $560 billion.", "Tesla's market cap: 610 bn USD.", "not_fulfilled"),
    ],
    "a speed in any unit": [
        ("The wind speed in Chicago is 15 mph.", "Observed wind in Chicago: 6.7 m/s sustained.", "fulfilled"),
        (
            "The wind speed in Chicago is 15 mph.",
            "Observed wind in Chicago: 9.5 m/s sustained.",
            "not_fulfilled",
        ),
    ],
    "a release number is a name": [
        (
            "Python 3.12 removed the distutils module.",
            "distutils was removed in Python 3.11.",
            "not_fulfilled",
        ),
        ("Python 3.12 removed the distutils module.", "distutils was removed in Python 3.12.", "fulfilled"),
    ],
    "a bare figure is not contradicted by a measure": [
        (
            "The earthquake had a magnitude of 6.4.",
            "An M6.4 earthquake struck at a depth of 10 km.",
            "abstain:unit",
        ),
    ],
    "a qualifier of the claim said with one value only": [
        (  # the match is said right after the claim's qualifier: the other value is no decisive rival
            "The p95 response time was 182 ms.",
            "For the load test: average response time was 128 ms, p95 was 182 ms, and p99 was 311 ms.",
            "abstain:contradiction",
        ),
        (  # the claim's qualifier is said only with another value, the match with another word
            "The average (mean) order value in 2023 was $84.17.",
            "For 2023 orders: the median order value was $84.17, while the mean was higher at $97.60.",
            "abstain:contradiction",
        ),
    ],
    "a list item's own aside says what its value is": [
        (
            "The median time to merge was about 2.4 days.",
            "PR activity:\n\n- Opened: 47 PRs\n- Merged: 38 PRs (median time to merge: 2.4 days)\n"
            "- Closed without merge: 6",
            "fulfilled",
        ),
    ],
    "a place by its name in another language": [
        (
            "The train from Berlin to Munich takes 4 hours 30 minutes.",
            "The fastest ICE takes 270 minutes, leaving Berlin Hbf at 08:30 and arriving in München Hbf at 13:00.",
            "fulfilled",
        ),
    ],
    "an answer in another language, on its figures": [
        (
            "Apple's (AAPL) closing price on 2024-03-15 was $172.62.",
            "D'après les données de marché, l'action Apple (AAPL) a clôturé à 172,62 USD le 15/03/2024.",
            "fulfilled",
        ),
        (  # a count spelled in that language is no absent figure
            "The employee's notice period is 3 months.",
            "Die Kündigungsfrist beträgt laut Arbeitsvertrag drei Monate zum Quartalsende. Eine Probezeit besteht nicht mehr.",
            "abstain:language",
        ),
        (  # nor is a time written "19 h"
            "Chez Margaux opens at 19:00 on Saturdays.",
            "D'après le site du restaurant, Chez Margaux ouvre le samedi à 19 h et ferme à 23 h 30.",
            "abstain:language",
        ),
        (  # a negation of that language: its grammar is not read
            "The latest stable version is 4.2.1.",
            "Die neueste stabile Version ist nicht 4.2.1 laut der Seite.",
            "abstain:language",
        ),
        (  # only a name found: no language-independent evidence
            "Voxelia acquired Groupe Lemaire's digital division.",
            "C'est le Groupe Lemaire qui a racheté Voxelia en mars 2023.",
            "abstain:language",
        ),
        (  # a figure stated nowhere is absent in any Latin-script language
            "The meeting has 5 attendees.",
            "D'après le calendrier, la réunion du lundi compte 7 participants et elle est dans la salle B.",
            "not_fulfilled",
        ),
    ],
    "a hedge qualifies the sentence of the values": [
        (
            "fastjson-lite has about 1.3 million weekly downloads.",
            "The latest version of fastjson-lite appears to be 4.12.1, though I'm not sure. It was released "
            "on 2024-08-22 and has around 1.3 million weekly downloads.",
            "fulfilled",
        ),
        (
            "fastjson-lite has about 1.3 million weekly downloads.",
            "fastjson-lite probably has 1.3 million weekly downloads.",
            "partially_fulfilled",
        ),
    ],
}


@each_case(CASES)
def test_each_class(claim: str, answer: str, expected: str) -> None:
    check_case(claim, answer, expected)
