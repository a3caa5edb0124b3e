"""Statistics over task results, checked against hand-computed and published values (the one interval
method, McNemar's exact test, dropped tasks); and `atlas compare` end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from atlasrun.judge.base import ClaimVerdict, JudgeInfo, Label
from atlasrun.scoring.agreement import claim_agreement, cohens_kappa, cross_judge_rates
from atlasrun.scoring.claims import Judgement
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.stats import (
    bootstrap_mean,
    breakdown,
    common_tasks,
    coverage_ci,
    dropped_tasks,
    mcnemar,
    paired_comparison,
    pass_at_k,
    pass_hat_k,
    pass_rate_ci,
    repeat_stats,
    task_interval,
    wilson,
)
from atlasrun.scoring.store import ResultsDir
from atlasrun.scoring.summary import summarize

PRIMARY = JudgeInfo(name="primary", kind="llm", model="judge-a", version="1")
OTHER = JudgeInfo(name="other", kind="llm", model="judge-b", version="1")
F: Label = "fulfilled"
P: Label = "partially_fulfilled"
N: Label = "not_fulfilled"


def result(
    task_id: str,
    coverage: float | None = 1.0,
    *,
    model: str = "m",
    repeat: int = 0,
    status: str = "scored",
    threshold: float = 0.75,
    **extra: object,
) -> TaskResult:
    passed = None if coverage is None else coverage >= threshold
    return TaskResult.model_validate(
        {
            "task_id": task_id,
            "model": model,
            "repeat": repeat,
            "status": status,
            "error_kind": None
            if status == "scored"
            else "provider"
            if status == "error"
            else "server_not_enabled",
            "coverage": coverage,
            "passed": passed,
            "judge": PRIMARY,
            **extra,
        }
    )


# --- intervals: Wilson over tasks ----------------------------------------------------------------


@pytest.mark.parametrize(
    "passed,n,low,high",
    # reference values: Wilson score interval, z = 1.96 (Newcombe 1998, table I; 3/3 and 0/20 by hand)
    [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (4, 4, 0.5101, 1.0),
        (3, 3, 0.4385, 1.0),
    ],
)
def test_wilson_reference_values(passed: int, n: int, low: float, high: float) -> None:
    assert wilson(passed / n, n) == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))


def test_pass_rate_interval_is_wilson_over_tasks_and_deterministic() -> None:
    rows = [result(f"t{i}", 1.0 if i % 3 else 0.0) for i in range(30)]
    ci = pass_rate_ci(rows)
    # 20 of 30 pass: point 2/3, the Wilson interval at n = 30, the same for any line order.
    assert ci is not None and ci.point == pytest.approx(20 / 30) and ci.n == 30
    assert (ci.low, ci.high) == wilson(20 / 30, 30)
    assert ci.low < ci.point < ci.high and ci.half_width == pytest.approx((ci.high - ci.low) / 2)
    assert pass_rate_ci(list(reversed(rows))) == ci


def test_interval_width_shrinks_with_more_tasks() -> None:
    small = pass_rate_ci([result(f"t{i}", float(i % 2)) for i in range(20)])
    large = pass_rate_ci([result(f"t{i}", float(i % 2)) for i in range(500)])
    assert small is not None and large is not None
    assert small.point == large.point == 0.5
    # Half-width ~ 1.96 * sqrt(0.25 / n): about 0.21 for 20 tasks, 0.044 for 500.
    assert large.half_width < small.half_width / 3
    assert 0.19 < small.half_width < 0.22 and 0.04 < large.half_width < 0.05


def test_small_n_all_passed_is_not_certain() -> None:
    """3 tasks, all passed: the interval is [0.44, 1], not the degenerate [1, 1] of a bootstrap."""
    ci = pass_rate_ci([result(f"t{i}", 1.0) for i in range(3)])
    assert ci is not None and ci.point == 1.0 and ci.high == pytest.approx(1.0)
    assert ci.low == pytest.approx(0.4385, abs=1e-4)
    two = pass_rate_ci([result("a", 0.0), result("b", 0.0)])
    assert two is not None and two.low == 0.0 and two.high == pytest.approx(0.6576, abs=1e-4)
    cov = coverage_ci([result(f"t{i}", 1.0) for i in range(3)])
    assert cov is not None and (cov.low, cov.high) == (ci.low, ci.high)


def test_only_scored_results_count_and_empty_is_none() -> None:
    rows = [
        result("a", 1.0),
        result("b", 0.0),
        result("c", None, status="error"),
        result("d", None, status="excluded"),
    ]
    ci = pass_rate_ci(rows)
    assert ci is not None and ci.point == 0.5 and ci.n == 2
    assert pass_rate_ci([result("c", None, status="error")]) is None
    assert task_interval([]) is None and task_interval([[], []]) is None
    assert bootstrap_mean([]) is None


def test_repeats_cluster_by_task() -> None:
    # Task a: repeats pass, pass; task b: fail, pass. Pooled point 3/4 over n = 2 tasks, not 4 items.
    rows = [result("a", 1.0), result("a", 1.0, repeat=1), result("b", 0.0), result("b", 1.0, repeat=1)]
    ci = pass_rate_ci(rows)
    assert ci is not None and ci.point == 0.75 and ci.n == 2
    assert (ci.low, ci.high) == wilson(0.75, 2)
    # The same four verdicts as four independent tasks give a narrower interval.
    independent = pass_rate_ci([result(f"t{i}", r.coverage) for i, r in enumerate(rows)])
    assert independent is not None and independent.n == 4
    assert independent.half_width < ci.half_width
    # Ten repeats of three tasks, all passed: still n = 3, still [0.44, 1].
    many = pass_rate_ci([result(f"t{t}", 1.0, repeat=r) for t in range(3) for r in range(10)])
    assert many is not None and many.n == 3 and many.low == pytest.approx(0.4385, abs=1e-4)
    cov = coverage_ci([result("a", 0.5), result("a", 1.0, repeat=1), result("b", 0.0)])
    assert cov is not None and cov.n == 2 and cov.point == pytest.approx(0.5)


def test_coverage_ci_and_threshold_pass_rates() -> None:
    rows = [result("a", 1.0), result("b", 0.8), result("c", 0.6), result("d", 0.2)]
    cov = coverage_ci(rows)
    assert cov is not None and cov.point == pytest.approx((1.0 + 0.8 + 0.6 + 0.2) / 4)  # 0.65
    assert cov.n == 4 and (cov.low, cov.high) == wilson(0.65, 4)
    # Pass rates at the reported coverage thresholds, as summary.json states them (MCP-Atlas Appendix G).
    at = summarize(rows)["m"]["pass_rate_at"]
    # >= 0.5: a, b, c -> 3/4; >= 0.75: a, b -> 2/4; >= 0.9: a -> 1/4.
    assert at == {"0.5": 0.75, "0.75": 0.5, "0.9": 0.25}
    # A coverage exactly at the threshold passes (same tolerance as score_claims); none scored: None.
    assert summarize([result("x", 0.75)])["m"]["pass_rate_at"]["0.75"] == 1.0
    assert summarize([result("x", None, status="error")])["m"]["pass_rate_at"]["0.75"] is None


# --- breakdowns ----------------------------------------------------------------------------------


def test_breakdowns_by_domain_category_and_server() -> None:
    rows = [
        result("a", 1.0, domain="Finance", category="single_server/single_call", servers=["filesystem"]),
        result("b", 0.5, domain="Finance", category="multi_server/sequential", servers=["filesystem", "git"]),
        result("c", 0.8, domain="Code", category="multi_server/sequential", servers=["git", "calculator"]),
        result("d", None, status="error", domain="Code", category="multi_server/sequential", servers=["git"]),
    ]
    domain = breakdown(rows, "domain")
    assert list(domain) == ["Code", "Finance"]
    # Finance: a passes (1.0), b fails (0.5): pass rate 1/2, mean coverage (1.0 + 0.5) / 2 = 0.75.
    assert (
        domain["Finance"]["scored"],
        domain["Finance"]["pass_rate"],
        domain["Finance"]["mean_coverage"],
    ) == (2, 0.5, 0.75)
    # Code: c scored and passes; d errored (not in rates, still counted).
    assert (
        domain["Code"]["tasks"],
        domain["Code"]["scored"],
        domain["Code"]["errored"],
        domain["Code"]["pass_rate"],
    ) == (2, 1, 1, 1.0)
    category = breakdown(rows, "category")
    # multi_server/sequential: b (0.5, fail), c (0.8, pass): pass 1/2, coverage 1.3 / 2 = 0.65.
    seq = category["multi_server/sequential"]
    assert (seq["scored"], seq["pass_rate"], seq["mean_coverage"]) == (2, 0.5, pytest.approx(0.65))
    server = breakdown(rows, "server")
    # git: b (fail, 0.5), c (pass, 0.8), d (error): 2 scored, pass 1/2, coverage 0.65.
    assert (server["git"]["tasks"], server["git"]["scored"], server["git"]["pass_rate"]) == (3, 2, 0.5)
    # filesystem: a (pass, 1.0), b (fail, 0.5); calculator: c only.
    assert (server["filesystem"]["pass_rate"], server["filesystem"]["mean_coverage"]) == (0.5, 0.75)
    assert (server["calculator"]["scored"], server["calculator"]["pass_rate"]) == (1, 1.0)


# --- pass@k / pass^k -----------------------------------------------------------------------------


def test_pass_at_k_and_pass_hat_k_for_n3_c1() -> None:
    # n=3 repeats, c=1 pass.
    # pass@1 = 1 - C(2,1)/C(3,1) = 1 - 2/3 = 1/3;  pass@2 = 1 - C(2,2)/C(3,2) = 1 - 1/3 = 2/3;
    # pass@3 = 1 - C(2,3)/C(3,3) = 1 - 0/1 = 1.
    assert [pass_at_k(3, 1, k) for k in (1, 2, 3)] == pytest.approx([1 / 3, 2 / 3, 1.0])
    # pass^1 = C(1,1)/C(3,1) = 1/3;  pass^2 = C(1,2)/C(3,2) = 0/3 = 0;  pass^3 = C(1,3)/1 = 0.
    assert [pass_hat_k(3, 1, k) for k in (1, 2, 3)] == pytest.approx([1 / 3, 0.0, 0.0])


def test_repeat_stats_average_over_tasks() -> None:
    # Task a: 1 of 3 repeats pass; task b: 3 of 3 pass (pass@k = pass^k = 1 for every k).
    rows = (
        [result("a", c, repeat=i) for i, c in enumerate([1.0, 0.0, 0.0])]
        + [result("b", 1.0, repeat=i) for i in range(3)]
        + [result("b", None, repeat=3, status="error")]
    )
    stats = repeat_stats(rows)
    assert stats is not None and (stats.tasks, stats.repeats_min, stats.repeats_max) == (2, 3, 3)
    # pass@k = (a + 1) / 2: k=1 (1/3 + 1)/2 = 2/3, k=2 (2/3 + 1)/2 = 5/6, k=3 (1 + 1)/2 = 1.
    assert [s.pass_at_k for s in stats.by_k] == pytest.approx([2 / 3, 5 / 6, 1.0])
    # pass^k = (a + 1) / 2: k=1 (1/3 + 1)/2 = 2/3, k=2 (0 + 1)/2 = 1/2, k=3 1/2.
    assert [s.pass_hat_k for s in stats.by_k] == pytest.approx([2 / 3, 0.5, 0.5])
    assert repeat_stats([]) is None


# --- McNemar and paired comparison ---------------------------------------------------------------


def exact_two_sided(b: int, c: int) -> float:
    """The two-sided exact binomial p of McNemar's test, in exact fractions (the reference)."""
    n = b + c
    tail = sum(Fraction(math.comb(n, i), 2**n) for i in range(min(b, c) + 1))
    return float(min(Fraction(1), 2 * tail))


