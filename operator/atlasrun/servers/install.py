"""Install each catalog server's pinned package into its own directory, idempotently.

npm packages go to ``DIR/node_modules`` (bin: ``DIR/node_modules/.bin/<bin>``); pip
packages get their own venv at ``DIR`` (bin: ``DIR/bin/<bin>``), so servers that need
``mcp<2`` never meet AtlasRun's own ``mcp`` 2.x. ``DIR`` is keyed by the pin, so
changing a version or extra installs afresh beside the old one.

A directory counts as installed only once ``DIR/.installed`` exists; that stamp is
written last, by rename. The package is built in place rather than in a temp dir
renamed at the end because a venv is not relocatable (console scripts carry the
venv's absolute path in their shebang). A directory without a stamp is an interrupted
install: it is wiped and rebuilt. A per-directory lock keeps concurrent installers
from building the same directory at once.

Run ``python -m atlasrun.servers.install [names...]`` to install (all by default).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from atlasrun.errors import AtlasError, InputError
from atlasrun.servers.catalog import Catalog, Package, ServerSpec, load_catalog

Log = Callable[[str], None]

STAMP = ".installed"
TIMEOUT_S = 900
TAIL_LINES = 30


class InstallError(AtlasError):
    """A server's package failed to install; carries the tail of the command output."""

    def __init__(self, server: str, command: Sequence[str], detail: str) -> None:
        self.server = server
        super().__init__(f"installing server {server!r} failed: `{' '.join(command)}` {detail}")


def servers_root() -> Path:
    env = os.environ.get("ATLAS_SERVERS_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "atlasrun" / "servers"


def _package(spec: ServerSpec) -> Package:
    if spec.package is None:
        raise InputError(f"server {spec.name!r} has no package to install", where="servers")
    return spec.package


def install_dir(spec: ServerSpec) -> Path:
    pkg = _package(spec)
    key = json.dumps([pkg.manager, pkg.name, pkg.version, pkg.extra])
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return servers_root() / f"{spec.name}-{pkg.version}-{digest}"


def is_installed(spec: ServerSpec) -> bool:
    return spec.package is not None and (install_dir(spec) / STAMP).is_file()


def _commands(pkg: Package, target: Path) -> list[list[str]]:
    if pkg.manager == "npm":
        npm = ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(target)]
        return [[*npm, f"{pkg.name}@{pkg.version}"]]
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    venv = [sys.executable, "-m", "venv", str(target)]
    return [venv, [*pip, "--no-input", f"{pkg.name}=={pkg.version}", *pkg.extra]]


def _run(server: str, command: list[str]) -> None:
    try:
        proc = subprocess.run(
            command,
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


@contextmanager
def _locked(target: Path) -> Iterator[None]:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def install(spec: ServerSpec, log: Log = print) -> Path:
    """Install ``spec``'s pinned package (once) and return its install dir."""
    pkg = _package(spec)
    target = install_dir(spec)
    with _locked(target):
        if (target / STAMP).is_file():
            log(f"{spec.name}: already installed at {target}")
            return target
        log(f"{spec.name}: installing {pkg.manager} {pkg.name} {pkg.version} into {target}")
        shutil.rmtree(target, ignore_errors=True)  # leftovers of an interrupted install
        target.mkdir(parents=True)
        try:
            for command in _commands(pkg, target):
                _run(spec.name, command)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        pending = target / f"{STAMP}.tmp"
        pending.write_text(json.dumps(pkg.model_dump()) + "\n")
        pending.replace(target / STAMP)
    log(f"{spec.name}: installed")
    return target


def install_all(catalog: Catalog, names: Sequence[str] | None = None, log: Log = print) -> dict[str, Path]:
    """Install the named servers (default: every catalog entry that has a package)."""
    specs = [catalog.get(n) for n in names] if names else catalog.servers
    done: dict[str, Path] = {}
    for spec in specs:
        if spec.package is None:
            log(f"{spec.name}: no package, nothing to install")
            continue
        done[spec.name] = install(spec, log)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m atlasrun.servers.install",
        description="Install the pinned packages of MCP servers in the catalog.",
    )
    parser.add_argument("names", nargs="*", help="servers to install (default: all)")
    parser.add_argument("--catalog", help="catalog YAML (default: the built-in one)")
    args = parser.parse_args(argv)
    try:
        install_all(load_catalog(args.catalog), args.names or None)
    except AtlasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
