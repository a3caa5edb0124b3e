"""The LLM claims judge: one call per claim, MCP-Atlas Appendix C semantics.

Output must be a JSON object with a valid ``coverage_outcome``. Garbage is
retried (a fresh call); after the retries the claim comes back as *failed*,
which the scorer excludes and counts, never scores as 0.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from atlasrun.judge.base import LABEL_SCORES, ClaimVerdict, JudgeInfo
from atlasrun.judge.prompt import CLAIM_JUDGE_PROMPT, PROMPT_SHA256, PROMPT_VERSION
from atlasrun.provider import Endpoint, ProviderError, complete
from atlasrun.redact import scrub

# The MCP-Atlas harness cuts longer answers before judging (score_claims.py MAX_RESPONSE_CHARS).
MAX_ANSWER_CHARS = 500_000
TRUNCATION_NOTE = "\n\n[TRUNCATED - original response was too long]"
EMPTY_ANSWER_REASON = "empty final answer: scored 0 without a judge call"


class JudgeOutputError(ValueError):
    pass


def extract_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in an LLM judge's reply: code fences, chatter before it and trailing
    text or stray braces after it are tolerated."""
    text = text or ""
    decoder = json.JSONDecoder()
    first_error: str | None = None
    for match in re.finditer(r"\{", text):
        try:
            data, _ = decoder.raw_decode(text, match.start())
        except ValueError as exc:
            first_error = first_error or str(exc)
            continue
        if isinstance(data, dict):
            return data
    if first_error is None:
        raise JudgeOutputError(f"no JSON object in judge output: {scrub(text)[:120]!r}")
    raise JudgeOutputError(f"judge output is not valid JSON: {first_error}")


def parse_judge_output(text: str) -> tuple[str, str, float | None]:
    """(label, justification, confidence) from the judge's reply, tolerant of code fences."""
    data = extract_json_object(text)
    label = str(data.get("coverage_outcome", "")).strip().lower().replace(" ", "_")
    if label not in LABEL_SCORES:
        raise JudgeOutputError(f"judge gave no valid coverage_outcome (got {label!r})")
    confidence = data.get("confidence")
    try:
        conf = None if confidence is None else min(max(float(confidence), 0.0), 1.0)
    except (TypeError, ValueError):
        conf = None
    return label, str(data.get("justification", "")), conf


class LLMJudge:
    can_abstain = False  # it always labels (or fails after its retries)

    def __init__(
        self,
        name: str,
        endpoint: Endpoint,
        *,
        retries: int = 3,
        backoff_base_s: float = 1.0,
        max_concurrency: int = 8,
    ) -> None:
        self.endpoint = endpoint
        self.retries = retries
        self.backoff_base_s = backoff_base_s
        self._slots = asyncio.Semaphore(max_concurrency)
        self.info = JudgeInfo(
            name=name, kind="llm", model=endpoint.model, prompt_sha256=PROMPT_SHA256, version=PROMPT_VERSION
        )

    async def judge(self, claim: str, response: str) -> ClaimVerdict:
        if not (response or "").strip():
            return ClaimVerdict.labelled(claim, "not_fulfilled", EMPTY_ANSWER_REASON, 1.0)
        truncated_from = None
        if len(response) > MAX_ANSWER_CHARS:
            truncated_from = len(response)
            response = response[:MAX_ANSWER_CHARS] + TRUNCATION_NOTE
        verdict = await self._judge(claim, response)
        if truncated_from is not None:
            verdict = verdict.model_copy(update={"truncated_from": truncated_from})
        return verdict

    async def _judge(self, claim: str, response: str) -> ClaimVerdict:
        prompt = CLAIM_JUDGE_PROMPT.format(claim=claim, response=response)
        messages = [{"role": "user", "content": prompt}]
        last_error = ""
        for _ in range(self.retries + 1):
            try:
                async with self._slots:
                    completion = await complete(
                        self.endpoint,
                        messages,
                        retries=self.retries,
                        backoff_base_s=self.backoff_base_s,
                        response_format={"type": "json_object"},
                    )
                label, reason, confidence = parse_judge_output(completion.message.get("content") or "")
                return ClaimVerdict.labelled(claim, label, reason, confidence)  # type: ignore[arg-type]
            except ProviderError as exc:
                return ClaimVerdict.failed(claim, f"judge provider failed: {exc}")
            except JudgeOutputError as exc:
                last_error = str(exc)
        return ClaimVerdict.failed(
            claim, f"judge output unusable after {self.retries + 1} attempts: {last_error}"
        )
