"""Failure diagnosis of one failed task: the LLM diagnostic judge and the offline deterministic diagnoser.

The LLM judge gets the Appendix E.1 prompt and must answer a JSON object whose
modes are taxonomy ids. A reply that does not parse, names an unknown mode, or
uses a mode a harness signal rules out is retried (with the reason fed back);
after the retries the diagnosis is recorded as *failed*, never given a made-up
mode. A certain signal (no tool call at all) forces the primary mode whatever
the judge says. The deterministic diagnoser uses the signals alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, Field, ValidationError, field_validator

from atlasrun.diagnostics import taxonomy
from atlasrun.diagnostics.model import DETERMINISTIC, Diagnosis, Failure
from atlasrun.diagnostics.prompt import (
    PROMPT_SHA256,
    PROMPT_VERSION,
    build_prompt,
    retry_prompt,
)
from atlasrun.diagnostics.signals import Signal, detect, forbidden_modes, strongest_mode
from atlasrun.judge.base import JudgeInfo
from atlasrun.judge.llm import JudgeOutputError, extract_json_object
from atlasrun.provider import Endpoint, ProviderError, complete
from atlasrun.scoring.result import TaskResult

DETERMINISTIC_VERSION = "signals/1"


class Diagnoser(Protocol):
    info: JudgeInfo

    async def diagnose(self, result: TaskResult) -> Diagnosis:
        """Diagnose a failed, scored result that carries its task and transcript."""
        ...


def _base(result: TaskResult, info: JudgeInfo, signals: list[Signal], **fields: Any) -> Diagnosis:
    return Diagnosis(
        model=result.model,
        task_id=result.task_id,
        repeat=result.repeat,
        coverage=result.coverage,
        signals=signals,
        judge=info,
        **fields,
    )


class _Reply(BaseModel):
    primary_mode: str
    failures: list[Failure] = Field(default_factory=list)
    confidence: float | None = None
    summary: str = ""

    @field_validator("primary_mode", mode="before")
    @classmethod
    def _primary(cls, value: Any) -> str:
        return taxonomy.get(taxonomy.normalize(str(value))).id

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> float | None:
        try:
            return None if value is None else min(max(float(value), 0.0), 1.0)
        except (TypeError, ValueError):
            return None


def parse_diagnosis(text: str, signals: Sequence[Signal] = ()) -> tuple[_Reply, str | None]:
    """The judge's reply, strictly, with the signals applied: (reply, what a certain signal overrode).

    Raises JudgeOutputError for anything but a JSON object whose modes are all taxonomy ids, or one
    that uses a mode a signal rules out (e.g. early_termination after a budget stop).
    """
    data = extract_json_object(text)
    failures = data.get("failures") or []
    if not isinstance(failures, list):
        raise JudgeOutputError("'failures' must be a list")
    data["failures"] = [
        {
            "mode": taxonomy.normalize(str(f.get("mode", ""))),
            "evidence": str(f.get("evidence") or ""),
            "root_cause": bool(f.get("is_root_cause", f.get("root_cause", False))),
        }
        if isinstance(f, dict)
        else f
        for f in failures
    ]
    try:
        reply = _Reply.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors())
        raise JudgeOutputError(f"judge output does not fit the taxonomy: {problems}") from exc
    if reply.primary_mode not in {f.mode for f in reply.failures}:
        root = not any(f.root_cause for f in reply.failures)
        reply.failures.insert(0, Failure(mode=reply.primary_mode, root_cause=root))
    if len(reply.failures) == 1:
        reply.failures[0].root_cause = True
    forced = _force(reply, signals)
    used = {reply.primary_mode, *(f.mode for f in reply.failures)} & forbidden_modes(signals)
    if used:
        raise JudgeOutputError(f"mode(s) {', '.join(sorted(used))} are ruled out by the harness signals")
    return reply, forced


def _force(reply: _Reply, signals: Sequence[Signal]) -> str | None:
    """A certain signal's mode becomes primary and sole root cause; failures it rules out are dropped."""
    signal = next((s for s in signals if s.certain and s.mode), None)
    if signal is None or signal.mode is None:
        return None
    said, before = reply.primary_mode, [f.mode for f in reply.failures]
    kept = [f for f in reply.failures if f.mode != signal.mode and f.mode not in signal.forbids]
    for failure in kept:
        failure.root_cause = False
    reply.primary_mode = signal.mode
    reply.failures = [Failure(mode=signal.mode, root_cause=True, evidence=signal.evidence), *kept]
    dropped = [m for m in before if m != signal.mode and m in signal.forbids]
    if said == signal.mode and not dropped:
        return None
    note = f"signal {signal.name} forced {signal.mode} (judge said {said})"
    return note + (f"; dropped {', '.join(dropped)}" if dropped else "")


