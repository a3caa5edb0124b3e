"""One interval per number: a real run's summary.json, its printed table, its report.html and the
operator's metrics exposition give the same 95% interval for the same results.

A small real run (scripted models through litellm's real path, real MCP servers, the
deterministic judge) with 2 repeats of 3 tasks: "steady" passes everything (3 of 3 tasks: the
interval must not be [1, 1]); "flaky" passes task 0 twice, task 1 once, task 2 never (its
repeats disagree: n is still 3 tasks, not 6 items). The operator's side is the real one: the
results travel as the pods' termination messages (``items.summary``), become outcome records
(``reconcile.record``), are counted by ``reconcile.decide`` into the run's status, and are
exported by a ``Metrics`` exporter scraped over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from atlasrun.cli import main
from atlasrun.cluster.operator.reconcile import (
    JobObs,
    PlannedTask,
    Snapshot,
    TasksObs,
    decide,
    plan_chunks,
    record,
)
from atlasrun.cluster.pod.items import summary
from atlasrun.cluster.wire.records import read_summary
from atlasrun.reports.data import build_data
from atlasrun.runner.local import format_table
from atlasrun.runspec.run import RunSpecBody
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.stats import wilson
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK
from test_metrics import Exporter, run_object, value
from test_reconcile import PIN, applied
from test_runner import run, solver, tool_results

pytestmark = pytest.mark.servers

MODELS = ("steady", "flaky")
REPEATS = 2
TASKS = [dict(SUM_TASK, id=f"sum-{i}", prompt=f"[{i}] {SUM_TASK['prompt']}") for i in range(3)]


def scripted_models() -> Any:
    """steady solves every attempt; flaky solves task 0, the first attempt of task 1, never task 2."""
    lock, attempts = threading.Lock(), {"sum-1": 0}

    def script(body: dict[str, Any]) -> Reply:
        model, index = body["model"], int(body["messages"][0]["content"][1])
        if model.endswith("flaky") and not tool_results(body):  # an attempt's first request decides
            with lock:
                attempts["sum-1"] += index == 1
                solve = index == 0 or (index == 1 and attempts["sum-1"] == 1)
            if not solve:
                return Reply(content="The sum is probably 17.")  # answers without using any tool
        return solver(body)

    return script


def operator_status(results: list[TaskResult]) -> dict[str, Any]:
    """The run's status as the operator writes it after counting every item's pod."""
    body = RunSpecBody.model_validate(
        {
            "tasks": {"configMap": "tasks"},
            "repeats": REPEATS,
            "models": [{"name": m} for m in MODELS],
            "cluster": {"itemsPerJob": 100},
        }
    )
    tasks = TasksObs(
        pin=PIN, runnable=tuple(PlannedTask(t["id"], ("filesystem", "calculator")) for t in TASKS)
    )

    def snap(status: dict[str, Any], jobs: tuple[JobObs, ...] = ()) -> Snapshot:
        return Snapshot(
            name="r", uid="u", generation=1, body=body, status=status, now="2026-01-01T00:00:00Z",
            tasks=tasks, jobs=jobs, results_uri="s3://results/r/",
        )  # fmt: skip

    by_key = {(r.model, r.task_id, r.repeat): r for r in results}
    jobs = []
    for model, chunks in plan_chunks(body, tasks.runnable).items():
        for chunk in chunks:
            outcomes = {
                i: record(
                    read_summary(json.dumps(summary(by_key[(model, task, rep)], None, 0)), "pod"),
                    model,
                    False,
                )
                for i, (task, rep) in enumerate(chunk.items)
            }
            size = len(chunk.items)
            jobs.append(
                JobObs(
                    name=f"{model}-c{chunk.index}", model=model, chunk=chunk.index, completions=size,
                    parallelism=1, finished=True, completed=frozenset(range(size)), outcomes=outcomes,
                )
            )  # fmt: skip
    first = applied({}, decide(snap({})))
    counted = decide(snap(first, tuple(jobs)))
    assert counted.phase == "Succeeded", counted.status
    return dict(counted.status)


def test_summary_table_report_and_metrics_give_the_same_interval(tmp_path: Path, data_dir: Path) -> None:
    with ScriptedProvider(scripted_models()) as provider:
        outcome = run(tmp_path, data_dir, provider, TASKS, list(MODELS), repeats=REPEATS, parallelism=2)
    out = tmp_path / "out"
    models = json.loads((out / "summary.json").read_text())["models"]

    # summary.json: tasks are distinct tasks, items task x repeat; n of the interval = 3 tasks
    steady, flaky = models["steady"], models["flaky"]
    assert (steady["tasks"], steady["items"], steady["scored"], steady["passed"]) == (3, 6, 6, 6)
    assert (flaky["tasks"], flaky["items"], flaky["scored"], flaky["passed"]) == (3, 6, 6, 3)
    expected = {"steady": wilson(1.0, 3), "flaky": wilson(0.5, 3)}
    for name, row in models.items():
        ci = row["pass_rate_ci"]
        assert (ci["low"], ci["high"]) == expected[name] and (ci["tasks"], ci["method"]) == (3, "wilson")
        assert row["mean_coverage_ci"]["tasks"] == 3
    assert steady["pass_rate_ci"]["low"] == pytest.approx(0.4385, abs=1e-4)  # 3 of 3 is not certain
    assert flaky["pass_rate_ci"]["low"] < wilson(0.5, 6)[0]  # repeats are not independent items

    # the printed table: the same bounds, items beside tasks
    table = format_table(outcome.summary)
    for name, row in models.items():
        ci = row["pass_rate_ci"]
        line = next(x for x in table.splitlines() if x.startswith(name))
        assert re.search(rf"\b3\s+6\s+6\s+{row['passed']}\s", line), line
        assert f"[{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]" in line, line

    # report.html: the report's numbers are the summary's, and the page shows them
    assert main(["report", str(out), "--open-path-only"]) == 0
    page = (out / "report.html").read_text()
    report_rows = {m.model: m for m in build_data(out).models}
    for name, row in models.items():
        estimate = report_rows[name].pass_rate
        assert estimate is not None and (estimate.low, estimate.high, estimate.n) == (
            row["pass_rate_ci"]["low"],
            row["pass_rate_ci"]["high"],
            3,
        )
        cells = page.split(f'<tr data-model="{name}">', 1)[1].split("</tr>", 1)[0]
        ci = row["pass_rate_ci"]
        assert (
            f'{100 * row["pass_rate"]:.1f}%<span class="ci">[{100 * ci["low"]:.1f}, {100 * ci["high"]:.1f}]'
            in cells
        )
        assert "6 items" in cells
    assert "Wilson" in page

    # the operator: status counted from the pods' messages, exported and scraped
    status = operator_status(outcome.results)
    exporter = Exporter()
    try:
        run_spec = {"repeats": REPEATS}
        exporter.metrics.run_seen({**run_object("ns", "r", "Succeeded", status["models"]), "spec": run_spec})
        samples = exporter.scrape()
    finally:
        exporter.close()
    for name, row in models.items():
        labels = {"namespace": "ns", "run": "r", "model": name}
        assert value(samples, "atlasrun_pass_rate", **labels) == row["pass_rate"]
        assert value(samples, "atlasrun_pass_rate_ci95_lower", **labels) == pytest.approx(
            row["pass_rate_ci"]["low"], abs=1e-12
        )
        assert value(samples, "atlasrun_pass_rate_ci95_upper", **labels) == pytest.approx(
            row["pass_rate_ci"]["high"], abs=1e-12
        )
