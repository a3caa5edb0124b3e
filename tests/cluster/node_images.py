"""The project's real images for the node tests, built by ``images/build.sh`` and cached by content.

No container registry serves ``FROM`` images here, so the Python base is a Debian bookworm rootfs
made by ``mmdebstrap`` (``images/build.sh base-rootfs``, ``BASE_ROOTFS``) and the Node.js stage of
npm servers is a local image holding this host's ``node`` and ``npm`` (``NODE_IMAGE``). Each image
is built once per content key (its Dockerfile, the build scripts, the sources it packages, the
bases) into an OCI archive under ``~/.cache/atlasrun/images/node/<target>/<key>.oci.tar``; the
tests push the archives to the node's registry and reference them by the pushed digest.

    PYTHONPATH=tests python -m cluster.node_images runner operator mcp-filesystem   # build what is missing
    PYTHONPATH=tests python -m cluster.node_images --check TARGET...                # exit 3 if anything is missing
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from images import archives

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "atlasrun" / "images" / "node"
# The sidecar images of the node tests (scenario 2's six starter tasks need these four servers).
SERVERS = ("filesystem", "memory", "git", "calculator")
TARGETS = ("runner", "operator", *(f"mcp-{s}" for s in SERVERS))
# overlay (not build.sh's default vfs, which copies the whole tree per layer: ~4x slower here), in
# a storage root of its own; layers uncompressed (they only travel to the node's local registry).
STORAGE = {"STORAGE_DRIVER": "overlay", "STORAGE_ROOT": str(CACHE / "storage"), "COMPRESS": "0"}
NODE_BASE = "localhost/atlasrun-base/node"


class ImagesUnavailable(RuntimeError):
    """buildah/mmdebstrap missing, or a build failed."""


def _log(message: str) -> None:
    print(f"node-images: {message}", file=sys.stderr, flush=True)


def _host_node() -> tuple[Path, Path]:
    node = shutil.which("node")
    if not node:
        raise ImagesUnavailable("no node on PATH (npm servers' images take Node.js from this host)")
    node_path = Path(node).resolve()
    npm = node_path.parent.parent / "lib" / "node_modules" / "npm"
    if not (npm / "bin" / "npm-cli.js").exists():
        raise ImagesUnavailable(f"npm not found next to {node_path} (looked in {npm})")
    return node_path, npm


def base_key() -> str:
    """The rootfs recipe: the ``base-rootfs`` branch of build.sh (mirrors, packages, options)."""
    return archives.rootfs_recipe_key()


def node_base_key() -> str:
    node, npm = _host_node()
    h = hashlib.sha256(node.read_bytes())
    h.update((npm / "package.json").read_bytes())
    return h.hexdigest()[:16]


def target_key(target: str) -> str:
    """The content key images/archives.py gives ``target`` with this module's bases."""
    return archives.content_key(target, base_key(), node_base_key())


def archive_path(target: str) -> Path:
    return CACHE / target / f"{target_key(target)}.oci.tar"


def missing(targets: Iterable[str]) -> list[str]:
    return [t for t in targets if not archive_path(t).exists()]


def _run(args: list[str], **kw: object) -> None:
    proc = subprocess.run(args, check=False, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise ImagesUnavailable(f"{' '.join(map(str, args[:4]))} ... exited {proc.returncode}")


def _base_rootfs() -> Path:
    out = CACHE / "base" / f"bookworm-python3-{base_key()}.tar"
    if out.exists():
        return out
    if not shutil.which("mmdebstrap"):
        raise ImagesUnavailable("mmdebstrap is missing (apt-get install mmdebstrap): no base rootfs")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}.tar")
    t = time.monotonic()
    _run(["nice", "-n", "10", "bash", str(IMAGES / "build.sh"), "base-rootfs", str(tmp)], stdout=sys.stderr)
    tmp.replace(out)
    _log(f"base rootfs {out.name}: {time.monotonic() - t:.0f} s")
    return out


def _node_base() -> str:
    """A local image with only /usr/local/bin/node and /usr/local/lib/node_modules/npm (what the
    sidecar Dockerfile's ``node`` stage provides), from this host's Node.js."""
    name = f"{NODE_BASE}:{node_base_key()}"
    root = STORAGE["STORAGE_ROOT"]
    bah = [
        "buildah",
        "--root",
        root,
        "--runroot",
        f"{root}.run",
        "--storage-driver",
        STORAGE["STORAGE_DRIVER"],
    ]
    if subprocess.run([*bah, "inspect", "--type", "image", name], capture_output=True).returncode == 0:
        return name
    node, npm = _host_node()
    ctr = subprocess.run([*bah, "from", "scratch"], capture_output=True, text=True, check=True).stdout.strip()
    try:
        _run([*bah, "copy", "--quiet", ctr, str(node), "/usr/local/bin/node"], stdout=subprocess.DEVNULL)
        _run(
            [*bah, "copy", "--quiet", ctr, str(npm), "/usr/local/lib/node_modules/npm"],
            stdout=subprocess.DEVNULL,
        )
        _run([*bah, "commit", "--quiet", "--timestamp", "0", ctr, name], stdout=subprocess.DEVNULL)
    finally:
        subprocess.run([*bah, "rm", ctr], capture_output=True)
    return name


def build_env(*, with_node_base: bool = True) -> dict[str, str]:
    """build.sh's environment on this machine (what ``make images`` needs here, too): the rootfs
    base, the host's Node.js as the npm stage, overlay storage, archives cached in CACHE."""
    python = REPO / ".venv" / "bin" / "python"
    env = {
        **os.environ,
        "BASE_ROOTFS": str(_base_rootfs()),
        "NODE_IMAGE": _node_base() if with_node_base else f"{NODE_BASE}:{node_base_key()}",
        "CACHE_DIR": str(CACHE / "build"),
        "ATLAS_IMAGES_CACHE": str(CACHE),
        "PYTHON": str(python if python.exists() else sys.executable),
        **STORAGE,
    }
    return env


def ensure(targets: Iterable[str] = TARGETS) -> dict[str, Path]:
    """Build (once per content key, images/archives.py) and return target -> OCI archive."""
    targets = list(targets)
    paths = {t: archive_path(t) for t in targets}  # keys taken once (see archives.ensure)
    todo = [t for t, path in paths.items() if not path.exists()]
    if todo:
        if not shutil.which("buildah"):
            raise ImagesUnavailable("buildah is missing (make node installs it)")
        t = time.monotonic()
        env = build_env(with_node_base=any(t.startswith("mcp-") for t in todo))
        try:
            paths.update(archives.ensure(todo, env))
        except archives.BuildFailed as exc:
            raise ImagesUnavailable(str(exc)) from exc
        _log(f"built {', '.join(todo)} in {time.monotonic() - t:.0f} s")
    return paths


def main(argv: list[str]) -> int:
    check = "--check" in argv
    targets = [a for a in argv if a != "--check"] or list(TARGETS)
    try:
        if check:
            gone = missing(targets)
            if gone:
                _log(f"not built yet: {' '.join(gone)}")
                return 3
            paths = {t: archive_path(t) for t in targets}
        else:
            paths = ensure(targets)
    except ImagesUnavailable as exc:
        _log(f"error: {exc}")
        return 1
    for target, path in paths.items():
        print(f"{target}={path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
