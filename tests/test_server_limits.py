"""Every sandboxed server is resource-bounded; hitting a bound is a ``server_resource`` item error.

A fork bomb and a 4 GiB allocation, each run by task code through the real sandboxed
code-runner of the built-in catalog (``atlas run`` with a scripted model), end as that error
within seconds, the next item runs fine and nothing of the sandboxes is left. CPU time, open
files and the process count without a cgroup are checked on a server instance with low limits.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.runner.plan import build_catalog
from atlasrun.runspec.run import load_run_spec
from atlasrun.servers import sandbox
from atlasrun.servers.catalog import ServerSpec, load_catalog
from atlasrun.servers.instance import ServerInstance, ServerResourceError
from atlasrun.servers.limits import _pids_hierarchy, bounds_for, host_limits
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider, tool_call
from conftest import write_run, write_tasks

pytestmark = pytest.mark.servers

ATLAS = str(Path(sys.executable).with_name("atlas"))
FORK_BOMB = ":(){ :|:& };:; sleep 60"
ALLOCATE_4G = 'python3 -c "b = bytearray(4 * 1024**3); print(len(b))"'
CODE = {"bomb": FORK_BOMB, "alloc": ALLOCATE_4G, "after": "echo ok"}


def code_task(task_id: str) -> dict[str, Any]:
    return {
        "id": task_id,
        "prompt": f"Run the {task_id} snippet.",
        "enabled_tools": ["code-runner_run-code"],
        "claims": ["The output is ok"],
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


def script(body: dict[str, Any]) -> Reply:
    """Run the task's snippet, then answer with what it printed."""
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if not results:
        task_id = prompt.split()[2]
        return Reply(
            tool_calls=[
                tool_call("code-runner_run-code", {"code": CODE[task_id], "languageId": "shellscript"})
            ]
        )
    return Reply(content=f"The output is {str(results[-1]['content']).strip()}.")


def cgroups_of(pid: int) -> list[Path]:
    """The pids cgroups (run directories) a process named ``pid`` made."""
    base = _pids_hierarchy()
    return list(base.glob(f"atlasrun-{pid}.*")) if base else []


def test_a_fork_bomb_and_a_4g_allocation_end_as_server_resource_and_the_run_goes_on(
    tmp_path: Path, data_dir: Path
) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [code_task(t) for t in ("bomb", "alloc", "after")])
    with ScriptedProvider(script) as provider:
        run = write_run(
            tmp_path / "run.yaml", tasks, [{"name": "m", "model": "openai/m", "apiBase": provider.api_base}],
            parallelism=1,
        )  # fmt: skip
        started = time.monotonic()
        proc = subprocess.Popen(
            [ATLAS, "run", str(run), "--data-dir", str(data_dir), "--out", str(tmp_path / "out"), "--quiet",
             "--no-preflight"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        output, _ = proc.communicate(timeout=300)
        took = time.monotonic() - started
    assert proc.returncode == 3, output  # some items ended as errors
    records = {
        r["task_id"]: r
        for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())
    }
    bomb, alloc, after = records["bomb"], records["alloc"], records["after"]
    assert (bomb["status"], bomb["error_kind"]) == ("error", "server_resource"), bomb
    assert "process limit" in bomb["reason"]
    assert (alloc["status"], alloc["error_kind"]) == ("error", "server_resource"), alloc
    assert "memory limit" in alloc["reason"]
    assert (after["status"], after["passed"]) == ("scored", True), after
    assert bomb["wall_s"] < 10 and alloc["wall_s"] < 10, (bomb["wall_s"], alloc["wall_s"])
    assert took < 120
    assert not cgroups_of(proc.pid)  # every sandbox's cgroup was removed


def low_limits(**limits: int) -> ServerSpec:
    """The built-in code-runner as a run file would redeclare it, with lower limits."""
    entry = load_catalog().get("code-runner").model_dump(mode="json", exclude_defaults=True)
    return ServerSpec.model_validate({**entry, "limits": limits})


async def run_code(spec: ServerSpec, data_dir: Path, code: str) -> tuple[float, str]:
    instance = await ServerInstance(spec, data_dir, "/data").start()
    started = time.monotonic()
    try:
        with pytest.raises(ServerResourceError) as failed:
            await instance.call("run-code", {"code": code, "languageId": "shellscript"}, 60)
        assert instance.broken == instance.exhausted
    finally:
        await instance.stop()
    return time.monotonic() - started, str(failed.value)


async def test_cpu_time_is_bounded(data_dir: Path) -> None:
    took, message = await run_code(low_limits(cpu_seconds=2), data_dir, "while :; do :; done")
    assert "CPU time limit (2 s)" in message and took < 10, (took, message)


async def test_open_files_are_bounded(data_dir: Path) -> None:
    hold = "import os, time\nfs = []\ntry:\n    while True: fs.append(os.open('/dev/null', os.O_RDONLY))\nexcept OSError: time.sleep(30)"
    took, message = await run_code(low_limits(open_files=128), data_dir, f'python3 -c "{hold}"')
    assert "open-file limit (128 per process)" in message and took < 10, (took, message)


async def test_without_a_cgroup_the_guard_counts_the_processes(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no pids cgroup can be made (and RLIMIT_NPROC does not bind a root runner), the guard
    counts the sandbox's processes and stops it at the limit."""
    monkeypatch.setattr(sandbox, "new_pids_cgroup", lambda label, processes: None)
    flood = "for i in $(seq 200); do sleep 60 & done; wait"
    took, message = await run_code(low_limits(processes=64), data_dir, flood)
    assert "process limit (64" in message and took < 10, (took, message)


def test_limits_come_from_the_catalog_with_per_server_overrides(tmp_path: Path) -> None:
    host = host_limits()
    builtin = load_catalog()
    assert bounds_for(builtin.get("calculator")).memory_mb == host.memory_mb
    catalog_file = tmp_path / "mine.yaml"
    entry = builtin.get("calculator").model_dump(mode="json", exclude_defaults=True, exclude={"limits"})
    catalog_file.write_text(
        yaml.safe_dump(
            {
                "limits": {"memory_mb": 512, "cpu_seconds": 30},
                "servers": [
                    {**entry, "name": "calc-a"},
                    {**entry, "name": "calc-b", "limits": {"memory_mb": 256, "open_files": 10**6}},
                ],
            }
        )
    )
    run = write_run(
        tmp_path / "run.yaml", write_tasks(tmp_path / "t.yaml", []), [{"name": "replay"}],
        servers={"catalog": str(catalog_file)},
    )  # fmt: skip
    catalog = build_catalog(load_run_spec(run))
    a, b = bounds_for(catalog.get("calc-a")), bounds_for(catalog.get("calc-b"))
    assert (a.memory_mb, a.cpu_seconds, a.processes) == (512, 30, host.processes)
    assert (b.memory_mb, b.cpu_seconds) == (256, 30)
    assert b.open_files == host.open_files  # not above the host's
