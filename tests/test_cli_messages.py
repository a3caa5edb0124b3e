"""The messages and suggestions the README promises (issue 23, parts 1 and 4), and the habits of
every command (``-v``/``--log-level``, ``python -m atlasrun``, ``atlas`` alone), through the real
CLI. Each test's docstring says what the command did before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from atlasrun.commands import COMMANDS
from atlasrun.errors import EXIT_BAD_INPUT, EXIT_FAIL_UNDER, EXIT_OK
from conftest import SUM_TASK, write_run, write_tasks

# Many CLI subprocesses and deliberate timeouts: `make test` runs them, `make check` does not.
pytestmark = pytest.mark.heavy

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo.yaml"
STARTER = REPO / "examples" / "starter" / "tasks.yaml"
CALC_TASK = {
    "id": "calc-only",
    "prompt": "What is 12 plus 30? Use the calculator.",
    "enabled_tools": ["calculator_calculate"],
    "claims": ["The sum is 42"],
    "reference_answer": "The sum is 42.",
    "reference_trajectory": [
        {"calls": [{"name": "calculator_calculate", "arguments": {"expression": "12+30"}}]}
    ],
}


def atlas(
    *args: str, env: dict[str, str] | None = None, module: str = "atlasrun.cli"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    return line


# ---- part 1: no data root at all


def test_no_data_root_names_the_tasks_that_read_data_and_refuses(tmp_path: Path) -> None:
    """Before: a note, then a real model would fail every file task."""
    out = tmp_path / "out"
    done = atlas("run", str(DEMO), "--out", str(out), "--no-preflight")
    assert done.returncode == EXIT_BAD_INPUT
    line = error_line(done)
    assert line.startswith(f"error: {DEMO}: no data root (--data-dir or spec.dataDir), but 18 of 20 task(s)")
    assert (
        "read files under /data: q3-revenue-leader, company-revenue-growth," in line and "and 13 more" in line
    )
    assert "`atlas init-workspace DIR`" in line and "spec.emptyDataDir: true" in line
    assert not out.exists()
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK, CALC_TASK])
    mixed = write_run(tmp_path / "mixed.yaml", tasks, [{"name": "replay"}])
    done = atlas("run", str(mixed), "--out", str(out))
    assert "1 of 2 task(s) read files under /data: sum-numbers." in error_line(done)
    both = write_run(tmp_path / "both.yaml", tasks, [{"name": "replay"}], dataDir="d", emptyDataDir=True)
    done = atlas("validate", str(both))
    assert done.returncode == EXIT_BAD_INPUT and "give dataDir or emptyDataDir: true, not both" in done.stderr


@pytest.mark.servers
def test_an_intended_empty_data_root_runs(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [CALC_TASK])
    plain = write_run(tmp_path / "calc.yaml", tasks, [{"name": "replay"}])
    done = atlas("run", str(plain), "--out", str(tmp_path / "calc"), "--quiet")
    assert done.returncode == EXIT_OK, done.stderr  # no task reads /data: a note, not a refusal
    assert "note: no --data-dir or spec.dataDir: servers see an empty data root" in done.stderr
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK, CALC_TASK])
    empty = write_run(tmp_path / "empty.yaml", tasks, [{"name": "replay"}], emptyDataDir=True)
    done = atlas("run", str(empty), "--out", str(tmp_path / "empty"), "--quiet")
    assert done.returncode == EXIT_OK, done.stderr
    assert "note: spec.emptyDataDir: servers see an empty data root" in done.stderr


def test_a_task_file_given_to_run_is_named_as_such(tmp_path: Path) -> None:
    """Before: "tasks: Extra inputs are not permitted (did you mean 'tasks'?)"."""
    csv = tmp_path / "tasks.csv"
    csv.write_text("TASK,PROMPT,ENABLED_TOOLS,GTFA_CLAIMS,TRAJECTORY\n")
    listed = write_tasks(tmp_path / "listed.yaml", [SUM_TASK])
    listed.write_text(yaml.safe_dump([SUM_TASK]))  # a bare list of tasks
    for given in (STARTER, csv, listed):
        done = atlas("run", str(given))
        assert done.returncode == EXIT_BAD_INPUT
        assert error_line(done) == (
            f"error: {given}: this is a task file, not a run file: give a run file (kind: AtlasRun) and "
            "this file as --tasks (atlas run RUN.yaml --tasks FILE), or check it with atlas validate FILE"
        )


def test_nothing_to_run_says_which_source_and_which_setting_left_nothing(tmp_path: Path) -> None:
    """Before (issue 24, the run fuzzer): "error: nothing was run: no task to run", naming nothing."""
    empty = tmp_path / "empty.csv"
    empty.write_text("TASK,PROMPT,ENABLED_TOOLS,GTFA_CLAIMS,TRAJECTORY\n")
    cases = {
        "header-only": ({"path": str(empty)}, {}, f"{empty} has no task to run"),
        "ids-empty": (
            {"path": str(STARTER), "ids": []},
            {},
            f"spec.tasks selects none of the 20 task(s) in {STARTER}",
        ),
        "all-excluded": (
            {"path": str(STARTER)},
            {"enabled": []},
            f"every selected task of {STARTER} was excluded (above)",
        ),
    }
    for name, (tasks, servers, expected) in cases.items():
        doc = yaml.safe_load(DEMO.read_text())
        doc["spec"]["tasks"] = tasks
        doc["spec"].setdefault("servers", {}).update(servers)
        run_file = tmp_path / f"{name}.yaml"
        run_file.write_text(yaml.safe_dump(doc))
        done = atlas("run", str(run_file), "--data-dir", str(tmp_path), "--out", str(tmp_path / name))
        assert done.returncode == EXIT_BAD_INPUT, (name, done.stderr)
        assert error_line(done) == f"error: nothing was run: {expected}", name
        checked = atlas("validate", str(run_file))
        assert checked.returncode == EXIT_FAIL_UNDER, (name, checked.stdout)
        assert f"error: nothing would run: {expected}" in checked.stdout.splitlines(), checked.stdout
    checked = atlas("validate", str(empty))
    assert checked.returncode == EXIT_FAIL_UNDER
    assert checked.stdout.splitlines()[0] == f"error: {empty} has no task (an empty file, or a header alone)"


# ---- part 4: validate's counts, --task, did-you-means


def test_validate_counts_unknown_ids_apart_and_run_names_the_task_flag(tmp_path: Path) -> None:
    """Before: "run file: 0 task(s) loadable, 1 rejected" although 20 load; ``--task`` reported as
    spec.tasks.ids."""
    doc = yaml.safe_load(DEMO.read_text())
    doc["spec"]["tasks"] = {"path": str(STARTER), "ids": ["q3-revenue-leadr"]}
    run_file = tmp_path / "ids.yaml"
    run_file.write_text(yaml.safe_dump(doc))
    done = atlas("validate", str(run_file))
    assert done.returncode == EXIT_FAIL_UNDER
    assert done.stdout.splitlines() == [
        "error: spec.tasks.ids: no task has id 'q3-revenue-leadr' (did you mean 'q3-revenue-leader'?)",
        f"{run_file}: run file: 20 task(s) loadable, 0 rejected, 1 unknown id(s) in spec.tasks.ids, 0 would run",
    ]
    done = atlas("validate", str(DEMO))
    assert done.returncode == EXIT_OK and done.stdout.endswith(
        "20 task(s) loadable, 0 rejected, 20 would run\n"
    )
    done = atlas("run", str(DEMO), "--task", "q3-revenue-leadr", "--data-dir", str(tmp_path))
    assert done.returncode == EXIT_BAD_INPUT
    assert (
        "error: --task: no task has id 'q3-revenue-leadr' (did you mean 'q3-revenue-leader'?)" in done.stderr
    )
    assert "spec.tasks.ids" not in done.stderr
    long_id = "q" * 5000  # before (issue 24): printed whole
    done = atlas("run", str(DEMO), "--task", long_id, "--data-dir", str(tmp_path))
    assert done.returncode == EXIT_BAD_INPUT and long_id not in done.stderr
    assert f"error: --task: no task has id '{'q' * 76}... (5,000 characters)" in done.stderr, done.stderr


def test_task_file_fields_get_a_did_you_mean(tmp_path: Path) -> None:
    """Before: ``domian:`` -> "Extra inputs are not permitted"; ``promt:`` -> "field prompt: missing"."""
    promt = {k if k != "prompt" else "promt": v for k, v in SUM_TASK.items()}
    domian = {k if k != "domain" else "domian": v for k, v in {**SUM_TASK, "id": "b"}.items()}
    limits = {**SUM_TASK, "id": "c", "limits": {"max_turn": 3}}
    path = write_tasks(tmp_path / "typos.yaml", [promt, domian, limits, {**SUM_TASK, "id": "ok"}])
    done = atlas("validate", str(path))
    assert done.returncode == EXIT_FAIL_UNDER
    assert "task sum-numbers, field promt: unknown field (did you mean 'prompt'?)" in done.stdout
    assert "task b, field domian: unknown field (did you mean 'domain'?)" in done.stdout
    assert (
        "task c, field limits.max_turn: limits.max_turn: Extra inputs are not permitted (did you mean 'max_turns'?)"
        in done.stdout
    )
    assert done.stdout.endswith("task file: 1 task(s) loadable, 3 rejected\n")


def test_servers_commands_suggest_a_known_server() -> None:
    """Before: ``servers check|install filesytem`` had no "did you mean"."""
    for sub in ("check", "install", "list"):
        done = atlas("servers", sub, "filesytem")
        assert done.returncode == EXIT_BAD_INPUT, (sub, done.stderr)
        assert (
            error_line(done)
            == f"error: atlas servers {sub}: unknown server 'filesytem' (did you mean 'filesystem'?)"
        )


@pytest.mark.servers
def test_servers_list_counts_tools_as_servers_check_does() -> None:
    """Before: ``servers list`` said "everything 0 tool(s)" while ``servers check`` found 13."""
    listed = atlas("servers", "list", "--live", "everything", "filesystem")
    checked = atlas("servers", "check", "--json", "everything", "filesystem")
    assert listed.returncode == 0 and checked.returncode == 0, listed.stderr + checked.stderr
    import json

    for row in json.loads(checked.stdout):
        assert row["tools"] > 0
        assert f"    {row['tools']} tool(s), listed live: " in listed.stdout, (row, listed.stdout)
    offline = atlas("servers", "list", "filesystem", "everything").stdout
    assert "tool(s)" not in offline  # without --live no count is claimed
    assert "tools the starter suite uses: filesystem_" in offline and "tools: --live starts it" in offline


def test_a_misspelt_model_gets_a_did_you_mean_before_anything_runs(tmp_path: Path) -> None:
    """Before: ``--model replya`` went to litellm: "LLM Provider NOT provided"."""
    done = atlas("run", str(DEMO), "--model", "replya", "--data-dir", str(tmp_path))
    assert done.returncode == EXIT_BAD_INPUT
    assert error_line(done) == (
        "error: command line: --model replya: not a model of the run file (replay, partial-agent), not a "
        "built-in agent (replay, replay-partial), and not a model name litellm knows (did you mean 'replay'?)"
    )
    done = atlas("run", str(DEMO), "--model", "my-local-llm", "--data-dir", str(tmp_path))
    assert "for a provider model write provider/model, e.g. openai/my-local-llm" in error_line(done)


@pytest.mark.heavy
def test_preflight_suggests_a_builtin_for_a_misspelt_run_file_model(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [CALC_TASK])
    run_file = write_run(tmp_path / "run.yaml", tasks, [{"name": "m", "model": "replai"}])
    done = atlas("run", str(run_file))
    assert done.returncode == EXIT_BAD_INPUT
    assert (
        "model 'm' (replai): litellm cannot route model name 'replai' to a provider (did you mean 'replay'?)"
        in error_line(done)
    )


@pytest.mark.heavy
def test_the_key_hint_names_the_flag_of_the_model_or_the_judge(tmp_path: Path) -> None:
    """Before: the judge's hint named ``apiKeyEnv / --api-key-env``; its flag is ``--judge-api-key-env``."""
    no_key = {"OPENAI_API_KEY": ""}
    done = atlas("run", str(DEMO), "--data-dir", str(tmp_path), "--judge", "gpt-4o", env=no_key)
    assert done.returncode == EXIT_BAD_INPUT
    assert error_line(done) == (
        "error: judge 'gpt-4o': provider openai needs OPENAI_API_KEY, which is not set "
        "(or name another variable with apiKeyEnv / --judge-api-key-env)"
    )
    done = atlas("run", str(DEMO), "--data-dir", str(tmp_path), "--model", "gpt-4o", env=no_key)
    assert error_line(done).endswith("(or name another variable with apiKeyEnv / --api-key-env)")


