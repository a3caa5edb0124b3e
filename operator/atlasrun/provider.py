"""Calls to LLM providers through litellm, with the harness's own retry policy.

Agents and LLM judges both go through ``complete()``: 429, 5xx, connection errors
and timeouts are retried with exponential backoff that honours ``Retry-After``;
anything else fails at once, typed by ``provider_error_kind`` (auth, unknown model, bad
request), including a missing key that litellm reports as a server error. litellm's and the OpenAI
client's own retries are switched off so the policy lives in one place.

A model litellm knows nothing about, behind an OpenAI-compatible ``api_base`` (``openai/<name>``:
local servers, scripted models), goes the direct path (``_direct``): one shared HTTP client per
event loop posts the same request litellm would send and reads the reply the way litellm
does (its error classes, retries, usage, and the price when the server names a model litellm
prices). It costs a fraction of litellm's CPU per call and never imports litellm (most of the
harness's memory). ``ATLAS_PROVIDER=litellm`` sends every call through litellm.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import os
import random
import re
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from atlasrun import http1
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
    if goes_direct(endpoint.model, kwargs):
        return await _complete_with(
            _direct, DirectError.retryable, endpoint, messages, retries, backoff_base_s, timeout_s, kwargs
        )
    return await _complete_with(
        _via_litellm, retryable(), endpoint, messages, retries, backoff_base_s, timeout_s, kwargs
    )


async def _via_litellm(
    endpoint: Endpoint, messages: list[dict[str, Any]], timeout_s: float, kwargs: dict[str, Any]
) -> tuple[dict[str, Any], int, int, float | None]:
    response = await _litellm().acompletion(
        model=endpoint.model, messages=messages, num_retries=0, max_retries=0, timeout=timeout_s, **kwargs
    )
    cost = _cost(response)
    choice = response.choices[0].message
    message = choice.model_dump() if hasattr(choice, "model_dump") else dict(choice)
    usage = getattr(response, "usage", None)
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    return message, prompt, int(getattr(usage, "completion_tokens", 0) or 0), cost


Call = Any  # (endpoint, messages, timeout_s, kwargs) -> (message, prompt tokens, completion tokens, cost)


async def _complete_with(
    call: Call,
    retry_on: tuple[type[BaseException], ...],
    endpoint: Endpoint,
    messages: list[dict[str, Any]],
    retries: int,
    backoff_base_s: float,
    timeout_s: float,
    kwargs: dict[str, Any],
) -> Completion:
    attempt = limited = 0
    while True:
        started = time.perf_counter()
        try:
            message, prompt_tokens, completion_tokens, cost = await call(
                endpoint, messages, timeout_s, kwargs
            )
        except retry_on as exc:
            limited += 1 if _is_rate_limited(exc) else 0
            fatal = provider_error_kind(exc)
            if fatal is not None:
                raise ProviderError(_describe(exc), attempt, kind=fatal, rate_limited=limited) from exc
            if attempt >= retries:
                raise ProviderError(
                    _describe(exc, f" after {attempt} retries"),
                    attempt,
                    timed_out=_is_timeout(exc),
                    rate_limited=limited,
                ) from exc
            await asyncio.sleep(backoff_s(attempt, backoff_base_s, exc))
            attempt += 1
            continue
        except Exception as exc:
            kind = provider_error_kind(exc) or ErrorKind.PROVIDER
            raise ProviderError(_describe(exc), attempt, kind=kind, rate_limited=limited) from exc
        elapsed = time.perf_counter() - started
        return Completion(
            message=message,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost or 0.0,
            priced=cost is not None,
            elapsed_s=elapsed,
            retries=attempt,
            rate_limited=limited,
        )


_WRAPPER = re.compile(r"^(?:litellm\.)?(\w*(?:Error|Exception|Timeout)\w*)(?::| -) ")


def _describe(exc: BaseException, after: str = "") -> str:
    """``Name[after]: message``, the class named once: litellm's text repeats it
    ("litellm.AuthenticationError: AuthenticationError: OpenAIException - ...")."""
    text = _short(exc)
    while match := _WRAPPER.match(text):
        text = text[match.end() :]
    if _not_json(exc):
        text = f"the reply is not valid JSON ({text})"
    return f"{_name(exc)}{after}: {text}"


def _not_json(exc: BaseException) -> bool:
    """The provider answered with a body that is not JSON (litellm reports it as a server error)."""
    if "not valid JSON" in str(exc):
        return False  # already said (the direct path)
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if isinstance(seen, json.JSONDecodeError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "Expecting value: line" in str(exc)


def _short(exc: BaseException, limit: int = 300) -> str:
    # Masked before it is cut: a provider's error body may echo the key, and half a key is a leak.
    text = scrub(str(exc)).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def _name(exc: BaseException) -> str:
    """The error's class name (a direct call's: the name litellm gives the same failure)."""
    return exc.name if isinstance(exc, DirectError) else type(exc).__name__


def _is_rate_limited(exc: BaseException) -> bool:
    """An HTTP 429 on either path (counted in ``Completion.rate_limited`` and the metrics)."""
    if isinstance(exc, DirectError):
        return exc.status_code == 429
    return isinstance(exc, _litellm().RateLimitError)


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, DirectError):
        return exc.timed_out
    return isinstance(exc, _litellm().Timeout)


# ---- The direct path: OpenAI-compatible endpoints serving models litellm does not know ----

# Request fields sent verbatim by litellm for a generic OpenAI-compatible model; a call with any
# other parameter goes through litellm (it maps or drops some of them).
OPENAI_PARAMS = frozenset(
    {"temperature", "top_p", "n", "stop", "max_tokens", "max_completion_tokens", "presence_penalty",
     "frequency_penalty", "logit_bias", "user", "seed", "tools", "tool_choice", "parallel_tool_calls",
     "response_format", "logprobs", "top_logprobs"}
)  # fmt: skip
_COST_MAP_KEY = re.compile(r'^    "([^"]+)": \{$', re.MULTILINE)


@functools.cache
def priced_models() -> frozenset[str]:
    """The model names in litellm's local cost map, read from its file without importing litellm."""
    spec = find_spec("litellm")
    if spec is None or spec.origin is None:
        return frozenset()
    text = (Path(spec.origin).parent / "model_prices_and_context_window_backup.json").read_text("utf-8")
    return frozenset(_COST_MAP_KEY.findall(text))


