"""The fuzz suite at a size that fits the test run (``make fuzz`` runs 6,000 cases of ``atlas
validate`` and 300 of ``atlas run --limit 1``): every file format ``atlas validate`` reads, the
hostile classes of issue 24 (special files, tagged YAML values, invalid Unicode, huge integers,
deep nesting, 1-50 MB fields) and damaged results directories; then the same kinds of input
through ``atlas run`` with the replay agent and its real servers."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from atlasrun.errors import InputError
from atlasrun.starter.workspace import create_workspace
from atlasrun.tasks.files import DOCUMENT_LIMIT
from atlasrun.tasks.loader import load_tasks
from atlasrun.tasks.sizes import ANSWER_LIMIT, CLAIM_LIMIT, TEXT_LIMIT
from fuzz.fuzz_run import RUN_CLASSES, STARTER_ROW, RunReport, fuzz_run, run_case, run_seed_doc
from fuzz.fuzz_validate import CLASSES, GB, Case, Report, fuzz

pytestmark = pytest.mark.heavy
CASES = 480  # 40 of each class
RUN_CASES = 26  # 2 of each class, ~40 s here


@pytest.fixture(scope="module")
def report() -> Iterator[Report]:
    found = fuzz(cases=CASES, seed=20261123)
    yield found
    shutil.rmtree(found.root, ignore_errors=True)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def run_report() -> Iterator[RunReport]:
    found = fuzz_run(cases=RUN_CASES, seed=20261123)
    yield found
    shutil.rmtree(found.root, ignore_errors=True)  # type: ignore[attr-defined]


def _failures(report: Report, kinds: tuple[str, ...]) -> str:
    listed = [
        f"case {c.index} ({c.fmt}) {o.kind}: {o.detail[-400:]}" for c, o in report.failures if o.kind in kinds
    ]
    return "\n".join(report.lines() + listed[:5])


def test_480_cases_of_every_class_give_no_traceback_hang_or_miscount(report: Report) -> None:
    kinds = ("traceback", "hang", "unclear", "internal", "over_1gb", "miscounted")
    assert not any(report.kinds[k] for k in kinds), _failures(report, kinds)
    assert report.cases == CASES and all(report.by_format[c] == CASES // len(CLASSES) for c in CLASSES)
    assert 0 < report.peak_rss < GB, report.lines()  # measured per case, in its own process
    # The mutations really are bad input: most cases are rejected, each with a clear error, and
    # every damaged results directory was read by two commands without a failure.
    assert report.kinds["rejected"] > 0.6 * (report.cases - report.by_format["results"]), report.lines()
    assert report.kinds["handled"] == report.by_format["results"], _failures(report, ("control",))
    assert report.row_level > 0 and report.kinds["accepted"] > 0, report.lines()


def test_no_message_echoes_a_control_character_raw(report: Report) -> None:
    assert report.kinds["control"] == 0, _failures(report, ("control",))


@pytest.mark.servers
def test_26_atlas_run_cases_exit_by_the_table_within_1_gb_and_name_what_is_wrong(
    run_report: RunReport,
) -> None:
    listed = [f"case {c.index} ({c.fmt}) {o.kind}: {o.detail[-400:]}" for c, o in run_report.failures]
    assert run_report.ok, "\n".join(run_report.lines() + listed[:5])
    assert run_report.cases == RUN_CASES
    assert all(run_report.by_class[c] == RUN_CASES // len(RUN_CLASSES) for c in RUN_CLASSES)
    # Sampled over the whole tree (harness, bwrap, servers) every 50 ms: a real, nonzero peak.
    assert 100 * 1024**2 < run_report.tree_peak < GB, run_report.lines()
    # Both paths ran: runs that scored their task, and bad input stopped before any work.
    assert run_report.kinds["passed"] >= 4 and run_report.kinds["rejected"] >= 4, run_report.lines()


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_a_task_text_over_its_bound_rejects_the_row_by_field_and_the_rest_loads(tmp_path: Path) -> None:
    """Regression (fuzz_run, bulky): a 10 MB claim ran the deterministic judge for minutes; a
    50 MB argument took the harness to ~570 MB. Such a row is now rejected by name."""
    native = run_seed_doc("yaml")
    first, second = native["tasks"]
    bounds = {
        "claims": ("claims", CLAIM_LIMIT, "claim 1"),
        "reference_answer": ("reference_answer", ANSWER_LIMIT, "the reference answer"),
        "prompt": ("prompt", TEXT_LIMIT, "the prompt"),
    }
    for name, (value_field, limit, what) in bounds.items():
        row = {**first, value_field: ["x" * (limit + 1)] if name == "claims" else "x" * (limit + 1)}
        loaded = load_tasks(_write(tmp_path / f"{name}.json", {"tasks": [row, second]}))
        assert [t.id for t in loaded.tasks] == ["second"], name
        (rejection,) = loaded.rejected
        assert rejection.field == name and rejection.task_id == first["id"], rejection
        assert f"{what} is {limit + 1:,} characters long; at most {limit:,}" in str(rejection)
    # PyYAML composes in Python (a 50 MB field: 1 GB, 20 s): a YAML task file is bounded up front.
    (tmp_path / "big.yaml").write_text(yaml.safe_dump({"tasks": [first]}) + "#" * DOCUMENT_LIMIT)
    with pytest.raises(InputError, match=r"big.yaml: the YAML task file .* over the limit of 16 MiB"):
        load_tasks(tmp_path / "big.yaml")
    trajectory = json.loads(STARTER_ROW["TRAJECTORY"])
    trajectory[0]["tool_calls"][0]["function"]["arguments"] = json.dumps({"path": "p" * TEXT_LIMIT})
    with (tmp_path / "tasks.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(STARTER_ROW))
        writer.writeheader()
        writer.writerows(
            [{**STARTER_ROW, "TRAJECTORY": json.dumps(trajectory)}, {**STARTER_ROW, "TASK": "ok"}]
        )
    loaded = load_tasks(tmp_path / "tasks.csv")
    assert [t.id for t in loaded.tasks] == ["ok"]
    assert str(loaded.rejected[0]).startswith(
        "tasks.csv line 2, task atlas-q3, field TRAJECTORY: turn 1, call 1's arguments (as JSON) is"
    ), loaded.rejected


@pytest.mark.servers
def test_atlas_run_on_a_10_mb_claim_rejects_that_row_and_runs_the_next(tmp_path: Path) -> None:
    """Regression (fuzz_run case 11): over 300 s in the judge, killed as a hang; now seconds."""
    doc = run_seed_doc("yaml")
    doc["tasks"][0]["claims"] = ["Lorem ipsum dolor sit amet, the sum is 42. " * 250_000]
    tasks = _write(tmp_path / "tasks.json", doc)
    run = run_seed_doc("run")
    run["spec"]["tasks"]["path"] = tasks.name
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    outcome = run_case(Case(0, "bulky", tasks), tmp_path / "run.yaml", create_workspace(tmp_path / "ws"), 60)
    assert (outcome.kind, outcome.code) == ("passed", 0), outcome
    assert outcome.tree_peak < GB / 2, outcome  # (the 60 s case timeout would have made it a hang)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert (
        "rejected: tasks.json line 1, item 1, task q3-revenue-leader, field claims: claim 1 is 10,749,999"
        in stderr
    )
    assert json.loads((tmp_path / "out/results.jsonl").read_text().splitlines()[0])["task_id"] == "second"