def test_rescore_takes_api_key_env_like_run(tmp_path: Path) -> None:
    """Before: ``rescore --api-key-env`` was "unrecognized"."""
    from test_stats import result, write_results

    out = write_results(tmp_path / "out", [result("t0", 1.0, model="m")])
    done = atlas("rescore", str(out), "--judge", "openai/j", "--api-key-env", "ATLAS_NO_JUDGE_KEY")
    assert done.returncode == EXIT_BAD_INPUT
    assert "judge 'openai/j': its key variable ATLAS_NO_JUDGE_KEY is not set" in error_line(done)


# ---- habits: python -m atlasrun, atlas alone, -v/--log-level everywhere


def test_python_m_atlasrun_and_atlas_alone_print_where_to_start() -> None:
    """Before: ``python -m atlasrun`` failed (no __main__); ``atlas`` alone printed only usage."""
    for done in (atlas(module="atlasrun"), atlas()):
        assert done.returncode == EXIT_OK, done.stderr
        lines = done.stdout.splitlines()
        commands = [line.strip() for line in lines if line.startswith("  atlas ")]
        assert commands == [
            "atlas init-workspace runs/ws",
            "atlas run examples/demo.yaml --data-dir runs/ws --out runs/demo",
            "atlas report runs/demo",
            "atlas validate RUN.yaml",
            "atlas servers check",
        ]
        assert lines[-1] == f"User guide: {REPO / 'README.md'}"
    done = atlas("--version", module="atlasrun")
    assert done.returncode == 0 and done.stdout.startswith("atlas (AtlasRun) ")


def test_every_command_takes_v_and_log_level(tmp_path: Path) -> None:
    commands = [["run"], ["validate"], ["init-workspace"], *([c] for c in COMMANDS if c != "servers")]
    commands += [["servers", s] for s in ("list", "install", "check")]
    for command in commands:
        text = atlas(*command, "--help").stdout
        assert "--log-level LEVEL" in text and "-v, --verbose" in text, command
    done = atlas("validate", str(DEMO), "-v")
    assert done.returncode == EXIT_OK
    assert "INFO atlasrun.cli: atlas validate (AtlasRun " in done.stderr
    assert "INFO atlasrun.cli: atlas validate finished in " in done.stderr and "exit 0" in done.stderr
    short = write_tasks(tmp_path / "short.yaml", [{**CALC_TASK, "claims": ["The sum is 42", "ok"]}])
    assert (
        "WARNING atlasrun.tasks: skipped 1 claim(s)"
        in atlas("validate", str(short), "--log-level", "info").stderr
    )
    assert "skipped" not in atlas("validate", str(short), "--log-level", "error").stderr
    done = atlas("validate", str(DEMO), "--log-level", "loud")
    assert done.returncode == EXIT_BAD_INPUT and "invalid choice: 'loud'" in done.stderr
