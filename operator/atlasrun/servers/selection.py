"""Which servers a run enables and which a task needs: one answer for local and cluster mode."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from atlasrun import naming
from atlasrun.tasks.model import Task


def enabled_servers(enabled: list[str] | None, available: Iterable[str]) -> list[str]:
    """``spec.servers.enabled`` resolved: omitted (None) means every available server, an explicit
    empty list means none. Names are kept as given (the caller reports unknown ones)."""
    return sorted(available) if enabled is None else list(enabled)


@dataclass(frozen=True)
class TaskServers:
    required: list[str]  # servers the reference solution calls, in first-use order
    missing: list[str]  # required but not enabled: the task cannot be scored (excluded)
    connect: list[str]  # enabled servers behind the task's enabled tools: what the run starts
    hidden_tools: list[str]  # enabled tools whose server is not enabled (dropped from the surface)


def task_servers(task: Task, enabled: Collection[str]) -> TaskServers:
    """The servers ``task`` needs, given the run's enabled servers."""
    surface = list(dict.fromkeys(naming.server_of(tool) for tool in task.enabled_tools))
    return TaskServers(
        required=task.required_servers,
        missing=[s for s in task.required_servers if s not in enabled],
        connect=[s for s in surface if s in enabled],
        hidden_tools=[t for t in task.enabled_tools if naming.server_of(t) not in enabled],
    )
