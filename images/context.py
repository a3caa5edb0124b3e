"""Build contexts for the AtlasRun images, prepared on the host (images/build.sh drives this).

Every Python package an image installs comes from ``<context>/wheels`` (``pip install
--no-index --find-links``) and every npm package from ``<context>/npm-cache`` (``npm install
--offline``), so the image build itself needs no package registry. This module fills those
directories while the registries are reachable (``pip download`` for the target platform,
CPython 3.11 on Debian bookworm's glibc 2.36, x86_64 by default), and writes the build
arguments of each image to ``<context>/build-args`` (``KEY=VALUE`` lines, one ``--build-arg``
each).

Targets: ``runner``, ``operator`` and ``mcp-<server>`` for every stdio server of
operator/atlasrun/servers/catalog.yaml (the catalog pins each package's version), plus
``mcp-atlas-<server>`` for the servers of the built-in ``mcp-atlas`` catalog
(catalog-mcp-atlas.yaml) that a registry package provides. Usage::

    python images/context.py targets                  # the default target list
    python images/context.py targets mcp-atlas        # the mcp-atlas catalog's sidecar targets
    python images/context.py prepare TARGET DIR       # a complete build context
    python images/context.py wheels DIR REQ...        # only the wheel download step
    python images/context.py runner-requirements      # what the runner image installs of atlasrun[cluster]
    python images/context.py lock-set NAME REF [KEY=VALUE...]   # record a digest in images.lock
    python images/context.py helm-values              # chart values (operator, runner) from images.lock
    python images/context.py catalog-images           # `image:` per catalog server from images.lock
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "images"
CATALOG = ROOT / "operator" / "atlasrun" / "servers" / "catalog.yaml"
# Built-in catalogs with sidecar images, by the target prefix of their servers' images
# (the same names as atlasrun.servers.catalog.BUILTIN_CATALOGS; tests/test_images.py checks).
CATALOGS = {"mcp-atlas": CATALOG.with_name("catalog-mcp-atlas.yaml"), "starter": CATALOG}
TARGET_PREFIX = {"starter": "mcp-", "mcp-atlas": "mcp-atlas-"}
PYPROJECT = ROOT / "pyproject.toml"
LOCK = Path(os.environ.get("ATLAS_IMAGES_LOCK", IMAGES / "images.lock"))
BASE_LOCK = IMAGES / "base-digests.lock"

# The images' Python: CPython 3.11 on Debian bookworm (glibc 2.36).
PYTHON_VERSION = "3.11"
ABI = "cp311"
GLIBC_MINOR = 36
ARCH = os.environ.get("ATLAS_IMAGE_ARCH", "x86_64")
# The sidecar image's own scripts (images/mcp-server/): copied into its build context, in its key.
SIDECAR_SCRIPTS = ("sidecar.py", "bridge.py", "control.py", "generations.py", "procs.py", "make_links.py")


class ContextError(RuntimeError):
    pass


def _run(cmd: list[str], **kw: Any) -> None:
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise ContextError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}"
        )


# ---------------------------------------------------------------- Python wheels


def platform_args(arch: str = ARCH) -> list[str]:
    """``pip download`` flags selecting wheels that install on the images' CPython 3.11 /
    glibc 2.36. pip < 24 does not expand ``manylinux_2_36`` to older glibc tags, so each
    manylinux tag is listed."""
    plats = [f"manylinux_2_{minor}_{arch}" for minor in range(GLIBC_MINOR, 16, -1)]
    if arch in ("x86_64", "i686"):
        plats += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    args = ["--only-binary=:all:", "--implementation", "cp", "--python-version", PYTHON_VERSION, "--abi", ABI]
    for plat in plats:
        args += ["--platform", plat]
    return args


def download_wheels(dest: Path, requirements: list[str], *, find_links: tuple[Path, ...] = ()) -> list[Path]:
    """``pip download`` every requirement and its dependencies into ``dest`` as wheels for the
    image platform. Sdist-only packages fail here (name and all), not inside the image build."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "-d",
        str(dest),
        *platform_args(),
    ]
    for link in find_links:
        cmd += ["--find-links", str(link)]
    _run([*cmd, *requirements])
    return sorted(dest.glob("*.whl"))


# atlasrun[cluster]'s dependencies the runner image leaves out, and why: the in-pod runner never
# imports them (tests/test_run_task.py runs `atlas run-task` with them unimportable). They are half
# the image, and the runner image is the first a pod pulls (its seed-data init container).
RUNNER_LEAVES_OUT = {
    "pyarrow": "parquet task files are read by the CLI and the operator; a pod reads the pinned JSON",
    "uv": "installs servers on a host; a pod's servers are images",
    "kopf": "the operator",
    "kubernetes": "the operator and `atlas pull`",
    "prometheus-client": "the operator's metrics",
}


