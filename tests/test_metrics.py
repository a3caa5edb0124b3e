"""The operator's metrics (``atlasrun.cluster.operator.metrics``), read the way Prometheus reads them: the
exposition text of a real exporter on 127.0.0.1, parsed with prometheus_client's own parser.

- Usage travels from a task result through the pod's termination summary, the operator's outcome
  record and the status fold into counters (tokens, cost, 429s through litellm's real HTTP path,
  errors by kind, tool errors by server).
- A deleted run leaves no series; a restarted operator exports the same finished counts from the
  same status; a standby replica exports no per-run series.
- The metrics table of docs/metrics.md is what the exporter exports (name, type, labels).

The chart's alerts and dashboards against a real Prometheus: tests/test_metrics_chart.py and
tests/cluster/test_metrics_operator.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from atlasrun.agent.transcript import CallRecord, ModelCallRecord, Transcript
from atlasrun.cluster.operator.metrics import RUN_FAMILIES, Metrics
from atlasrun.cluster.operator.outcomes import Outcome
from atlasrun.cluster.operator.outcomes import outcome_of as record
from atlasrun.cluster.operator.reconcile import JobObs
from atlasrun.cluster.pod.items import summary
from atlasrun.cluster.pod.termination import compact
from atlasrun.cluster.wire import usage
from atlasrun.cluster.wire.records import read_summary
from atlasrun.cluster.wire.usage import ItemUsage
from atlasrun.provider import Endpoint, complete
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.scoring.stats import wilson
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
METRICS_DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
Sample = tuple[str, tuple[tuple[str, str], ...]]


class Exporter:
    """A ``Metrics`` on its own registry, served over HTTP on 127.0.0.1 like the operator's."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.metrics = Metrics(self.registry)
        self.server, _ = start_http_server(0, addr="127.0.0.1", registry=self.registry)

    def scrape(self) -> dict[Sample, float]:
        text = httpx.get(f"http://127.0.0.1:{self.server.server_port}/metrics", timeout=5).text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def families(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """name -> (type, label names) of every family with samples, as scraped."""
        text = httpx.get(f"http://127.0.0.1:{self.server.server_port}/metrics", timeout=5).text
        found = {}
        for family in text_string_to_metric_families(text):
            labels = {k for s in family.samples for k in s.labels if k not in ("le",)}
            name = family.name + ("_total" if family.type == "counter" else "")
            if family.samples and not name.endswith("_created"):
                found[name] = (family.type, tuple(sorted(labels)))
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    e = Exporter()
    yield e
    e.close()


def value(samples: dict[Sample, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def of_run(samples: dict[Sample, float], namespace: str, run: str) -> list[Sample]:
    return [k for k in samples if ("namespace", namespace) in k[1] and ("run", run) in k[1]]


def result_with_transcript(**fields: Any) -> TaskResult:
    transcript = Transcript(
        agent="litellm",
        model="openai/gpt",
        calls=[
            CallRecord(id="1", name="filesystem_read_file", is_error=True, error_kind="tool_error"),
            CallRecord(id="2", name="filesystem_read_file"),
            CallRecord(id="3", name="git_log", is_error=True, error_kind="transport"),
            CallRecord(id="4", name="made-up_tool", is_error=True, error_kind="not_available"),
        ],
        model_calls=[
            ModelCallRecord(
                prompt_tokens=100, completion_tokens=20, cost_usd=0.002, retries=2, rate_limited=2
            ),
            ModelCallRecord(prompt_tokens=150, completion_tokens=30, cost_usd=0.003, retries=1),
        ],
    )
    return TaskResult(
        task_id="t1",
        model="gpt",
        servers=["filesystem", "git"],
        tool_calls=4,
        prompt_tokens=250,
        completion_tokens=50,
        cost_usd=0.005,
        wall_s=12.5,
        transcript=transcript,
        **fields,
    )


def status_from(outcomes: list[Outcome], total: int) -> dict[str, Any]:
    """A model's status counts as ``reconcile`` folds them (the same ``usage.fold``)."""
    spent = usage.ModelUsage()
    for outcome in outcomes:
        spent = usage.fold(spent, outcome.usage, outcome.error)
    scored = [o for o in outcomes if o.status == "scored"]
    return {
        "total": total,
        "pending": total - len(outcomes),
        "running": 0,
        "scored": len(scored),
        "passed": sum(1 for o in scored if o.passed),
        "failed": sum(1 for o in scored if not o.passed),
        "errored": sum(1 for o in outcomes if o.status == "error"),
        "excluded": sum(1 for o in outcomes if o.status == "excluded"),
        "coverageSum": sum(o.coverage or 0 for o in scored),
        "usage": spent.model_dump(by_alias=True),
    }


def run_object(
    namespace: str, name: str, phase: str, models: dict[str, Any], blocked: str | None = None
) -> dict[str, Any]:
    conditions = [
        {"type": "Blocked", "status": "True" if blocked else "False", "reason": blocked or "NotBlocked"}
    ]
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"},
        "status": {"phase": phase, "models": models, "conditions": conditions},
    }


# ---------------------------------------------------------------- from a result to counters


def test_usage_travels_from_the_result_through_status_into_counters(exporter: Exporter) -> None:
    passed = result_with_transcript(status="scored", passed=True, coverage=1.0)
    errored = result_with_transcript(
        status="error", error_kind=ErrorKind.SERVER_TRANSPORT, reason="git crashed"
    )
    outcomes = [
        record(read_summary(json.dumps(summary(r, None, 0)), "test"), "gpt", False) for r in (passed, errored)
    ]
    outcomes.append(record(None, "gpt", True, "DeadlineExceeded"))  # a pod that died without a summary
    exporter.metrics.run_seen(run_object("team-a", "sweep", "Running", {"gpt": status_from(outcomes, 10)}))
    s = exporter.scrape()
    labels = {"namespace": "team-a", "run": "sweep", "model": "gpt"}
    assert value(s, "atlasrun_tokens_total", **labels, type="prompt") == 500
    assert value(s, "atlasrun_tokens_total", **labels, type="completion") == 100
    assert value(s, "atlasrun_cost_usd_total", **labels) == pytest.approx(0.01)
    assert value(s, "atlasrun_provider_retries_total", **labels) == 6
    assert value(s, "atlasrun_provider_rate_limited_total", **labels) == 4
    assert value(s, "atlasrun_tool_calls_total", **labels) == 8
    assert value(s, "atlasrun_item_errors_total", **labels, kind="server_transport") == 1
    assert value(s, "atlasrun_item_errors_total", **labels, kind="job_failed") == 1
    assert value(s, "atlasrun_tool_errors_total", **labels, server="filesystem", kind="tool_error") == 2
    assert value(s, "atlasrun_tool_errors_total", **labels, server="git", kind="transport") == 2
    # a tool name the model made up is never a label: its server is "other"
    assert value(s, "atlasrun_tool_errors_total", **labels, server="other", kind="not_available") == 2
    assert {k[1] for k in s if k[0] == "atlasrun_tool_errors_total"} == {
        tuple(sorted({**labels, "server": server, "kind": kind}.items()))
        for server, kind in (("filesystem", "tool_error"), ("git", "transport"), ("other", "not_available"))
    }
    assert value(s, "atlasrun_items_total", **labels, outcome="passed") == 1
    assert value(s, "atlasrun_items_total", **labels, outcome="errored") == 2
    assert value(s, "atlasrun_items_waiting", **labels) == 7
    assert value(s, "atlasrun_pass_rate", **labels) == 1.0


def test_usage_fits_the_termination_message_whatever_the_transcript() -> None:
    """Many failing tools on many servers and a huge reason: the 4 KiB summary keeps its usage."""
    result = result_with_transcript(status="error", error_kind=ErrorKind.PROVIDER, reason="x" * 10_000)
    assert result.transcript is not None
    result.servers = [f"server-{i}" for i in range(40)]
    kinds = ("tool_error", "transport", "tool_timeout", "invalid_arguments")
    result.transcript.calls = [
        CallRecord(id=str(i), name=f"server-{i % 40}_tool", is_error=True, error_kind=kinds[i % 4])
        for i in range(400)
    ]
    text = compact(summary(result, None, 3))
    assert len(text.encode()) <= 4000
    outcome = record(read_summary(text, "test"), "gpt", True)
    assert outcome.usage.rate_limited == 2 and len(outcome.usage.tool_errors) == usage.MAX_TOOL_ERROR_KEYS


def test_an_unknown_error_kind_is_counted_as_other() -> None:
    spent = usage.fold(usage.ModelUsage(), usage.ItemUsage(), "something-new")
    assert spent.errors == {"other": 1}


def test_rate_limited_answers_are_counted_through_litellm() -> None:
    """Two 429s then an answer, through litellm's HTTP path to a scripted provider."""
    answers = iter(
        [
            Reply(status=429, raw_body='{"error": {"message": "slow down", "type": "rate_limit"}}'),
            Reply(status=429, raw_body='{"error": {"message": "slow down", "type": "rate_limit"}}'),
            Reply(status=503, raw_body='{"error": {"message": "overloaded"}}'),
        ]
    )

    def script(body: dict[str, Any]) -> Reply:
        return next(answers, Reply(content="done"))

    with ScriptedProvider(script) as provider:
        endpoint = Endpoint("openai/limited", provider.api_base)
        done = asyncio.run(
            complete(endpoint, [{"role": "user", "content": "hi"}], retries=5, backoff_base_s=0)
        )
    assert (done.retries, done.rate_limited) == (3, 2)


# ---------------------------------------------------------------- lifecycle of the series


def test_a_deleted_run_leaves_no_series(exporter: Exporter) -> None:
    m = exporter.metrics
    outcome = Outcome(
        "scored", "gpt", passed=True, coverage=1.0, wall_s=3.0, usage=ItemUsage(prompt_tokens=5)
    )
    for run in ("keep", "gone"):
        m.run_seen(run_object("team-a", run, "Running", {"gpt": status_from([outcome], 4)}))
        m.item_counted("team-a", run, outcome)
        m.jobs_seen(
            "team-a",
            run,
            [JobObs(name="j", model="gpt", chunk=0, completions=3, parallelism=2, active=2, ready=1)],
        )
    assert (
        len(of_run(exporter.scrape(), "team-a", "gone"))
        == len(of_run(exporter.scrape(), "team-a", "keep"))
        > 30
    )
    m.run_deleted("team-a", "gone")
    after = exporter.scrape()
    assert of_run(after, "team-a", "gone") == []
    assert (
        value(after, "atlasrun_item_duration_seconds_count", namespace="team-a", run="keep", model="gpt") == 1
    )
    # an item counted after its run was deleted (a pass that raced the deletion) adds nothing back
    m.item_counted("team-a", "gone", outcome)
    assert of_run(exporter.scrape(), "team-a", "gone") == []


def test_the_same_status_gives_the_same_counts_after_a_restart() -> None:
    outcomes = [
        Outcome("scored", "gpt", passed=True, coverage=1.0, usage=ItemUsage(10, 2, cost_usd=0.5)),
        Outcome("scored", "gpt", passed=False, coverage=0.5),
        Outcome("error", "gpt", error_kind="provider", usage=ItemUsage(rate_limited=3)),
    ]
    run = run_object("team-b", "long", "Running", {"gpt": status_from(outcomes, 6)})
    before, after = Exporter(), Exporter()  # the operator, then the operator after a restart
    try:
        before.metrics.run_seen(run)
        after.metrics.run_seen(run)  # what the restarted operator's first watch event carries
        counted = [k for k in before.scrape() if k[0].endswith("_total") and "operator" not in k[0]]
        assert len(counted) >= 10
        assert {k: before.scrape()[k] for k in counted} == {k: after.scrape()[k] for k in counted}
        finished = sum(v for k, v in after.scrape().items() if k[0] == "atlasrun_items_total")
        assert finished == 3
    finally:
        before.close()
        after.close()


def test_a_standby_replica_exports_no_run_series(exporter: Exporter) -> None:
    m = exporter.metrics
    m.run_seen(run_object("team-a", "sweep", "Blocked", {}, blocked="QuotaExceeded"))
    assert (
        value(
            exporter.scrape(), "atlasrun_run_blocked", namespace="team-a", run="sweep", reason="QuotaExceeded"
        )
        == 1
    )
    m.set_leading(False)
    s = exporter.scrape()
    assert of_run(s, "team-a", "sweep") == [] and value(s, "atlasrun_operator_leader") == 0
    m.set_leading(True)
    assert of_run(exporter.scrape(), "team-a", "sweep")


def test_jobs_and_pods_by_state(exporter: Exporter) -> None:
    jobs = [
        JobObs(name="a", model="gpt", chunk=0, completions=4, parallelism=4, active=3, ready=2),
        JobObs(name="b", model="gpt", chunk=1, completions=4, parallelism=4, suspended=True),
        JobObs(name="c", model="gpt", chunk=2, completions=4, parallelism=4, finished=True),
    ]
    exporter.metrics.run_seen(run_object("ns", "r", "Running", {}))
    exporter.metrics.jobs_seen("ns", "r", jobs)
    s = exporter.scrape()
    labels = {"namespace": "ns", "run": "r", "model": "gpt"}
    assert value(s, "atlasrun_jobs", **labels, state="active") == 1
    assert value(s, "atlasrun_jobs", **labels, state="suspended") == 1
    assert value(s, "atlasrun_pods", **labels, state="ready") == 2
    assert value(s, "atlasrun_pods", **labels, state="starting") == 1


def test_pass_rate_interval_counts_tasks_not_repeats(exporter: Exporter) -> None:
    """The gauges use scoring.stats' one interval (Wilson, n = tasks): 9 of 9 items passed in a
    3-repeat run are 3 tasks, [0.44, 1], not 9 independent items; 3 tasks at one repeat agree."""
    labels = {"namespace": "ns", "model": "gpt"}
    row = {"total": 9, "scored": 9, "passed": 9, "coverageSum": 9.0}
    for name, repeats, status_row in (
        ("r3", 3, row),
        ("r1", 1, {"total": 3, "scored": 3, "passed": 3, "coverageSum": 3.0}),
        ("counted", 3, {**row, "scored": 8, "passed": 8, "scoredTasks": 3}),  # one repeat errored
    ):
        run = run_object("ns", name, "Succeeded", {"gpt": status_row})
        exporter.metrics.run_seen({**run, "spec": {"repeats": repeats}})
    s = exporter.scrape()
    low, high = wilson(1.0, 3)
    assert low == pytest.approx(0.4385, abs=1e-4) and high == pytest.approx(1.0)
    for name in ("r3", "r1", "counted"):
        assert value(s, "atlasrun_pass_rate_ci95_lower", **labels, run=name) == pytest.approx(low, abs=1e-12)
        assert value(s, "atlasrun_pass_rate_ci95_upper", **labels, run=name) == pytest.approx(high, abs=1e-12)
    # without the run's repeats a status is read as one repeat per task
    exporter.metrics.run_seen(run_object("ns", "bare", "Succeeded", {"gpt": row}))
    bare = exporter.scrape()
    assert value(bare, "atlasrun_pass_rate_ci95_lower", **labels, run="bare") == pytest.approx(
        wilson(1.0, 9)[0]
    )


# ---------------------------------------------------------------- docs/metrics.md's table


def readme_table() -> dict[str, tuple[str, tuple[str, ...]]]:
    text = METRICS_DOC.read_text()
    section = text.split("## The metrics", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`atlasrun_"):
            labels = tuple(sorted(re.findall(r"`(\w+)`", cells[2])))
            rows[cells[0].strip("`")] = (cells[1], labels)
    return rows


def test_readme_metrics_table_is_what_the_operator_exports(exporter: Exporter) -> None:
    m = exporter.metrics
    outcome = Outcome(
        "error",
        "gpt",
        error_kind="provider",
        wall_s=3.0,
        usage=ItemUsage(prompt_tokens=1, tool_errors=(("git/transport", 1),)),
    )
    m.run_seen(run_object("ns", "r", "Blocked", {"gpt": status_from([outcome], 2)}, blocked="QuotaExceeded"))
    m.run_seen(
        run_object(
            "ns",
            "s",
            "Running",
            {
                "gpt": status_from(
                    [dataclasses.replace(outcome, status="scored", passed=True, coverage=1, error_kind=None)],
                    2,
                )
            },
        )
    )
    m.item_counted("ns", "r", outcome)
    m.jobs_seen("ns", "r", [JobObs(name="j", model="gpt", chunk=0, completions=1, parallelism=1)])
    m.pass_done(True, 0.1)
    m.queue_wait.observe(0.01)
    exported = exporter.families()
    documented = readme_table()
    assert set(documented) == set(exported), (
        f"docs/metrics.md only: {sorted(set(documented) - set(exported))}; exported only: {sorted(set(exported) - set(documented))}"
    )
    for name, (kind, labels) in exported.items():
        assert documented[name] == (kind, labels), (
            f"docs/metrics.md row of {name}: {documented[name]} != {(kind, labels)}"
        )
    assert {n.removesuffix("_total") for n in exported} >= set(RUN_FAMILIES)
