"""MCP-Atlas's ``/data``: the data root its public tasks were written against.

Built as MCP-Atlas's agent-environment Dockerfile builds it (scaleapi/mcp-atlas 5b6220c,
``services/agent-environment/Dockerfile``):

1. a copy of ``services/agent-environment/data`` from the MCP-Atlas source at the pinned commit
   (a local archive in ``$ATLAS_SOURCE_ARCHIVES`` checked by sha256, else a fetch of the commit);
2. the repositories listed in ``repos/git_submodule_info.csv`` cloned at their recorded commits,
   where the network allows (each one that cannot be cloned is listed as missing);
3. the code executor's workspace environment: ``uv sync`` of
   ``repos/mcp_code_executor_workspace`` (pandas, numpy, scipy), from the lock committed beside
   this module (resolved as of MCP-Atlas's commit date). The venv is relocatable: servers see it
   at ``/data/...`` while it lives elsewhere on the host.

The ``mcp-atlas`` catalog's servers see the result at ``/data`` (``mount_data``).
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from atlasrun.errors import InputError
from atlasrun.servers.catalog import Source
from atlasrun.servers.source import fetch_source, run_step

Log = Callable[[str], None]

# The MCP-Atlas commit the mcp-atlas catalog pins (its template, its data, its lock).
MCP_ATLAS_SOURCE = Source(
    git="https://github.com/scaleapi/mcp-atlas",
    commit="5b6220c64d55072d4ab6c028fa4aba063da9901b",
    archive="mcp-atlas-5b6220c.src.tar.gz",
    sha256="fe6f641c91418d8fe2ca1bf248da24190e83eb3c666ef63336d3dbdeb2bf5e06",
)
DATA_IN_SOURCE = Path("services/agent-environment/data")
WORKSPACE = Path("repos/mcp_code_executor_workspace")
SUBMODULES = Path("repos/git_submodule_info.csv")
LOCK = Path(__file__).with_name("mcp_atlas_data") / "code-executor-workspace.uv.lock"
CLONE_TIMEOUT_S = 120


@dataclass
class Built:
    root: Path
    missing: list[str] = field(default_factory=list)


def _python() -> str:
    """An interpreter every sandboxed server can see (under /usr) when it is new enough."""
    system = Path("/usr/bin/python3")
    if system.exists():
        probe = subprocess.run(
            [str(system), "-c", "import sys; print(sys.version_info >= (3, 11))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.stdout.strip() == "True":
            return str(system)
    return sys.executable


def _clone(url: str, commit: str, target: Path) -> str | None:
    """Clone ``url`` at ``commit`` into ``target``; None, or why it could not."""
    git = ["git", "-c", "advice.detachedHead=false"]
    try:
        target.mkdir(parents=True)
        for step in (
            ["init", "-q"],
            ["fetch", "-q", "--depth", "1", url, commit],
            ["checkout", "-q", "FETCH_HEAD"],
        ):
            subprocess.run(
                [*git, "-C", str(target), *step],
                capture_output=True,
                text=True,
                timeout=CLONE_TIMEOUT_S,
                check=True,
            )
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(target, ignore_errors=True)
        return (exc.stderr or "").strip().splitlines()[-1:][0] if exc.stderr else f"exit {exc.returncode}"
    except subprocess.TimeoutExpired:
        shutil.rmtree(target, ignore_errors=True)
        return f"timed out after {CLONE_TIMEOUT_S}s"
    return None


def _repos(root: Path, log: Log) -> list[str]:
    """Clone the repositories the data's submodule list names; the ones that failed, with why."""
    missing: list[str] = []
    listing = root / SUBMODULES
    if not listing.is_file():
        return missing
    with open(listing, newline="", encoding="utf-8") as handle:
        for row in csv.reader(handle):
            if len(row) != 3:
                continue
            url, commit, path = (cell.strip() for cell in row)
            rel = path.removeprefix("/data/")
            log(f"cloning {url} at {commit[:12]} into {rel}")
            why = _clone(url, commit, root / rel)
            if why:
                missing.append(f"{rel}: {url} at {commit[:12]} could not be cloned ({why})")
    return missing


def _workspace_env(root: Path, log: Log) -> None:
    workspace = root / WORKSPACE
    from uv import find_uv_bin

    uv = str(find_uv_bin())
    shutil.copyfile(LOCK, workspace / "uv.lock")
    log(f"creating the code executor's environment in {WORKSPACE}/.venv (uv sync)")
    run_step(
        "mcp-atlas /data", [uv, "venv", "--quiet", "--relocatable", "--python", _python(), ".venv"], workspace
    )
    run_step(
        "mcp-atlas /data", [uv, "sync", "--quiet", "--frozen", "--python", ".venv/bin/python"], workspace
    )


def create_mcp_atlas_workspace(target: Path, log: Log = print) -> Built:
    """Build MCP-Atlas's ``/data`` at ``target`` (which must not exist or be empty)."""
    target = target.resolve()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError("exists and is not an empty directory", where=str(target))
    with tempfile.TemporaryDirectory(prefix="atlas-mcp-atlas-") as work:
        tree = fetch_source("mcp-atlas /data", MCP_ATLAS_SOURCE, Path(work), log)
        data = tree / DATA_IN_SOURCE
        if not data.is_dir():
            raise InputError(f"the MCP-Atlas source has no {DATA_IN_SOURCE}", where=str(tree))
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.rmdir()
        shutil.copytree(data, target, symlinks=True)
    built = Built(target)
    built.missing = _repos(target, log)
    _workspace_env(target, log)
    return built
