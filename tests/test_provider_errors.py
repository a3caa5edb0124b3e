"""Which provider errors are retried: litellm's own exception classes, as it raises them."""

from __future__ import annotations

import os

import pytest

from atlasrun.errors import ErrorKind
from atlasrun.provider import _litellm, provider_error_kind

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.mark.parametrize(
    "name,message,kind",
    [
        # litellm reports a missing key as a server error: it must not be retried
        (
            "InternalServerError",
            "OpenAIException - Missing credentials. Please pass an `api_key`",
            ErrorKind.PROVIDER_AUTH,
        ),
        ("AuthenticationError", "Incorrect API key provided", ErrorKind.PROVIDER_AUTH),
        ("NotFoundError", "The model `gpt-9` does not exist", ErrorKind.PROVIDER_MODEL),
        ("BadRequestError", "LLM Provider NOT provided. You passed model=foo", ErrorKind.PROVIDER_MODEL),
        ("BadRequestError", "messages: field required", ErrorKind.PROVIDER_REQUEST),
        ("RateLimitError", "rate limited", None),
        ("InternalServerError", "overloaded", None),
    ],
)
def test_non_retryable_errors_are_typed(name: str, message: str, kind: ErrorKind | None) -> None:
    cls = getattr(_litellm(), name)
    exc = cls(message=message, llm_provider="openai", model="gpt-4o")
    assert provider_error_kind(exc) == kind