def test_mcnemar_exact_for_few_discordant_pairs() -> None:
    # b=1, c=6, n=7: P(X <= 1) = (C(7,0) + C(7,1)) / 2^7 = (1 + 7) / 128 = 0.0625; two-sided 0.125.
    test = mcnemar(1, 6)
    assert test.method == "exact binomial, two-sided" and test.p_value == pytest.approx(0.125)
    # b=c=3: the two-sided p caps at 1.
    assert mcnemar(3, 3).p_value == 1.0
    assert mcnemar(0, 0).p_value == 1.0


@pytest.mark.parametrize("b,c", [(30, 10), (20, 5), (10, 30), (200, 170), (1500, 1400)])
def test_mcnemar_is_exact_at_every_size(b: int, c: int) -> None:
    """No chi-square switch: at 40 discordant pairs the continuity-corrected chi-square says
    p = 0.00266 where the exact test says 0.00222."""
    test = mcnemar(b, c)
    assert test.method == "exact binomial, two-sided"
    assert test.p_value == pytest.approx(exact_two_sided(b, c), rel=1e-12)
    assert "statistic" not in test.model_dump()


def test_dropped_tasks_say_why_the_other_side_has_no_score() -> None:
    a = [
        result("both", 1.0, model="A"),
        result("b-errored", 1.0, model="A"),
        result("b-excluded", 1.0, model="A"),
        result("b-missing", 1.0, model="A"),
        result("b-other-repeat", 1.0, model="A"),
        result("a-errored", None, model="A", status="error"),
        result("nobody", None, model="A", status="error"),
    ]
    b = [
        result("both", 0.0, model="B"),
        result("b-errored", None, model="B", status="error"),
        result("b-excluded", None, model="B", status="excluded"),
        result("b-other-repeat", 1.0, model="B", repeat=1),
        result("a-errored", 1.0, model="B"),
        result("a-missing", 1.0, model="B"),
        result("nobody", None, model="B", status="error"),
    ]
    found = {(d.task, d.unscored_by, d.reason) for d in dropped_tasks(a, b)}
    assert found == {
        ("b-errored", "b", "error"),
        ("b-excluded", "b", "excluded"),
        ("b-missing", "b", "missing"),
        ("b-other-repeat", "b", "other repeats"),
        ("b-other-repeat", "a", "other repeats"),
        ("a-errored", "a", "error"),
        ("a-missing", "a", "missing"),
    }
    cmp = paired_comparison(a, b)
    assert cmp is not None and cmp.tasks == 1 and len(cmp.dropped) == 7
    assert cmp.dropped_by_reason == {
        "a": {"error": 1, "missing": 1, "other repeats": 1},
        "b": {"error": 1, "excluded": 1, "missing": 1, "other repeats": 1},
    }


