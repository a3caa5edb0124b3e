"""Build the images once per content and publish them to a registry by digest (``make images``).

Each target is built by ``images/build.sh`` into an OCI archive named by a content key (the
Dockerfile, the build scripts, what the image packages, its bases), under
``$ATLAS_IMAGES_CACHE/<target>/<key>.oci.tar`` (default ``~/.cache/atlasrun/images/archives``);
an archive already there for the same inputs is reused, not rebuilt. With ``--push REGISTRY``
each archive is copied as is to ``REGISTRY/<target>:<version>`` (``skopeo copy
--preserve-digests``: the manifest digest stays the archive's), and ``images/images.lock``
(``ATLAS_IMAGES_LOCK``) records ``REGISTRY/<target>@sha256:...``, the reference that
``images/context.py helm-values`` and ``images/context.py pin`` hand to the chart and run files.

    python -m images.archives [--push REGISTRY] [--tls-verify false] [TARGET...]
    python -m images.archives pin FILE        # FILE with the lock's digests, printed (see ``pin``)
    python -m images.archives pre-pull        # the chart's prePull values: the starter servers' images

Bases: build.sh's environment (``BASE_ROOTFS``, ``PYTHON_IMAGE``, ``NODE_IMAGE``, ``STORAGE_*``,
``COMPRESS``) is passed through; the key covers the Python base (the ``base-rootfs`` recipe
with ``BASE_ROOTFS``, else the ``PYTHON_IMAGE`` reference) and for sidecars the Node.js base
(``NODE_IMAGE``'s digest, or its tag for a local image).
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from images import context

ROOT = context.ROOT
IMAGES = context.IMAGES
DEFAULT_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "atlasrun" / "images" / "archives"
)


KEEP = 3  # archives kept per target (the newest)


class BuildFailed(RuntimeError):
    """build.sh or the push failed; the message names the target."""


def _log(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    return Path(environ.get("ATLAS_IMAGES_CACHE") or DEFAULT_CACHE)


def _hash_files(paths: Iterable[Path], h: hashlib._Hash) -> None:
    for path in sorted(paths):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")


def _sources() -> list[Path]:
    src = ROOT / "operator" / "atlasrun"
    return [p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]


def rootfs_recipe_key() -> str:
    """The ``base-rootfs`` branch of build.sh (mirrors, packages, options) as a key."""
    script = (IMAGES / "build.sh").read_text()
    start = script.index("  base-rootfs)")
    return hashlib.sha256(script[start : script.index(";;", start)].encode()).hexdigest()[:16]


def content_key(target: str, python_base: str, node_base: str) -> str:
    """Content key of one image: what build.sh reads for it, plus its bases. A sidecar's key covers
    only its own catalog entry and the project version (its tag), so most
    source or dependency changes rebuild only the runner and operator."""
    h = hashlib.sha256(target.encode())
    files = [IMAGES / "build.sh", IMAGES / "context.py"]
    if target.startswith("mcp-"):
        files += [IMAGES / "mcp-server" / n for n in ("Dockerfile", *context.SIDECAR_SCRIPTS)]
        catalog, entry = context.sidecar_entry(target)
        entries = [entry] if catalog == "starter" else []
        if catalog != "starter":
            entries.insert(0, {"catalog": catalog, **entry})
        h.update(json.dumps(entries, sort_keys=True, default=str).encode())
        version = tomllib.loads(context.PYPROJECT.read_text())["project"]["version"]
        h.update(f"{version}\0{node_base}".encode())
    else:
        files += [context.PYPROJECT, IMAGES / target / "Dockerfile", *_sources()]
    _hash_files(files, h)
    h.update(python_base.encode())
    return h.hexdigest()[:16]


def _identity(ref: str) -> str:
    """What names a base image's content: its digest, or the tag of a local (unpinned) image."""
    return ref.rsplit("@", 1)[1] if "@" in ref else ref.rsplit(":", 1)[-1]


