"""Warm pools of fresh server instances (servers/pool.py), with real sandboxed servers.

``prestart`` (the code runners): every task gets a process no task used before, and the next
one is already started when a task ends. ``reuse-with-fresh-data``: between tasks only what a
task changed in its data copy is copied again (servers/scratch.py ``DataCopy``), and a refresh
that fails in any way stops the instance. ``ATLAS_FRESH=respawn`` turns every pool off.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.instance import ServerInstance
from atlasrun.servers.manager import ServerManager
from atlasrun.servers.scratch import DataCopy


@pytest.mark.servers
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


@pytest.mark.servers
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


def _tree(root: Path) -> dict[str, tuple[int, int, bytes | str]]:
    """Every entry under ``root``: mode, modification time and content (link target for links)."""
    found: dict[str, tuple[int, int, bytes | str]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if path.is_symlink():
            content: bytes | str = os.readlink(path)
        elif path.is_dir():
            content = "dir"
        else:
            content = path.read_bytes()
        found[str(path.relative_to(root))] = (info.st_mode, info.st_mtime_ns, content)
    return found


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "source"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "b.txt").write_text("bravo\n")
    (root / "sub" / "c.txt").write_text("charlie\n")
    (root / "sub" / "deeper" / "d.txt").write_text("delta\n")
    (root / "link").symlink_to("a.txt")
    return root


def _copy(source: Path, tmp_path: Path) -> DataCopy:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    copy = DataCopy(source, scratch / "data", scratch / ".clock")
    copy.create()
    assert _tree(copy.target) == _tree(source)
    return copy


def test_an_untouched_copy_is_not_copied_again(source: Path, tmp_path: Path) -> None:
    copy = _copy(source, tmp_path)
    created = copy.copied
    (copy.target / "a.txt").read_text()  # reading changes nothing that counts
    assert copy.refresh() == [] and copy.copied == created


def test_refresh_undoes_every_kind_of_change_copying_only_those_entries(source: Path, tmp_path: Path) -> None:
    copy = _copy(source, tmp_path)
    target = copy.target
    before = (target / "a.txt").stat()
    (target / "a.txt").write_text("ALPHA\n")  # same size, and the modification time put back:
    os.utime(target / "a.txt", ns=(before.st_atime_ns, before.st_mtime_ns))  # only ctime tells
    (target / "b.txt").unlink()
    shutil.rmtree(target / "sub" / "deeper")
    (target / "sub" / "new").mkdir()
    (target / "sub" / "new" / "x.txt").write_text("x")
    (target / "top.txt").write_text("added")
    (target / "link").unlink()
    (target / "link").symlink_to("b.txt")
    os.chmod(target / "sub", 0o700)
    created = copy.copied

    copied = copy.refresh()

    assert sorted(copied) == ["a.txt", "b.txt", "link", "sub/deeper"]
    assert copy.copied - created == 5  # those four entries and d.txt inside sub/deeper; c.txt stays
    assert _tree(target) == _tree(source)
    assert copy.refresh() == []  # and the refreshed copy counts as untouched


def test_a_file_replaced_by_a_directory_and_back(source: Path, tmp_path: Path) -> None:
    copy = _copy(source, tmp_path)
    (copy.target / "a.txt").unlink()
    (copy.target / "a.txt").mkdir()
    (copy.target / "a.txt" / "inner").write_text("x")
    shutil.rmtree(copy.target / "sub")
    (copy.target / "sub").write_text("now a file")
    assert sorted(copy.refresh()) == ["a.txt", "sub"]
    assert _tree(copy.target) == _tree(source)


def test_a_copy_of_a_missing_source_is_an_empty_directory(tmp_path: Path) -> None:
    copy = _copy(tmp_path / "absent", tmp_path)
    (copy.target / "made.txt").write_text("by a task")
    assert copy.refresh() == [] and list(copy.target.iterdir()) == []


FS_EDITS = [
    ("write_file", {"path": "/data/notes.md", "content": "# Changed by task A\n"}),
    ("write_file", {"path": "/data/new.txt", "content": "from task A"}),
    ("create_directory", {"path": "/data/newdir/inner"}),
]


async def _call(instance: ServerInstance, tool: str, arguments: dict[str, object]) -> str:
    text, is_error = await instance.call(tool, arguments, timeout_s=30)
    assert not is_error, text
    return text


@pytest.mark.servers
async def test_refresh_copies_only_what_a_task_changed(data_dir: Path, tmp_path: Path) -> None:
    (data_dir / "sub").mkdir()
    (data_dir / "sub" / "kept.txt").write_text("kept\n")
    manager = ServerManager(load_catalog(), data_dir, log_dir=tmp_path)
    try:
        task_a = await manager.acquire(["filesystem"])
        a = task_a["filesystem"]
        created = a.data_copied
        assert created == 4  # numbers.txt, notes.md, sub, sub/kept.txt
        for tool, arguments in FS_EDITS:
            await _call(a, tool, arguments)
        manager.release(task_a)
        await manager.settle()
        pool = manager._fresh["filesystem"]
        assert (pool.refreshed, pool.refresh_copies) == (1, 1)
        assert a.data_copied - created == 1  # notes.md only: new.txt and newdir were removed

        task_b = await manager.acquire(["filesystem"])  # the same process, and no residue of task A
        assert task_b["filesystem"] is a
        listing = await _call(a, "list_directory", {"path": "/data"})
        assert "new.txt" not in listing and "newdir" not in listing and "kept.txt" not in listing
        assert "sub" in listing
        assert (
            await _call(a, "read_text_file", {"path": "/data/notes.md"})
            == (data_dir / "notes.md").read_text()
        )
        manager.release(task_b)  # task B only read: nothing to copy
        await manager.settle()
        assert (pool.refreshed, pool.refresh_copies) == (2, 1) and a.data_copied - created == 1
    finally:
        await manager.close()


@pytest.mark.servers
@pytest.mark.parametrize("failure", ["source file gone", "unexpected error"])
async def test_an_instance_whose_refresh_fails_is_stopped_not_reused(
    failure: str, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = ServerManager(load_catalog(), data_dir, log_dir=tmp_path)
    try:
        task_a = await manager.acquire(["filesystem"])
        a = task_a["filesystem"]
        await _call(a, *FS_EDITS[0])  # notes.md changed: the refresh must copy it again
        if failure == "source file gone":
            (data_dir / "notes.md").unlink()  # the copy cannot be restored (FileNotFoundError)
        else:

            def refresh(self: DataCopy) -> list[str]:
                raise ValueError("not an OSError")

            monkeypatch.setattr(DataCopy, "refresh", refresh)
        manager.release(task_a)
        await manager.settle()
        pool = manager._fresh["filesystem"]
        assert pool.refresh_failures == 1 and pool.last_refresh_error
        assert a.broken is not None and not a._scratch.exists()  # stopped, its scratch removed
        monkeypatch.undo()

        task_b = await manager.acquire(["filesystem"])
        b = task_b["filesystem"]
        assert b is not a and b.broken is None
        assert "Changed by task A" not in await _call(b, "list_directory", {"path": "/data"})
        manager.release(task_b)
    finally:
        await manager.close()
