"""Shared fixtures: a small data root, run files, and process helpers.

Markers say what a test needs beyond this checkout (pyproject.toml lists them): ``servers``
(the offline MCP servers from ``make servers``), ``cluster`` (a real API server), ``node`` (a
real kubelet node), ``network`` (hosts beyond loopback), ``tools`` (the pinned external tools
from ``make tools chart-tools``). Unmarked tests need none of these: ``make check`` runs them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.install import install_dir

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The scripted provider is reached through litellm's real path in every test (the brief's standard);
# tests/test_provider_paths.py runs the direct path (provider.goes_direct) beside it and checks that
# both give the same requests, replies, error kinds, retries and scores.
os.environ.setdefault("ATLAS_PROVIDER", "litellm")

SUM_TASK: dict[str, Any] = {
    "id": "sum-numbers",
    "prompt": "What is the sum of the numbers listed in /data/numbers.txt?",
    "domain": "Analytics",
    "enabled_tools": ["filesystem_read_text_file", "filesystem_list_directory", "calculator_calculate"],
    "distractors": ["filesystem_list_directory"],
    "claims": ["The sum of the numbers is 42"],
    "reference_answer": "The sum of the numbers is 42.",
    "reference_trajectory": [
        {"calls": [{"name": "filesystem_read_text_file", "arguments": {"path": "/data/numbers.txt"}}]},
        {"calls": [{"name": "calculator_calculate", "arguments": {"expression": "12+30"}}]},
    ],
}


@functools.cache
def _missing_servers() -> tuple[str, ...]:
    return tuple(
        s.name for s in load_catalog().servers if s.package and not (install_dir(s) / ".installed").exists()
    )


# Fixtures that install or run a pinned external tool: a test using one (directly or through
# another fixture) is marked ``tools`` here, so no test file has to repeat it.
TOOL_FIXTURES = {"helm", "prom_tools", "kubernetes_validate", "hadolint"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if TOOL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.tools)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``servers`` need every offline MCP server installed; the others need none."""
    if item.get_closest_marker("servers") and (missing := _missing_servers()):
        pytest.exit(
            f"MCP servers not installed: {', '.join(missing)}; run `make servers` (make test does)", 2
        )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    (root / "numbers.txt").write_text("12\n30\n")
    (root / "notes.md").write_text("# Notes\nThe launch code name is BLUEBIRD.\n")
    return root


def write_tasks(path: Path, tasks: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False))
    return path


def write_run(path: Path, tasks_file: Path, models: list[dict[str, Any]], **spec: Any) -> Path:
    body: dict[str, Any] = {"tasks": {"path": str(tasks_file)}, "models": models}
    body.update(spec)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "atlasrun.dev/v1alpha1",
                "kind": "AtlasRun",
                "metadata": {"name": path.stem},
                "spec": body,
            },
            sort_keys=False,
        )
    )
    return path


def child_pids(match: str) -> list[int]:
    """PIDs of this process's children whose command line contains ``match``."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and match in cmdline:
            found.append(int(entry.name))
    return found


def kill_children(match: str) -> int:
    """SIGKILL each matching child and everything under it (under bwrap the server is a
    grandchild that would otherwise outlive the kill by a moment and answer one more call)."""
    pids = child_pids(match)
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, frontier = list(pids), list(pids)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree += children
        frontier += children
    for pid in reversed(tree):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)
