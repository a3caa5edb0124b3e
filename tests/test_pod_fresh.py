"""Fresh state between a pod's items (cluster/pod/fresh.py): which servers are started again, the
data volume made equal to its pristine source, and a failure that names the sidecar.

The sidecars' side (the control endpoint) is tested in tests/test_sidecar_control.py; the whole
path, in pods, in tests/cluster/test_pod_fresh_state.py and on the real node.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from atlasrun.cluster.pod.fresh import FreshStateError, PodState, needs_new_process
from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.instance import free_port


def test_servers_keeping_state_in_their_process_or_running_code_are_started_again() -> None:
    catalog = load_catalog()
    chosen = {s.name for s in catalog.servers if needs_new_process(s)}
    assert {"code-runner", "cli-mcp-server"} <= chosen  # run code / commands
    assert not {"calculator", "time", "everything"} & chosen  # stateless
    assert not {"filesystem", "memory", "git"} & chosen  # reuse-with-fresh-data: data only (leak-tested)
    inline = catalog.get("memory").model_copy(update={"executes_code": True})
    assert needs_new_process(inline)  # a data-only strategy never keeps a process that may run code


def _tree(root: Path) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        found[rel] = None if path.is_dir() else path.read_bytes()
    return found


def test_the_data_volume_is_reset_to_the_source_plus_what_servers_wrote_at_start(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / "a.txt").write_text("a")
    (source / "sub" / "b.txt").write_text("b")
    data = tmp_path / "data"
    shutil.copytree(source, data)  # the seed container
    (data / "memory.jsonl").write_text("")  # a server's start-up write: part of the fresh state
    memory = load_catalog().get("memory")  # stateful, data only: nothing to respawn
    state = PodState([memory], data, source)
    try:
        state.adopt()
        fresh = _tree(data)
        (data / "a.txt").write_text("changed by item 1")
        (data / "sub" / "b.txt").unlink()
        (data / "new").mkdir()
        (data / "new" / "c.txt").write_text("added")
        (data / "memory.jsonl").write_text('{"leak": 1}')
        between = asyncio.run(state.reset())
        assert between.respawned == [] and between.data_copied >= 2
        tree = _tree(data)
        assert {k: v for k, v in tree.items() if k != "memory.jsonl"} == {
            k: v for k, v in fresh.items() if k != "memory.jsonl"
        }
        assert "memory.jsonl" not in tree  # changed: removed, and the source has none to restore
        assert asyncio.run(state.reset()).data_copied == 0  # nothing changed since: nothing copied
    finally:
        state.close()


def test_without_a_data_volume_the_pristine_data_is_empty(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    state = PodState([load_catalog().get("filesystem")], data, None)
    try:
        state.adopt()
        (data / "left-by-item-1.txt").write_text("x")
        os.symlink("/etc/passwd", data / "link")
        asyncio.run(state.reset())
        assert list(data.iterdir()) == []
    finally:
        state.close()


def test_stateless_servers_only_leave_the_data_alone(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("x")
    state = PodState([load_catalog().get("calculator")], tmp_path / "no-such-dir", None)
    try:
        state.adopt()
        assert asyncio.run(state.reset()).respawned == []
    finally:
        state.close()


def test_a_sidecar_without_a_control_endpoint_fails_the_reset_naming_it(tmp_path: Path) -> None:
    runner = load_catalog().get("code-runner").model_copy(update={"port": 9107})
    state = PodState([runner], tmp_path, None, control_ports={"code-runner": free_port()})
    try:
        state.adopt()
        with pytest.raises(FreshStateError) as failed:
            asyncio.run(state.reset())
    finally:
        state.close()
    message = str(failed.value)
    assert "sidecar 'code-runner': stop failed: no control endpoint" in message
    assert "itemsPerPod: 1" in message


def test_only_the_servers_the_last_item_could_reach_are_started_again(tmp_path: Path) -> None:
    # code-runner always needs a new process; its control endpoint here answers nothing, so a
    # reset that calls it fails: an item that could not reach it leaves it alone.
    runner = load_catalog().get("code-runner").model_copy(update={"port": 9107})
    state = PodState([runner], tmp_path, None, control_ports={"code-runner": free_port()})
    try:
        state.adopt()
        assert asyncio.run(state.reset(used={"filesystem"})).respawned == []
        with pytest.raises(FreshStateError, match="code-runner"):
            asyncio.run(state.reset(used={"filesystem", "code-runner"}))
    finally:
        state.close()
