"""The deterministic judge reads an answer's tables and lists (``judge.layout``) and counts a claim
figure only where the answer attaches it to the claim's subject (``judge.attributed``)."""

from __future__ import annotations

import pytest

from atlasrun.judge.attributed import attributed
from atlasrun.judge.base import Abstention
from atlasrun.judge.deterministic import VERSION, DeterministicJudge
from atlasrun.judge.layout import Layout
from atlasrun.judge.reading import read

JUDGE = DeterministicJudge()

DAILY = """Here are the last three sessions for MSFT from the quotes tool:

| Date | Close | Volume |
|---|---|---|
| 2025-02-03 | 410.92 | 22.1M |
| 2025-02-04 | 414.35 | 25.8M |
| 2025-02-05 | 412.08 | 19.4M |

The stock ended the week slightly higher."""

CITIES = """Forecast for Thursday:

| Metric | Lyon | Marseille |
|---|---|---|
| High | 19 °C | 23 °C |
| Low | 9 °C | 14 °C |

Both cities stay dry."""

TANKS = """Readings from the three tanks:

- North tank: 1,240 litres
- East tank: 980 litres
- South tank: 1,515 litres

All three are within their normal range."""

SERVICES = """Deploy timings for the release:

- **Build:** 6 minutes
- **Tests:** 14 minutes

Both stages finished without retries."""

RANKED = """Stations with the most weekday boardings:

1. Central Terminal — 48,200
2. Riverside — 31,750
3. Old Market — 22,400"""


def _label(claim: str, answer: str) -> str | None:
    return JUDGE.judge_sync(claim, answer).label


def _structure(claim: str, answer: str) -> object:
    """What the answer's structure alone says of the claim (None: nothing against it)."""
    return attributed(read(claim, claim=True), read(answer))


def test_the_version_names_the_structure_reading() -> None:
    assert int(VERSION.split("/")[1]) >= 7


def test_a_table_is_read_as_rows_and_columns_of_sibling_records() -> None:
    layout = Layout(DAILY)
    rows, columns = layout.groups
    assert [DAILY[slice(*r.key)] for r in rows.records] == ["2025-02-03", "2025-02-04", "2025-02-05"]
    assert [DAILY[slice(*c.key)] for c in columns.records] == ["Close", "Volume"]
    assert columns.across and not rows.across
    assert [DAILY[slice(*cell)] for cell in rows.records[1].cells] == ["2025-02-04", "414.35", "25.8M"]


def test_list_items_are_keyed_by_their_label() -> None:
    (items,) = Layout(TANKS).groups
    assert [TANKS[slice(*r.key)] for r in items.records] == ["North tank", "East tank", "South tank"]
    assert [TANKS[slice(*r.cells[0])] for r in items.records] == [
        "1,240 litres",
        "980 litres",
        "1,515 litres",
    ]


def test_a_value_from_another_days_row_fails_when_the_claims_day_has_its_own() -> None:
    verdict = JUDGE.judge_sync("MSFT closed at $414.35 on February 5, 2025.", DAILY)
    assert verdict.label == "not_fulfilled"
    assert "'2025-02-04'" in verdict.reason and "'412.08'" in verdict.reason
    assert _structure("MSFT closed at $412.08 on February 5, 2025.", DAILY) is None


def test_a_dated_table_without_the_claims_day_is_no_support() -> None:
    found = _structure("MSFT closed at $414.35 on February 6, 2025.", DAILY)
    assert isinstance(found, Abstention) and "has no row" in found.reason


def test_a_transposed_table_attaches_a_value_to_its_column() -> None:
    found = _structure("The high in Marseille on Thursday is 19 °C.", CITIES)
    assert found == ("not_fulfilled", "19 °C is said of 'Lyon', not of 'Marseille', which has '23 °C'")
    assert _label("The high in Marseille on Thursday is 19 °C.", CITIES) == "not_fulfilled"
    assert _structure("The high in Marseille on Thursday is 23 °C.", CITIES) is None


@pytest.mark.parametrize(
    ("claim", "answer", "rival"),
    [
        ("The east tank holds 1,515 litres.", TANKS, "980 litres"),  # the south tank's reading
        ("The test stage took 6 minutes.", SERVICES, "14 minutes"),  # the build's time
    ],
)
def test_a_value_in_another_list_item_fails(claim: str, answer: str, rival: str) -> None:
    found = _structure(claim, answer)
    assert (
        isinstance(found, tuple) and found[0] == "not_fulfilled" and found[1].endswith(f"which has '{rival}'")
    )
    assert _label(claim, answer) == "not_fulfilled"


@pytest.mark.parametrize(
    ("claim", "answer"),
    [("The east tank holds 980 litres.", TANKS), ("The test stage took 14 minutes.", SERVICES)],
)
def test_a_value_in_its_own_list_item_stands(claim: str, answer: str) -> None:
    assert _structure(claim, answer) is None


def test_a_column_header_that_says_what_is_measured_is_no_other_subject() -> None:
    answer = """Cloud spend by service:

| Service | Mar 2025 | Feb 2025 | Change |
|---|---|---|---|
| Compute | $9,120 | $8,400 | +8.6% |
| Storage | $1,310 | $1,290 | +1.6% |"""
    assert _structure("Compute spend rose about 8.6% from February to March 2025.", answer) is None


def test_the_first_of_a_ranked_list_is_its_first_item() -> None:
    verdict = JUDGE.judge_sync("The station with the most weekday boardings is Riverside.", RANKED)
    assert verdict.label == "not_fulfilled" and "Riverside is item 2" in verdict.reason
    assert _structure("The station with the most weekday boardings is Central Terminal.", RANKED) is None
    assert _structure("The station with the second most weekday boardings is Riverside.", RANKED) is None
