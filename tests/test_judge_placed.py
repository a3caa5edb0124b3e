"""Session 13: a pass needs the claim's value said in the claim's place (``judge.placed``), not as a
past state, another period's column, the other end of a move or a name the answer takes back; and a
sum of money is never a percentage. One case per class, worded apart from the development sets."""

from __future__ import annotations

from judge_cases import Cases, check_case, each_case

CASES: Cases = {
    "a figure said only as a past state or a baseline": [
        (
            "The savings account pays 4.35% interest.",
            "Rates from the bank's API: the savings account pays 3.95% interest (previously 4.35% three "
            "months ago). The fixed-term deposit pays 4.6% for 12 months.",
            "not_fulfilled",  # within a point of the current rate, but said as the old one
        ),
        (
            "The warehouse holds 8,200 pallets.",
            "Capacity figures from the facilities tool: the warehouse holds 8,450 pallets, up from 8,200 "
            "pallets a year earlier.",
            "abstain:contradiction",  # the current figure is within 5%: uncertain, never a pass
        ),
    ],
    "the figure said plainly beside its past value: the pass stands": [
        (
            "The standard plan costs $29 per month.",
            "The pricing page lists the standard plan at $29 per month (previously $24, before the "
            "March update). The premium plan is $49 per month.",
            "fulfilled",
        ),
    ],
    "a table value under another period's column": [
        (
            "The mobile app had 1,412 tickets in March 2025.",
            "Ticket volume by product:\n\n| Product | Mar 2025 | Feb 2025 |\n|---|---|---|\n"
            "| Mobile app | 1,288 | 1,412 |\n| Web app | 2,930 | 2,874 |\n\nMobile tickets fell after the "
            "login fix shipped.",
            "not_fulfilled",
        ),
        (
            "The mobile app had 1,288 tickets in March 2025.",
            "Ticket volume by product:\n\n| Product | Mar 2025 | Feb 2025 |\n|---|---|---|\n"
            "| Mobile app | 1,288 | 1,412 |\n| Web app | 2,930 | 2,874 |\n\nMobile tickets fell after the "
            "login fix shipped.",
            "fulfilled",
        ),
    ],
    "a value after 'from' where the claim has 'to', or the reverse": [
        (
            "The design review was moved from Monday to Thursday.",
            "Your calendar for the week starting Monday, 7 April: the design review was moved from "
            "Thursday at Kofi's request and now sits in the 14:00 slot on Monday.",
            "not_fulfilled",
        ),
    ],
    "a name the answer takes back": [
        (
            "Lucia Ferri approved the purchase order.",
            "Purchase order PO-3318 was approved by Lucia Ferri. Sorry, I read the wrong row: the "
            "approver is Anders Holm, and Lucia Ferri only commented on it.",
            "abstain:contradiction",
        ),
    ],
    "a sum of money is never a percentage": [
        (
            "Globex shares closed up 1.8% on Friday.",
            "Globex ended Friday at $212.40, down 1.8% on the session, which leaves its market value "
            "near $1.2 trillion.",
            "not_fulfilled",
        ),
    ],
}


@each_case(CASES)
def test_placed_classes(claim: str, answer: str, expected: str) -> None:
    check_case(claim, answer, expected)
