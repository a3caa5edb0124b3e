"""What a model's work items spent and what went wrong in them, kept in ``status.models[m].usage``.

One source for three places: the pod's termination summary (``summary_fields``, written by
``runtask``), the compact outcome record the operator reads back (``from_summary``) and the
running totals folded into the run's status when a chunk is counted (``fold``). Because the totals
live in the status, the metrics built from them (``metrics.py``: tokens, cost, provider 429s,
errors by kind, tool errors by server) survive an operator restart: they are counters that never
reset while the run exists.

Keys are small and bounded: error kinds are ``ErrorKind`` values, tool errors are
``<server>/<CallErrorKind>``; never a task id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from atlasrun.errors import ErrorKind
from atlasrun.scoring.result import TaskResult

MAX_TOOL_ERROR_KEYS = 16  # (server, kind) pairs: the summary stays far below its 4 KiB
OTHER_SERVER = "other"


class ModelUsage(BaseModel):
    """Totals over a model's counted work items (``status.models[m].usage``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    prompt_tokens: int = Field(default=0, ge=0, description="prompt tokens of the agent's model calls")
    completion_tokens: int = Field(
        default=0, ge=0, description="completion tokens of the agent's model calls"
    )
    cost_usd: float = Field(
        default=0, ge=0, alias="costUSD", description="priced cost of the agent's model calls"
    )
    tool_calls: int = Field(default=0, ge=0, description="tool calls the agent made")
    provider_retries: int = Field(
        default=0, ge=0, description="model calls retried by the harness (429, 5xx, timeouts)"
    )
    rate_limited: int = Field(default=0, ge=0, description="provider answers with HTTP 429 (rate limited)")
    errors: dict[str, int] = Field(default_factory=dict, description="errored items by error kind")
    tool_errors: dict[str, int] = Field(
        default_factory=dict,
        description="failed tool calls by '<server>/<kind>' (kind: tool_error, transport, ...)",
    )


def summary_fields(result: TaskResult) -> dict[str, Any]:
    """The usage part of a pod's termination summary (besides ``tokens`` and ``cost_usd``)."""
    transcript = result.transcript
    tool_errors: dict[str, int] = {}
    retries = rate_limited = 0
    if transcript is not None:
        for call in transcript.calls:
            if call.is_error or call.error_kind:
                server = call.name.split("_", 1)[0]
                server = server if server in result.servers else OTHER_SERVER  # never a made-up name
                key = f"{server}/{call.error_kind or 'tool_error'}"
                if key in tool_errors or len(tool_errors) < MAX_TOOL_ERROR_KEYS:
                    tool_errors[key] = tool_errors.get(key, 0) + 1
        retries = sum(m.retries for m in transcript.model_calls)
        rate_limited = sum(m.rate_limited for m in transcript.model_calls)
    return {"tool_errors": tool_errors, "provider_retries": retries, "rate_limited": rate_limited}


def from_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The compact usage of one item (the ``u`` of an outcome record) from its termination summary."""
    tokens = summary.get("tokens") or {}
    return {
        "pt": _int(tokens.get("prompt")),
        "ct": _int(tokens.get("completion")),
        "usd": _float(summary.get("cost_usd")),
        "tc": _int(summary.get("tool_calls")),
        "pr": _int(summary.get("provider_retries")),
        "rl": _int(summary.get("rate_limited")),
        "te": {str(k): _int(v) for k, v in (summary.get("tool_errors") or {}).items() if _int(v)},
    }


def fold(totals: Mapping[str, Any] | None, outcome: Mapping[str, Any]) -> dict[str, Any]:
    """``totals`` (a ``usage`` as stored, camelCase) plus one counted outcome record."""
    usage = ModelUsage.model_validate(totals or {})
    item = outcome.get("u") or {}
    usage.prompt_tokens += _int(item.get("pt"))
    usage.completion_tokens += _int(item.get("ct"))
    usage.cost_usd = round(usage.cost_usd + _float(item.get("usd")), 6)
    usage.tool_calls += _int(item.get("tc"))
    usage.provider_retries += _int(item.get("pr"))
    usage.rate_limited += _int(item.get("rl"))
    for key, count in (item.get("te") or {}).items():
        usage.tool_errors[key] = usage.tool_errors.get(key, 0) + _int(count)
    if outcome.get("s") not in ("scored", "excluded"):
        kind = error_kind(outcome.get("k"))
        usage.errors[kind] = usage.errors.get(kind, 0) + 1
    return usage.model_dump(by_alias=True)


def error_kind(value: Any) -> str:
    """An ``ErrorKind`` value; anything else is ``other`` (labels stay a closed set)."""
    try:
        return ErrorKind(str(value)).value
    except ValueError:
        return ErrorKind.OTHER.value


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float:
    try:
        return max(0.0, float(value or 0.0))
    except (TypeError, ValueError):
        return 0.0
