"""Can the deterministic judge's own evidence tell a right pass from a wrong one on an unseen grader?

    .venv/bin/python bench/judge_separability.py

Each development set was written by another grader, so holding one set out estimates the judge on
an unseen grader's text. For every label the judge gives, a logistic score of the pair's evidence
(``judge_evidence_features``: 46 numbers the rules already compute) predicts whether the verdict
agrees with the grader; each set weighs the same in every fit. A label's threshold is the lowest
score whose out-of-fold precision (leave-one-set-out over the fitting sets) meets its target. The
table is nested: for each held-out set, weights *and* thresholds come from the other sets only, and
it shows the judge's figures before and after abstaining below the threshold. Last, each label's
out-of-fold AUC per set (0.5: the scores rank right and wrong verdicts no better than chance).
The blind sets are never read. Plain Python (no numpy in the environment): Newton steps on an
L2-penalised log-likelihood.
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from atlasrun.judge.base import Label
from atlasrun.judge.deterministic import DeterministicJudge
from atlasrun.scoring.judge_eval import load_labels
from judge_evidence_features import evidence_features

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
DEV_SETS = (
    "judge_labels",
    "judge_labels_holdout",
    "judge_dev_classes",
    "judge_labels_dev2",
    "judge_labels_dev3",
    "judge_labels_dev4",
    "judge_labels_dev5",
    "judge_labels_dev6",
    "judge_labels_dev7",
)
LABELS: tuple[Label, ...] = ("fulfilled", "partially_fulfilled", "not_fulfilled")
TARGETS: dict[Label, float] = {"fulfilled": 0.95, "partially_fulfilled": 0.90, "not_fulfilled": 0.90}
# Gated first alone (a false pass is the worst error), then with the other two labels.
GATINGS: tuple[tuple[Label, ...], ...] = (("fulfilled",), LABELS)
L2 = 2.0  # on standardised features
NEWTON_STEPS = 30
NEVER = 1.01  # a threshold no score reaches: the label is always abstained on


@dataclass(frozen=True)
class LabelModel:
    """A logistic score on standardised features: sigmoid(bias + sum(w * (x - mean) / scale))."""

    means: list[float]
    scales: list[float]
    weights: list[float]
    bias: float
    threshold: float  # keep the verdict when the score is at least this

    def score(self, row: Sequence[float]) -> float:
        z = self.bias + sum(
            w * (x - m) / s for w, x, m, s in zip(self.weights, row, self.means, self.scales, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


@dataclass(frozen=True)
class Row:
    set: str
    expected: Label
    got: Label | None  # the rules' verdict; None: they abstained
    features: tuple[float, ...]


def collect(sets: Sequence[str], limit: int | None = None) -> list[Row]:
    """The judge's verdict and evidence of every pair of ``sets`` (the first ``limit`` of each)."""
    judge = DeterministicJudge()
    rows = []
    for name in sets:
        for pair in load_labels(DATA / f"{name}.jsonl")[:limit]:
            found = judge.judge_sync(pair.claim, pair.answer)
            row = evidence_features(pair.claim, pair.answer, found.reason)
            rows.append(Row(name, pair.label, found.label, tuple(row)))
    return rows


