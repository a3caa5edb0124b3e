"""The mcp-atlas catalog's sidecar images: targets, build arguments and the sidecar's run-time steps.

The images themselves are built and run on the real node (tests/cluster/test_node_mcp_atlas.py);
here: what build.sh gets for them, and the two image steps that are plain programs (the catalog's
``links``, its ``path_aliases``), run as the image runs them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from images import context

from atlasrun.servers.catalog import load_catalog

REPO = Path(__file__).resolve().parents[1]
MCP_SERVER = REPO / "images" / "mcp-server"
# MCP-Atlas's servers that start with no network or keys (tests/mcp_atlas_env.py has the same list).
OFFLINE = [
    "calculator",
    "cli-mcp-server",
    "desktop-commander",
    "filesystem",
    "git",
    "mcp-code-executor",
    "mcp-server-code-runner",
    "memory",
]


def test_every_offline_server_and_every_served_pin_has_a_target() -> None:
    targets = context.targets("mcp-atlas")
    assert {f"mcp-atlas-{s}" for s in OFFLINE} <= set(targets)
    catalog = load_catalog("mcp-atlas")
    expected = [
        f"mcp-atlas-{s.name}"
        for s in catalog.servers
        if s.transport == "stdio" and s.package and not s.package.unavailable
    ]
    assert targets == expected
    # The starter catalog's targets keep their names; an mcp-atlas server never shadows one.
    assert not set(targets) & set(context.targets())
    assert context.sidecar_entry("mcp-atlas-git")[0] == "mcp-atlas"
    assert context.sidecar_entry("mcp-git")[0] == "starter"
    with pytest.raises(context.ContextError, match="no sidecar target 'mcp-atlas-airtable'"):
        context.sidecar_entry("mcp-atlas-airtable")  # its pin is served by no registry here


def test_build_arguments_carry_the_catalog_entry() -> None:
    calculator = context.server_build_args("mcp-atlas-calculator")
    assert (calculator["SERVER_VERSION"], calculator["SERVER_EXTRA"]) == (
        "0.2.0",
        f"-c /build/wheels/{context.CONSTRAINTS}",  # the uv resolution as of the catalog's date
    )
    commander = context.server_build_args("mcp-atlas-desktop-commander")
    assert commander["SERVER_NPM_SPEC"] == f"/build/npm-cache/{context.PACKED}"
    assert json.loads(commander["SERVER_LINKS"]) == {"node_modules/@vscode/ripgrep/bin/rg": "rg"}
    assert commander["SERVER_APT_PACKAGES"] == "ripgrep"
    runner = context.server_build_args("mcp-atlas-mcp-server-code-runner")
    assert json.loads(runner["SERVER_PATH_ALIASES"]) == {"python": "python3"}
    assert runner["SERVER_NPM_SPEC"] == ""  # from the registry
    assert context.server_build_args("mcp-atlas-git")["SERVER_APT_PACKAGES"] == "git"
    executor = context.server_build_args("mcp-atlas-mcp-code-executor")
    assert executor["SERVER_BIN"] == "code execution server"


@pytest.mark.network  # uv resolves against PyPI as of the catalog's date
def test_a_dated_pin_resolves_to_what_the_host_install_resolves() -> None:
    pins = context.resolve_as_of(["mcp-server-calculator==0.2.0"], "2026-07-22T19:28:34Z")
    versions = dict(p.split("==", 1) for p in pins)
    assert versions["mcp-server-calculator"] == "0.2.0"
    assert int(versions["mcp"].split(".")[0]) == 1  # resolved today, the pin would pull mcp 2.x


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, MCP_SERVER / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_links_step_points_the_package_at_the_image_command(tmp_path: Path) -> None:
    install = tmp_path / "opt-server"
    rel = "node_modules/@vscode/ripgrep/bin/rg"
    stale = install / "lib" / "node_modules" / "@wonderwhy-er/desktop-commander" / rel
    stale.parent.mkdir(parents=True)
    stale.write_text("the download the install script could not make")
    spec = {
        "install_dir": str(install),
        "package": {"name": "@wonderwhy-er/desktop-commander"},
        "links": {rel: "sh"},
    }
    (tmp_path / "server.json").write_text(json.dumps(spec))
    env = {**os.environ, "ATLAS_SIDECAR_SPEC": str(tmp_path / "server.json")}
    proc = subprocess.run(
        [sys.executable, str(MCP_SERVER / "make_links.py")], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert stale.is_symlink() and stale.resolve() == Path(shutil.which("sh") or "").resolve()
    spec["links"] = {rel: "no-such-command-here"}
    (tmp_path / "server.json").write_text(json.dumps(spec))
    proc = subprocess.run(
        [sys.executable, str(MCP_SERVER / "make_links.py")], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1 and "no 'no-such-command-here' in the image" in proc.stderr


def test_path_aliases_come_first_on_the_servers_path(tmp_path: Path) -> None:
    sidecar = _script("sidecar")
    directory = sidecar._alias_dir({"python": "python3"}, str(tmp_path))
    alias = Path(directory) / "python"
    assert alias.is_symlink() and alias.resolve() == Path(shutil.which("python3") or "").resolve()
    out = subprocess.run(
        ["python", "-c", "import sys; print(sys.version_info[0])"],
        env={**os.environ, "PATH": directory + os.pathsep + os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "3"
    assert sidecar._alias_dir({"python": "python3"}, str(tmp_path)) == directory  # idempotent on restart
