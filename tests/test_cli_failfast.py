"""Fail fast and honest exit codes: pre-flight before any task, typed provider errors that are not
retried, "did you mean" for ids and fields, exit codes for CI, --junit."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from atlasrun.errors import EXIT_BAD_INPUT, EXIT_FAIL_UNDER, EXIT_ITEM_ERRORS, EXIT_OK
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK, write_run, write_tasks
from test_runner import solver


def atlas(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def run_file(tmp_path: Path, models: list[dict[str, Any]], **spec: Any) -> Path:
    tasks = write_tasks(
        tmp_path / "tasks.yaml",
        [SUM_TASK, {**SUM_TASK, "id": "sum-again", "prompt": "Add up the numbers in /data/numbers.txt."}],
    )
    spec.setdefault("limits", {"retryBackoffSeconds": 0})
    spec.setdefault("emptyDataDir", True)  # the tests that need the data pass --data-dir
    return write_run(tmp_path / "run.yaml", tasks, models, **spec)


def test_missing_key_variable_stops_before_any_call(tmp_path: Path) -> None:
    with ScriptedProvider(solver) as provider:
        models = [
            {
                "name": "m1",
                "model": "openai/m1",
                "apiBase": provider.api_base,
                "apiKeyEnv": "ATLAS_NO_SUCH_KEY",
            }
        ]
        proc = atlas("run", str(run_file(tmp_path, models)), "--out", str(tmp_path / "out"))
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert "model 'm1'" in line and "ATLAS_NO_SUCH_KEY is not set" in line, line
    assert provider.requests == [] and not (tmp_path / "out" / "results.jsonl").exists()


@pytest.mark.heavy
def test_provider_key_variable_and_unroutable_model_are_named(tmp_path: Path) -> None:
    proc = atlas(
        "run",
        str(run_file(tmp_path, [{"name": "gpt-4o"}])),
        "--out",
        str(tmp_path / "o1"),
        env={"OPENAI_API_KEY": ""},
    )
    assert proc.returncode == EXIT_BAD_INPUT and "needs OPENAI_API_KEY, which is not set" in proc.stderr, (
        proc.stderr
    )
    proc = atlas(
        "run", str(run_file(tmp_path, [{"name": "no-such-model-xyz"}])), "--out", str(tmp_path / "o2")
    )
    assert proc.returncode == EXIT_BAD_INPUT
    assert "cannot route model name 'no-such-model-xyz'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "status,expect",
    [
        (401, "wants a key and none was sent: name its variable with apiKeyEnv / --api-key-env"),
        (404, "does not know this model"),
        (400, "refused the request"),
    ],
)
@pytest.mark.heavy
def test_preflight_call_is_not_retried_on_auth_model_or_request_errors(
    tmp_path: Path, status: int, expect: str
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        return Reply(status=status, raw_body='{"error": {"message": "no", "type": "x"}}')

    with ScriptedProvider(script) as provider:
        models = [{"name": "m1", "model": "openai/m1", "apiBase": provider.api_base}]
        proc = atlas("run", str(run_file(tmp_path, models)), "--out", str(tmp_path / "out"))
    assert proc.returncode == EXIT_BAD_INPUT and expect in proc.stderr, proc.stderr
    # one cheap call (max_tokens 1), not retried; a refused request is tried once without max_tokens
    assert len(provider.requests) == (2 if status == 400 else 1)
    assert provider.requests[0]["max_tokens"] == 1


def test_unknown_task_ids_and_fields_get_a_did_you_mean(tmp_path: Path) -> None:
    spec = run_file(tmp_path, [{"name": "replay"}], tasks={"path": "tasks.yaml", "ids": ["sum-numbrs"]})
    for command in ("run", "validate"):
        proc = (
            atlas(command, str(spec), "--out", str(tmp_path / "out"))
            if command == "run"
            else atlas(command, str(spec))
        )
        text = proc.stdout + proc.stderr
        assert "no task has id 'sum-numbrs' (did you mean 'sum-numbers'?)" in text, text
        assert proc.returncode in (1, 2)
    assert not (tmp_path / "out").exists()  # nothing ran
    proc = atlas("run", str(run_file(tmp_path, [{"name": "replay"}])), "--task", "sum-agian")
    assert proc.returncode == EXIT_BAD_INPUT and "(did you mean 'sum-again'?)" in proc.stderr
    bad = run_file(tmp_path, [{"name": "replay"}], paralelism=3)
    proc = atlas("validate", str(bad))
    assert proc.returncode == EXIT_BAD_INPUT and "(did you mean 'parallelism'?)" in proc.stderr, proc.stderr


@pytest.mark.servers
def test_auth_error_during_a_run_is_typed_and_not_retried(tmp_path: Path, data_dir: Path) -> None:
    def script(body: dict[str, Any]) -> Reply:
        return Reply(status=401, raw_body='{"error": {"message": "bad key", "type": "auth"}}')

    with ScriptedProvider(script) as provider:
        models = [{"name": "m1", "model": "openai/m1", "apiBase": provider.api_base}]
        spec = run_file(tmp_path, models, limits={"retryBackoffSeconds": 0, "providerRetries": 5})
        out = tmp_path / "out"
        proc = atlas("run", str(spec), "--no-preflight", "--data-dir", str(data_dir), "--out", str(out))
    assert proc.returncode == EXIT_ITEM_ERRORS, proc.stderr
    assert len(provider.requests) == 2  # one per task, none retried
    assert "provider_auth 2" in proc.stderr  # errors by kind on the live display
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["status"], r["error_kind"]) for r in rows} == {("error", "provider_auth")}


@pytest.mark.servers
def test_exit_codes_fail_under_and_junit(tmp_path: Path, data_dir: Path) -> None:
    def half(body: dict[str, Any]) -> Reply:  # solves sum-numbers, answers sum-again wrongly
        return Reply(content="It is 7.") if "Add up" in str(body["messages"][0]) else solver(body)

    with ScriptedProvider(half) as provider:
        models = [{"name": "half", "model": "openai/half", "apiBase": provider.api_base}, {"name": "replay"}]
        spec = str(run_file(tmp_path, models))
        out, junit = str(tmp_path / "out"), tmp_path / "junit.xml"
        common = ["--data-dir", str(data_dir), "--out", out]
        proc = atlas("run", spec, *common, "--junit", str(junit))
        assert proc.returncode == EXIT_OK, proc.stderr
        assert "2 task(s) x 2 model(s) (half, replay) x 1 repeat(s) = 4 item(s)" in proc.stderr
        # litellm knows no price for the scripted model: its cost is n/a, not $0.00
        (half_row,) = [line for line in proc.stdout.splitlines() if line.startswith("half ")]
        assert half_row.endswith("n/a") and "cost n/a" in proc.stderr, (half_row, proc.stderr[-300:])
        proc = atlas("run", spec, *common, "--fail-under", "0.75")
        assert (
            proc.returncode == EXIT_FAIL_UNDER and "half: pass rate 50.0% < --fail-under 75%" in proc.stderr
        )
        proc = atlas("run", spec, *common, "--fail-under", "75%", "--model", "replay")
        assert proc.returncode == EXIT_OK, proc.stderr
        proc = atlas("run", spec, *common, "--fail-under", "1.5")
        assert proc.returncode == EXIT_BAD_INPUT and "--fail-under" in proc.stderr
    suites = ET.parse(junit).getroot()
    cases = {(c.get("classname"), c.get("name")): c for c in suites.iter("testcase")}
    assert set(cases) == {(m, t) for m in ("half", "replay") for t in ("sum-numbers", "sum-again")}
    failure = cases[("half", "sum-again")].find("failure")
    assert failure is not None and failure.text and "The sum of the numbers is 42" in failure.text
    assert cases[("replay", "sum-again")].find("failure") is None


@pytest.mark.heavy
def test_preflight_never_prints_the_key_a_provider_echoes(tmp_path: Path) -> None:
    key = "sk-preflight-SENTINEL-7f3a9c"

    def echo(body: dict[str, Any]) -> Reply:
        return Reply(
            status=401, raw_body=json.dumps({"error": {"message": f"Incorrect API key provided: {key}"}})
        )

    with ScriptedProvider(echo) as provider:
        models = [
            {"name": "m1", "model": "openai/m1", "apiBase": provider.api_base, "apiKeyEnv": "ATLAS_PF_KEY"}
        ]
        proc = atlas("run", str(run_file(tmp_path, models)), env={"ATLAS_PF_KEY": key})
    assert proc.returncode == EXIT_BAD_INPUT and "the key was refused (variable ATLAS_PF_KEY)" in proc.stderr
    assert key not in proc.stdout + proc.stderr and "sk-preflight" not in proc.stderr, proc.stderr


def test_rescore_checks_its_judges_before_judging(tmp_path: Path) -> None:
    from test_stats import result, write_results

    out = write_results(tmp_path / "out", [result("t0", 1.0, model="m")])
    proc = atlas("rescore", str(out), "--judge", "openai/j", "--judge-api-key-env", "ATLAS_NO_JUDGE_KEY")
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert "judge 'openai/j': its key variable ATLAS_NO_JUDGE_KEY is not set" in proc.stderr
    assert not (tmp_path / "out-rescored-openai_j").exists()  # nothing was written


def test_live_display_shows_errors_by_kind_and_the_latest_reasons() -> None:
    import io

    from atlasrun.errors import ErrorKind
    from atlasrun.runner.progress import Progress
    from atlasrun.scoring.result import TaskResult

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream in (Terminal(), io.StringIO()):
        bar = Progress(3, stream=stream)
        bar.update(
            TaskResult(task_id="a", model="m", status="scored", coverage=1.0, passed=True, prompt_tokens=1200)
        )
        bar.update(
            TaskResult(
                task_id="b",
                model="m",
                status="error",
                error_kind=ErrorKind.PROVIDER_AUTH,
                reason="provider_auth: 401",
            )
        )
        bar.update(
            TaskResult(task_id="c", model="m", status="scored", coverage=0.0, passed=False, cost_known=False)
        )
        text = stream.getvalue()
        assert "error: m/b: provider_auth: 401" in text  # the reason, on the terminal
        assert "errors 1 (provider_auth 1)" in text and "tokens 1,200" in text and "cost n/a" in text
        assert "eta " in text and "elapsed " in text
        assert ("\r" in text) == isinstance(stream, Terminal)  # plain lines when not a terminal