def requirement_name(requirement: str) -> str:
    """The distribution a requirement names, normalized (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ContextError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def runner_requirements() -> list[str]:
    """What the runner image installs besides atlasrun itself: ``atlasrun[cluster]``'s
    requirements (pyproject.toml) without ``RUNNER_LEAVES_OUT``."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    every = [*project["dependencies"], *project["optional-dependencies"]["cluster"]]
    return [r for r in every if requirement_name(r) not in RUNNER_LEAVES_OUT]


def atlasrun_version() -> str:
    return tomllib.loads(PYPROJECT.read_text())["project"]["version"]


def build_atlasrun_wheel(dest: Path) -> Path:
    """Build the atlasrun wheel from a copy of the sources (never writes into the repo)."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    with tempfile.TemporaryDirectory(prefix="atlasrun-src-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        shutil.copy2(PYPROJECT, src / "pyproject.toml")
        for extra in ("README.md", "LICENSE"):
            if (ROOT / extra).exists():
                shutil.copy2(ROOT / extra, src / extra)
        shutil.copytree(ROOT / "operator", src / "operator", ignore=ignore)
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--disable-pip-version-check",
                "--no-input",
                "--no-deps",
                "-w",
                str(dest),
                str(src),
            ]
        )
    wheels = sorted(dest.glob(f"atlasrun-{atlasrun_version()}-*.whl"))
    if not wheels:
        raise ContextError(f"pip wheel built no atlasrun-{atlasrun_version()} wheel in {dest}")
    return wheels[-1]


# ---------------------------------------------------------------- the catalog


def load_catalog(name: str = "starter") -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = yaml.safe_load(CATALOGS[name].read_text())["servers"]
    return entries


def sidecar_servers(catalog: str = "starter") -> list[dict[str, Any]]:
    """Catalog entries that get a sidecar image: stdio servers with a package a registry serves or
    that is built from its pinned source (a pin no registry serves has no image)."""
    return [
        e
        for e in load_catalog(catalog)
        if e.get("transport", "stdio") == "stdio" and e.get("package") and not e["package"].get("unavailable")
    ]


def image_target(catalog: str, server: str) -> str:
    """The image target of a catalog's server: ``mcp-<server>`` (starter), ``mcp-atlas-<server>``."""
    return TARGET_PREFIX[catalog] + server


def sidecar_entry(target: str) -> tuple[str, dict[str, Any]]:
    """(catalog name, entry) of a sidecar target; the longest prefix wins (``mcp-atlas-``)."""
    for catalog, prefix in sorted(TARGET_PREFIX.items(), key=lambda kv: -len(kv[1])):
        if target.startswith(prefix):
            entries = {e["name"]: e for e in sidecar_servers(catalog)}
            if target.removeprefix(prefix) in entries:
                return catalog, entries[target.removeprefix(prefix)]
    known = [image_target(c, e["name"]) for c in TARGET_PREFIX for e in sidecar_servers(c)]
    raise ContextError(f"no sidecar target {target!r}; known: {', '.join(sorted(known))}")


# Debian packages a server needs at run time beyond the Python base (name -> apt packages).
# These come from the Debian mirror during the build (the one non-offline step).
SYSTEM_PACKAGES = {"git": ["git"]}
# Debian packages providing the commands a catalog entry's ``links`` point at.
LINK_PACKAGES = {"rg": "ripgrep"}
# A package built from source travels in the npm cache folder (/build/npm-cache in the build).
PACKED = "server-package.tgz"
# Where a pip server's resolution pins (``exclude_newer``) travel into the build: the wheels
# folder is copied to /build/wheels, and SERVER_EXTRA passes them to pip as constraints.
CONSTRAINTS = "server-constraints.txt"


def server_build_args(target: str) -> dict[str, str]:
    """The build args of a sidecar target (``mcp-<server>`` or ``mcp-atlas-<server>``); a bare
    server name means the starter catalog's ``mcp-<server>``."""
    if not target.startswith("mcp-"):
        target = image_target("starter", target)
    _, entry = sidecar_entry(target)
    name, pkg = entry["name"], entry["package"]
    command = entry.get("command") or ""
    binary = pkg.get("bin") or Path(command).name or pkg["name"].rsplit("/", 1)[-1]
    extra = list(pkg.get("extra", []))
    if pkg.get("exclude_newer"):
        extra += ["-c", f"/build/wheels/{CONSTRAINTS}"]
    return {
        "SERVER_NAME": name,
        "SERVER_MANAGER": pkg["manager"],
        "SERVER_PACKAGE": pkg["name"],
        "SERVER_VERSION": str(pkg["version"]),
        "SERVER_BIN": binary,
        "SERVER_EXTRA": " ".join(extra),
        "SERVER_ARGS": json.dumps(entry.get("args", [])),
        "SERVER_CWD": entry.get("cwd") or "{data_dir}",
        "SERVER_APT_PACKAGES": " ".join(
            [*SYSTEM_PACKAGES.get(name, []), *(LINK_PACKAGES[c] for c in pkg.get("links", {}).values())]
        ),
        "SERVER_NPM_SPEC": f"/build/npm-cache/{PACKED}" if pkg.get("source") else "",
        "SERVER_LINKS": json.dumps(pkg.get("links", {})),
        "SERVER_PATH_ALIASES": json.dumps(entry.get("path_aliases", {})),
    }


