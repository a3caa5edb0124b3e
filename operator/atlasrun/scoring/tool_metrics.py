"""MCP-Bench rule-based tool metrics (section 5.1) from transcripts, per task and per model.

Per task, over the agent's tool calls:

* valid tool-name rate: calls to a tool in the task's surface (``error_kind != "not_available"``)
  over all calls;
* schema compliance: calls to valid tools whose arguments validate (``jsonschema``) against the
  tool's ``parameters`` as shown to the agent (``Transcript.tools``), over calls to valid tools;
* execution success: valid-tool calls that returned without error, over calls to valid tools;

plus efficiency (calls, turns, wall time, tokens, cost). Calls refused because the tool-call
budget was spent (``error_kind == "budget"``) never reached the name check or a server; they are
counted separately and left out of all three rates. A task with no calls has rates of None (not
0 or 1); the per-model aggregate counts such tasks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, computed_field

from atlasrun.agent.transcript import Transcript


class TaskToolMetrics(BaseModel):
    task_id: str
    model: str
    repeat: int = 0
    calls: int = 0  # calls that were attempted (budget refusals excluded)
    budget_refused: int = 0
    valid_calls: int = 0  # tool name in the surface
    schema_checked: int = 0  # valid calls whose tool had a usable schema
    schema_compliant: int = 0
    succeeded: int = 0  # valid calls without error
    valid_name_rate: float | None = None
    schema_compliance: float | None = None
    execution_success: float | None = None
    turns: int = 0
    wall_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _validators(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Tool name -> jsonschema validator for its parameters (None if the schema itself is invalid)."""
    out: dict[str, Any] = {}
    for spec in tools:
        fn = spec.get("function") or {}
        name, schema = fn.get("name"), fn.get("parameters")
        if not isinstance(name, str):
            continue
        if not isinstance(schema, dict):
            schema = {"type": "object"}
        cls = jsonschema.validators.validator_for(schema)
        try:
            cls.check_schema(schema)
            out[name] = cls(schema)
        except SchemaError:
            out[name] = None
    return out


def task_tool_metrics(
    transcript: Transcript, task_id: str, model: str | None = None, repeat: int = 0
) -> TaskToolMetrics:
    """The rule-based metrics of one task's transcript."""
    validators = _validators(transcript.tools)
    attempted = [c for c in transcript.calls if c.error_kind != "budget"]
    valid = [c for c in attempted if c.error_kind != "not_available"]
    checked = compliant = 0
    for call in valid:
        validator = validators.get(call.name)
        if validator is None:
            continue  # no usable schema for this tool: neither compliant nor not
        checked += 1
        compliant += int(isinstance(call.arguments, dict) and bool(validator.is_valid(call.arguments)))
    succeeded = sum(1 for c in valid if not c.is_error)
    return TaskToolMetrics(
        task_id=task_id,
        model=model or transcript.model,
        repeat=repeat,
        calls=len(attempted),
        budget_refused=len(transcript.calls) - len(attempted),
        valid_calls=len(valid),
        schema_checked=checked,
        schema_compliant=compliant,
        succeeded=succeeded,
        valid_name_rate=_ratio(len(valid), len(attempted)),
        schema_compliance=_ratio(compliant, checked),
        execution_success=_ratio(succeeded, len(valid)),
        turns=transcript.turns,
        wall_s=transcript.wall_s,
        prompt_tokens=transcript.prompt_tokens,
        completion_tokens=transcript.completion_tokens,
        cost_usd=transcript.cost_usd,
    )


class ModelToolMetrics(BaseModel):
    tasks: int
    missing_transcripts: int  # results whose task JSON could not be read (not in any number below)
    tasks_without_calls: int
    calls: int
    budget_refused: int
    # Mean of the per-task rates over the tasks where the rate is defined.
    mean_valid_name_rate: float | None
    mean_schema_compliance: float | None
    mean_execution_success: float | None
    # Pooled over all calls of all tasks.
    valid_name_rate: float | None
    schema_compliance: float | None
    execution_success: float | None
    mean_calls: float | None
    mean_turns: float | None
    mean_wall_s: float | None
    mean_tokens: float | None
    tokens: int
    cost_usd: float


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None


def aggregate_tool_metrics(
    metrics: Iterable[TaskToolMetrics], missing_transcripts: int = 0
) -> ModelToolMetrics:
    """One model's per-task metrics: macro (mean of per-task rates) and pooled (micro) rates."""
    rows = list(metrics)
    calls, valid = sum(m.calls for m in rows), sum(m.valid_calls for m in rows)
    return ModelToolMetrics(
        tasks=len(rows),
        missing_transcripts=missing_transcripts,
        tasks_without_calls=sum(1 for m in rows if m.calls == 0),
        calls=calls,
        budget_refused=sum(m.budget_refused for m in rows),
        mean_valid_name_rate=_mean([m.valid_name_rate for m in rows]),
        mean_schema_compliance=_mean([m.schema_compliance for m in rows]),
        mean_execution_success=_mean([m.execution_success for m in rows]),
        valid_name_rate=_ratio(valid, calls),
        schema_compliance=_ratio(sum(m.schema_compliant for m in rows), sum(m.schema_checked for m in rows)),
        execution_success=_ratio(sum(m.succeeded for m in rows), valid),
        mean_calls=_mean([float(m.calls) for m in rows]),
        mean_turns=_mean([float(m.turns) for m in rows]),
        mean_wall_s=_mean([m.wall_s for m in rows]),
        mean_tokens=_mean([float(m.tokens) for m in rows]),
        tokens=sum(m.tokens for m in rows),
        cost_usd=math.fsum(m.cost_usd for m in rows),
    )
