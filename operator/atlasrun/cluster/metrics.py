"""Prometheus metrics of the operator. Labels stay low-cardinality: run, model, outcome, phase.

Never a task id, Job name or URL as a label: a run of 10,000 tasks must not make
10,000 series.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from atlasrun.cluster.contract import PHASES


class Metrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.runs = Gauge(
            "atlasrun_runs",
            "AtlasRuns by phase (1 for the run's current phase)",
            ["run", "phase"],
            registry=registry,
        )
        self.tasks = Counter(
            "atlasrun_tasks_total",
            "Finished work items by outcome",
            ["run", "model", "outcome"],
            registry=registry,
        )
        self.pass_rate = Gauge(
            "atlasrun_pass_rate", "Pass rate of scored tasks", ["run", "model"], registry=registry
        )
        self.coverage = Gauge(
            "atlasrun_mean_coverage",
            "Mean claims coverage of scored tasks",
            ["run", "model"],
            registry=registry,
        )
        self.pending = Gauge(
            "atlasrun_tasks_pending", "Work items not finished yet", ["run", "model"], registry=registry
        )
        self.latency = Histogram(
            "atlasrun_task_duration_seconds",
            "Agent wall time per task",
            ["run", "model"],
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
            registry=registry,
        )
        self.errors = Counter(
            "atlasrun_task_errors_total",
            "Work items that ended in an error, by kind",
            ["run", "model", "kind"],
            registry=registry,
        )


METRICS = Metrics()


def serve(port: int) -> None:
    start_http_server(port)


def task_finished(run: str, record: dict[str, Any], metrics: Metrics = METRICS) -> None:
    model = str(record.get("m") or "unknown")
    outcome = record["s"] if record["s"] != "scored" else ("passed" if record.get("p") else "failed")
    metrics.tasks.labels(run, model, outcome).inc()
    if record.get("w") is not None:
        metrics.latency.labels(run, model).observe(float(record["w"]))
    if record["s"] == "error":
        metrics.errors.labels(run, model, str(record.get("k") or "other")).inc()


def run_status(run: str, phase: str, models: dict[str, dict[str, Any]], metrics: Metrics = METRICS) -> None:
    run_phase(run, phase, metrics)
    for model, row in models.items():
        if row.get("passRate") is not None:
            metrics.pass_rate.labels(run, model).set(row["passRate"])
        if row.get("meanCoverage") is not None:
            metrics.coverage.labels(run, model).set(row["meanCoverage"])
        metrics.pending.labels(run, model).set(row.get("pending", 0))


def run_phase(run: str, phase: str, metrics: Metrics = METRICS) -> None:
    for name in PHASES:
        metrics.runs.labels(run, name).set(1 if name == phase else 0)
