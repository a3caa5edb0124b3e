"""What a model's work items spent and what went wrong in them, kept in ``status.models[m].usage``.

One source for three places: the pod's termination summary (``summary_fields``, written by
``runtask``), the ``ItemUsage`` of an outcome the operator reads back (``from_summary``) and the
running totals folded into the run's status when a chunk is counted (``fold``). Because the totals
live in the status, the metrics built from them (``metrics.py``: tokens, cost, provider 429s,
errors by kind, tool errors by server) survive an operator restart: they are counters that never
reset while the run exists.

Keys are small and bounded: error kinds are ``ErrorKind`` values, tool errors are
``<server>/<CallErrorKind>``; never a task id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from atlasrun.errors import ErrorKind
from atlasrun.scoring.result import TaskResult

if TYPE_CHECKING:  # records imports this module
    from atlasrun.cluster.wire.records import TaskSummary

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
    pods: int = Field(default=0, ge=0, description="pods (attempts included) of the counted Jobs")
    pod_seconds: float = Field(
        default=0, ge=0, description="seconds from each pod's start on its node to its runner's end"
    )
    cpu_seconds: float = Field(
        default=0, ge=0, description="CPU-seconds the pods reported (runner and sidecars, cgroup accounting)"
    )
    pods_without_cpu: int = Field(
        default=0,
        ge=0,
        description="pods that reported no CPU figure (killed first): cpuSeconds leaves them out",
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


@dataclass(frozen=True, slots=True)
class ItemUsage:
    """What one counted work item spent (from its termination summary), before it is folded."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    provider_retries: int = 0
    rate_limited: int = 0
    tool_errors: tuple[tuple[str, int], ...] = ()  # ('<server>/<kind>', count), sorted


def from_summary(summary: TaskSummary) -> ItemUsage:
    """The usage of one item from its termination summary (absent or negative values count 0)."""
    tokens = summary.tokens or {}
    return ItemUsage(
        prompt_tokens=_int(tokens.get("prompt")),
        completion_tokens=_int(tokens.get("completion")),
        cost_usd=_float(summary.cost_usd),
        tool_calls=_int(summary.tool_calls),
        provider_retries=_int(summary.provider_retries),
        rate_limited=_int(summary.rate_limited),
        tool_errors=tuple(
            sorted((str(k), _int(v)) for k, v in (summary.tool_errors or {}).items() if _int(v))
        ),
    )


def fold(totals: ModelUsage, item: ItemUsage, error: str | None) -> ModelUsage:
    """``totals`` plus one counted item; ``error``: its error kind if it ended in an error."""
    usage = totals.model_copy(deep=True)
    usage.prompt_tokens += item.prompt_tokens
    usage.completion_tokens += item.completion_tokens
    usage.cost_usd = round(usage.cost_usd + item.cost_usd, 6)
    usage.tool_calls += item.tool_calls
    usage.provider_retries += item.provider_retries
    usage.rate_limited += item.rate_limited
    # Assigned, not updated in place: the status is dumped with exclude_unset, and a field is
    # "set" only when assigned.
    tool_errors = dict(usage.tool_errors)
    for key, count in item.tool_errors:
        tool_errors[key] = tool_errors.get(key, 0) + count
    usage.tool_errors = tool_errors
    if error is not None:
        kind = error_kind(error)
        usage.errors = {**usage.errors, kind: usage.errors.get(kind, 0) + 1}
    return usage


@dataclass(frozen=True, slots=True)
class PodCost:
    """What a counted Job's pods cost (every attempt): read from them when the Job is counted."""

    pods: int = 0
    pod_seconds: float = 0.0
    cpu_seconds: float = 0.0
    pods_without_cpu: int = 0


def fold_cost(totals: ModelUsage, cost: PodCost) -> ModelUsage:
    """``totals`` plus the cost of one counted Job's pods."""
    usage = totals.model_copy()
    usage.pods += cost.pods
    usage.pod_seconds = round(usage.pod_seconds + cost.pod_seconds, 3)
    usage.cpu_seconds = round(usage.cpu_seconds + cost.cpu_seconds, 3)
    usage.pods_without_cpu += cost.pods_without_cpu
    return usage


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