def test_paired_comparison_on_shared_scored_tasks() -> None:
    a = [
        result("t1", 1.0, model="A"),
        result("t2", 1.0, model="A"),
        result("t3", 0.5, model="A"),
        result("t4", 1.0, model="A"),
        result("only-a", 1.0, model="A"),
    ]
    b = [
        result("t1", 1.0, model="B"),
        result("t2", 0.0, model="B"),
        result("t3", 1.0, model="B"),
        result("t4", 0.5, model="B"),
        result("only-b", 1.0, model="B"),
        result("t5", None, model="B", status="error"),
    ]
    cmp = paired_comparison(a, b)
    assert cmp is not None and cmp.pairs == cmp.tasks == 4
    # A passes t1 t2 t4 (3/4), B passes t1 t3 (2/4): delta +1/4.
    assert (cmp.pass_rate_a, cmp.pass_rate_b, cmp.pass_rate_diff.point) == (0.75, 0.5, 0.25)
    # Coverage: A (1 + 1 + 0.5 + 1)/4 = 0.875, B (1 + 0 + 1 + 0.5)/4 = 0.625, delta 0.25.
    assert cmp.coverage_diff.point == pytest.approx(0.25)
    assert cmp.pass_rate_diff.low <= 0.25 <= cmp.pass_rate_diff.high
    # Discordant: A-only passes t2, t4 (b=2); B-only t3 (c=1). Exact: 2 * (C(3,0)+C(3,1))/8 = 1.
    assert (cmp.mcnemar.b, cmp.mcnemar.c, cmp.mcnemar.p_value) == (2, 1, 1.0)
    assert paired_comparison(a, [result("zzz", 1.0, model="B")]) is None
    # Secondary, unpaired: A passes 4 of its 5 scored tasks (t3 at 0.5 fails), B 3 of 5 (the error
    # on t5 is not scored): 0.8 vs 0.6, on different task sets.
    assert cmp.unpaired_a is not None and cmp.unpaired_b is not None
    assert (cmp.unpaired_a.tasks, cmp.unpaired_a.pass_rate) == (5, 0.8)
    assert (cmp.unpaired_b.tasks, cmp.unpaired_b.pass_rate) == (5, 0.6)
    assert common_tasks(a + b) == {"t1", "t2", "t3", "t4"}


