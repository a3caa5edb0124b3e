"""The ``replay`` agent: replays a task's reference trajectory against the live servers.

A real feature, not a test fake: it checks that tasks are still solvable on the
current servers (drift audits) and powers the offline demo. Calls within one
reference turn run concurrently, as a parallel tool call would.
"""

from __future__ import annotations

import asyncio
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
