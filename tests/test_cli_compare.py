"""`atlas compare`: a paired regression gate for CI (``--fail-on-regression``), and refusal of runs
whose verdicts are not comparable (pass threshold, judge, task content) unless ``--allow-different``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atlasrun.cli import main
from atlasrun.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION
from atlasrun.judge.base import JudgeInfo
from atlasrun.runner.local import write_summary
from atlasrun.scoring.store import ResultsDir
from atlasrun.tasks.model import Task
from test_stats import PRIMARY, atlas, result, write_results


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


# ---------------------------------------------------------------- incomparable runs are refused


def compare_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["compare", *args])
    out, err = capsys.readouterr()
    return code, out, err


def task(task_id: str, claim: str) -> Task:
    return Task(
        id=task_id, prompt=f"What about {task_id}?", enabled_tools=["calculator_calculate"], claims=[claim]
    )


def scored_dir(root: Path, model: str, threshold: float, judge: JudgeInfo = PRIMARY, **claims: str) -> Path:
    """Results of ``model`` on tasks t1, t2 (with their content) and summary.json at ``threshold``,
    written by the run's own writer."""
    rows = [
        result(t, 1.0 if t == "t1" else 0.0, model=model, judge=judge, task=task(t, claims.get(t, "x is 1")))
        for t in ("t1", "t2")
    ]
    write_results(root, rows)
    write_summary(ResultsDir(root), root.name, [judge], threshold)
    return root


def test_runs_at_different_pass_thresholds_are_refused_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = scored_dir(tmp_path / "a", "alpha", 0.75)
    b = scored_dir(tmp_path / "b", "beta", 0.5)
    code, out, err = compare_in_process(capsys, str(a), str(b))
    assert code == EXIT_BAD_INPUT and out == ""
    assert "not comparable: pass threshold: A 0.75, B 0.5" in err and "--allow-different" in err
    code, out, err = compare_in_process(capsys, str(a), str(b), "--allow-different")
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0] == "difference (--allow-different): pass threshold: A 0.75, B 0.5"
    assert lines[1].startswith("paired tasks: 2")
    code, out, err = compare_in_process(capsys, str(a), str(b), "--allow-different", "--json")
    assert code == EXIT_OK and json.loads(out)["differences"] == ["pass threshold: A 0.75, B 0.5"]
    assert "difference (--allow-different): pass threshold" in err
    # the same threshold, judge and task content: compared without a word
    same = scored_dir(tmp_path / "same", "beta", 0.75)
    code, out, err = compare_in_process(capsys, str(a), str(same))
    assert code == EXIT_OK and "difference" not in out + err, err


def test_runs_judged_differently_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = scored_dir(tmp_path / "a", "alpha", 0.75)
    newer = PRIMARY.model_copy(update={"version": "2"})
    b = scored_dir(tmp_path / "b", "beta", 0.75, judge=newer)
    code, _, err = compare_in_process(capsys, str(a), str(b))
    assert code == EXIT_BAD_INPUT
    assert "primary judge: A primary (llm, judge-a, version 1), B primary (llm, judge-a, version 2)" in err


def test_runs_on_different_task_content_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = scored_dir(tmp_path / "a", "alpha", 0.75)
    b = scored_dir(tmp_path / "b", "beta", 0.75, t2="x is 2")  # same id, another claim
    code, _, err = compare_in_process(capsys, str(a), str(b))
    assert code == EXIT_BAD_INPUT and "task content: 1 of 2 paired task(s) differ (t2)" in err
    code, out, _ = compare_in_process(capsys, str(a), str(b), "--allow-different")
    assert code == EXIT_OK and out.startswith("difference (--allow-different): task content: 1 of 2")