def set_weights(rows: Sequence[Row]) -> dict[str, float]:
    """Each set weighs the same in total (a grader is one sample of how graders write)."""
    sizes: dict[str, int] = {}
    for r in rows:
        sizes[r.set] = sizes.get(r.set, 0) + 1
    return {s: len(rows) / (len(sizes) * n) for s, n in sizes.items()}


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the matrix is positive definite)."""
    n = len(vector)
    a = [[*row, vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            if factor:
                a[r] = [x - factor * y for x, y in zip(a[r], a[col], strict=True)]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        out[r] = (a[r][n] - sum(a[r][c] * out[c] for c in range(r + 1, n))) / a[r][r]
    return out


def fit_logistic(xs: Sequence[Sequence[float]], ys: Sequence[float], ws: Sequence[float]) -> LabelModel:
    """Weighted L2-penalised logistic regression on standardised columns (bias not penalised)."""
    total = sum(ws)
    columns = [list(c) for c in zip(*xs, strict=True)]
    means = [sum(map(operator.mul, c, ws)) / total for c in columns]
    scales = []
    for c, m in zip(columns, means, strict=True):
        var = sum(w * (x - m) ** 2 for x, w in zip(c, ws, strict=True)) / total
        scales.append(math.sqrt(var) if var > 1e-12 else 1.0)
    z = [[1.0] * len(ys)] + [[(x - m) / s for x in c] for c, m, s in zip(columns, means, scales, strict=True)]
    d = len(z)
    beta = [0.0] * d
    for _ in range(NEWTON_STEPS):
        eta = [sum(b * col[i] for b, col in zip(beta, z, strict=True)) for i in range(len(ys))]
        p = [1.0 / (1.0 + math.exp(-max(min(e, 35.0), -35.0))) for e in eta]
        residual = [w * (pi - y) for w, pi, y in zip(ws, p, ys, strict=True)]
        curvature = [w * pi * (1.0 - pi) for w, pi in zip(ws, p, strict=True)]
        grad = [
            sum(map(operator.mul, residual, col)) + (L2 * b if j else 0.0)
            for j, (col, b) in enumerate(zip(z, beta, strict=True))
        ]
        hessian = [[0.0] * d for _ in range(d)]
        for j in range(d):
            weighted = list(map(operator.mul, curvature, z[j]))
            for k in range(j, d):
                hessian[j][k] = hessian[k][j] = sum(map(operator.mul, weighted, z[k]))
            hessian[j][j] += L2 if j else 1e-9
        step = _solve(hessian, grad)
        beta = [b - s for b, s in zip(beta, step, strict=True)]
        if max(abs(s) for s in step) < 1e-9:
            break
    return LabelModel(means, scales, beta[1:], beta[0], threshold=NEVER)


def choose_threshold(scored: Sequence[tuple[float, bool, float]], target: float) -> float:
    """The lowest score at which the kept verdicts' weighted precision meets ``target``."""
    best, right, kept = NEVER, 0.0, 0.0
    for score, correct, weight in sorted(scored, key=lambda t: -t[0]):
        kept += weight
        right += weight * correct
        if right >= target * kept:
            best = score
    return best


class Fitter:
    """Models fitted on a subset of the sets, each fitted once (the nested table reuses them)."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = rows
        self.weights = set_weights(rows)
        self._fitted: dict[tuple[frozenset[str], Label], LabelModel] = {}

    def model(self, sets: frozenset[str], label: Label) -> LabelModel:
        key = (sets, label)
        if key not in self._fitted:
            mine = [r for r in self.rows if r.set in sets and r.got == label]
            self._fitted[key] = fit_logistic(
                [r.features for r in mine],
                [float(r.expected == label) for r in mine],
                [self.weights[r.set] for r in mine],
            )
        return self._fitted[key]

    def threshold(self, sets: frozenset[str], label: Label) -> float:
        """From out-of-fold scores: each set scored by the model fitted on the others of ``sets``."""
        scored = []
        for held in sorted(sets):
            model = self.model(sets - {held}, label)
            scored += [
                (model.score(r.features), r.expected == label, self.weights[r.set])
                for r in self.rows
                if r.set == held and r.got == label
            ]
        return choose_threshold(scored, TARGETS[label])

    def out_of_fold(self, label: Label) -> dict[str, list[tuple[float, bool]]]:
        """Per set: (score by the model fitted on the other sets, verdict right) of its ``label`` verdicts."""
        sets = frozenset(r.set for r in self.rows)
        return {
            held: [
                (self.model(sets - {held}, label).score(r.features), r.expected == label)
                for r in self.rows
                if r.set == held and r.got == label
            ]
            for held in sorted(sets)
        }

    def layer(self, sets: frozenset[str], labels: Sequence[Label]) -> dict[Label, LabelModel]:
        return {
            label: replace(self.model(sets, label), threshold=self.threshold(sets, label)) for label in labels
        }


@dataclass(frozen=True)
class Figures:
    pairs: int
    answered: int
    precision: float | None  # of fulfilled
    accuracy: float | None  # on the answered pairs

    @property
    def abstention(self) -> float:
        return 1 - self.answered / self.pairs

    def cells(self) -> str:
        def f(x: float | None) -> str:
            return "  n/a" if x is None else f"{x:.3f}"

        return (
            f"{self.answered:4}/{self.pairs:<4} {self.abstention:6.1%} {f(self.precision)} {f(self.accuracy)}"
        )


def kept(row: Row, layer: dict[Label, LabelModel]) -> bool:
    """The rules gave a verdict and the layer keeps it (a label it does not gate is kept)."""
    if row.got is None:
        return False
    model = layer.get(row.got)
    return model is None or model.score(row.features) >= model.threshold


def figures(rows: Sequence[Row], layer: dict[Label, LabelModel]) -> Figures:
    """A set's figures with the verdicts ``layer`` keeps (empty: every verdict of the rules)."""
    answered = [r for r in rows if kept(r, layer)]
    said = [r for r in answered if r.got == "fulfilled"]
    return Figures(
        pairs=len(rows),
        answered=len(answered),
        precision=sum(r.expected == "fulfilled" for r in said) / len(said) if said else None,
        accuracy=sum(r.expected == r.got for r in answered) / len(answered) if answered else None,
    )