def test_mcnemar_aggregates_repeats_per_task() -> None:
    # Two repeats per task. A passes both repeats of t1-t3 where B fails both; on t4 B passes both
    # and A fails both; on t5 each passes one repeat (a tie: concordant).
    a, b = [], []
    for rep in (0, 1):
        for t in ("t1", "t2", "t3"):
            a.append(result(t, 1.0, model="A", repeat=rep))
            b.append(result(t, 0.0, model="B", repeat=rep))
        a.append(result("t4", 0.0, model="A", repeat=rep))
        b.append(result("t4", 1.0, model="B", repeat=rep))
        a.append(result("t5", 1.0 if rep == 0 else 0.0, model="A", repeat=rep))
        b.append(result("t5", 0.0 if rep == 0 else 1.0, model="B", repeat=rep))
    cmp = paired_comparison(a, b)
    assert cmp is not None and (cmp.pairs, cmp.tasks) == (10, 5)
    # Task level: b=3, c=1, exact p = 2 * (C(4,0) + C(4,1)) / 2^4 = 0.625. Pairing by repeat would
    # count b=7, c=3 and treat dependent repeats as independent evidence.
    assert (cmp.mcnemar.b, cmp.mcnemar.c, cmp.mcnemar.method) == (3, 1, "exact binomial, two-sided")
    assert cmp.mcnemar.p_value == pytest.approx(0.625)
    assert "repeats aggregated" in cmp.mcnemar_unit


