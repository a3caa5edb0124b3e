"""bench/judge_separability.py's pieces: the AUC, the threshold choice, the logistic fit, the deciding
rule read from a reason, and a reproducible nested cross-validation on a small slice."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import judge_separability as separability
from judge_evidence_features import FEATURES, decided_by, evidence_features


def test_auc_counts_right_verdicts_ranked_above_wrong_ones() -> None:
    assert separability.auc([(0.9, True), (0.8, True), (0.2, False)]) == 1.0
    assert separability.auc([(0.9, False), (0.8, True), (0.2, False)]) == 0.5
    assert separability.auc([(0.5, True), (0.5, False)]) == 0.5  # a tie counts half
    assert separability.auc([(0.9, True)]) is None  # one class: nothing to rank


def test_a_threshold_is_the_lowest_score_meeting_the_precision() -> None:
    scored = [(0.9, True, 1.0), (0.8, True, 1.0), (0.7, False, 1.0), (0.6, True, 1.0)]
    assert separability.choose_threshold(scored, 0.75) == 0.6  # 3 right of 4 kept
    assert separability.choose_threshold(scored, 0.8) == 0.8
    assert separability.choose_threshold([(0.5, False, 1.0)], 0.95) == separability.NEVER


def test_the_fit_ranks_the_right_class_higher() -> None:
    xs = [[float(i % 5), float(i % 3)] for i in range(60)]
    ys = [float(x[0] >= 2) for x in xs]
    model = separability.fit_logistic(xs, ys, [1.0] * len(xs))
    assert model.score([4.0, 1.0]) > 0.8 > 0.2 > model.score([0.0, 1.0])
    assert separability.auc([(model.score(x), bool(y)) for x, y in zip(xs, ys, strict=True)]) == 1.0


def test_the_deciding_rule_is_read_from_the_reason() -> None:
    assert decided_by("contradicted: $3,650 (answer: $4,100); matched 0/1 key facts") == "rule_contradicted"
    assert decided_by("matched 1/1 key facts ($3,650), 2/2 content words") is None
    row = evidence_features("The invoice total is $3,650.", "The invoice total is $4,100.", "contradicted")
    assert len(row) == len(FEATURES) and row[FEATURES.index("facts_contradicted")] == 1.0


def test_the_cross_validation_is_reproducible() -> None:
    """Same rows, same table twice, in a fresh fitter each time (a small slice of three sets)."""
    sets = ("judge_labels_dev5", "judge_labels_dev6", "judge_labels_dev7")
    rows = separability.collect(sets, limit=40)
    runs = [
        separability.report(separability.cross_validate(separability.Fitter(rows), ("fulfilled",)))
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    assert all(name in runs[0] for name in sets)
