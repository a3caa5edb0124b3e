"""Pre-flight: before any task starts, every model and LLM judge of a run is checked.

For each endpoint: its key variable (``apiKeyEnv``) is set; the litellm model name resolves to a
provider; without ``apiBase`` or ``apiKeyEnv``, the provider's own key variable is set; then one
cheap call (one token) succeeds. That call is made as the run's own calls are: its retries
(``providerRetries``, ``judgeRetries``), backoff and Retry-After, and ``providerTimeoutSeconds``
(at most ``PING_TIMEOUT_CAP_S``); only auth, unknown-model and bad-request errors fail at once.
The first failure stops the run with one line naming the model and the variable (``atlas run
--no-preflight`` skips the checks).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

from atlasrun.agent.replay import BUILTIN_AGENTS
from atlasrun.errors import AtlasError, ErrorKind, did_you_mean
from atlasrun.provider import Endpoint, ProviderError, _litellm, complete, goes_direct
from atlasrun.redact import declare
from atlasrun.runner.engine import DETERMINISTIC
from atlasrun.runspec.run import RunSpec

PING = [{"role": "user", "content": "Reply with the single word: ok"}]


class PreflightError(AtlasError):
    """A model or judge cannot be called: nothing was run."""


@dataclass(frozen=True)
class Target:
    role: str  # "model" or "judge"
    name: str
    endpoint: Endpoint
    retries: int = 1  # the run's own: limits.providerRetries (models), limits.judgeRetries (judges)

    @property
    def key_flag(self) -> str:
        """The flag that names this endpoint's key variable on the command line."""
        return "--judge-api-key-env" if self.role == "judge" else "--api-key-env"

    @property
    def label(self) -> str:
        return f"{self.role} {self.name!r}" + (
            f" ({self.endpoint.model})" if self.endpoint.model != self.name else ""
        )


def targets(spec: RunSpec, *, models: bool = True, judges: bool = True) -> list[Target]:
    """The endpoints a run calls (built-in replay agent and deterministic judge need none)."""
    found: list[Target] = []
    body = spec.spec
    limits = body.limits
    if models:
        for m in body.models:
            if m.litellm_model not in BUILTIN_AGENTS:
                params = tuple(sorted(m.params.items()))
                endpoint = Endpoint(m.litellm_model, m.api_base, m.api_key_env, params)
                found.append(Target("model", m.name, endpoint, limits.provider_retries))
    if judges:
        for j in body.judges:
            if (j.model or j.name) != DETERMINISTIC:
                params = tuple(sorted(j.params.items()))
                endpoint = Endpoint(j.model or j.name, j.api_base, j.api_key_env, params)
                found.append(Target("judge", j.name, endpoint, limits.judge_retries))
    return found


def _without_empty_variables() -> dict[str, str]:
    """Remove (and return) the empty environment variables: litellm counts an empty key as set."""
    empty: dict[str, str] = {k: v for k, v in os.environ.items() if not v}
    for key in empty:
        del os.environ[key]
    return empty


def provider_key_variables(model: str) -> list[str]:
    """The variables litellm reads the key of ``model``'s provider from (e.g. OPENAI_API_KEY)."""
    saved = dict(os.environ)
    os.environ.clear()  # with nothing set, litellm lists every variable it would look at
    try:
        found = _litellm().validate_environment(model)
    except Exception:
        return []
    finally:
        os.environ.update(saved)
    return [str(k) for k in found.get("missing_keys") or [] if "KEY" in str(k) or "TOKEN" in str(k)]


