"""A hung provider is an infrastructure error (provider_timeout), never a 0.0 score; resume redoes it.

Real servers, litellm's real HTTP path, a scripted provider that holds requests open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from atlasrun.runner.local import run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK, write_run, write_tasks

pytestmark = pytest.mark.servers


def hang(body: dict[str, Any]) -> Reply:
    return Reply(hang=True)


def answer(body: dict[str, Any]) -> Reply:
    return Reply(content="The sum of the numbers is 42.")


def _run(tmp_path: Path, data_dir: Path, provider: ScriptedProvider, limits: dict[str, Any]) -> Any:
    run_file = write_run(
        tmp_path / "run.yaml",
        write_tasks(tmp_path / "tasks.yaml", [SUM_TASK]),
        [{"name": "m", "model": "openai/m", "apiBase": provider.api_base}],
        limits={"retryBackoffSeconds": 0, **limits},
    )
    return run_local(load_run_spec(run_file), tmp_path / "out", data_dir, progress=False)


def test_provider_call_hanging_past_its_timeout_is_provider_timeout_then_resumed(
    tmp_path: Path, data_dir: Path
) -> None:
    limits = {"providerTimeoutSeconds": 0.5, "providerRetries": 1, "taskTimeoutSeconds": 120}
    with ScriptedProvider(hang) as provider:
        outcome = _run(tmp_path, data_dir, provider, limits)
    [result] = outcome.results
    assert len(provider.requests) == 2  # the first attempt and one retry, each held open
    assert result.status == "error"
    assert result.coverage is None and result.passed is None
    assert (result.reason or "").startswith("provider_timeout:")
    assert result.stop_reason == "provider_timeout"
    assert outcome.summary["models"]["m"]["scored"] == 0

    with ScriptedProvider(answer) as provider:  # the provider is back: resume scores the task
        outcome = _run(tmp_path, data_dir, provider, limits)
    [result] = outcome.results
    assert result.status == "scored" and result.passed is True


def test_provider_hanging_past_the_task_timeout_is_provider_timeout(tmp_path: Path, data_dir: Path) -> None:
    limits = {"providerTimeoutSeconds": 300, "taskTimeoutSeconds": 1}
    with ScriptedProvider(hang) as provider:
        outcome = _run(tmp_path, data_dir, provider, limits)
    [result] = outcome.results
    assert len(provider.requests) == 1
    assert result.status == "error" and result.coverage is None
    assert result.stop_reason == "provider_timeout"
    assert "task timeout" in (result.reason or "")
    assert outcome.summary["models"]["m"]["scored"] == 0
