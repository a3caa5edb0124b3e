"""Planning a run: which tasks run on which servers, and which are excluded (with the reason)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from atlasrun import naming
from atlasrun.errors import InputError, did_you_mean
from atlasrun.runspec.run import RunSpec
from atlasrun.servers.catalog import Catalog, is_builtin, load_catalog
from atlasrun.servers.readiness import blocker, runs_here
from atlasrun.servers.remote import probe_environment
from atlasrun.servers.selection import enabled_servers, task_servers
from atlasrun.tasks.hub import hub_source, is_hub_source
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
    source: str = ""  # where the tasks came from (a file or a dataset), for messages
    loaded: int = 0  # tasks read from the source (rejected rows not counted)

    def why_nothing(self) -> str:
        """Why the plan has no task, naming the source and the setting that emptied it."""
        if self.unknown_ids:
            return f"fix the ids above ({self.source} has no task of that id)"
        if not self.loaded:
            rejected = f" ({len(self.rejected)} row(s) rejected above)" if self.rejected else ""
            return f"{self.source} has no task to run{rejected}"
        if self.excluded:
            return f"every selected task of {self.source} was excluded (above)"
        return f"spec.tasks selects none of the {self.loaded} task(s) in {self.source}"

    def surface(self, task: Task) -> list[str]:
        """The tools ``task`` is offered in this run (its enabled tools minus dropped distractors)."""
        dropped = set(self.dropped_tools.get(task.id, []))
        return [t for t in task.enabled_tools if t not in dropped]

    def servers_used(self) -> list[str]:
        """Every server some planned task's surface needs."""
        return sorted({s for task in self.tasks for s in task_servers(task, self.enabled_servers).connect})


def _shown(task_id: str, limit: int = 80) -> str:
    """An id as a message quotes it: escaped, and cut to ``limit`` characters (one was 5,000)."""
    text = repr(task_id)
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(task_id):,} characters)"


def build_catalog(spec: RunSpec) -> Catalog:
    """The run's servers: a built-in catalog by name (``starter``, the default; ``mcp-atlas``) or
    the starter catalog with a catalog file's entries over it; then ``servers.inline`` over that.
    Only a built-in catalog's entries are the host's: the others get what the sandbox grants
    them (servers/sandbox.py), and each names where it was declared for the sandbox's errors."""
    chosen = spec.spec.servers.catalog
    if chosen and is_builtin(chosen):
        catalog = load_catalog(chosen)
    else:
        catalog = load_catalog()
        if chosen:
            catalog = catalog.merged(load_catalog(spec.resolve(chosen)).servers)
    if spec.spec.servers.inline:
        run_file = str(spec.source_file) if spec.source_file else None
        inline = [s.declared_at(run_file, f"spec.servers.inline[{s.name}]") for s in spec.spec.servers.inline]
        catalog = catalog.merged(inline)
    return catalog


def tasks_path(spec: RunSpec) -> Path | str:
    """The local tasks file, or a Hugging Face dataset as an ``hf://`` source (``dataset``, or ``uri: hf://...``)."""
    source = spec.spec.tasks
    if source.path:
        return spec.resolve(source.path)
    if source.dataset:
        return hub_source(source.dataset)
    if source.uri and is_hub_source(source.uri):
        return source.uri
    raise InputError(
        "local runs read tasks from 'path' or a dataset (s3:// uri and configMap are for cluster mode)",
        "spec.tasks",
    )


def _why_not(server: str, catalog: Catalog) -> str:
    """A server a task needs that is not enabled, with why ("brave-search (key BRAVE_API_KEY not
    set, egress to api.search.brave.com:443)")."""
    spec = catalog.by_name().get(server)
    if spec is None:
        return f"{server}{did_you_mean(server, catalog.by_name())}"
    why = blocker(spec)
    return f"{server} ({why})" if why else server


def _servers_named(tasks: list[Task]) -> list[str]:
    """Every server the tasks' reference solutions or enabled tools name."""
    named = {s for task in tasks for s in task.required_servers}
    return sorted(named | {naming.server_of(tool) for task in tasks for tool in task.enabled_tools})


def plan_run(spec: RunSpec) -> Plan:
    catalog = build_catalog(spec)
    run_file = str(spec.source_file) if spec.source_file else None
    # backend mcp-atlas-env: the servers are the agent-environment's, not the catalog's
    url = spec.spec.servers.environment_url
    remote = probe_environment(url, where=run_file or "spec.servers.url") if url else None
    if remote is None:
        names, has = set(catalog.by_name()), "the catalog has"
        runnable = [s.name for s in catalog.servers if runs_here(s)]
    else:
        names, has, runnable = set(remote.statuses), f"the agent-environment at {url} has", remote.online
    enabled = enabled_servers(spec.spec.servers.enabled, runnable)
    unknown = list(dict.fromkeys(n for n in enabled if n not in names))
    if unknown and not (remote and remote.unreachable):
        shown = ", ".join(n if re.fullmatch(r"[\w.-]+", n) else repr(n) for n in unknown[:10])
        raise InputError(
            f"spec.servers.enabled: unknown server(s) {shown}{' ...' if len(unknown) > 10 else ''}; "
            f"{has} {', '.join(sorted(names)) or 'none'}",
            where=run_file,
        )
    if remote and not remote.unreachable:  # one it has configured but not online serves nothing
        enabled = [n for n in enabled if n in remote.online]
    path = tasks_path(spec)
    try:
        loaded = load_tasks(path)
    except InputError as exc:
        if not isinstance(path, Path) or exc.where != str(path) or run_file is None:
            raise
        raise InputError(f"spec.tasks.path: {exc}", where=run_file) from exc
    plan = Plan(
        catalog=catalog,
        enabled_servers=list(enabled),
        rejected=loaded.rejected,
        source=str(path),
        loaded=len(loaded.tasks),
    )
    tasks = loaded.tasks
    if spec.spec.tasks.ids is not None:
        wanted = set(spec.spec.tasks.ids)
        known = [t.id for t in tasks]
        plan.unknown_ids = [
            f"spec.tasks.ids: no task has id {_shown(i)}{did_you_mean(i, known)}"
            for i in spec.spec.tasks.ids
            if i not in set(known)
        ]
        tasks = [t for t in tasks if t.id in wanted]
    if spec.spec.tasks.limit is not None:
        tasks = tasks[: spec.spec.tasks.limit]
    if remote and remote.unreachable and spec.spec.servers.enabled is None:
        # What it serves is unknown: no task is excluded for a server; its items fail as infra errors.
        enabled = plan.enabled_servers = _servers_named(tasks)
    on = set(enabled)
    for task in tasks:
        needs = task_servers(task, on)
        if needs.missing:
            why = remote.why_not if remote else lambda server: _why_not(server, catalog)
            missing = ", ".join(why(n) for n in needs.missing)
            plan.excluded.append(Exclusion(task, f"needs server(s) not enabled: {missing}"))
            continue
        if needs.hidden_tools:
            plan.dropped_tools[task.id] = needs.hidden_tools
        plan.tasks.append(task)
    return plan