def resolve_as_of(requirements: list[str], exclude_newer: str) -> list[str]:
    """``requirements`` and their whole dependency tree pinned (``name==version``) as the registry
    stood at ``exclude_newer``, for the images' platform: uv's resolver, as ``atlas servers
    install`` resolves the same package on the host (``uv --exclude-newer``)."""
    from uv import find_uv_bin

    proc = subprocess.run(
        [
            str(find_uv_bin()),
            "pip",
            "compile",
            "-",
            "--quiet",
            "--no-header",
            "--no-annotate",
            "--exclude-newer",
            exclude_newer,
            "--python-version",
            PYTHON_VERSION,
            "--python-platform",
            f"{ARCH}-manylinux_2_{GLIBC_MINOR}",
        ],
        input="\n".join(requirements) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ContextError(
            f"uv pip compile {' '.join(requirements)} (as of {exclude_newer}): {proc.stderr[-4000:]}"
        )
    return [line.strip() for line in proc.stdout.splitlines() if line.strip() and not line.startswith("#")]


# ---------------------------------------------------------------- contexts


def targets(catalog: str = "starter") -> list[str]:
    """Every target of the starter catalog (the default), or a built-in catalog's sidecar targets."""
    sidecars = [image_target(catalog, e["name"]) for e in sidecar_servers(catalog)]
    return ["runner", "operator", *sidecars] if catalog == "starter" else sidecars


def dockerfile(target: str) -> Path:
    kind = "mcp-server" if target.startswith("mcp-") else target
    path = IMAGES / kind / "Dockerfile"
    if not path.exists():
        raise ContextError(f"unknown target {target!r}; known: {', '.join(targets())}")
    return path


def _packed_from_source(entry: dict[str, Any], dest: Path) -> Path:
    """The entry's npm package built from its pinned source (``atlas servers install``'s own
    build: the source archive in ``$ATLAS_SOURCE_ARCHIVES`` checked by sha256, else the commit
    fetched upstream), packed to ``dest``."""
    from atlasrun.errors import AtlasError
    from atlasrun.servers.catalog import Package
    from atlasrun.servers.source import build_from_source

    with tempfile.TemporaryDirectory(prefix="atlasrun-source-") as work:
        try:
            packed = build_from_source(
                entry["name"], Package.model_validate(entry["package"]), Path(work), print
            )
        except AtlasError as exc:
            raise ContextError(str(exc)) from exc
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(packed, dest)
    return dest


def _npm_cache(dest: Path, package: str, version: str) -> None:
    """Fill an npm cache with ``package@version`` (``version`` empty: ``package`` is a packed
    tarball) and its dependency tree (tarballs and metadata), so ``npm install --offline --cache
    <dest>`` works inside the build."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="atlasrun-npm-") as tmp:
        _run(
            [
                "npm",
                "install",
                "--global",
                "--prefix",
                tmp,
                "--cache",
                str(dest),
                "--no-audit",
                "--no-fund",
                "--no-update-notifier",
                "--ignore-scripts",
                f"{package}@{version}" if version else package,
            ]
        )


def prepare(target: str, ctx: Path) -> dict[str, str]:
    """A complete build context for ``target`` in ``ctx``; returns the build args."""
    dockerfile(target)  # validates the target
    if ctx.exists():
        shutil.rmtree(ctx)
    wheels, npm = ctx / "wheels", ctx / "npm-cache"
    wheels.mkdir(parents=True)
    npm.mkdir()
    (npm / ".keep").touch()  # COPY needs the directory to exist even when empty
    if target == "runner":
        build_atlasrun_wheel(wheels)
        requirements = runner_requirements()
        download_wheels(wheels, requirements)
        (wheels / "runner-requirements.txt").write_text("".join(f"{r}\n" for r in requirements))
        args = {"ATLASRUN_VERSION": atlasrun_version(), "LEFT_OUT": " ".join(sorted(RUNNER_LEAVES_OUT))}
    elif target == "operator":
        wheel = build_atlasrun_wheel(wheels)
        download_wheels(wheels, [f"{wheel}[cluster]"])
        args = {"ATLASRUN_VERSION": atlasrun_version()}
    else:
        args = server_build_args(target)
        _, entry = sidecar_entry(target)
        if args["SERVER_MANAGER"] == "pip":
            wanted = [
                f"{args['SERVER_PACKAGE']}=={args['SERVER_VERSION']}",
                *entry["package"].get("extra", []),
            ]
            if as_of := entry["package"].get("exclude_newer"):
                pins = resolve_as_of(wanted, as_of)
                (wheels / CONSTRAINTS).write_text("".join(f"{p}\n" for p in pins))
                download_wheels(wheels, ["--no-deps", *pins])
            else:
                download_wheels(wheels, wanted)
        elif entry["package"].get("source"):
            _npm_cache(npm, str(_packed_from_source(entry, npm / PACKED)), "")
        else:
            _npm_cache(npm, args["SERVER_PACKAGE"], args["SERVER_VERSION"])
        for script in SIDECAR_SCRIPTS:
            shutil.copy2(IMAGES / "mcp-server" / script, ctx / script)
    (ctx / "build-args").write_text("".join(f"{k}={v}\n" for k, v in args.items()))
    (ctx / "wheels.txt").write_text("".join(f"{w.name}\n" for w in sorted(wheels.glob("*.whl"))))
    return args


# ---------------------------------------------------------------- lock files


def base_images() -> dict[str, str]:
    """images/base-digests.lock: ``ARG_NAME=ref@sha256:...`` lines (comments allowed)."""
    refs = {}
    for line in BASE_LOCK.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            refs[key.strip()] = value.strip()
    return refs


LOCK_HEADER = """\
# Image digests written by images/build.sh: name -> image@sha256. Consumers pin from here:
# the catalog's `image:` for each server (mcp-<server>), the operator's ATLAS_RUNNER_IMAGE /
# chart values for runner and operator. `provenance` says how each digest was produced.
"""


def read_lock(path: Path = LOCK) -> dict[str, Any]:
    if not path.exists():
        return {"images": {}, "provenance": {}}
    data = yaml.safe_load(path.read_text()) or {}
    return {"images": data.get("images") or {}, "provenance": data.get("provenance") or {}}


def lock_set(name: str, ref: str, info: dict[str, str], path: Path = LOCK) -> None:
    data = read_lock(path)
    data["images"][name] = ref
    data["provenance"][name] = info
    data = {
        "images": dict(sorted(data["images"].items())),
        "provenance": dict(sorted(data["provenance"].items())),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(LOCK_HEADER + yaml.safe_dump(data, sort_keys=False, width=200))
    tmp.replace(path)


def _split(ref: str) -> tuple[str, str]:
    repository, _, digest = ref.partition("@")
    return repository, digest


def helm_values(path: Path = LOCK) -> dict[str, Any]:
    """Values for charts/atlasrun from the lock: ``image`` (operator) and ``runnerImage``."""
    images = read_lock(path)["images"]
    values: dict[str, Any] = {}
    for key, name in (("image", "operator"), ("runnerImage", "runner")):
        if name in images:
            repository, digest = _split(images[name])
            values[key] = {"repository": repository, "digest": digest}
    return values


def catalog_images(path: Path = LOCK) -> dict[str, str]:
    """Server name -> pinned image, for the catalog's ``image:`` fields."""
    return {
        name.removeprefix("mcp-"): ref
        for name, ref in read_lock(path)["images"].items()
        if name.startswith("mcp-") and not name.startswith(TARGET_PREFIX["mcp-atlas"])
    }


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "targets" and len(rest) <= 1:
            if rest and rest[0] not in TARGET_PREFIX:
                raise ContextError(f"no built-in catalog {rest[0]!r}; known: {', '.join(TARGET_PREFIX)}")
            print("\n".join(targets(*rest)))
        elif cmd == "dockerfile" and len(rest) == 1:
            print(dockerfile(rest[0]))
        elif cmd == "prepare" and len(rest) == 2:
            prepare(rest[0], Path(rest[1]))
        elif cmd == "wheels" and len(rest) >= 2:
            for wheel in download_wheels(Path(rest[0]), rest[1:]):
                print(wheel.name)
        elif cmd == "runner-requirements":
            print("\n".join(runner_requirements()))
        elif cmd == "base-images":
            print("".join(f"{k}={v}\n" for k, v in base_images().items()), end="")
        elif cmd == "helm-values":
            print(yaml.safe_dump(helm_values(), sort_keys=False), end="")
        elif cmd == "catalog-images":
            print(yaml.safe_dump(catalog_images(), sort_keys=True), end="")
        elif cmd == "lock-set" and len(rest) >= 2:
            info = dict(kv.split("=", 1) for kv in rest[2:])
            lock_set(rest[0], rest[1], info)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except ContextError as exc:
        print(f"images/context.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