def test_intervals_do_not_depend_on_line_order() -> None:
    a = [result(f"t{i}", 1.0 if i % 3 else 0.0, model="A") for i in range(12)]
    b = [result(f"t{i}", 1.0 if i % 2 else 0.5, model="B") for i in range(12)]
    shuffled_a, shuffled_b = a[5:] + a[:5], list(reversed(b))
    assert pass_rate_ci(a) == pass_rate_ci(shuffled_a)
    assert coverage_ci(b) == coverage_ci(shuffled_b)
    assert paired_comparison(a, b) == paired_comparison(shuffled_a, shuffled_b)


# --- cross-judge ---------------------------------------------------------------------------------


def verdicts(labels: list[Label | None]) -> list[ClaimVerdict]:
    return [
        ClaimVerdict.labelled(f"claim {i}", label, "") if label else ClaimVerdict.failed(f"claim {i}", "x")
        for i, label in enumerate(labels)
    ]


def judged(
    task_id: str,
    primary: list[Label | None],
    other: list[Label | None],
    *,
    model: str = "m",
    passed_other: bool | None = None,
    status: str = "scored",
) -> TaskResult:
    claims, second = verdicts(primary), verdicts(other)
    cov = sum(v.score or 0 for v in claims) / len(claims)
    r = result(task_id, cov, model=model, status=status, claims=claims)
    r.secondary = [Judgement(judge=OTHER, claims=second, passed=passed_other)]
    return r