class LLMDiagnoser:
    def __init__(
        self, name: str, endpoint: Endpoint, *, retries: int = 3, backoff_base_s: float = 1.0
    ) -> None:
        self.endpoint = endpoint
        self.retries = retries
        self.backoff_base_s = backoff_base_s
        self.info = JudgeInfo(
            name=name, kind="llm", model=endpoint.model, prompt_sha256=PROMPT_SHA256, version=PROMPT_VERSION
        )

    async def diagnose(self, result: TaskResult) -> Diagnosis:
        if result.task is None or result.transcript is None:
            raise ValueError(f"{result.key}: the per-task record has no task or transcript")
        signals = detect(result.transcript, bool(result.task.reference_calls()))
        prompt = build_prompt(result.task, result.transcript, result.claims, result.coverage or 0.0, signals)
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
        error = ""
        for attempt in range(1, self.retries + 2):
            try:
                completion = await complete(
                    self.endpoint,
                    messages,
                    retries=self.retries,
                    backoff_base_s=self.backoff_base_s,
                    response_format={"type": "json_object"},
                )
            except ProviderError as exc:
                return _base(
                    result,
                    self.info,
                    signals,
                    status="failed",
                    attempts=attempt,
                    **usage,
                    error=f"judge provider failed: {exc}",
                )
            usage["prompt_tokens"] += completion.prompt_tokens
            usage["completion_tokens"] += completion.completion_tokens
            usage["cost_usd"] += completion.cost_usd
            text = completion.message.get("content") or ""
            try:
                reply, forced = parse_diagnosis(text, signals)
            except JudgeOutputError as exc:
                error = str(exc)
                messages = [
                    messages[0],
                    {"role": "assistant", "content": text or "(empty)"},
                    {"role": "user", "content": retry_prompt(error)},
                ]
                continue
            return _base(
                result,
                self.info,
                signals,
                status="diagnosed",
                primary_mode=reply.primary_mode,
                failures=reply.failures,
                confidence=reply.confidence,
                summary=reply.summary,
                forced=forced,
                attempts=attempt,
                **usage,
            )
        return _base(
            result,
            self.info,
            signals,
            status="failed",
            attempts=self.retries + 1,
            **usage,
            error=f"judge output unusable after {self.retries + 1} attempts: {error}",
        )


class DeterministicDiagnoser:
    """Signals only, no API key: primary = the strongest signal's mode, else ``unclassified``."""

    def __init__(self, name: str = DETERMINISTIC) -> None:
        self.info = JudgeInfo(name=name, kind="deterministic", version=DETERMINISTIC_VERSION)

    async def diagnose(self, result: TaskResult) -> Diagnosis:
        if result.transcript is None:
            raise ValueError(f"{result.key}: the per-task record has no transcript")
        needs = bool(result.task.reference_calls()) if result.task is not None else None
        signals = detect(result.transcript, needs)
        primary = strongest_mode(signals)
        if primary is None:
            return _base(
                result,
                self.info,
                signals,
                status="diagnosed",
                primary_mode=taxonomy.UNCLASSIFIED,
                summary="no deterministic signal applies; an LLM judge is needed to classify this failure",
            )
        certain = any(s.certain and s.mode == primary for s in signals)
        failures = [
            Failure(mode=s.mode, root_cause=s.mode == primary, evidence=s.evidence) for s in signals if s.mode
        ]
        return _base(
            result,
            self.info,
            signals,
            status="diagnosed",
            primary_mode=primary,
            failures=failures,
            confidence=1.0 if certain else 0.5,
            summary=next(f.evidence for f in failures if f.root_cause),
        )


def make_diagnoser(
    name: str,
    api_base: str | None = None,
    api_key_env: str | None = None,
    *,
    retries: int = 3,
    backoff_base_s: float = 1.0,
    temperature: float = 0.0,
) -> Diagnoser:
    """``deterministic`` or a litellm model id (the judge's name is its model, as with ``atlas run --judge``).

    LLM diagnosers run at ``temperature`` 0 unless told otherwise, like the claims judge."""
    if name == DETERMINISTIC:
        return DeterministicDiagnoser()
    endpoint = Endpoint(name, api_base, api_key_env, (("temperature", temperature),))
    return LLMDiagnoser(name, endpoint, retries=retries, backoff_base_s=backoff_base_s)
