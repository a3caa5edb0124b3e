"""Calls to LLM providers through litellm, with the harness's own retry policy.

Agents and LLM judges both go through ``complete()``: 429, 5xx, connection errors
and timeouts are retried with exponential backoff that honours ``Retry-After``;
anything else fails at once, typed by ``provider_error_kind`` (auth, unknown model, bad
request), including a missing key that litellm reports as a server error. litellm's and the OpenAI
client's own retries are switched off so the policy lives in one place.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import os
import random
import time
from dataclasses import dataclass
from typing import Any

from atlasrun.errors import ErrorKind
from atlasrun.redact import scrub

MAX_RETRY_AFTER_S = 300.0


@functools.cache
def _litellm() -> Any:
    """litellm, imported on first use: it takes seconds, and most ``atlas`` commands never call a model."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the cost map at import
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


@functools.cache
def retryable() -> tuple[type[BaseException], ...]:
    """Provider errors worth retrying: 429, 5xx, connection failures, timeouts."""
    lib = _litellm()
    return (
        lib.RateLimitError,
        lib.InternalServerError,
        lib.ServiceUnavailableError,
        lib.BadGatewayError,
        lib.APIConnectionError,
        lib.Timeout,
    )


class ProviderError(RuntimeError):
    """The provider failed after all retries (or with a non-retryable error)."""

    def __init__(
        self,
        message: str,
        retries: int,
        timed_out: bool = False,
        kind: ErrorKind = ErrorKind.PROVIDER,
        rate_limited: int = 0,
    ) -> None:
        super().__init__(message)
        self.retries = retries
        self.rate_limited = rate_limited  # answers with HTTP 429 among the attempts
        self.timed_out = timed_out  # the last attempt hung past its timeout (an infrastructure fault)
        self.kind = ErrorKind.PROVIDER_TIMEOUT if timed_out else kind


# Phrases of errors that no retry can fix, whatever class or status litellm gives them (it reports
# a missing key as an InternalServerError).
_AUTH_PHRASES = (
    "missing credentials",
    "api_key client option must be set",
    "api key not",
    "invalid api key",
    "incorrect api key",
)
_MODEL_PHRASES = ("llm provider not provided", "model not found", "does not exist")


def provider_error_kind(exc: BaseException) -> ErrorKind | None:
    """The kind of a provider error that must not be retried (auth, unknown model, bad request);
    None for one worth retrying (429, 5xx, connection, timeout) or of unknown kind."""
    status = getattr(exc, "status_code", None)
    text = str(exc).lower()
    if status in (401, 403) or any(p in text for p in _AUTH_PHRASES):
        return ErrorKind.PROVIDER_AUTH
    if status == 404 or any(p in text for p in _MODEL_PHRASES):
        return ErrorKind.PROVIDER_MODEL
    if status in (400, 422):
        return ErrorKind.PROVIDER_REQUEST
    return None


@dataclass(frozen=True)
class Endpoint:
    """Where and how to call a model. ``api_key`` is read from the environment, never stored."""

    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    params: tuple[tuple[str, Any], ...] = ()

    def kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(self.params)
        if self.api_base:
            kwargs["api_base"] = self.api_base
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            kwargs["api_key"] = key
        elif self.api_base:
            kwargs["api_key"] = "unused"  # OpenAI-compatible local servers still want a key
        return kwargs


@dataclass
class Completion:
    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float  # 0.0 when not priced
    elapsed_s: float
    retries: int
    rate_limited: int = 0  # attempts answered with HTTP 429 (then retried)
    priced: bool = True  # False: litellm knows no price for this model (cost shown as n/a)


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), if the error has one."""
    headers: Any = getattr(exc, "litellm_response_headers", None)
    response = getattr(exc, "response", None)
    if headers is None and response is not None:
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    value: str | None = headers.get("retry-after") or headers.get("Retry-After")
    if value is None:
        return None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return min(max(parsed.timestamp() - time.time(), 0.0), MAX_RETRY_AFTER_S)


def backoff_s(attempt: int, base_s: float, exc: BaseException) -> float:
    hinted = retry_after_s(exc)
    if hinted is not None:
        return hinted
    return min(base_s * (2.0**attempt), 60.0) * (0.5 + random.random() / 2)


def _cost(response: Any) -> float | None:
    """The call's price in USD; None when litellm knows no price for the model (shown as n/a)."""
    hidden = getattr(response, "_hidden_params", None) or {}
    cost: Any
    if "response_cost" in hidden:  # litellm already priced it (None: a model with no known price)
        cost = hidden["response_cost"]
        return None if cost is None else float(cost)
    try:
        cost = _litellm().completion_cost(completion_response=response)
    except Exception:
        return None
    return float(cost or 0.0)


async def complete(
    endpoint: Endpoint,
    messages: list[dict[str, Any]],
    *,
    retries: int,
    backoff_base_s: float,
    timeout_s: float = 600.0,
    **extra: Any,
) -> Completion:
    """One chat completion with harness-side retries. Raises ProviderError when it gives up."""
    kwargs = endpoint.kwargs() | extra
    litellm, retry_on = _litellm(), retryable()
    attempt = limited = 0
    while True:
        started = time.perf_counter()
        try:
            response = await litellm.acompletion(
                model=endpoint.model,
                messages=messages,
                num_retries=0,
                max_retries=0,
                timeout=timeout_s,
                **kwargs,
            )
        except retry_on as exc:
            limited += 1 if isinstance(exc, litellm.RateLimitError) else 0
            fatal = provider_error_kind(exc)
            if fatal is not None:
                raise ProviderError(
                    f"{type(exc).__name__}: {_short(exc)}", attempt, kind=fatal, rate_limited=limited
                ) from exc
            if attempt >= retries:
                raise ProviderError(
                    f"{type(exc).__name__} after {attempt} retries: {_short(exc)}",
                    attempt,
                    timed_out=isinstance(exc, litellm.Timeout),
                    rate_limited=limited,
                ) from exc
            await asyncio.sleep(backoff_s(attempt, backoff_base_s, exc))
            attempt += 1
            continue
        except Exception as exc:
            kind = provider_error_kind(exc) or ErrorKind.PROVIDER
            raise ProviderError(
                f"{type(exc).__name__}: {_short(exc)}", attempt, kind=kind, rate_limited=limited
            ) from exc
        elapsed = time.perf_counter() - started
        cost = _cost(response)
        choice = response.choices[0].message
        message = choice.model_dump() if hasattr(choice, "model_dump") else dict(choice)
        usage = getattr(response, "usage", None)
        return Completion(
            message=message,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            cost_usd=cost or 0.0,
            priced=cost is not None,
            elapsed_s=elapsed,
            retries=attempt,
            rate_limited=limited,
        )


def _short(exc: BaseException, limit: int = 300) -> str:
    # Masked before it is cut: a provider's error body may echo the key, and half a key is a leak.
    text = scrub(str(exc)).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
