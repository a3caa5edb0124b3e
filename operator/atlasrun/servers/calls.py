"""The record of one tool call, as the tool surface makes it (agents put these in transcripts)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

# Why a tool call did not return a normal result. One list, used everywhere.
CallErrorKind = Literal[
    "tool_error",  # the server ran the tool and reported an error
    "not_available",  # the tool is not in the task's surface
    "invalid_arguments",  # arguments were not a JSON object
    "tool_timeout",  # no answer within the per-call timeout (fed back to the model; server restarted)
    "transport",  # the server crashed / the connection failed (infrastructure)
    "budget",  # the max-tool-calls budget was exhausted
]


class CallRecord(BaseModel):
    id: str
    name: str
    arguments: Any = None
    result: str = ""
    is_error: bool = False
    error_kind: CallErrorKind | None = None
    started_s: float = 0.0  # seconds since the task started
    elapsed_s: float = 0.0
    truncated: bool = False
