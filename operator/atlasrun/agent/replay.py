"""The ``replay`` agent: replays a task's reference trajectory against the live servers.

A real feature, not a test fake: it checks that tasks are still solvable on the
current servers (drift audits) and powers the offline demo. Calls within one
reference turn run concurrently, as a parallel tool call would.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

from atlasrun.agent.transcript import Transcript
from atlasrun.runspec.run import Limits
from atlasrun.servers.surface import ToolSurface
from atlasrun.tasks.model import Task


class ReplayAgent:
    name = "replay"

    async def run(self, task: Task, surface: ToolSurface, limits: Limits) -> Transcript:
        started = time.perf_counter()
        transcript = Transcript(agent=self.name, model="replay", stop_reason="replayed")
        transcript.messages.append({"role": "user", "content": task.prompt})
        for turn in task.reference_trajectory:
            if not turn.calls:
                continue
            transcript.turns += 1
            records = await asyncio.gather(*(surface.call(c.name, c.arguments, c.id) for c in turn.calls))
            transcript.messages.append(
                {
                    "role": "assistant",
                    "content": turn.text or None,
                    "tool_calls": [
                        {
                            "id": r.id,
                            "type": "function",
                            "function": {"name": r.name, "arguments": json.dumps(r.arguments)},
                        }
                        for r in records
                    ],
                }
            )
            transcript.messages.extend(
                {"role": "tool", "tool_call_id": r.id, "content": r.result} for r in records
            )
            if surface.infra_errors:
                transcript.stop_reason = "infra_error"
                break
        transcript.final_answer = task.reference_answer or _fallback_answer(task, surface)
        transcript.messages.append({"role": "assistant", "content": transcript.final_answer})
        transcript.calls = list(surface.calls)
        transcript.infra_errors = list(surface.infra_errors)
        transcript.wall_s = time.perf_counter() - started
        return transcript


def _fallback_answer(task: Task, surface: ToolSurface) -> str:
    """Without a reference answer: the trajectory's last text, else the tool outputs."""
    texts = [t.text for t in task.reference_trajectory if t.text.strip()]
    if texts:
        return texts[-1]
    return "\n\n".join(c.result for c in surface.calls if not c.is_error)


class PartialReplayAgent(ReplayAgent):
    """``replay-partial``: a scripted offline agent that follows the reference only partly, so a
    demo has a second agent with other skills to compare and failures to diagnose. Which way a
    task goes is fixed by a hash of its id (the same every run):

    * half of the tasks: the full reference trajectory and answer (as ``replay``);
    * stops early: only the first reference step, then an answer that does not use it;
    * a misspelt tool name (not offered), then a guess;
    * no tool call at all: a guess.
    """

    name = "replay-partial"
    MODES = ("full", "full", "stops_early", "no_tools", "full", "full", "stops_early", "wrong_tool")

    def mode(self, task: Task) -> str:
        digest = hashlib.sha256(task.id.encode()).digest()
        return self.MODES[digest[0] % len(self.MODES)]

    async def run(self, task: Task, surface: ToolSurface, limits: Limits) -> Transcript:
        mode = self.mode(task)
        steps = [t for t in task.reference_trajectory if t.calls]
        if mode == "full" or not steps:
            transcript = await super().run(task, surface, limits)
            transcript.agent = transcript.model = self.name
            return transcript
        started = time.perf_counter()
        transcript = Transcript(agent=self.name, model=self.name, stop_reason="answered")
        transcript.messages.append({"role": "user", "content": task.prompt})
        if mode != "no_tools":
            first = steps[0].calls[0]
            name = first.name if mode == "stops_early" else first.name + "s"
            record = await surface.call(name, first.arguments, first.id)
            transcript.turns += 1
            transcript.messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": record.id,
                            "type": "function",
                            "function": {"name": record.name, "arguments": json.dumps(record.arguments)},
                        }
                    ],
                }
            )
            transcript.messages.append({"role": "tool", "tool_call_id": record.id, "content": record.result})
        transcript.final_answer = {
            "stops_early": "I looked at the first result and stopped there: the task looks done.",
            "wrong_tool": "That tool did not work, so from memory: the answer is 7.",
            "no_tools": "Without looking anything up, my best guess is 7.",
        }[mode]
        transcript.messages.append({"role": "assistant", "content": transcript.final_answer})
        transcript.calls = list(surface.calls)
        transcript.infra_errors = list(surface.infra_errors)
        transcript.wall_s = time.perf_counter() - started
        return transcript


# Agents built into AtlasRun (a model's ``model:`` field): what they are, as the report labels them.
BUILTIN_AGENTS = {
    ReplayAgent.name: "built-in: replays the reference trajectory and answer (no model)",
    PartialReplayAgent.name: "built-in scripted agent: follows the reference trajectory only partly "
    "(stops early, misspells a tool, or skips tools on some tasks); no model",
}