def _known(name: str) -> bool:
    bare = name.removeprefix("openai/")
    return bare in priced_models() or f"openai/{bare}" in priced_models()


def goes_direct(model: str, kwargs: dict[str, Any]) -> bool:
    """True for an ``openai/<name>`` model at an ``api_base`` that litellm has no entry for (it
    would pass the call through unchanged), with OpenAI parameters only, unless
    ``ATLAS_PROVIDER=litellm``; litellm uses its local cost map (``LITELLM_LOCAL_MODEL_COST_MAP``)."""
    if os.environ.get("ATLAS_PROVIDER") == "litellm" or not model.startswith("openai/"):
        return False
    if os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "True").lower() != "true":
        return False
    params = set(kwargs) - {"api_base", "api_key"}
    return "api_base" in kwargs and params <= OPENAI_PARAMS and not _known(model)


class DirectError(Exception):
    """A failed direct call, named and typed as litellm names and types the same failure."""

    retryable: tuple[type[BaseException], ...] = ()

    def __init__(self, name: str, message: str, status_code: int | None, headers: Any = None) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.status_code = status_code
        self.litellm_response_headers = headers  # read by retry_after_s
        self.timed_out = name == "Timeout"


class DirectRetryable(DirectError):
    """429, 500, 502, 503, timeouts (408, 504 and no answer), connection failures, unreadable replies."""


DirectError.retryable = (DirectRetryable,)

# HTTP status -> the litellm exception name for it (tests/test_provider_paths.py checks the table
# against litellm itself); other statuses are litellm's APIError, not retried.
_RETRIED = {408: "Timeout", 429: "RateLimitError", 500: "InternalServerError", 502: "BadGatewayError",
            503: "ServiceUnavailableError", 504: "Timeout"}  # fmt: skip
_FATAL = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 422: "BadRequestError"}


def _status_error(status: int, body: bytes, headers: Any) -> DirectError:
    try:
        detail = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        detail = body.decode("utf-8", "replace")
    message = f"OpenAIException - {detail}"
    if status in _RETRIED:
        return DirectRetryable(_RETRIED[status], message, status, headers)
    return DirectError(_FATAL.get(status, "APIError"), message, status, headers)


