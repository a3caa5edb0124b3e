"""The sandbox policy is the host's alone: a run file cannot lower any server's confinement.

A built-in catalog entry keeps its ``executes_code`` whatever a run file says; every entry that
is not from a built-in catalog (``servers.inline``, a catalog file) is treated as executing code
and cannot raise its resource limits above the host's; and without a working bubblewrap no
server process starts unless the command line says ``--unsafe-host-exec`` (tested with bwrap
missing in three ways, and present).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.runner.plan import build_catalog
from atlasrun.runspec.run import load_run_spec
from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.instance import ServerInstance
from atlasrun.servers.limits import bounds_for, host_limits
from conftest import write_run, write_tasks
from test_sandbox import exe, server_chain

pytestmark = pytest.mark.servers

ATLAS = str(Path(sys.executable).with_name("atlas"))

CODE_TASK = {
    "id": "echo",
    "prompt": "Say ok with the code runner.",
    "enabled_tools": ["code-runner_run-code", "calculator_calculate"],
    "claims": ["The output is ok"],
    "reference_answer": "The output is ok.",
    "reference_trajectory": [
        {
            "calls": [
                {
                    "name": "code-runner_run-code",
                    "arguments": {"code": "echo ok", "languageId": "shellscript"},
                }
            ]
        }
    ],
}


def lowered(server: str, **changes: Any) -> dict[str, Any]:
    """The built-in entry ``server`` as a run file would redeclare it, with ``changes``."""
    entry = load_catalog().get(server).model_dump(mode="json", exclude_defaults=True)
    return {**entry, **changes}


def inline_run(tmp_path: Path, **servers: Any) -> Path:
    return write_run(
        tmp_path / "run.yaml",
        write_tasks(tmp_path / "tasks.yaml", [CODE_TASK]),
        [{"name": "replay"}],
        servers=servers,
    )


def test_only_a_builtin_catalog_can_say_a_server_runs_no_code(tmp_path: Path) -> None:
    catalog_file = tmp_path / "mine.yaml"
    catalog_file.write_text(
        yaml.safe_dump({"servers": [{**lowered("calculator", name="calc-file"), "executes_code": False}]})
    )
    run = inline_run(
        tmp_path,
        catalog=str(catalog_file),
        inline=[
            lowered("code-runner", executes_code=False, limits={"memory_mb": 900_000, "processes": 50}),
            lowered("calculator", name="calc-inline", executes_code=False),
            lowered("time", executes_code=False),  # a built-in name, redeclared as it is
        ],
    )
    catalog = build_catalog(load_run_spec(run))
    builtin = load_catalog()
    assert builtin.get("code-runner").may_execute_code and not builtin.get("calculator").may_execute_code
    for name in ("code-runner", "calc-inline", "calc-file", "time"):
        spec = catalog.get(name)
        assert not spec.host_trusted and spec.may_execute_code, name
    assert not catalog.get("calculator").may_execute_code  # untouched built-in entry: the host's word
    # A run file may tighten a limit, never loosen one beyond the host's defaults.
    bounds = bounds_for(catalog.get("code-runner"))
    assert bounds.memory_mb == host_limits().memory_mb and bounds.processes == 50


async def test_an_inline_server_that_claims_no_code_runs_under_the_reaper(
    tmp_path: Path, data_dir: Path
) -> None:
    """bwrap present: the redeclared code-runner is not trusted to be PID 1 of its namespace."""
    run = inline_run(tmp_path, inline=[lowered("code-runner", executes_code=False)])
    spec = build_catalog(load_run_spec(run)).get("code-runner")
    instance = await ServerInstance(spec, data_dir, "/data").start()
    try:
        tree, path = server_chain(str(spec.command))
        assert [exe(p) for p in path] == ["bwrap", "bwrap", "node"], tree
        text, is_error = await instance.call(
            "run-code", {"code": "cat /proc/1/cmdline", "languageId": "shellscript"}, 30
        )
        assert not is_error and text.startswith("/usr/bin/bwrap\0"), (
            text
        )  # PID 1 is bwrap's reaper, not the server
    finally:
        await instance.stop()


def no_bwrap_env(how: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ATLAS_BWRAP"}
    if how == "empty":
        env["ATLAS_BWRAP"] = ""
    elif how == "broken":
        env["ATLAS_BWRAP"] = str(tmp_path / "no-such-bwrap")
    else:  # a PATH without bwrap: the way a host without the package looks
        tools = tmp_path / "bin"
        tools.mkdir()
        for tool in ("node", "python3", "sh", "bash", "git", "setpriv"):
            if found := subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip():
                (tools / tool).symlink_to(found)
        env["PATH"] = str(tools)
    return env


@pytest.mark.parametrize("how", ["empty", "broken", "path"])
def test_without_bwrap_a_run_file_cannot_run_any_server_unconfined(
    tmp_path: Path, data_dir: Path, how: str
) -> None:
    run = inline_run(tmp_path, inline=[lowered("code-runner", executes_code=False)])
    out = tmp_path / "out"
    proc = subprocess.run(
        [ATLAS, "run", str(run), "--data-dir", str(data_dir), "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120, env=no_bwrap_env(how, tmp_path),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'code-runner'" in proc.stderr and "--unsafe-host-exec" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "results.jsonl").exists()  # refused before any work


def test_unsafe_host_exec_is_the_one_way_to_run_unconfined(tmp_path: Path, data_dir: Path) -> None:
    run = inline_run(tmp_path, inline=[lowered("code-runner", executes_code=False)])
    out = tmp_path / "out"
    proc = subprocess.run(
        [ATLAS, "run", str(run), "--data-dir", str(data_dir), "--out", str(out), "--quiet", "--unsafe-host-exec"],
        capture_output=True, text=True, timeout=300, env=no_bwrap_env("empty", tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning: server 'code-runner' runs unconfined" in proc.stderr
    record = yaml.safe_load((out / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "scored" and record["passed"] is True, record
