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
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from atlasrun.errors import AtlasError, InputError
from atlasrun.servers.catalog import Catalog, Package, ServerSpec, load_catalog
from atlasrun.servers.source import InstallError, build_from_source, run_step

Log = Callable[[str], None]

STAMP = ".installed"


def servers_root() -> Path:
    env = os.environ.get("ATLAS_SERVERS_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "atlasrun" / "servers"


def _package(spec: ServerSpec) -> Package:
    if spec.package is None:
        raise InputError(f"server {spec.name!r} has no package to install", where="servers")
    return spec.package


def install_dir(spec: ServerSpec) -> Path:
    pkg = _package(spec)
    fields: list[object] = [pkg.manager, pkg.name, pkg.version, pkg.extra]
    if pkg.exclude_newer or pkg.source:  # older pins keep their directory (and their cache)
        fields += [pkg.exclude_newer, pkg.source.model_dump(exclude_defaults=True) if pkg.source else None]
    if pkg.links:
        fields.append(pkg.links)
    key = json.dumps(fields)
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return servers_root() / f"{spec.name}-{pkg.version}-{digest}"


def is_installed(spec: ServerSpec) -> bool:
    return spec.package is not None and (install_dir(spec) / STAMP).is_file()


def _commands(pkg: Package, target: Path, source: Path | None = None) -> list[list[str]]:
    """The commands installing ``pkg`` into ``target`` (from ``source``, a built package or
    source tree, when the package is built from source)."""
    if pkg.manager == "npm":
        npm = ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(target)]
        return [[*npm, str(source) if source else f"{pkg.name}@{pkg.version}"]]
    requirement = str(source) if source else f"{pkg.name}=={pkg.version}"
    if pkg.exclude_newer or source:
        # uv resolves as of the pin's date: today's resolution of an old pin can pull an
        # incompatible dependency (e.g. mcp 2.x for servers written against mcp 1.x).
        uv = _uv()
        dated = ["--exclude-newer", pkg.exclude_newer] if pkg.exclude_newer else []
        venv = [uv, "venv", "--quiet", "--python", sys.executable, str(target)]
        pip = [uv, "pip", "install", "--quiet", "--python", str(target / "bin" / "python"), *dated]
        return [venv, [*pip, requirement, *pkg.extra]]
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    venv = [sys.executable, "-m", "venv", str(target)]
    return [venv, [*pip, "--no-input", requirement, *pkg.extra]]


def _uv() -> str:
    from uv import find_uv_bin  # the pinned uv wheel (pyproject.toml)

    return str(find_uv_bin())


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
            if pkg.source is not None:
                with tempfile.TemporaryDirectory(prefix=f"atlas-build-{spec.name}-") as work:
                    built = build_from_source(spec.name, pkg, Path(work), log)
                    for command in _commands(pkg, target, built):
                        run_step(spec.name, command)
            else:
                for command in _commands(pkg, target):
                    run_step(spec.name, command)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        _link_missing(spec.name, pkg, target, log)
        pending = target / f"{STAMP}.tmp"
        pending.write_text(json.dumps(pkg.model_dump()) + "\n")
        pending.replace(target / STAMP)
    log(f"{spec.name}: installed")
    return target


def _link_missing(server: str, pkg: Package, target: Path, log: Log) -> None:
    for rel, command in pkg.links.items():
        path = target / rel
        if path.exists():
            continue
        found = shutil.which(command)
        if found is None:
            raise InstallError(
                server, ["which", command], f"found nothing to provide {rel} (install {command})"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(found)
        log(f"{server}: {rel} -> {found} (its install script downloads it; not reachable)")


def install_all(catalog: Catalog, names: Sequence[str] | None = None, log: Log = print) -> dict[str, Path]:
    """Install the named servers (default: every catalog entry that has a package)."""
    specs = [catalog.get(n) for n in names] if names else catalog.servers
    done: dict[str, Path] = {}
    failed: list[InstallError] = []
    for spec in specs:
        if spec.package is None:
            log(f"{spec.name}: no package, nothing to install")
            continue
        try:
            done[spec.name] = install(spec, log)
        except InstallError as exc:  # the others still install; every failure is reported
            log(f"{spec.name}: FAILED: {exc}")
            failed.append(exc)
    if len(failed) == 1:
        raise failed[0]
    if failed:
        raise AtlasError(
            f"{len(failed)} server(s) failed to install: {', '.join(e.server for e in failed)} (reasons above)"
        )
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
