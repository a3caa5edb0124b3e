"""The agent extension point."""

from __future__ import annotations

from typing import Protocol

from atlasrun.agent.transcript import Transcript
from atlasrun.runspec.run import Limits
from atlasrun.servers.surface import ToolSurface
from atlasrun.tasks.model import Task


class Agent(Protocol):
    """Solves one task using only ``surface``; returns the full transcript.

    Agents never raise for tool or provider trouble: they record it in the
    transcript (``stop_reason``, ``infra_errors``) so the runner can decide.
    """

    name: str

    async def run(self, task: Task, surface: ToolSurface, limits: Limits) -> Transcript: ...
