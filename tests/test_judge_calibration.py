"""The calibration layer of the deterministic judge (``judge.calibration``): the shipped weights load
and are validated, the fitting script's leave-one-set-out figures are reproducible, and the judge
abstains exactly where the layer says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from atlasrun.judge.calibration import Calibration, load_calibration, parse_calibration
from atlasrun.judge.deterministic import VERSION, DeterministicJudge
from atlasrun.judge.evidence_features import FEATURES, decided_by, evidence_features

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import fit_judge_calibration as fitting

PASS = ("The invoice total is $3,650.", "The invoice total is $3,650, due on Friday.")
FAIL = ("The invoice total is $3,650.", "The invoice total is $4,100.")


def test_the_shipped_calibration_loads_for_this_judge_and_its_features() -> None:
    calibration = load_calibration()
    assert calibration.judge_version == VERSION == "deterministic/7"
    assert tuple(calibration.features) == FEATURES
    assert set(calibration.models) == {"fulfilled"} == set(calibration.targets)
    assert calibration.targets["fulfilled"] == 0.95
    model = calibration.models["fulfilled"]
    assert len(model.weights) == len(FEATURES) and 0.0 < model.threshold < 1.0


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        (("features",), ["facts"], "features differ"),
        (("models", "fulfilled", "weights"), [0.0], "differ in length"),
        (("fitted_on",), [], "no label set"),
        (("models", "fulfilled", "scales"), None, "greater than 0"),
        (("targets",), {}, "needs a model"),
        (("models", "fulfilled", "unknown"), 1, "Extra inputs"),
    ],
)
def test_a_malformed_calibration_is_rejected(path: tuple[str, ...], value: object, error: str) -> None:
    raw = load_calibration().model_dump(mode="json")
    at = raw
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = [0.0] * len(FEATURES) if value is None else value
    with pytest.raises(ValidationError, match=error):
        parse_calibration(json.dumps(raw))


def _layer_at(threshold: float) -> Calibration:
    shipped = load_calibration()
    model = shipped.models["fulfilled"].model_copy(update={"threshold": threshold})
    return shipped.model_copy(update={"models": {"fulfilled": model}})


def test_the_judge_abstains_where_the_layer_does_not_keep_a_pass() -> None:
    strict = DeterministicJudge(calibration=_layer_at(fitting.NEVER)).judge_sync(*PASS)
    assert strict.label is None and strict.abstention is not None
    assert strict.abstention.kind == "calibration"
    assert strict.abstention.reason.startswith("fulfilled scored ") and "< 1.01" in strict.abstention.reason
    lenient = DeterministicJudge(calibration=_layer_at(0.0)).judge_sync(*PASS)
    row = evidence_features(PASS[0], PASS[1], lenient.reason)
    assert lenient.label == "fulfilled" and lenient.abstention is None
    assert lenient.confidence == round(load_calibration().models["fulfilled"].score(row), 3)
    # a label the layer does not gate stands as the rules give it
    failed = DeterministicJudge(calibration=_layer_at(fitting.NEVER)).judge_sync(*FAIL)
    assert failed.label == "not_fulfilled" and failed.confidence == 1.0


def test_the_rules_verdict_is_the_judge_before_the_layer() -> None:
    judge = DeterministicJudge(calibration=_layer_at(fitting.NEVER))
    assert judge.rules_verdict(*PASS).label == "fulfilled"
    assert judge.judge_sync(*PASS).label is None


def test_the_deciding_rule_is_read_from_the_reason() -> None:
    assert decided_by("contradicted: $3,650 (answer: $4,100); matched 0/1 key facts") == "rule_contradicted"
    assert decided_by("answer refuses or reports a failure ('could not')") == "rule_refusal"
    assert decided_by("matched 1/1 key facts ($3,650), 2/2 content words") is None
    row = evidence_features(*FAIL, "contradicted: $3,650 (answer: $4,100)")
    assert len(row) == len(FEATURES) and row[FEATURES.index("rule_contradicted")] == 1.0
    assert row[FEATURES.index("facts_contradicted")] == 1.0


def test_a_threshold_is_the_lowest_score_meeting_the_precision() -> None:
    scored = [(0.9, True, 1.0), (0.8, True, 1.0), (0.7, False, 1.0), (0.6, True, 1.0)]
    assert fitting.choose_threshold(scored, 0.75) == 0.6  # 3 right of 4 kept
    assert fitting.choose_threshold(scored, 0.8) == 0.8
    assert fitting.choose_threshold([(0.5, False, 1.0)], 0.95) == fitting.NEVER


def test_the_fit_ranks_the_right_class_higher() -> None:
    xs = [[float(i % 5), float(i % 3)] for i in range(60)]
    ys = [float(x[0] >= 2) for x in xs]
    model = fitting.fit_logistic(xs, ys, [1.0] * len(xs))
    assert model.score([4.0, 1.0]) > 0.8 > 0.2 > model.score([0.0, 1.0])
    assert fitting.auc([(model.score(x), bool(y)) for x, y in zip(xs, ys, strict=True)]) == 1.0


def test_the_cross_validation_is_reproducible() -> None:
    """Same rows, same figures twice, in a fresh fitter each time (a small slice of three sets)."""
    rows = fitting.collect(("judge_labels_dev5", "judge_labels_dev6", "judge_labels_dev7"), limit=60)
    runs = [fitting.report(fitting.cross_validate(fitting.Fitter(rows), fitting.LABELS)) for _ in range(2)]
    assert runs[0] == runs[1]
    assert all(name in runs[0] for name in ("judge_labels_dev5", "judge_labels_dev6", "judge_labels_dev7"))
    assert fitting.Fitter(rows).layer(frozenset({"judge_labels_dev5", "judge_labels_dev6"}), ("fulfilled",))
