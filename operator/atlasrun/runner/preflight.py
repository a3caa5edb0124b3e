"""Pre-flight: before any task starts, every model and LLM judge of a run is checked.

For each endpoint: its key variable (``apiKeyEnv``) is set; the litellm model name resolves to a
provider; without ``apiBase`` or ``apiKeyEnv``, the provider's own key variable is set; then one
cheap call (one token) succeeds. The first failure stops the run with one line naming the model
and the variable (``atlas run --no-preflight`` skips the checks).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from atlasrun.agent.replay import BUILTIN_AGENTS
from atlasrun.errors import AtlasError, ErrorKind
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

    @property
    def label(self) -> str:
        return f"{self.role} {self.name!r}" + (
            f" ({self.endpoint.model})" if self.endpoint.model != self.name else ""
        )


def targets(spec: RunSpec, *, models: bool = True, judges: bool = True) -> list[Target]:
    """The endpoints a run calls (built-in replay agent and deterministic judge need none)."""
    found: list[Target] = []
    body = spec.spec
    if models:
        for m in body.models:
            if m.litellm_model not in BUILTIN_AGENTS:
                params = tuple(sorted(m.params.items()))
                found.append(
                    Target("model", m.name, Endpoint(m.litellm_model, m.api_base, m.api_key_env, params))
                )
    if judges:
        for j in body.judges:
            if (j.model or j.name) != DETERMINISTIC:
                params = tuple(sorted(j.params.items()))
                found.append(
                    Target("judge", j.name, Endpoint(j.model or j.name, j.api_base, j.api_key_env, params))
                )
    return found


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
        raise PreflightError(
            f"{target.label}: litellm cannot route model name {endpoint.model!r} to a provider "
            f"(write provider/model, e.g. openai/{endpoint.model}): {str(exc).splitlines()[0][:160]}"
        ) from exc
    if endpoint.api_base or endpoint.api_key_env:
        return  # a local endpoint needs no key; a named variable was checked above
    empty = {k: v for k, v in os.environ.items() if not v}  # an empty variable is as good as unset
    for key in empty:
        del os.environ[key]
    try:
        found = litellm.validate_environment(endpoint.model)
    finally:
        os.environ.update(empty)
    missing = list(found.get("missing_keys") or [])
    if missing:
        raise PreflightError(
            f"{target.label}: provider {provider} needs {', '.join(missing)}, which is not set "
            "(or name another variable with apiKeyEnv / --api-key-env)"
        )


async def check_call(target: Target, timeout_s: float) -> None:
    """One cheap completion; auth, unknown-model and bad-request errors are named as such."""
    try:
        try:
            await complete(
                target.endpoint, PING, retries=1, backoff_base_s=0.5, timeout_s=timeout_s, max_tokens=1
            )
        except ProviderError as exc:
            if exc.kind != ErrorKind.PROVIDER_REQUEST:
                raise
            # Some models refuse max_tokens (or a value of 1): the same call without it.
            await complete(target.endpoint, PING, retries=1, backoff_base_s=0.5, timeout_s=timeout_s)
    except ProviderError as exc:
        variable = target.endpoint.api_key_env
        hint = {
            ErrorKind.PROVIDER_AUTH: f"the key was refused (variable {variable})"
            if variable
            else "the key was refused",
            ErrorKind.PROVIDER_MODEL: "the provider does not know this model",
            ErrorKind.PROVIDER_REQUEST: "the provider refused the request",
            ErrorKind.PROVIDER_TIMEOUT: "no answer in time",
        }.get(exc.kind, "the call failed")
        raise PreflightError(f"{target.label}: {hint}: {exc}") from exc


def preflight(
    spec: RunSpec, *, call: bool = True, models: bool = True, judges: bool = True, timeout_s: float = 60.0
) -> list[Target]:
    """Check every endpoint ``spec`` calls; raise PreflightError on the first that fails.
    Returns the endpoints checked."""
    found = targets(spec, models=models, judges=judges)
    declare(t.endpoint.api_key_env for t in found)  # a provider's error may echo the key: mask it
    unique = list(
        {(t.endpoint.model, t.endpoint.api_base, t.endpoint.api_key_env): t for t in found}.values()
    )
    for target in unique:
        check_local(target)
    if call and unique:

        async def calls() -> None:
            await asyncio.gather(*(check_call(t, timeout_s) for t in unique))

        asyncio.run(calls())
    return found
