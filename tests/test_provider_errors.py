"""Which provider errors are retried (litellm's own exception classes, as it raises them), and
what a provider error says on the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from atlasrun.errors import EXIT_BAD_INPUT, ErrorKind
from atlasrun.provider import _litellm, provider_error_kind
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK, write_run, write_tasks

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


# ---- through the CLI: what a provider error says (issue 23, part 4)


def _run(tmp_path: Path, model: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK])
    limits = {"providerRetries": 0, "retryBackoffSeconds": 0}
    spec = write_run(tmp_path / "run.yaml", tasks, [model], limits=limits, emptyDataDir=True)
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", "run", str(spec), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )


def _error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == EXIT_BAD_INPUT and "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    return line


@pytest.mark.heavy
@pytest.mark.parametrize("path", ["direct", "litellm"])
def test_a_malformed_reply_says_it_is_not_json(tmp_path: Path, path: str) -> None:
    """Before: "InternalServerError ... Expecting value"."""
    with ScriptedProvider(lambda body: Reply(raw_body="not json")) as provider:
        model = {"name": "m1", "model": "openai/m1", "apiBase": provider.api_base}
        line = _error(_run(tmp_path, model, {"ATLAS_PROVIDER": path}))
    expected = (
        "error: model 'm1' (openai/m1): the call failed (providerRetries 0): InternalServerError after 0 "
    )
    assert line.startswith(
        expected + "retries: the reply is not valid JSON (Expecting value: line 1 column 1"
    ), line
    if path == "direct":
        assert line.endswith("HTTP 200, 8 bytes: 'not json')"), line


@pytest.mark.heavy
def test_a_401_names_the_variable_litellm_read_and_the_class_once(tmp_path: Path) -> None:
    """Before: "AuthenticationError: AuthenticationError: OpenAIException - ...", and "the key was
    refused" without the variable litellm had used."""

    def refuse(body: dict[str, Any]) -> Reply:
        return Reply(status=401, raw_body=json.dumps({"error": {"message": "Incorrect API key provided"}}))

    with ScriptedProvider(refuse) as provider:
        # no apiBase: litellm's own OpenAI route, pointed at the scripted server by its variable
        env = {"OPENAI_API_KEY": "sk-refused-key", "OPENAI_API_BASE": provider.api_base}
        line = _error(_run(tmp_path, {"name": "gpt-4o"}, env))
    assert line == (
        "error: model 'gpt-4o': the key was refused (variable OPENAI_API_KEY, read by litellm): "
        "AuthenticationError: Incorrect API key provided"
    ), line