def bases(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """(python base, node base) of the content key, from build.sh's environment."""
    locked = context.base_images()
    python = (
        rootfs_recipe_key()
        if environ.get("BASE_ROOTFS")
        else environ.get("PYTHON_IMAGE") or locked["PYTHON_IMAGE"]
    )
    return python, _identity(environ.get("NODE_IMAGE") or locked["NODE_IMAGE"])


def archive_path(target: str, environ: Mapping[str, str] = os.environ) -> Path:
    return cache_dir(environ) / target / f"{content_key(target, *bases(environ))}.oci.tar"


def missing(targets: Iterable[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    return [t for t in targets if not archive_path(t, environ).exists()]


def ensure(targets: Iterable[str], environ: Mapping[str, str] = os.environ) -> dict[str, Path]:
    """Build what is missing (build.sh, one target at a time, serialised by a lock in the cache)
    and return target -> OCI archive."""
    targets = list(targets)
    cache = cache_dir(environ)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Keys taken once, before building: sources edited during a build must not send the
        # caller to an archive that was never built.
        paths = {t: archive_path(t, environ) for t in targets}
        for target in [t for t, path in paths.items() if not path.exists()]:
            dest = paths[target]
            with tempfile.TemporaryDirectory(prefix="atlasrun-images-", dir=cache) as tmp:
                env = {**environ, "PUSH": "0", "OUT_DIR": tmp, "LOCK": str(Path(tmp) / "images.lock")}
                env.setdefault("CACHE_DIR", str(cache / "build"))
                t = time.monotonic()
                proc = subprocess.run(["bash", str(IMAGES / "build.sh"), target], env=env, stdout=sys.stderr)
                if proc.returncode != 0:
                    raise BuildFailed(f"{target}: images/build.sh exited {proc.returncode}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                # Keep a few older versions: worktrees of different commits share the cache.
                older = sorted(dest.parent.glob("*.oci.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
                for old in older[KEEP - 1 :]:
                    old.unlink()
                    old.with_suffix(".json").unlink(missing_ok=True)
                provenance = context.read_lock(Path(tmp) / "images.lock")["provenance"].get(target, {})
                dest.with_suffix(".json").write_text(json.dumps(provenance, indent=1))
                (Path(tmp) / f"{target}.oci.tar").replace(dest)
                _log(f"{target}: built in {time.monotonic() - t:.0f} s -> {dest}")
        return paths


def push(target: str, archive: Path, registry: str, *, tls_verify: bool = True) -> str:
    """Copy ``archive`` to ``registry/target:<version>`` unchanged; record and return the digest ref."""
    tag = f"{registry}/{target}:{context.atlasrun_version()}"
    with tempfile.NamedTemporaryFile("r", suffix=".digest") as digest_file:
        proc = subprocess.run(
            [
                "skopeo", "copy", "--quiet", "--preserve-digests", f"--dest-tls-verify={str(tls_verify).lower()}",
                "--digestfile", digest_file.name, f"oci-archive:{archive}", f"docker://{tag}",
            ],
            capture_output=True,
            text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            raise BuildFailed(f"{target}: skopeo copy to {tag} failed: {proc.stderr.strip()}")
        digest = digest_file.read().strip()
    ref = f"{registry}/{target}@{digest}"
    provenance_file = archive.with_suffix(".json")
    info = json.loads(provenance_file.read_text()) if provenance_file.exists() else {}
    pushed = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    info.update({"tag": tag, "published": f"{tag} at {pushed}", "archive": archive.name})
    context.lock_set(target, ref, {k: str(v) for k, v in info.items()})
    return ref


PLACEHOLDER = re.compile(r"[\w.:/-]*?(?P<target>runner|operator|mcp-[\w-]+)@sha256:REPLACE_WITH_DIGEST")
FIRST_SERVER_PORT = 9101


def pin(text: str, lock: Mapping[str, str]) -> str:
    """A manifest (YAML, several documents allowed) made ready for the cluster from the lock:
    every ``.../<target>@sha256:REPLACE_WITH_DIGEST`` becomes the lock's reference, and an
    AtlasRun's ``servers.enabled`` servers that have no ``servers.inline`` entry get one: their
    entry in the run's built-in catalog (``servers.catalog``: starter unless it names another)
    with that catalog's image (``mcp-<server>``, ``mcp-atlas-<server>``) from the lock and a port
    of its own (9101, 9102, ... in ``enabled`` order)."""

    def ref(target: str) -> str:
        if target not in lock:
            raise context.ContextError(f"{context.LOCK} has no {target}: run make images PUSH=REGISTRY first")
        return lock[target]

    docs = list(yaml.safe_load_all(PLACEHOLDER.sub(lambda m: ref(m["target"]), text)))
    from atlasrun.servers.catalog import is_builtin, load_catalog  # the runner's own view of the catalog

    for doc in docs:
        servers = (
            ((doc or {}).get("spec") or {}).get("servers") if (doc or {}).get("kind") == "AtlasRun" else None
        )
        if not servers:
            continue
        chosen = servers.get("catalog") or "starter"
        if not is_builtin(chosen) or chosen not in context.TARGET_PREFIX:
            raise context.ContextError(
                f"servers.catalog: {chosen!r} is not a built-in catalog with images "
                f"({', '.join(context.TARGET_PREFIX)}); a cluster run defines other servers in servers.inline"
            )
        catalog = load_catalog(chosen).by_name()
        inline = servers.setdefault("inline", [])
        used = {e.get("port") for e in inline}
        ports = (p for p in range(FIRST_SERVER_PORT, 65536) if p not in used)
        for name in servers.get("enabled") or []:
            if any(e.get("name") == name for e in inline):
                continue
            if name not in catalog:
                raise context.ContextError(
                    f"servers.enabled names {name!r}, which the built-in catalog {chosen!r} lacks"
                )
            entry = catalog[name].model_dump(mode="json", by_alias=True, exclude_none=True)
            image = ref(context.image_target(chosen, name))
            inline.append({**entry, "image": image, "port": next(ports)})
    return yaml.safe_dump_all(docs, sort_keys=False, width=120)


def pre_pull_values(lock: Path | None = None) -> dict[str, Any]:
    """The chart's ``prePull`` values: the starter servers' images of the lock, pulled on every node
    ahead of runs (charts/atlasrun/templates/prepull-daemonset.yaml)."""
    images = context.catalog_images(lock) if lock else context.catalog_images()
    return {"prePull": {"enabled": True, "images": sorted(images.values())}}


def main(argv: list[str]) -> int:
    if argv == ["pre-pull"]:
        print(yaml.safe_dump(pre_pull_values(), sort_keys=False), end="")
        return 0
    if argv[:1] == ["pin"]:
        if len(argv) != 2:
            print("usage: python -m images.archives pin FILE", file=sys.stderr)
            return 2
        try:
            print(pin(Path(argv[1]).read_text(), context.read_lock()["images"]), end="")
        except (OSError, context.ContextError) as exc:
            _log(f"error: {exc}")
            return 1
        return 0
    parser = argparse.ArgumentParser(prog="python -m images.archives", description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help="default: every target (images/context.py targets)")
    parser.add_argument("--push", metavar="REGISTRY", help="push to REGISTRY/<target> and lock the digests")
    parser.add_argument(
        "--tls-verify", default="true", choices=["true", "false"], help="false: plain-HTTP registry"
    )
    args = parser.parse_args(argv)
    if args.push == "1":  # the older spelling: PUSH=1 REGISTRY=...
        args.push = os.environ.get("REGISTRY") or "ghcr.io/atlasrun"
    targets = args.targets or context.targets()
    try:
        archives = ensure(targets)
        for target, archive in archives.items():
            if args.push:
                t = time.monotonic()
                ref = push(target, archive, args.push.rstrip("/"), tls_verify=args.tls_verify == "true")
                _log(f"{target}: pushed in {time.monotonic() - t:.1f} s")
                print(f"{target}={ref}")
            else:
                print(f"{target}={archive}")
    except (BuildFailed, context.ContextError) as exc:
        _log(f"error: {exc}")
        return 1
    if args.push:
        _log(f"digests recorded in {context.LOCK}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