def test_cohens_kappa_on_a_hand_counted_table() -> None:
    a: list[Label | None] = [F, F, F, F, P, P, N, N, N, F]
    b: list[Label | None] = [F, F, F, P, P, N, N, N, F, F]
    # Agreements at 1,2,3,5,7,8,10: p_o = 7/10 = 0.7.
    # Marginals A: F 5, P 2, N 3; B: F 5, P 2, N 3.  p_e = .5*.5 + .2*.2 + .3*.3 = .38.
    # kappa = (0.7 - 0.38) / (1 - 0.38) = 0.32 / 0.62 = 16/31 = 0.516129...
    assert cohens_kappa([(x, y) for x, y in zip(a, b, strict=False) if x and y]) == pytest.approx(16 / 31)
    assert cohens_kappa([(F, F), (F, F)]) is None  # p_e = 1: undefined
    assert cohens_kappa([]) is None
    # Perfect agreement across two labels: p_o = 1, p_e = .5*.5 + .5*.5 = .5 -> kappa 1.
    assert cohens_kappa([(F, F), (N, N)]) == 1.0

    # Same table through task results; a failed claim (None) on either side is skipped.
    r1 = judged("t1", [*a[:5], None], [*b[:5], F])
    r2 = judged("t2", [*a[5:], F], [*b[5:], None])
    (pair,) = claim_agreement([r1, r2])
    assert (pair.judge_a, pair.judge_b, pair.claims, pair.skipped) == ("other", "primary", 10, 2)
    assert pair.agreement == pytest.approx(0.7) and pair.kappa == pytest.approx(16 / 31)


def test_cross_judge_pass_rates_and_range() -> None:
    rows = [
        judged("t1", [F], [F], passed_other=True),
        judged("t2", [F], [N], passed_other=False),
        judged("t3", [F], [F], passed_other=True),
        judged("t4", [N], [N], passed_other=False),
        judged("t5", [F], [None], passed_other=None),  # other judge failed: dropped from both
        judged("t1", [F], [F], model="x", passed_other=False),
    ]
    rates = cross_judge_rates(rows)
    m = rates["m"]
    # On t1..t4: primary passes t1 t2 t3 = 3/4, other passes t1 t3 = 2/4; range 0.75 - 0.5 = 0.25.
    assert (m.tasks, m.dropped, m.primary) == (4, 1, "primary")
    assert m.pass_rate == {"primary": 0.75, "other": 0.5} and m.range == pytest.approx(0.25)
    assert rates["x"].pass_rate == {"primary": 1.0, "other": 0.0} and rates["x"].range == 1.0


# --- atlas compare, end to end -------------------------------------------------------------------


def atlas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args], capture_output=True, text=True, timeout=120
    )


def write_results(root: Path, rows: list[TaskResult]) -> Path:
    results = ResultsDir(root)
    root.mkdir(parents=True, exist_ok=True)
    for row in rows:
        results.append(row)
    return root


