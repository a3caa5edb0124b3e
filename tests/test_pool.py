"""Warm pools of fresh server instances (servers/pool.py), with real sandboxed servers.

``prestart`` (the code runners): every task gets a process no task used before, and the next
one is already started when a task ends. ``ATLAS_FRESH=respawn`` turns every pool off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.manager import ServerManager

pytestmark = pytest.mark.servers


async def test_prestart_gives_each_task_a_new_process_started_ahead(data_dir: Path, tmp_path: Path) -> None:
    catalog = load_catalog()
    assert catalog.get("code-runner").fresh == "prestart"
    manager = ServerManager(catalog, data_dir, log_dir=tmp_path)
    try:
        first = await manager.acquire(["code-runner"])
        a = first["code-runner"]
        text, is_error = await a.call(
            "run-code", {"code": "console.log(6*7)", "languageId": "javascript"}, 60
        )
        assert not is_error and "42" in text
        await manager.settle()  # the pool has started the next task's instance meanwhile
        pool = manager._fresh["code-runner"]
        assert pool._ready.qsize() == 1
        manager.release(first)
        await manager.settle()
        assert a.broken is not None  # a prestarted instance serves one task, then stops

        second = await manager.acquire(["code-runner"])
        b = second["code-runner"]
        assert b is not a and b._scratch != a._scratch and b.broken is None  # new process, new TMPDIR
        text, is_error = await b.call(
            "run-code", {"code": "console.log(6*7)", "languageId": "javascript"}, 60
        )
        assert not is_error and "42" in text
        manager.release(second)
    finally:
        await manager.close()


async def test_respawn_override_turns_the_pools_off(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATLAS_FRESH", "respawn")
    manager = ServerManager(load_catalog(), data_dir, log_dir=tmp_path)
    try:
        first = await manager.acquire(["memory"])
        manager.release(first)
        await manager.settle()
        second = await manager.acquire(["memory"])
        assert second["memory"] is not first["memory"] and first["memory"].broken is not None
        assert manager._fresh == {}
        manager.release(second)
    finally:
        await manager.close()


def test_reuse_needs_a_private_data_copy() -> None:
    from atlasrun.servers.catalog import ServerSpec

    with pytest.raises(ValueError, match="needs stateful and isolate_data"):
        ServerSpec(name="x", command="x", fresh="reuse-with-fresh-data", isolate_data=False)
