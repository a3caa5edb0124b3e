"""`atlas compare --fail-on-regression`: a paired regression gate for CI."""

from __future__ import annotations

from pathlib import Path

from atlasrun.errors import EXIT_OK, EXIT_REGRESSION
from test_stats import atlas, result, write_results


def test_fail_on_regression_exits_non_zero_only_when_b_is_significantly_worse(tmp_path: Path) -> None:
    good = write_results(tmp_path / "good", [result(f"t{i}", 1.0, model="base") for i in range(12)])
    worse = write_results(
        tmp_path / "worse", [result(f"t{i}", 1.0 if i < 2 else 0.0, model="cand") for i in range(12)]
    )
    same = write_results(
        tmp_path / "same", [result(f"t{i}", 1.0 if i else 0.0, model="peer") for i in range(12)]
    )

    proc = atlas("compare", str(good), str(worse), "--fail-on-regression")
    assert proc.returncode == EXIT_REGRESSION, proc.stderr
    assert "regression: cand is significantly worse than base: McNemar p=" in proc.stderr
    # the other way round B is better: no regression
    assert atlas("compare", str(worse), str(good), "--fail-on-regression").returncode == EXIT_OK
    # one task apart of twelve is not significant
    proc = atlas("compare", str(good), str(same), "--fail-on-regression")
    assert proc.returncode == EXIT_OK and "regression" not in proc.stderr, proc.stderr
    # without the flag compare only reports
    assert atlas("compare", str(good), str(worse)).returncode == EXIT_OK
