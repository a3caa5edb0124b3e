"""Prometheus metrics of the operator (``/metrics`` on ``ATLASRUN_METRICS_PORT``); README "Metrics" lists them.

Three sources, each the one place its numbers come from:

- **The runs' status** (``run_seen``, on every watch event of a run and on our own status
  writes): phase, Blocked reason, work items by outcome, pass rate with its 95% interval (the
  one method of ``scoring.stats``, as in summary.json and the report: Wilson, n = tasks),
  coverage, and the usage totals (``usage.py``: tokens, cost, provider retries and 429s, errors
  by kind, tool errors by server; and the pods' cost: pods, pod-seconds, CPU-seconds). Counters among them (``*_total``) are the status' own totals, so
  they survive an operator restart: a restarted operator lists the runs and exports the same
  values, and ``increase()`` sees no reset.
- **The last observation of a run's Jobs** (``jobs_seen``): live Jobs and their pods.
- **This process**: item durations (a histogram, observed when an item is counted) and the
  operator's health: passes by result, pass duration, queue backlog and wait, leadership.

Every per-run series carries ``namespace`` and ``run`` and disappears when the run is deleted
(``run_deleted``). Only the leading replica exports per-run series (a standby would duplicate
them). Labels stay low-cardinality: namespace, run, model, outcome, kind, server; never a task id,
Job name or URL.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from atlasrun import __version__
from atlasrun.cluster.operator.outcomes import Outcome
from atlasrun.cluster.wire.contract import BLOCKED, PHASES
from atlasrun.cluster.wire.usage import ModelUsage
from atlasrun.scoring.stats import wilson

RUN = ("namespace", "run")
MODEL = (*RUN, "model")
OUTCOMES = ("passed", "failed", "errored", "excluded")
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)
PASS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
WAIT_BUCKETS = (0.01, 0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600)


@dataclass
class LiveJobs:
    """One model's Jobs of a run, as last observed."""

    active: int = 0  # Jobs not finished and not suspended
    suspended: int = 0
    pods_ready: int = 0
    pods_starting: int = 0  # active pods not ready yet (pulling, unschedulable, quota)


def scored_tasks(row: Mapping[str, Any], repeats: int) -> int:
    """The n of a model's pass-rate interval: tasks with a scored item. A status that counts them
    (``scoredTasks``) is used as is; otherwise they are the scored items over the run's repeats,
    rounded up: exact when every scored task has all its repeats scored, and never more tasks
    than there are (a smaller n only widens the interval)."""
    counted = row.get("scoredTasks")
    if isinstance(counted, int) and not isinstance(counted, bool) and counted > 0:
        return counted
    return math.ceil(_num(row.get("scored")) / max(1, repeats))


class Metrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, run) -> status
        self._live: dict[tuple[str, str], dict[str, LiveJobs]] = {}
        self._durations: dict[tuple[str, str], set[str]] = {}  # models with duration series
        self.leading = True  # False on a standby replica (leader election): no per-run series
        self.item_duration = Histogram(
            "atlasrun_item_duration_seconds",
            "Agent wall time of counted work items",
            MODEL,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.reconciles = Counter(
            "atlasrun_operator_reconcile",
            "Reconcile passes by result (success, error)",
            ["result"],
            registry=registry,
        )
        for result in ("success", "error"):
            self.reconciles.labels(result)  # both series exist from the start (rate() sees 0)
        self.reconcile_duration = Histogram(
            "atlasrun_operator_reconcile_duration_seconds",
            "Duration of a reconcile pass (observe, decide, act)",
            buckets=PASS_BUCKETS,
            registry=registry,
        )
        self.queue_wait = Histogram(
            "atlasrun_operator_queue_wait_seconds",
            "Time a due run waited in the work queue for a worker",
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.queue_depth = Gauge(
            "atlasrun_operator_queue_depth", "Runs due for a pass and waiting for a worker", registry=registry
        )
        self.leader = Gauge(
            "atlasrun_operator_leader",
            "1 if this replica acts (holds the Lease, or runs without leader election)",
            registry=registry,
        )
        self.leader.set(1)
        self.build = Gauge(
            "atlasrun_operator_build_info", "The operator's version (value 1)", ["version"], registry=registry
        )
        self.build.labels(__version__).set(1)
        registry.register(_RunCollector(self))

    # ------------------------------------------------------------------ updates

    def run_seen(self, run: Mapping[str, Any]) -> None:
        meta = run.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        status = run.get("status") or {}
        with self._lock:
            self._runs[key] = {
                "phase": status.get("phase") or "Pending",
                "blocked": next(
                    (
                        str(c.get("reason") or "")
                        for c in status.get("conditions") or []
                        if c.get("type") == BLOCKED and c.get("status") == "True"
                    ),
                    None,
                ),
                "models": {
                    str(m): dict(v) for m, v in (status.get("models") or {}).items() if isinstance(v, dict)
                },
                "repeats": _repeats(run.get("spec")),
            }

    def run_deleted(self, namespace: str, run: str) -> None:
        key = (namespace, run)
        with self._lock:
            self._runs.pop(key, None)
            self._live.pop(key, None)
            models = self._durations.pop(key, set())
        for model in models:
            try:
                self.item_duration.remove(namespace, run, model)
            except KeyError:
                pass

    def jobs_seen(self, namespace: str, run: str, jobs: Iterable[Any]) -> None:
        """``jobs``: the run's ``reconcile.JobObs`` of one observation."""
        live: dict[str, LiveJobs] = {}
        for job in jobs:
            if job.finished or job.deleting:
                continue
            row = live.setdefault(job.model, LiveJobs())
            if job.suspended:
                row.suspended += 1
                continue
            row.active += 1
            row.pods_ready += job.ready
            row.pods_starting += max(0, job.active - job.ready)
        with self._lock:
            self._live[(namespace, run)] = live

    def item_counted(self, namespace: str, run: str, outcome: Outcome) -> None:
        """An item's outcome, as the run's status counts it (once)."""
        model, wall_s = outcome.model or "unknown", outcome.wall_s
        if wall_s is None:
            return
        with self._lock:
            if (namespace, run) not in self._runs:
                return  # deleted meanwhile: no series to leave behind
            self._durations.setdefault((namespace, run), set()).add(model)
        self.item_duration.labels(namespace, run, model).observe(wall_s)

    def pass_done(self, ok: bool, seconds: float) -> None:
        self.reconciles.labels("success" if ok else "error").inc()
        self.reconcile_duration.observe(seconds)

    def set_leading(self, leading: bool) -> None:
        self.leading = leading
        self.leader.set(1 if leading else 0)

    # ------------------------------------------------------------------ the scrape

    def collect_runs(self) -> Iterator[Metric]:
        with self._lock:
            runs = {k: dict(v) for k, v in self._runs.items()} if self.leading else {}
            live = {k: dict(v) for k, v in self._live.items()} if self.leading else {}
        fam = _Families()
        for (namespace, run), view in sorted(runs.items()):
            for phase in PHASES:
                fam.gauge("atlasrun_run_phase", [namespace, run, phase], 1 if view["phase"] == phase else 0)
            if view["blocked"]:
                fam.gauge("atlasrun_run_blocked", [namespace, run, view["blocked"]], 1)
            for model, row in sorted(view["models"].items()):
                _model_series(fam, [namespace, run, model], row, view["repeats"])
        for (namespace, run), view in sorted(runs.items()):
            observed = live.get((namespace, run), {})
            for model in sorted(set(view["models"]) | set(observed)):
                jobs = observed.get(model) or LiveJobs()  # none live: 0, the series stays
                labels = [namespace, run, model]
                fam.gauge("atlasrun_jobs", [*labels, "active"], jobs.active)
                fam.gauge("atlasrun_jobs", [*labels, "suspended"], jobs.suspended)
                fam.gauge("atlasrun_pods", [*labels, "ready"], jobs.pods_ready)
                fam.gauge("atlasrun_pods", [*labels, "starting"], jobs.pods_starting)
        yield from fam.all()


def _model_series(fam: _Families, labels: list[str], row: Mapping[str, Any], repeats: int) -> None:
    for outcome in OUTCOMES:
        fam.counter("atlasrun_items", [*labels, outcome], _num(row.get(outcome)))
    fam.gauge("atlasrun_items_planned", labels, _num(row.get("total")))
    fam.gauge("atlasrun_items_waiting", labels, _num(row.get("pending")))
    fam.gauge("atlasrun_items_running", labels, _num(row.get("running")))
    scored, passed = int(_num(row.get("scored"))), int(_num(row.get("passed")))
    if scored:
        low, high = wilson(passed / scored, scored_tasks(row, repeats))
        fam.gauge("atlasrun_pass_rate", labels, passed / scored)
        fam.gauge("atlasrun_pass_rate_ci95_lower", labels, low)
        fam.gauge("atlasrun_pass_rate_ci95_upper", labels, high)
        fam.gauge("atlasrun_mean_coverage", labels, _num(row.get("coverageSum")) / scored)
    spent = ModelUsage.model_validate(row.get("usage") or {})
    fam.counter("atlasrun_tokens", [*labels, "prompt"], spent.prompt_tokens)
    fam.counter("atlasrun_tokens", [*labels, "completion"], spent.completion_tokens)
    fam.counter("atlasrun_cost_usd", labels, spent.cost_usd)
    fam.counter("atlasrun_tool_calls", labels, spent.tool_calls)
    fam.counter("atlasrun_provider_retries", labels, spent.provider_retries)
    fam.counter("atlasrun_provider_rate_limited", labels, spent.rate_limited)
    for kind, count in sorted(spent.errors.items()):
        fam.counter("atlasrun_item_errors", [*labels, kind], count)
    for key, count in sorted(spent.tool_errors.items()):
        server, _, kind = key.partition("/")
        fam.counter("atlasrun_tool_errors", [*labels, server, kind or "tool_error"], count)
    fam.counter("atlasrun_pods_finished", labels, spent.pods)
    fam.counter("atlasrun_pod_seconds", labels, spent.pod_seconds)
    fam.counter("atlasrun_cpu_seconds", labels, spent.cpu_seconds)
    fam.counter("atlasrun_pods_without_cpu", labels, spent.pods_without_cpu)


def _repeats(spec: Any) -> int:
    repeats = spec.get("repeats") if isinstance(spec, Mapping) else None
    return repeats if isinstance(repeats, int) and not isinstance(repeats, bool) and repeats > 0 else 1


def _num(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


# name -> (type, label names, help): the per-run families built from status and observations.
RUN_FAMILIES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "atlasrun_run_phase": ("gauge", (*RUN, "phase"), "1 for the run's current phase, 0 for the others"),
    "atlasrun_run_blocked": (
        "gauge",
        (*RUN, "reason"),
        "1 while the run's Blocked condition is True, by reason",
    ),
    "atlasrun_items": (
        "counter",
        (*MODEL, "outcome"),
        "Counted work items by outcome (from the run's status; excluded: also tasks excluded by the plan)",
    ),
    "atlasrun_items_planned": ("gauge", MODEL, "Work items of the run's plan (tasks x repeats)"),
    "atlasrun_items_waiting": (
        "gauge",
        MODEL,
        "Work items not started yet (waiting for a Job slot or admission)",
    ),
    "atlasrun_items_running": ("gauge", MODEL, "Work items whose pods run"),
    "atlasrun_pass_rate": ("gauge", MODEL, "Pass rate of the scored items"),
    "atlasrun_pass_rate_ci95_lower": (
        "gauge",
        MODEL,
        "Lower bound of the pass rate's 95% Wilson interval, n = tasks (as summary.json)",
    ),
    "atlasrun_pass_rate_ci95_upper": (
        "gauge",
        MODEL,
        "Upper bound of the pass rate's 95% Wilson interval, n = tasks (as summary.json)",
    ),
    "atlasrun_mean_coverage": ("gauge", MODEL, "Mean claims coverage of the scored items"),
    "atlasrun_tokens": (
        "counter",
        (*MODEL, "type"),
        "Tokens of the agent's model calls (type: prompt, completion)",
    ),
    "atlasrun_cost_usd": ("counter", MODEL, "Priced cost of the agent's model calls in US dollars"),
    "atlasrun_tool_calls": ("counter", MODEL, "Tool calls the agent made"),
    "atlasrun_provider_retries": ("counter", MODEL, "Model calls the harness retried (429, 5xx, timeouts)"),
    "atlasrun_provider_rate_limited": ("counter", MODEL, "Provider answers with HTTP 429 (rate limited)"),
    "atlasrun_item_errors": (
        "counter",
        (*MODEL, "kind"),
        "Errored work items by error kind (atlasrun.errors.ErrorKind)",
    ),
    "atlasrun_tool_errors": (
        "counter",
        (*MODEL, "server", "kind"),
        "Failed tool calls by MCP server and kind",
    ),
    "atlasrun_pods_finished": ("counter", MODEL, "Pods of the run's counted Jobs, retried attempts included"),
    "atlasrun_pod_seconds": (
        "counter",
        MODEL,
        "Seconds from each counted pod's start on its node to its runner's end",
    ),
    "atlasrun_cpu_seconds": (
        "counter",
        MODEL,
        "CPU-seconds the counted pods reported (runner and sidecars, their cgroups' accounting)",
    ),
    "atlasrun_pods_without_cpu": (
        "counter",
        MODEL,
        "Counted pods that reported no CPU figure (killed before their summary): left out of cpu_seconds",
    ),
    "atlasrun_jobs": ("gauge", (*MODEL, "state"), "The run's unfinished Jobs (state: active, suspended)"),
    "atlasrun_pods": ("gauge", (*MODEL, "state"), "Active pods of the run's Jobs (state: ready, starting)"),
}


class _Families:
    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}
        for name, (kind, labels, text) in RUN_FAMILIES.items():
            family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            self._families[name] = family(name, text, labels=list(labels))

    def gauge(self, name: str, labels: list[str], value: float) -> None:
        self._families[name].add_metric(labels, value)  # type: ignore[attr-defined]

    counter = gauge

    def all(self) -> Iterator[Metric]:
        yield from self._families.values()


class _RunCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics.collect_runs()

    def describe(self) -> Iterable[Metric]:
        return list(_Families().all())


METRICS = Metrics()


def serve(port: int, addr: str = "0.0.0.0") -> None:
    disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series
    start_http_server(port, addr=addr)


def run_seen(run: Mapping[str, Any]) -> None:
    METRICS.run_seen(run)


def run_deleted(namespace: str, run: str) -> None:
    METRICS.run_deleted(namespace, run)


def jobs_seen(namespace: str, run: str, jobs: Iterable[Any]) -> None:
    METRICS.jobs_seen(namespace, run, jobs)


def item_counted(namespace: str, run: str, outcome: Outcome) -> None:
    METRICS.item_counted(namespace, run, outcome)


def pass_done(ok: bool, seconds: float) -> None:
    METRICS.pass_done(ok, seconds)


def queue_waited(seconds: float) -> None:
    METRICS.queue_wait.observe(max(0.0, seconds))


def watch_queue(depth: Callable[[], float]) -> None:
    """``depth()`` is read at each scrape: the runs due and not yet taken by a worker."""
    METRICS.queue_depth.set_function(depth)


def set_leading(leading: bool) -> None:
    METRICS.set_leading(leading)
