"""CLI habits: --version, an example in every command's help, filters, `servers list`, validating
a cluster run file, and the README's statement of validate's exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from atlasrun.commands import COMMANDS
from atlasrun.errors import EXIT_BAD_INPUT, EXIT_FAIL_UNDER, EXIT_OK
from conftest import SUM_TASK, write_run, write_tasks
from test_cli import atlas

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.heavy
def test_version_and_an_example_in_every_commands_help() -> None:
    from atlasrun import __version__

    proc = atlas("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"atlas (AtlasRun) {__version__}"
    commands = [["run"], ["validate"], ["init-workspace"], *([c] for c in COMMANDS)]
    commands += [["servers", s] for s in ("list", "install", "check")]
    for command in commands:
        proc = atlas(*command, "--help")
        assert proc.returncode == 0 and "example: atlas " in proc.stdout, (command, proc.stdout[-300:])
    # every flag and argument has its help text
    import argparse

    from atlasrun.cli import build_parser

    for name in ["run", "validate", "init-workspace", *COMMANDS]:
        stack = [build_parser(name)]
        while stack:
            parser = stack.pop()
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    stack += [p for n, p in action.choices.items() if n == name or parser.prog != "atlas"]
                else:
                    assert action.help, (name, action.option_strings or action.dest)
    run_help = atlas("run", "--help").stdout
    for flag in ("--limit", "--task", "--model", "--fail-under", "--junit", "--no-preflight", "--force-new"):
        assert flag in run_help


def test_servers_list_from_the_catalog_names_tools_server_tool() -> None:
    proc = atlas("servers", "list", "filesystem", "calculator")
    assert proc.returncode == 0, proc.stderr
    assert "calculator_calculate" in proc.stdout and "filesystem_read_text_file" in proc.stdout
    proc = atlas("servers", "list", "calculatr")
    assert proc.returncode == EXIT_BAD_INPUT and "(did you mean 'calculator'?)" in proc.stderr


@pytest.mark.servers
def test_servers_list_live_lists_what_the_server_offers() -> None:
    proc = atlas("servers", "list", "--live", "time", "memory")
    assert proc.returncode == 0, proc.stderr
    assert "time_convert_time" in proc.stdout and "time_get_current_time" in proc.stdout
    assert "memory_read_graph" in proc.stdout and "listed live" in proc.stdout


def test_validate_checks_a_cluster_run_file_locally_and_says_what_it_skipped(tmp_path: Path) -> None:
    proc = atlas("validate", str(REPO / "examples" / "run.yaml"))
    assert proc.returncode == EXIT_FAIL_UNDER  # its digests are placeholders
    assert "cluster run file" in proc.stdout and "REPLACE_WITH_DIGEST" in proc.stdout
    assert "skipped: the tasks (ConfigMap starter-tasks): not readable from here" in proc.stdout
    assert "skipped: that the Secrets exist: model-key, s3-credentials" in proc.stdout
    doc = yaml.safe_load((REPO / "examples" / "run.yaml").read_text())
    digest = "sha256:" + "a" * 64
    doc["spec"]["cluster"]["runnerImage"] = f"reg.local/runner@{digest}"
    for server in doc["spec"]["servers"]["inline"]:
        server["image"] = server["image"].split("@")[0] + "@" + digest
    doc["spec"]["servers"]["enabled"] = ["filesystem", "calculator"]
    good = tmp_path / "cluster.yaml"
    good.write_text(yaml.safe_dump(doc))
    proc = atlas("validate", str(good))
    assert proc.returncode == EXIT_OK and "0 error(s), 0 warning(s)" in proc.stdout, proc.stdout
    doc["spec"]["servers"]["enabled"] = ["filesytem"]
    good.write_text(yaml.safe_dump(doc))
    proc = atlas("validate", str(good))
    assert proc.returncode == EXIT_FAIL_UNDER and "(did you mean 'filesystem'?)" in proc.stdout


def test_readme_states_validates_exit_codes_as_the_code_has_them(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `atlas validate"))
    stated = dict(re.findall(r"exit (\d) ([^;|]+)", row))
    assert set(stated) == {str(EXIT_OK), str(EXIT_FAIL_UNDER), str(EXIT_BAD_INPUT)}, row
    good = write_tasks(tmp_path / "good.yaml", [SUM_TASK])
    bad = write_tasks(tmp_path / "bad.yaml", [SUM_TASK, {"id": "x"}])
    assert atlas("validate", str(good)).returncode == EXIT_OK
    assert atlas("validate", str(bad)).returncode == EXIT_FAIL_UNDER
    assert atlas("validate", str(tmp_path / "missing.yaml")).returncode == EXIT_BAD_INPUT
    # and the README's exit-code table lists every constant
    for name, value in (("EXIT_ITEM_ERRORS", 3), ("EXIT_REGRESSION", 4), ("EXIT_INTERRUPTED", 130)):
        assert f"| {value} |" in readme, name


@pytest.mark.servers
def test_limit_task_and_model_filters(tmp_path: Path, data_dir: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK, {**SUM_TASK, "id": "b"}, {**SUM_TASK, "id": "c"}])
    run_file = write_run(
        tmp_path / "run.yaml", tasks, [{"name": "replay"}, {"name": "again", "model": "replay"}]
    )
    common = ["--data-dir", str(data_dir)]

    def items(out: str) -> set[tuple[str, str]]:
        rows = [json.loads(x) for x in (tmp_path / out / "results.jsonl").read_text().splitlines()]
        return {(r["model"], r["task_id"]) for r in rows}

    assert atlas("run", str(run_file), *common, "--out", str(tmp_path / "l"), "--limit", "1").returncode == 0
    assert items("l") == {("replay", "sum-numbers"), ("again", "sum-numbers")}
    # the same directory with another filter: one run, and summary.json covers all of it (as the report)
    proc = atlas(
        "run", str(run_file), *common, "--out", str(tmp_path / "l"), "--task", "b", "--model", "replay"
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "l" / "summary.json").read_text())["models"]
    assert (summary["replay"]["tasks"], summary["again"]["tasks"]) == (2, 1)
    proc = atlas("run", str(run_file), *common, "--out", str(tmp_path / "t"), "--task", "c", "--task", "b")
    assert proc.returncode == 0 and "2 task(s) x 2 model(s)" in proc.stderr
    assert items("t") == {(m, t) for m in ("replay", "again") for t in ("b", "c")}
    proc = atlas("run", str(run_file), *common, "--out", str(tmp_path / "m"), "--model", "again")
    assert proc.returncode == 0 and items("m") == {("again", t) for t in ("sum-numbers", "b", "c")}


def test_a_misspelt_tool_names_its_server_with_a_did_you_mean(tmp_path: Path) -> None:
    typo = {
        **SUM_TASK,
        "enabled_tools": ["filesytem_read_text_file", "calculator_calculate"],
        "distractors": [],
    }
    typo["reference_trajectory"] = [
        {"calls": [{"name": "filesytem_read_text_file", "arguments": {"path": "/data/numbers.txt"}}]}
    ]
    run_file = write_run(
        tmp_path / "run.yaml", write_tasks(tmp_path / "t.yaml", [typo]), [{"name": "replay"}]
    )
    proc = atlas("validate", str(run_file))
    assert "needs server(s) not enabled: filesytem (did you mean 'filesystem'?)" in proc.stdout, proc.stdout
    assert proc.returncode == EXIT_FAIL_UNDER  # nothing would run
