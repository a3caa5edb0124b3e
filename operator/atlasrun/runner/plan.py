"""Planning a run: which tasks run on which servers, and which are excluded (with the reason)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from atlasrun.errors import InputError, did_you_mean
from atlasrun.runspec.run import RunSpec
from atlasrun.servers.catalog import Catalog, load_catalog
from atlasrun.servers.selection import enabled_servers, task_servers
from atlasrun.tasks.loader import Rejection, load_tasks
from atlasrun.tasks.model import Task


@dataclass
class Exclusion:
    task: Task
    reason: str


@dataclass
class Plan:
    catalog: Catalog
    enabled_servers: list[str]
    tasks: list[Task] = field(default_factory=list)
    excluded: list[Exclusion] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    # Distractor tools dropped because their server is not enabled, per task id.
    dropped_tools: dict[str, list[str]] = field(default_factory=dict)
    # Ids asked for (spec.tasks.ids, --task) that match no loaded task, each with a "did you mean".
    unknown_ids: list[str] = field(default_factory=list)

    def surface(self, task: Task) -> list[str]:
        """The tools ``task`` is offered in this run (its enabled tools minus dropped distractors)."""
        dropped = set(self.dropped_tools.get(task.id, []))
        return [t for t in task.enabled_tools if t not in dropped]

    def servers_used(self) -> list[str]:
        """Every server some planned task's surface needs."""
        return sorted({s for task in self.tasks for s in task_servers(task, self.enabled_servers).connect})


def build_catalog(spec: RunSpec) -> Catalog:
    catalog = load_catalog()
    if spec.spec.servers.catalog:
        catalog = catalog.merged(load_catalog(spec.resolve(spec.spec.servers.catalog)).servers)
    if spec.spec.servers.inline:
        catalog = catalog.merged(spec.spec.servers.inline)
    return catalog


def tasks_path(spec: RunSpec) -> Path:
    source = spec.spec.tasks
    if source.path:
        return spec.resolve(source.path)
    where = "spec.tasks"
    if source.dataset:
        raise InputError(
            "loading a Hugging Face dataset needs a reachable hub; download it and use 'path'", where
        )
    raise InputError("local runs read tasks from 'path' (uri and configMap are for cluster mode)", where)


def plan_run(spec: RunSpec) -> Plan:
    catalog = build_catalog(spec)
    names = set(catalog.by_name())
    enabled = enabled_servers(spec.spec.servers.enabled, names)
    unknown = list(dict.fromkeys(n for n in enabled if n not in names))
    run_file = str(spec.source_file) if spec.source_file else None
    if unknown:
        shown = ", ".join(n if re.fullmatch(r"[\w.-]+", n) else repr(n) for n in unknown[:10])
        raise InputError(
            f"spec.servers.enabled: unknown server(s) {shown}{' ...' if len(unknown) > 10 else ''}; "
            f"the catalog has {', '.join(sorted(names))}",
            where=run_file,
        )
    path = tasks_path(spec)
    try:
        loaded = load_tasks(path)
    except InputError as exc:
        if exc.where != str(path) or run_file is None:
            raise
        raise InputError(f"spec.tasks.path: {exc}", where=run_file) from exc
    plan = Plan(catalog=catalog, enabled_servers=list(enabled), rejected=loaded.rejected)
    tasks = loaded.tasks
    if spec.spec.tasks.ids is not None:
        wanted = set(spec.spec.tasks.ids)
        known = [t.id for t in tasks]
        plan.unknown_ids = [
            f"spec.tasks.ids: no task has id {i!r}{did_you_mean(i, known)}"
            for i in spec.spec.tasks.ids
            if i not in set(known)
        ]
        tasks = [t for t in tasks if t.id in wanted]
    if spec.spec.tasks.limit is not None:
        tasks = tasks[: spec.spec.tasks.limit]
    on = set(enabled)
    for task in tasks:
        needs = task_servers(task, on)
        if needs.missing:
            missing = ", ".join(f"{n}{'' if n in names else did_you_mean(n, names)}" for n in needs.missing)
            plan.excluded.append(Exclusion(task, f"needs server(s) not enabled: {missing}"))
            continue
        if needs.hidden_tools:
            plan.dropped_tools[task.id] = needs.hidden_tools
        plan.tasks.append(task)
    return plan
