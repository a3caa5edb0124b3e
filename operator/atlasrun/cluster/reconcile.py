"""The reconcile decision, as a pure function: what exists -> what to create and what status says.

Kept free of API calls so it can be tested exhaustively and so a restarted
operator reaches the same decision from the same observations: work items are
identified by deterministic Job names, finished items are recorded in
``status.results`` (compact, keyed by Job name) before their Jobs may expire,
and nothing already recorded or already existing is created again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from atlasrun.cluster.manifests import job_name
from atlasrun.runspec.run import RunSpecBody
from atlasrun.scoring.result import ErrorKind
from atlasrun.tasks.model import Task

Phase = Literal["Pending", "Running", "Succeeded", "Blocked", "Suspended"]
MAX_REASON = 200


@dataclass(frozen=True)
class WorkItem:
    model: str
    task: Task
    repeat: int
    name: str  # the Job name


@dataclass(frozen=True)
class JobState:
    """What the operator observed about one Job (and its pod's termination message)."""

    name: str
    active: bool
    succeeded: bool
    failed: bool
    summary: dict[str, Any] | None = None  # parsed termination message of the runner
    failure_reason: str | None = None


@dataclass
class Decision:
    create: list[WorkItem] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # live Jobs to cancel (suspend)
    newly_recorded: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    phase: Phase = "Pending"
    status: dict[str, Any] = field(default_factory=dict)


def work_items(run: str, body: RunSpecBody, tasks: list[Task]) -> list[WorkItem]:
    """Every (model, task, repeat) in a stable order: repeats, then tasks, then models (interleaved)."""
    return [
        WorkItem(m.name, t, r, job_name(run, m.name, t.id, r))
        for r in range(body.repeats)
        for t in tasks
        for m in body.models
    ]


def record_from_job(job: JobState, model: str) -> dict[str, Any] | None:
    """The compact record of a finished Job (s=status p=passed c=coverage w=wall s m=model k=error kind
    r=reason);
    None while it is still running."""
    if job.summary is not None and (job.succeeded or job.failed):
        summary = job.summary
        return {
            "s": summary.get("status", "error"),
            "p": summary.get("passed"),
            "c": summary.get("coverage"),
            "w": summary.get("wall_s"),
            "m": model,
            "k": summary.get("error_kind"),
            "r": _short(summary.get("reason")),
        }
    if job.failed:
        return {
            "s": "error",
            "p": None,
            "c": None,
            "w": None,
            "m": model,
            "k": ErrorKind.JOB_FAILED.value,
            "r": _short(f"job failed: {job.failure_reason or 'no termination message'}"),
        }
    return None


def _short(text: Any) -> str | None:
    if text is None:
        return None
    text = str(text)
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def decide(
    run: str,
    body: RunSpecBody,
    tasks: list[Task],
    excluded: dict[str, str],
    jobs: list[JobState],
    recorded: dict[str, dict[str, Any]],
) -> Decision:
    """Given tasks, observed Jobs and already-recorded results: the next step and the new status."""
    items = work_items(run, body, tasks)
    by_name = {j.name: j for j in jobs}
    results = dict(recorded)
    decision = Decision(results=results)
    model_of = {i.name: i.model for i in items}
    for job in jobs:
        if job.name not in results and job.name in model_of:
            record = record_from_job(job, model_of[job.name])
            if record is not None:
                results[job.name] = decision.newly_recorded[job.name] = record
    live = [j for j in jobs if j.name not in results and not (j.succeeded or j.failed)]
    model_live: dict[str, int] = {}
    if body.cluster.suspend:
        decision.delete = [j.name for j in live]
        live = []
    else:
        for job in live:
            model_of_job = model_of.get(job.name)
            if model_of_job:
                model_live[model_of_job] = model_live.get(model_of_job, 0) + 1
        limits = {m.name: m.max_concurrency for m in body.models}
        room = body.parallelism - len(live)
        for item in items:
            if room <= 0:
                break
            if item.name in results or item.name in by_name:
                continue
            if model_live.get(item.model, 0) >= limits[item.model]:
                continue
            decision.create.append(item)
            model_live[item.model] = model_live.get(item.model, 0) + 1
            room -= 1
    decision.status = summarize_status(body, items, excluded, results, model_live)
    done = sum(1 for i in items if i.name in results)
    if body.cluster.suspend:
        decision.phase = "Suspended"
    elif (items and done == len(items)) or not items:
        decision.phase = "Succeeded"
    else:
        decision.phase = "Running" if (done or live or decision.create) else "Pending"
    return decision


def summarize_status(
    body: RunSpecBody,
    items: list[WorkItem],
    excluded: dict[str, str],
    results: dict[str, dict[str, Any]],
    running: dict[str, int],
) -> dict[str, Any]:
    """Per-model counts, pass rate and mean coverage; the printer-column strings."""
    models: dict[str, dict[str, Any]] = {}
    for model in body.models:
        mine = [i for i in items if i.model == model.name]
        records = [results[i.name] for i in mine if i.name in results]
        scored = [r for r in records if r["s"] == "scored"]
        passed = sum(1 for r in scored if r.get("p"))
        coverages = [float(r["c"]) for r in scored if r.get("c") is not None]
        models[model.name] = {
            "total": len(mine),
            "pending": len(mine) - len(records) - running.get(model.name, 0),
            "running": running.get(model.name, 0),
            "scored": len(scored),
            "passed": passed,
            "failed": len(scored) - passed,
            "excluded": sum(1 for r in records if r["s"] == "excluded") + len(excluded) * body.repeats,
            "errored": sum(1 for r in records if r["s"] == "error"),
            "passRate": round(passed / len(scored), 4) if scored else None,
            "meanCoverage": round(sum(coverages) / len(coverages), 4) if coverages else None,
        }
    done = sum(1 for i in items if i.name in results)
    pass_rates = " ".join(
        f"{name}={m['passRate']:.2f}" if m["passRate"] is not None else f"{name}=-"
        for name, m in models.items()
    )
    return {
        "progress": f"{done}/{len(items)}",
        "running": sum(running.values()),
        "models": models,
        "passRates": pass_rates,
        "excludedTasks": [{"task": t, "reason": r} for t, r in sorted(excluded.items())],
    }


def parse_summary(message: str | None) -> dict[str, Any] | None:
    """The runner's termination message (JSON), or None if absent or not ours."""
    if not message:
        return None
    try:
        data = json.loads(message)
    except ValueError:
        return None
    return data if isinstance(data, dict) and "status" in data else None