_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


async def _closing(client: Any) -> AsyncIterator[Any]:
    """Holds ``client`` open; the loop's ``shutdown_asyncgens()`` (``asyncio.run`` ends) closes it."""
    try:
        yield client
    finally:
        await client.aclose()


async def _clients() -> _Clients:
    """The event loop's HTTP clients (keep-alive connections shared by every direct call): a
    minimal one for plain http (``http1.py``), httpx for the rest (https, a proxy)."""
    loop = asyncio.get_running_loop()
    found = _CLIENTS.get(loop)
    if found is None:
        holder = _closing(_Clients())
        found = _CLIENTS[loop] = (await holder.__anext__(), holder)
    clients: _Clients = found[0]
    return clients


class _Clients:
    def __init__(self) -> None:
        self.plain = http1.Client()
        self._httpx: Any = None

    def httpx(self) -> Any:
        if self._httpx is None:
            import httpx

            limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
            self._httpx = httpx.AsyncClient(limits=limits)
        return self._httpx

    async def aclose(self) -> None:
        self.plain.close()
        if self._httpx is not None:
            await self._httpx.aclose()


async def _post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> http1.Response:
    """POST through the loop's clients; raises DirectRetryable for timeouts and connection trouble."""
    clients = await _clients()
    if http1.usable_for(url):
        try:
            return await clients.plain.post(url, body, headers, timeout_s)
        except TimeoutError as exc:
            raise DirectRetryable("Timeout", f"Request timed out after {timeout_s:g} s", None) from exc
        except (OSError, EOFError) as exc:  # refused, reset, closed, not HTTP (IncompleteReadError)
            raise DirectRetryable("APIConnectionError", f"Connection error. {exc!r}", None) from exc
    import httpx

    try:
        response = await clients.httpx().post(url, content=body, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException as exc:
        raise DirectRetryable("Timeout", f"Request timed out. {exc!r}", None) from exc
    except httpx.HTTPError as exc:  # connection refused or reset, protocol errors
        raise DirectRetryable("APIConnectionError", f"Connection error. {exc!r}", None) from exc
    return http1.Response(response.status_code, dict(response.headers), response.content)


async def _direct(
    endpoint: Endpoint, messages: list[dict[str, Any]], timeout_s: float, kwargs: dict[str, Any]
) -> tuple[dict[str, Any], int, int, float | None]:
    body = {"messages": messages, "model": endpoint.model.removeprefix("openai/")}
    body |= {k: v for k, v in kwargs.items() if k not in ("api_base", "api_key") and v is not None}
    url = str(kwargs["api_base"]).rstrip("/") + "/chat/completions"
    headers = {"authorization": f"Bearer {kwargs['api_key']}", "content-type": "application/json"}
    response = await _post(url, json.dumps(body).encode(), headers, timeout_s)
    if response.status >= 400:
        raise _status_error(response.status, response.body, response.headers)
    try:
        data = json.loads(response.body)
    except ValueError as exc:  # litellm: InternalServerError
        preview = response.body[:60].decode("utf-8", "replace")
        raise DirectRetryable(
            "InternalServerError",
            f"OpenAIException - the reply is not valid JSON ({exc}; HTTP {response.status}, "
            f"{len(response.body)} bytes: {preview!r})",
            response.status,
        ) from exc
    try:
        message = dict(data["choices"][0]["message"])
    except (KeyError, IndexError, TypeError, ValueError) as exc:  # litellm: InternalServerError
        raise DirectRetryable(
            "InternalServerError",
            f"OpenAIException - the reply has no choices[0].message ({type(exc).__name__}: {exc})",
            response.status,
        ) from exc
    usage = data.get("usage") or {}
    cost = None
    if any(_known(str(name)) for name in (data.get("model") or "", endpoint.model)):
        cost = _litellm_price(data)  # the server named a model litellm prices: price it as litellm does
    return message, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), cost


def _litellm_price(data: dict[str, Any]) -> float | None:
    lib = _litellm()
    try:
        cost = lib.completion_cost(
            completion_response=lib.ModelResponse(**data), custom_llm_provider="openai"
        )
    except Exception:
        return None
    return float(cost or 0.0)
