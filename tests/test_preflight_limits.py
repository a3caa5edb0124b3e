"""Pre-flight uses the run's own limits (issue 23, part 2), through the real CLI and a scripted
OpenAI-compatible endpoint on loopback.

Before: pre-flight called with a fixed 60 s timeout and one retry, whatever the run file said:
a hanging endpoint with ``providerTimeoutSeconds: 1`` cost 122 s; one 429 with Retry-After or
one 500 failed the run (exit 2) where the same error mid-run is retried. Now the pre-flight call is
made as the run's calls are (timeout, retries, backoff, Retry-After); only auth, unknown-model
and bad-request errors fail at once (tests/test_cli_failfast.py keeps those).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from atlasrun.errors import EXIT_BAD_INPUT, EXIT_OK
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK, write_run, write_tasks

# Many CLI subprocesses and deliberate timeouts: `make test` runs them, `make check` does not.
pytestmark = pytest.mark.heavy

ANSWER = Reply(content="The sum of the numbers is 42.")


def atlas_run(run_file: Path, out: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", "run", str(run_file), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **env},
        check=False,
    )
    return done, time.monotonic() - started


def run_file(tmp_path: Path, api_base: str, **limits: Any) -> Path:
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK])
    models = [{"name": "m1", "model": "openai/m1", "apiBase": api_base}]
    return write_run(tmp_path / "run.yaml", tasks, models, limits=limits, emptyDataDir=True)


class Timed:
    """A script that answers from ``replies`` in turn (the last one repeats) and notes each time."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.times: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.times.append(time.monotonic())
            return self.replies[min(len(self.times), len(self.replies)) - 1]


def only_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    (line,) = [x for x in stderr.splitlines() if x.startswith("error:")]
    return line


def test_a_hanging_endpoint_is_given_the_runs_timeout_and_retries(tmp_path: Path) -> None:
    script = Timed(Reply(hang=True))
    with ScriptedProvider(script) as provider:
        spec = run_file(tmp_path, provider.api_base, providerTimeoutSeconds=1, providerRetries=1)
        done, took = atlas_run(spec, tmp_path / "out")
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert len(script.times) == 2 and took < 30, (len(script.times), took)  # was 2 x 60 s
    line = only_line(done.stderr)
    assert line.startswith(
        "error: model 'm1' (openai/m1): no answer within 1 s per attempt (providerRetries 1): "
        "Timeout after 1 retries: Request timed out"  # the class named once, on either provider path
    ), line
    assert not (tmp_path / "out" / "results.jsonl").exists()


@pytest.mark.servers
def test_a_429_with_retry_after_is_waited_out_and_the_run_goes_on(tmp_path: Path) -> None:
    limited = Reply(status=429, headers={"Retry-After": "2"}, raw_body='{"error": {"message": "slow down"}}')
    script = Timed(limited, ANSWER)
    with ScriptedProvider(script) as provider:
        # a backoff of 0: only the Retry-After header can make the pre-flight wait
        spec = run_file(tmp_path, provider.api_base, providerRetries=1, retryBackoffSeconds=0)
        done, _ = atlas_run(spec, tmp_path / "out")
    assert done.returncode == EXIT_OK, done.stderr
    assert script.times[1] - script.times[0] >= 1.9, script.times  # Retry-After: 2 honoured
    rows = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [(r["status"], r["passed"]) for r in rows] == [("scored", True)]


@pytest.mark.servers
def test_500s_are_retried_as_often_as_the_run_says(tmp_path: Path) -> None:
    failing = Reply(status=500, raw_body='{"error": {"message": "overloaded"}}')
    script = Timed(failing, failing, ANSWER)
    with ScriptedProvider(script) as provider:
        spec = run_file(tmp_path, provider.api_base, providerRetries=2, retryBackoffSeconds=0)
        done, _ = atlas_run(spec, tmp_path / "out")
    assert done.returncode == EXIT_OK, done.stderr  # was: exit 2 after one retry
    assert len(script.times) == 4  # pre-flight: 500, 500, answer; then the task's one call


def test_500s_beyond_the_runs_retries_stop_the_run_naming_the_limit(tmp_path: Path) -> None:
    script = Timed(Reply(status=500, raw_body='{"error": {"message": "overloaded"}}'))
    with ScriptedProvider(script) as provider:
        spec = run_file(tmp_path, provider.api_base, providerRetries=1, retryBackoffSeconds=0)
        done, took = atlas_run(spec, tmp_path / "out")
    assert done.returncode == EXIT_BAD_INPUT and len(script.times) == 2, done.stderr
    line = only_line(done.stderr)
    assert line == (
        "error: model 'm1' (openai/m1): the call failed (providerRetries 1): "
        "InternalServerError after 1 retries: overloaded"
    ), line
    assert took < 30


def test_the_ping_timeout_is_the_runs_up_to_a_minute(tmp_path: Path) -> None:
    from atlasrun.runner.preflight import PING_TIMEOUT_CAP_S, CallPolicy
    from atlasrun.runspec.run import load_run_spec

    for given, used in ((None, PING_TIMEOUT_CAP_S), (20, 20.0), (600, PING_TIMEOUT_CAP_S)):
        limits = {"retryBackoffSeconds": 0.5} | ({"providerTimeoutSeconds": given} if given else {})
        policy = CallPolicy.of(load_run_spec(run_file(tmp_path, "http://127.0.0.1:9/v1", **limits)))
        assert (policy.timeout_s, policy.backoff_s) == (used, 0.5)