def check_local(target: Target) -> None:
    """The checks that need no network: key variable set, model name routable, provider key set."""
    endpoint = target.endpoint
    if endpoint.api_key_env and not os.environ.get(endpoint.api_key_env):
        raise PreflightError(f"{target.label}: its key variable {endpoint.api_key_env} is not set")
    if goes_direct(endpoint.model, endpoint.kwargs()):
        return  # an OpenAI-compatible endpoint called without litellm: nothing for litellm to route
    litellm = _litellm()
    try:
        _, provider, _, _ = litellm.get_llm_provider(endpoint.model, api_base=endpoint.api_base)
    except Exception as exc:
        suggestion = did_you_mean(endpoint.model, BUILTIN_AGENTS) if target.role == "model" else ""
        raise PreflightError(
            f"{target.label}: litellm cannot route model name {endpoint.model!r} to a provider"
            f"{suggestion or f' (write provider/model, e.g. openai/{endpoint.model})'}: "
            f"{_first_line(exc)}"
        ) from exc
    if endpoint.api_base or endpoint.api_key_env:
        return  # a local endpoint needs no key; a named variable was checked above
    empty = _without_empty_variables()
    try:
        found = litellm.validate_environment(endpoint.model)
    finally:
        os.environ.update(empty)
    missing = list(found.get("missing_keys") or [])
    if missing:
        raise PreflightError(
            f"{target.label}: provider {provider} needs {', '.join(missing)}, which is not set "
            f"(or name another variable with apiKeyEnv / {target.key_flag})"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:160]


def _key_refused(target: Target) -> str:
    """Which key was refused: the variable it came from, as the user can fix it."""
    endpoint = target.endpoint
    if endpoint.api_key_env:
        return f"the key was refused (variable {endpoint.api_key_env})"
    if endpoint.api_base:
        return f"the endpoint wants a key and none was sent: name its variable with apiKeyEnv / {target.key_flag}"
    variables = provider_key_variables(endpoint.model)
    if variables:
        return f"the key was refused (variable {' or '.join(variables)}, read by litellm)"
    return f"the key was refused (name its variable with apiKeyEnv / {target.key_flag})"


# A one-token ping needs no more than this per attempt; a lower providerTimeoutSeconds wins (the
# default of 600 s, meant for long agent turns, would hold a hanging endpoint for an hour).
PING_TIMEOUT_CAP_S = 60.0


@dataclass(frozen=True)
class CallPolicy:
    """How the pre-flight call is made: the run's own limits, as its first real call would be."""

    timeout_s: float
    backoff_s: float

    @classmethod
    def of(cls, spec: RunSpec) -> CallPolicy:
        limits = spec.spec.limits
        return cls(min(limits.provider_timeout_s, PING_TIMEOUT_CAP_S), limits.retry_backoff_s)


async def check_call(target: Target, policy: CallPolicy) -> None:
    """One cheap completion with the run's timeout, retries and backoff (Retry-After honoured):
    auth, unknown-model and bad-request errors fail at once and are named as such."""

    async def ping(**extra: Any) -> None:
        await complete(
            target.endpoint,
            PING,
            retries=target.retries,
            backoff_base_s=policy.backoff_s,
            timeout_s=policy.timeout_s,
            **extra,
        )

    try:
        try:
            await ping(max_tokens=1)
        except ProviderError as exc:
            if exc.kind != ErrorKind.PROVIDER_REQUEST:
                raise
            await ping()  # some models refuse max_tokens (or a value of 1): the same call without it
    except ProviderError as exc:
        hint = {
            ErrorKind.PROVIDER_AUTH: _key_refused(target),
            ErrorKind.PROVIDER_MODEL: "the provider does not know this model",
            ErrorKind.PROVIDER_REQUEST: "the provider refused the request",
            ErrorKind.PROVIDER_TIMEOUT: f"no answer within {policy.timeout_s:g} s per attempt",
        }.get(exc.kind, "the call failed")
        if exc.kind in (ErrorKind.PROVIDER, ErrorKind.PROVIDER_TIMEOUT):
            retries_field = "judgeRetries" if target.role == "judge" else "providerRetries"
            hint += f" ({retries_field} {target.retries})"
        raise PreflightError(f"{target.label}: {hint}: {exc}") from exc


def preflight(spec: RunSpec, *, call: bool = True, models: bool = True, judges: bool = True) -> list[Target]:
    """Check every endpoint ``spec`` calls; raise PreflightError on the first that fails.
    Returns the endpoints checked."""
    policy = CallPolicy.of(spec)
    found = targets(spec, models=models, judges=judges)
    declare(t.endpoint.api_key_env for t in found)  # a provider's error may echo the key: mask it
    unique = list(
        {(t.endpoint.model, t.endpoint.api_base, t.endpoint.api_key_env): t for t in found}.values()
    )
    for target in unique:
        check_local(target)
    if call and unique:

        async def calls() -> None:
            await asyncio.gather(*(check_call(t, policy) for t in unique))

        asyncio.run(calls())
    return found