def test_atlas_compare_two_results_dirs(tmp_path: Path) -> None:
    # A passes t0..t7 and fails t8, t9; B passes t0, t1 and t8 only; t10 only in A; t11 errored in B
    # only (scored by neither: not a dropped task); A scored t12 and t13, which B errored and excluded.
    cov_a = [1.0] * 8 + [0.5, 0.0]
    cov_b = [1.0, 1.0] + [0.5] * 6 + [1.0, 0.0]
    out_a = write_results(
        tmp_path / "a",
        [result(f"t{i}", c, model="alpha") for i, c in enumerate(cov_a)]
        + [result(t, 1.0, model="alpha") for t in ("t10", "t12", "t13")],
    )
    out_b = write_results(
        tmp_path / "b",
        [result(f"t{i}", c, model="beta") for i, c in enumerate(cov_b)]
        + [
            result("t11", None, model="beta", status="error"),
            result("t12", None, model="beta", status="error"),
            result("t13", None, model="beta", status="excluded"),
        ],
    )
    proc = atlas("compare", str(out_a), str(out_b), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["a"]["model"], doc["b"]["model"], doc["pairs"]) == ("alpha", "beta", 10)
    assert doc["dropped_by_reason"] == {"b": {"error": 1, "excluded": 1, "missing": 1}}
    assert [(d["task"], d["reason"]) for d in doc["dropped"]] == [
        ("t10", "missing"),
        ("t12", "error"),
        ("t13", "excluded"),
    ]
    assert doc["mcnemar"]["method"] == "exact binomial, two-sided" and doc["differences"] == []
    # Pass: A 8/10, B 3/10, delta 0.5. Coverage: A 8.5/10 = 0.85, B 6/10 = 0.6, delta 0.25.
    assert (doc["pass_rate_a"], doc["pass_rate_b"]) == (0.8, 0.3)
    assert doc["pass_rate_diff"]["point"] == pytest.approx(0.5)
    assert doc["coverage_diff"]["point"] == pytest.approx(0.25)
    # Discordant: A-only t2..t7 (b=6), B-only t8 (c=1): exact p = 2 * (1 + 7)/128 = 0.125.
    assert (doc["mcnemar"]["b"], doc["mcnemar"]["c"]) == (6, 1)
    assert doc["mcnemar"]["p_value"] == pytest.approx(0.125)

    table = atlas("compare", str(out_a), str(out_b))
    assert table.returncode == 0, table.stderr
    assert "paired tasks: 10" in table.stdout and "80.0%" in table.stdout and "30.0%" in table.stdout
    assert (
        "dropped tasks: 3 scored by one side only (not scored by B: 1 error, 1 excluded, 1 missing)"
        in table.stdout
    )
    assert "McNemar (exact binomial, two-sided)" in table.stdout
    assert "+50.0 pp" in table.stdout and "b=6" in table.stdout and "c=1" in table.stdout
    assert "p=0.125" in table.stdout


def test_atlas_compare_two_models_of_one_dir_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from atlasrun.cli import main  # in-process: same parser and error handling, no interpreter start-up

    def compare(*args: str) -> tuple[int, str, str]:
        code = main(["compare", *args])
        out, err = capsys.readouterr()
        return code, out, err

    both = write_results(
        tmp_path / "both",
        [
            result("t1", 1.0, model="alpha"),
            result("t1", 0.0, model="beta"),
            result("t2", 1.0, model="alpha"),
            result("t2", 1.0, model="beta"),
            result("t9", 1.0, model="gamma"),
        ],
    )
    code, out, _ = compare(str(both), str(both), "--model-a", "alpha", "--model-b", "beta", "--json")
    assert code == 0
    assert json.loads(out)["pass_rate_diff"]["point"] == 0.5  # (1 + 1)/2 - (0 + 1)/2

    code, _, err = compare(str(tmp_path / "nope"), str(both))
    assert code == 2 and "results directory not found" in err
    code, _, err = compare(str(both), str(both), "--model-a", "alpha", "--model-b", "delta")
    assert code == 2 and "unknown model 'delta'" in err and "gamma" in err
    code, _, err = compare(str(both), str(both))
    assert code == 2 and "--model-a" in err
    code, _, err = compare(str(both), str(both), "--model-a", "alpha", "--model-b", "gamma")
    assert code == 2 and "no task scored by both" in err
    # why: gamma has no record of t1 and t2, alpha none of t9
    assert "not scored by A: 1 missing; not scored by B: 2 missing" in err
