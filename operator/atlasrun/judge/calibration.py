"""The calibration layer: when the deterministic judge's verdict is kept, decided by measurement.

For each gated label (``fulfilled``: a false pass is the worst error), a logistic score of the pair's
evidence (``judge.evidence_features``) estimates how likely that verdict agrees with a grader's
label. The verdict stands only where the score reaches the label's threshold; below it the judge
abstains (kind ``calibration``). Verdicts of the other labels stand as the rules give them. Weights and thresholds are fitted offline by ``bench/fit_judge_calibration.py``
on the development label sets, one grader a set: each threshold is the lowest whose
leave-one-set-out precision meets the label's target (``fulfilled`` 0.95), so the estimate is of an
unseen grader's text. They live in ``calibration.json`` next to this module; plain arithmetic here.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PositiveFloat, TypeAdapter

from atlasrun.judge.base import Label
from atlasrun.judge.evidence_features import FEATURES

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


class LabelModel(BaseModel):
    """A logistic score on standardised features: sigmoid(bias + sum(w * (x - mean) / scale))."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    means: list[float]
    scales: list[PositiveFloat]
    weights: list[float]
    bias: float
    threshold: float = Field(description="keep the verdict when the score is at least this")

    def score(self, row: list[float]) -> float:
        z = self.bias + sum(
            w * (x - m) / s for w, x, m, s in zip(self.weights, row, self.means, self.scales, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    judge_version: str  # the judge version these weights were fitted for
    features: list[str]
    fitted_on: list[str]  # the development label sets, one grader each
    targets: dict[Label, float]  # the precision each gated label's threshold was chosen for
    models: dict[Label, LabelModel]  # the gated labels; a verdict of another label always stands

    def keeps(self, label: Label, row: list[float]) -> tuple[bool, float]:
        """(whether a verdict of a gated label stands, its score)."""
        model = self.models[label]
        score = model.score(row)
        return score >= model.threshold, score


def _consistent(calibration: Calibration) -> Calibration:
    if tuple(calibration.features) != FEATURES:
        raise ValueError("features differ from judge.evidence_features.FEATURES: refit the calibration")
    if not calibration.fitted_on:
        raise ValueError("no label set named as fitted on")
    if not calibration.models or set(calibration.targets) != set(calibration.models):
        raise ValueError("every gated label needs a model and the precision it was chosen for")
    for label, m in calibration.models.items():
        if not len(m.means) == len(m.scales) == len(m.weights) == len(FEATURES):
            raise ValueError(
                f"the {label} model's means, scales and weights differ in length from the features"
            )
    return calibration


_CHECKED: TypeAdapter[Calibration] = TypeAdapter(Annotated[Calibration, AfterValidator(_consistent)])


def parse_calibration(text: str) -> Calibration:
    """A calibration file's content, validated: its schema, then that it fits these features."""
    return _CHECKED.validate_json(text)


@functools.cache
def load_calibration(path: Path = CALIBRATION_FILE) -> Calibration:
    return parse_calibration(path.read_text(encoding="utf-8"))
