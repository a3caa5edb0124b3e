"""Leak tests for every server the catalog lets reuse a process (``fresh: reuse-with-fresh-data``).

Real sandboxed servers through the real ``ServerManager``: task A writes state through the
server's own tools, the task ends, task B gets the *same process* (checked by pid, so the
reuse is real) and must not see A's state. The same write seen again within task A proves
the probe would catch a leak. A server declared reusable without a test here fails
``test_every_reusable_server_has_a_leak_test``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.instance import ServerInstance
from atlasrun.servers.manager import ServerManager

pytestmark = pytest.mark.servers

Probe = Callable[[ServerInstance], Awaitable[str]]


async def _call(instance: ServerInstance, tool: str, arguments: dict[str, object]) -> str:
    text, is_error = await instance.call(tool, arguments, timeout_s=30)
    assert not is_error, text
    return text


async def _fs_write(i: ServerInstance) -> str:
    return await _call(i, "write_file", {"path": "/data/leak.txt", "content": "from task A"})


async def _fs_read(i: ServerInstance) -> str:
    return await _call(i, "list_directory", {"path": "/data"})


async def _mem_write(i: ServerInstance) -> str:
    entity = {"name": "LeakyEntity", "entityType": "probe", "observations": ["from task A"]}
    return await _call(i, "create_entities", {"entities": [entity]})


async def _mem_read(i: ServerInstance) -> str:
    return await _call(i, "read_graph", {})


async def _git_write(i: ServerInstance) -> str:
    return await _call(i, "git_create_branch", {"repo_path": ".", "branch_name": "LeakyEntity"})


async def _git_read(i: ServerInstance) -> str:
    return await _call(i, "git_branch", {"repo_path": ".", "branch_type": "all"})


PROBES: dict[str, tuple[Probe, Probe, str]] = {
    "filesystem": (_fs_write, _fs_read, "leak.txt"),
    "memory": (_mem_write, _mem_read, "LeakyEntity"),
    "git": (_git_write, _git_read, "LeakyEntity"),
}


@pytest.fixture
def repo_data(data_dir: Path) -> Path:
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "seed"],
    ):
        subprocess.run(["git", *args], cwd=data_dir, env=env, check=True)
    return data_dir


def test_every_reusable_server_has_a_leak_test() -> None:
    reusable = {s.name for s in load_catalog().servers if s.fresh == "reuse-with-fresh-data"}
    assert reusable == set(PROBES)


@pytest.mark.parametrize("name", sorted(PROBES))
async def test_task_b_does_not_see_what_task_a_wrote(name: str, repo_data: Path, tmp_path: Path) -> None:
    write, read, mark = PROBES[name]
    catalog = load_catalog()
    assert catalog.get(name).fresh == "reuse-with-fresh-data"
    manager = ServerManager(catalog, repo_data, log_dir=tmp_path)
    try:
        task_a = await manager.acquire([name])
        a = task_a[name]
        assert mark not in await read(a)
        await write(a)
        assert mark in await read(a)  # the probe sees a write when there is one
        pid_a = a.pid or a.path_map.real
        manager.release(task_a)
        await manager.settle()

        task_b = await manager.acquire([name])
        b = task_b[name]
        assert b is a and (b.pid or b.path_map.real) == pid_a  # the same process was reused
        assert mark not in await read(b)
        assert "leak.txt" not in {p.name for p in repo_data.iterdir()}  # the source is untouched
        manager.release(task_b)
    finally:
        await manager.close()


@pytest.mark.parametrize("name", sorted(PROBES))
async def test_concurrent_tasks_get_separate_processes_and_data(
    name: str, repo_data: Path, tmp_path: Path
) -> None:
    write, read, mark = PROBES[name]
    manager = ServerManager(load_catalog(), repo_data, log_dir=tmp_path)
    try:
        first, second = await manager.acquire([name]), await manager.acquire([name])
        assert first[name] is not second[name]
        assert first[name].path_map.real != second[name].path_map.real
        await write(first[name])
        assert mark not in await read(second[name])
        manager.release(first)
        manager.release(second)
    finally:
        await manager.close()


async def test_a_broken_instance_is_not_reused(repo_data: Path, tmp_path: Path) -> None:
    manager = ServerManager(load_catalog(), repo_data, log_dir=tmp_path)
    try:
        task_a = await manager.acquire(["memory"])
        a = task_a["memory"]
        await a.stop()  # as if it crashed during task A
        manager.release(task_a)
        await manager.settle()
        task_b = await manager.acquire(["memory"])
        assert task_b["memory"] is not a and task_b["memory"].broken is None
        assert "LeakyEntity" not in await _mem_read(task_b["memory"])
        manager.release(task_b)
    finally:
        await manager.close()
