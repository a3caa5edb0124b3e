"""The records the operator and the pods exchange through the API server, typed and versioned.

- ``TaskSummary``: the runner's termination message (``atlas run-task`` writes it, at most 4 KiB;
  the operator reads it as the outcome of the pod's attempt).
- ``RunStatus`` (with ``Condition``, ``ModelStatus``, ``TasksStatus``, ``ExcludedTask``): the
  AtlasRun's ``status``, which the operator writes (``reconcile`` builds it, ``status_patch``
  serialises what changed) and which ``crd.py`` turns into the CRD's status schema.
- The pod's inputs, ``contract.WorkUnit``, are the third (kept in ``contract`` beside the env
  var that carries them).

Each carries ``schema_version`` (``schemaVersion`` in the camelCase status). Like the local
records (``scoring.records``), a reader accepts the current version and the previous one (the
shape written before records were versioned) and refuses any other with a ``RecordVersionError``
naming the record, where it was read and the version.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from atlasrun.cluster.wire.contract import INFRA_EXITS, Phase
from atlasrun.cluster.wire.usage import ModelUsage, summary_fields
from atlasrun.scoring.records import CURRENT_VERSION, RecordVersionError, VersionedRecord
from atlasrun.scoring.result import TaskResult

STATUS_VERSION_KEY = "schemaVersion"
# What an item spent (``TaskSummary`` fields): the first thing a batch drops to fit its message.
USAGE_FIELDS = (
    "tool_calls",
    "tokens",
    "cost_usd",
    "tool_errors",
    "provider_retries",
    "rate_limited",
    "infra",
)

# ---------------------------------------------------------------- the termination message


class TaskSummary(VersionedRecord):
    """One attempt of one work item, as its pod's termination message. Long strings may have been
    cut to fit 4 KiB (``termination.compact``), whole fields dropped (``truncated``): all but ``status``
    are optional."""

    RECORD: ClassVar[str] = "termination message"
    model_config = ConfigDict(extra="ignore")

    status: Literal["scored", "excluded", "error", "batch"]
    task: str | None = None
    model: str | None = None
    repeat: int | None = None
    error_kind: str | None = None
    reason: str | None = None
    coverage: float | None = None
    passed: bool | None = None
    tool_calls: int | None = None
    wall_s: float | None = None
    tokens: dict[str, int] | None = None
    cost_usd: float | None = None
    # usage.summary_fields: failed tool calls by '<server>/<kind>', provider retries and 429s
    tool_errors: dict[str, int] | None = None
    provider_retries: int | None = None
    rate_limited: int | None = None
    infra: bool | None = None  # exit code 3 or 4: the outcome says nothing about the model
    result: str | None = None  # the stored result's URI
    exit_code: int | None = None
    truncated: bool | None = None  # only status and exit_code are left
    # status "batch": a pod that ran several items in sequence, one summary per item, in order
    items: list[TaskSummary] | None = None
    # the pod's CPU-seconds (runner and sidecars, cluster/pod/cpu.py): on the pod's own summary
    cpu_s: float | None = Field(default=None, ge=0)

    @classmethod
    def of_result(cls, result: TaskResult, stored: str | None = None, exit_code: int | None = None) -> Self:
        """The summary of ``result``; ``stored``: its object's URI; ``exit_code``: the pod's."""
        return cls(
            task=result.task_id,
            model=result.model,
            repeat=result.repeat,
            status=result.status,
            error_kind=result.error_kind,
            reason=result.reason,
            coverage=result.coverage,
            passed=result.passed,
            tool_calls=result.tool_calls,
            wall_s=round(result.wall_s, 3),
            tokens={"prompt": result.prompt_tokens, "completion": result.completion_tokens},
            cost_usd=result.cost_usd,
            **summary_fields(result),
            infra=None if exit_code is None else exit_code in INFRA_EXITS,
            result=stored,
            exit_code=exit_code,
        )

    def for_batch(self, reason_chars: int = 200, usage: bool = True) -> TaskSummary:
        """This item's entry in a ``batch`` summary: what the operator counts (the pod-level
        ``model``, ``result``, ``exit_code`` and ``cpu_s`` left out), the reason cut to ``reason_chars``
        (0: none), the usage fields dropped unless ``usage``."""
        drop: dict[str, Any] = {
            "model": None,
            "result": None,
            "exit_code": None,
            "items": None,
            "cpu_s": None,
        }
        if not usage:
            drop |= dict.fromkeys(USAGE_FIELDS)
        reason = self.reason
        if reason is not None and len(reason) > reason_chars:
            drop["reason"] = reason[:reason_chars] + "..." if reason_chars else None
        return self.model_copy(update=drop)

    def to_message(self) -> dict[str, Any]:
        """The JSON object written (before ``termination.compact`` fits it into the limit)."""
        return self.model_dump(mode="json", exclude={"items"} if self.items is None else None)


def read_summary(message: str | None, where: str) -> TaskSummary | None:
    """The runner's termination message, or None if absent or not ours (not JSON, no status).

    A message of an unknown ``schema_version`` (a newer runner image than this operator) is not
    dropped: it becomes an ``error`` outcome whose reason says so, visible in status and metrics."""
    if not message:
        return None
    try:
        return TaskSummary.from_json(message, where)
    except RecordVersionError as exc:
        return TaskSummary(status="error", error_kind="harness", reason=str(exc))
    except ValueError:
        return None


# ---------------------------------------------------------------- the AtlasRun status


class _Status(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Condition(_Status):
    """A metav1.Condition: Ready, Blocked (e.g. unpinned images), ..."""

    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: datetime | None = None
    observed_generation: int | None = Field(default=None, ge=0)


class ModelStatus(_Status):
    """Work items of one model by state; passRate and meanCoverage over its scored items."""

    total: int = Field(default=0, ge=0)
    pending: int = Field(default=0, ge=0)
    running: int = Field(default=0, ge=0)
    scored: int = Field(default=0, ge=0)
    passed: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    excluded: int = Field(default=0, ge=0)
    errored: int = Field(default=0, ge=0)
    pass_rate: float | None = Field(default=None, ge=0, le=1)
    mean_coverage: float | None = Field(default=None, ge=0, le=1)
    coverage_sum: float = Field(default=0, ge=0, description="sum of the scored items' coverage")
    excluded_items: int = Field(default=0, ge=0, description="items the runner reported excluded")
    chunks_done: str = Field(
        default="", description="chunks (Indexed Jobs) already counted, as ranges, e.g. 0-4,7"
    )
    scored_tasks: int = Field(
        default=0, ge=0, description="distinct tasks with a scored item (the n of the pass rate's interval)"
    )
    scored_task_indexes: str = Field(
        default="",
        description="the runnable tasks (by position in the pinned document) with a scored item, as ranges",
    )
    usage: ModelUsage = Field(
        default_factory=ModelUsage,
        description="tokens, cost, provider retries and 429s, errors by kind, tool errors by server",
    )


class TasksStatus(_Status):
    """The task document the run pinned: content-addressed, read once."""

    sha256: str = ""
    uri: str | None = Field(default=None, description="s3://<bucket>/<prefix>/tasks/<sha256>")
    path: str | None = Field(default=None, description="the pods' mounted copy (ConfigMap source)")
    name: str = ""
    count: int = Field(default=0, ge=0, description="runnable tasks")
    excluded: int = Field(default=0, ge=0, description="excluded or rejected tasks")


class ExcludedTask(_Status):
    task: str
    reason: str


class RunStatus(_Status, VersionedRecord):
    """``status`` of an AtlasRun, written by the operator. Fields not declared here are pruned
    by the API server, so everything the operator keeps in status must be declared."""

    RECORD: ClassVar[str] = "AtlasRun status"

    schema_version: int = Field(
        default=CURRENT_VERSION, description="the version of this status' shape (absent: version 1)"
    )
    phase: Phase = Phase.PENDING
    progress: str = Field(default="0/0", description="finished/total work items, e.g. 12/40")
    running: int = Field(default=0, ge=0, description="live Jobs")
    models: dict[str, ModelStatus] = Field(
        default_factory=dict, description="per-model counts, by model name"
    )
    pass_rates: str = Field(
        default="", description='per-model pass rates for display, e.g. "gpt-4o=0.82 claude=0.79"'
    )
    results_uri: str | None = Field(default=None, alias="resultsURI")
    tasks: TasksStatus | None = None
    excluded_tasks: list[ExcludedTask] = Field(
        default_factory=list, description="the first excluded tasks with the reason (count: tasks.excluded)"
    )
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = Field(default=None, ge=0)
    start_time: datetime | None = None
    completion_time: datetime | None = None
    kopf: dict[str, Any] = Field(default_factory=dict, description="kopf's handler progress")

    @classmethod
    def from_data(cls, data: Any, where: str) -> Self:
        """The status as stored (camelCase ``schemaVersion``): current or previous version."""
        if isinstance(data, dict) and STATUS_VERSION_KEY in data:
            data = dict(data)
            data["schema_version"] = data.pop(STATUS_VERSION_KEY)
        return super().from_data(data, where)


def status_dump(status: RunStatus) -> dict[str, Any]:
    """``status`` serialised for the API server: camelCase, only the fields set, plus its
    ``schemaVersion``. Only declared fields exist (the API server would prune any other)."""
    data = status.model_dump(by_alias=True, mode="json", exclude_unset=True)
    data[STATUS_VERSION_KEY] = status.schema_version
    return data


def status_patch(observed: RunStatus, desired: RunStatus) -> dict[str, Any]:
    """The merge patch from ``observed`` to ``desired``: the top-level fields whose dumped value
    differs (empty: nothing to write), with ``schemaVersion`` whenever anything is written."""
    before, after = status_dump(observed), status_dump(desired)
    patch = {k: v for k, v in after.items() if before.get(k) != v}
    if patch:
        patch[STATUS_VERSION_KEY] = after[STATUS_VERSION_KEY]
    return patch