def cross_validate(fitter: Fitter, labels: Sequence[Label]) -> list[tuple[str, Figures, Figures]]:
    """(held-out set, the rules alone, the rules with a layer for ``labels`` fitted on the other sets)."""
    sets = frozenset(r.set for r in fitter.rows)
    table = []
    for held in sorted(sets):
        mine = [r for r in fitter.rows if r.set == held]
        table.append((held, figures(mine, {}), figures(mine, fitter.layer(sets - {held}, labels))))
    return table


def auc(scored: Sequence[tuple[float, bool]]) -> float | None:
    """How well the scores rank right verdicts above wrong ones (0.5: not at all); None: one class."""
    right = [s for s, ok in scored if ok]
    wrong = [s for s, ok in scored if not ok]
    if not right or not wrong:
        return None
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return wins / (len(right) * len(wrong))


def discrimination(fitter: Fitter) -> str:
    lines = ["out-of-fold AUC of each label's score (right vs wrong verdicts; - : no wrong verdict)"]
    for label in LABELS:
        cells = []
        for name, scored in fitter.out_of_fold(label).items():
            value = auc(scored)
            cells.append(f"{name.removeprefix('judge_')} {'-' if value is None else f'{value:.2f}'}")
        lines.append(f"  {label}: " + ", ".join(cells))
    return "\n".join(lines)


def report(table: Sequence[tuple[str, Figures, Figures]]) -> str:
    head = f"{'held-out set':<22} {'before: answered abst. prec. acc.':<36} after: answered abst. prec. acc."
    lines = [head]
    for name, before, after in table:
        lines.append(f"{name:<22} {before.cells():<36} {after.cells()}")
    for label, part in (
        ("mean of sets", table),
        ("mean dev4-dev7", [t for t in table if t[0][-1] in "4567"]),
    ):
        rules_alone = _means([t[1] for t in part])
        lines.append(f"{label:<22} {rules_alone:<36} {_means([t[2] for t in part])}")
    return "\n".join(lines)


def _means(figs: Sequence[Figures]) -> str:
    """Abstention, precision and accuracy averaged over sets (each set counts once)."""
    prec = [f.precision for f in figs if f.precision is not None]
    acc = [f.accuracy for f in figs if f.accuracy is not None]
    abstention = sum(f.abstention for f in figs) / len(figs)
    return f"{'':9} {abstention:6.1%} {sum(prec) / len(prec):.3f} {sum(acc) / len(acc):.3f}"


def main() -> int:
    fitter = Fitter(collect(DEV_SETS))
    for labels in GATINGS:
        print(
            f"leave-one-set-out, nested (weights and thresholds from the other sets only); gating {', '.join(labels)}"
        )
        print(report(cross_validate(fitter, labels)) + "\n")
    print(discrimination(fitter))
    return 0


if __name__ == "__main__":
    sys.exit(main())
