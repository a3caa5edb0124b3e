"""Build a server package from its source at a pinned commit.

Some pins are served by no registry (MCP-Atlas pins ``@wonderwhy-er/desktop-commander@0.2.7``,
which npm never published, and ``@geobio/code_execution_server``, which is not on npm at all).
The catalog names their upstream repository and commit, and optionally a source archive of that
commit with its sha256. The source comes from:

- ``$ATLAS_SOURCE_ARCHIVES/<archive>`` when that directory holds the archive (the tests point it
  at ``shared/vendor``); its sha256 must match;
- else a shallow fetch of the commit from the upstream repository; the commit id is the check.

npm packages are then built as their authors publish them (``npm ci --ignore-scripts``, then
``npm pack``, which runs the package's own prepare/prepack build), or packed as they are when the
commit holds the build (``prebuilt``), and the packed tarball is installed; pip packages are
installed from the source tree.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

from atlasrun.errors import AtlasError
from atlasrun.servers.catalog import Package, Source

Log = Callable[[str], None]
TIMEOUT_S = 900
TAIL_LINES = 30


class InstallError(AtlasError):
    """A server's package failed to install; carries the tail of the command output."""

    def __init__(self, server: str, command: Sequence[str], detail: str) -> None:
        self.server = server
        super().__init__(f"installing server {server!r} failed: `{' '.join(command)}` {detail}")


def run_step(server: str, command: list[str], cwd: Path | None = None) -> str:
    """Run one install step; its output on success, an ``InstallError`` with its tail otherwise."""
    try:
        proc = subprocess.run(
            command,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as exc:
        raise InstallError(server, command, f"could not start: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise InstallError(server, command, f"timed out after {TIMEOUT_S}s") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-TAIL_LINES:])
        raise InstallError(server, command, f"exited {proc.returncode}:\n{tail}")
    return proc.stdout


def archives_dir() -> Path | None:
    value = os.environ.get("ATLAS_SOURCE_ARCHIVES")
    return Path(value).expanduser() if value else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _from_archive(server: str, source: Source, archive: Path, tree: Path) -> None:
    found = sha256_of(archive)
    if source.sha256 and found != source.sha256:
        raise InstallError(
            server, ["verify", str(archive)], f"sha256 {found} differs from the pinned {source.sha256}"
        )
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    entries = list(tree.iterdir())
    if len(entries) == 1 and entries[0].is_dir():  # one top-level folder: that is the tree
        inner = entries[0]
        for child in inner.iterdir():
            child.rename(tree / child.name)
        inner.rmdir()


def _from_git(server: str, source: Source, tree: Path) -> None:
    tree.mkdir()
    git = ["git", "-c", "advice.detachedHead=false", "-C", str(tree)]
    run_step(server, [*git, "init", "-q"])
    run_step(server, [*git, "fetch", "-q", "--depth", "1", source.git, source.commit])
    run_step(server, [*git, "checkout", "-q", "FETCH_HEAD"])
    head = run_step(server, [*git, "rev-parse", "HEAD"]).strip()
    if head != source.commit:
        raise InstallError(server, ["git", "fetch", source.git], f"got {head}, pinned {source.commit}")


def fetch_source(server: str, source: Source, work: Path, log: Log) -> Path:
    """The source tree of ``source`` under ``work`` (from the local archive or upstream)."""
    tree = work / "src"
    local = archives_dir()
    archive = local / source.archive if local and source.archive else None
    if archive is not None and archive.is_file():
        log(f"{server}: source from {archive}")
        _from_archive(server, source, archive, tree)
    else:
        log(f"{server}: source from {source.git} at {source.commit[:12]}")
        _from_git(server, source, tree)
    return tree


def build_from_source(server: str, pkg: Package, work: Path, log: Log) -> Path:
    """What to install for ``pkg``: the packed npm tarball, or the Python source tree."""
    assert pkg.source is not None
    tree = fetch_source(server, pkg.source, work, log)
    if pkg.manager == "pip":
        return tree
    pack = ["npm", "pack", "--pack-destination", str(work / "packed")]
    if pkg.source.prebuilt:
        pack.append("--ignore-scripts")
    elif (tree / "package-lock.json").is_file():
        run_step(server, ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=tree)
    out = work / "packed"
    out.mkdir()
    run_step(server, pack, cwd=tree)
    packed = sorted(out.glob("*.tgz"))
    if len(packed) != 1:
        raise InstallError(server, ["npm", "pack"], f"made {len(packed)} tarballs, expected 1")
    return packed[0]
