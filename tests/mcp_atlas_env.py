"""MCP-Atlas's own agent-environment (vendored commit 5b6220c), built once and run in bubblewrap.

The reference side of the ``mcp-atlas`` catalog's parity tests: the FastAPI app of
``services/agent-environment`` runs unmodified (its template, ``main.py``, ``mcp_client.py``)
with the 8 servers that work offline, so a test can send it the same ``/call-tool`` bodies as
MCP-Atlas's harness and compare with AtlasRun. Never copied into this repository::

    .venv/bin/python tests/mcp_atlas_env.py build     # idempotent; cold ~1.5 min here (downloads)

``build()`` fills ``~/.cache/atlasrun/mcp-atlas-env/5b6220c/`` (``$ATLASRUN_MCP_ATLAS_ENV_HOME``
overrides the parent) under a lock; ``.built`` is written last. Every step runs inside a bwrap
sandbox laid out like the Docker image, so paths baked in at install time (venv ``activate``
scripts, uv tool shebangs) are the ones seen at run time:

- ``/agent-environment``: the service, ``uv sync --frozen --no-dev`` on Python 3.12 (from this
  machine; never downloaded), ``mcp_server_config.json`` = its entrypoint's ``envsubst`` of the
  template with no API keys set. Its ``data/`` and ``dev_scripts/`` are removed, as in the image.
- ``/data``: the service's ``data/`` plus ``uv sync`` of ``repos/mcp_code_executor_workspace``.
  The git submodule clones are skipped (no GitHub here): ``NOTES.txt`` in the cache says so.
- npm packages installed globally into ``/opt/mcp-atlas/npm-global`` (the ``prefix`` in
  ``~/.npmrc``), uv tools into ``/root/.local`` (uv's default tool dir for HOME=/root), at
  MCP-Atlas's pins, resolved as of the commit's date (npm ``--before``, uv ``--exclude-newer``:
  resolved today, the uvx pins pull ``mcp`` 2.x and fail). The template's commands stay as they
  are: ``uvx pkg==ver`` reuses the installed tool; ``npx pkg@ver`` finds the package in
  ``/agent-environment/node_modules`` (links to the global installs; see ``_link_npx_tree``). At
  run time ``~/.npmrc`` and ``~/.config/uv/uv.toml`` say ``offline``: a missing pin fails at
  start-up instead of downloading.
- desktop-commander 0.2.7 and @geobio/code_execution_server (both absent from npm) are packed from
  their vendored sources. Two departures, both recorded in ``NOTES.txt``: the code-execution
  package says 0.2.0 and is packed as 0.2.1 (the template's pin) so ``npx`` finds it; ripgrep
  (``@vscode/ripgrep`` downloads it from GitHub at install) is Debian's ``rg`` 13.0.0, the upstream
  version that package's v13.0.0-10 build carries.

``running(servers, data_dir)`` starts uvicorn inside a fresh sandbox: host network (its port on
127.0.0.1), ``data_dir`` bound at ``/data``, a fresh HOME at ``/root``, everything else read-only,
``--die-with-parent``; on exit the whole PID namespace is gone. ``fresh_data(tmp_path)`` gives
the per-test copy of ``/data``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from atlasrun.servers.instance import free_port

COMMIT = "5b6220c"
COMMIT_DATE = "2026-07-22T19:28:34Z"  # the commit's date: what its unpinned dependencies resolve to
# shared/ lies beside the checkout (here and in CI); $ATLASRUN_VENDOR_DIR overrides.
_BESIDE = Path(__file__).resolve().parents[2] / "shared" / "vendor"
VENDOR = Path(
    os.environ.get("ATLASRUN_VENDOR_DIR")
    or os.environ.get("ATLAS_SOURCE_ARCHIVES")
    or (_BESIDE if _BESIDE.is_dir() else "/work/shared/vendor")
)
SOURCES = {
    "mcp-atlas": VENDOR / f"mcp-atlas-{COMMIT}.src.tar.gz",
    "desktop-commander": VENDOR / "desktop-commander-v0.2.7.src.tar.gz",
    "code-executor": VENDOR / "mcp_code_executor-a584f76.src.tar.gz",
}
CACHE_DIR = (
    Path(os.environ.get("ATLASRUN_MCP_ATLAS_ENV_HOME", Path.home() / ".cache" / "atlasrun" / "mcp-atlas-env"))
    / COMMIT
)
STAMP = CACHE_DIR / ".built"
REQUIRE_ENV = "ATLASRUN_REQUIRE_MCP_ATLAS_ENV"

# The servers of MCP-Atlas's template that start with no network and no API key.
OFFLINE_SERVERS = (
    "filesystem", "memory", "git", "calculator", "cli-mcp-server",
    "desktop-commander", "mcp-server-code-runner", "mcp-code-executor",
)  # fmt: skip
# npm pin -> the --before date its dependencies resolve at: the commit's date, except where this
# registry dates the pin itself later (mcp-server-code-runner 0.1.7: 2026-08-22T18:44:36.527Z).
NPM_PINS = {
    "@modelcontextprotocol/server-filesystem@2026.7.10": COMMIT_DATE,
    "@modelcontextprotocol/server-memory@2025.8.4": COMMIT_DATE,
    "mcp-server-code-runner@0.1.7": "2026-08-22T18:44:37Z",
}
UV_TOOL_PINS = ("mcp-server-git==2026.7.10", "mcp-server-calculator==0.2.0", "cli-mcp-server==0.2.5")
CODE_EXECUTOR_PIN = "0.2.1"  # the template's @geobio/code_execution_server@0.2.1

# Paths inside the sandbox (the image's layout; the npm prefix is ours: the image used /usr).
APP, DATA, ROOT_HOME = "/agent-environment", "/data", "/root"
NPM_PREFIX, TOOL_BIN, BUILD_DIR = "/opt/mcp-atlas/npm-global", "/opt/mcp-atlas/bin", "/opt/mcp-atlas/build"
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the image's
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
STEP_TIMEOUT_S = 1800
LOG_TAIL_LINES = 40
SERVER_GRACE_S = 10.0  # once the app answers, how long a server may still be reported offline


class MCPAtlasEnvError(RuntimeError):
    """The environment cannot be built or started; the message says which step and why."""


def _app_dir() -> Path:
    return CACHE_DIR / "agent-environment"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The log's last ``lines`` before our first poll (a server's start-up error is there; the
    polls only repeat "Failed to get tools from server")."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    before_polls = text.split('"GET /enabled-servers', 1)[0]
    return "\n".join(before_polls.splitlines()[-lines:])


@functools.cache
def find_python312() -> Path:
    """A local CPython 3.12 (``uv python find``, then pyenv and system paths); never downloads."""
    uv = find_uv()
    # pyenv's shims answer "command not found" for versions not selected: keep them off uv's PATH.
    path = ":".join(p for p in os.environ.get("PATH", "").split(":") if "/.pyenv/shims" not in p)
    env = {**os.environ, "PATH": path, "UV_PYTHON_DOWNLOADS": "never"}
    found = subprocess.run(
        [str(uv), "python", "find", "--system", "3.12"], capture_output=True, text=True, env=env, check=False
    )
    candidates = [Path(found.stdout.strip())] if found.returncode == 0 and found.stdout.strip() else []
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(pyenv_root.glob("versions/3.12*/bin/python3.12"), reverse=True)
    candidates += [Path("/usr/local/bin/python3.12"), Path("/usr/bin/python3.12")]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.resolve()
    raise MCPAtlasEnvError("no Python 3.12 here (uv python find 3.12, pyenv versions, /usr/bin/python3.12)")


def _sandbox_path() -> str:
    """PATH inside: our tools, the npm and uv tool bins, then Python 3.12's bin before the system's
    (the image's ``python3`` is 3.12: uvx only reuses a tool installed for the default Python)."""
    python_bin = _python_prefix(find_python312()) / "bin"
    return f"{TOOL_BIN}:{NPM_PREFIX}/bin:{ROOT_HOME}/.local/bin:{python_bin}:" + _SYSTEM_PATH


@functools.cache
def _python_prefix(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return Path(out.stdout.strip())


def find_uv() -> Path:
    """The project's pinned uv (``.venv/bin/uv``, beside this interpreter), else uv on PATH."""
    beside = Path(sys.executable).parent / "uv"
    chosen = beside if beside.is_file() else (Path(w) if (w := shutil.which("uv")) else None)
    if chosen is None or not (chosen.parent / "uvx").is_file():
        raise MCPAtlasEnvError("uv (with uvx beside it) not found: install the project venv (make venv)")
    return chosen


def unavailable_reason() -> str | None:
    """None when this machine can build and run the environment, else why it cannot."""
    from atlasrun.servers.sandbox import Sandbox  # bwrap discovery and probe, shared with the runner

    if reason := Sandbox().unavailable:
        return reason
    for tool in ("node", "npm", "npx", "rg"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH (Debian: nodejs/npm 20+, ripgrep)"
    missing = [str(p) for p in SOURCES.values() if not p.is_file()]
    if missing:
        return f"vendored sources missing: {', '.join(missing)}"
    try:
        find_uv(), find_python312()
    except MCPAtlasEnvError as exc:
        return str(exc)
    return None


def _sandbox_argv(home: Path, data: Path, *, building: bool) -> list[str]:
    """bwrap options for the image's layout: writable HOME and /data; the rest read-only unless
    ``building``. The host network is shared (builds download; the app serves on 127.0.0.1)."""
    # The runner's read-only system binds (/usr, the /bin and /lib links, /proc, /dev, a tmpfs /tmp).
    from atlasrun.servers.sandbox import find_bwrap, system_binds

    bwrap = find_bwrap()
    if bwrap is None:
        raise MCPAtlasEnvError("bwrap not found (Debian package bubblewrap; make sandbox-deps)")
    uv = find_uv()
    python_prefix = str(_python_prefix(find_python312()))
    rw = "--bind" if building else "--ro-bind"
    argv = [
        bwrap,
        "--unshare-all",
        "--share-net",
        "--die-with-parent",
        *system_binds(),
        "--ro-bind",
        "/etc",
        "/etc",
    ]
    argv += ["--bind", str(home), ROOT_HOME, "--ro-bind", python_prefix, python_prefix]
    if not building:
        # uvx writes a temp file and a lock into the tool dir itself: that dir is the fresh HOME's,
        # each installed tool and the bin dir in it are the build's, read-only.
        local = CACHE_DIR / "home" / ".local"
        tools = sorted(p.name for p in (local / "share" / "uv" / "tools").iterdir() if p.is_dir())
        for sub in ["bin", *(f"share/uv/tools/{name}" for name in tools)]:
            argv += ["--ro-bind", str(local / sub), f"{ROOT_HOME}/.local/{sub}"]
    argv += [
        rw,
        str(CACHE_DIR / "npm-global"),
        NPM_PREFIX,
        rw,
        str(_app_dir()),
        APP,
        "--bind",
        str(data),
        DATA,
    ]
    argv += ["--ro-bind", str(uv), f"{TOOL_BIN}/uv", "--ro-bind", str(uv.parent / "uvx"), f"{TOOL_BIN}/uvx"]
    if building:
        argv += ["--bind", str(CACHE_DIR / "build"), BUILD_DIR]
    return argv


def _write_user_config(home: Path, *, offline: bool) -> None:
    """~/.npmrc and ~/.config/uv/uv.toml: the npm prefix; offline at run time (no downloads)."""
    npmrc = [
        f"prefix={NPM_PREFIX}",
        f"cafile={CA_BUNDLE}",
        "update-notifier=false",
        "fund=false",
        "audit=false",
    ]
    (home / ".npmrc").write_text("\n".join([*npmrc, *(["offline=true"] if offline else [])]) + "\n")
    (home / ".config" / "uv").mkdir(parents=True, exist_ok=True)
    uv_toml = 'python-downloads = "never"\n'
    if offline:
        # uvx reuses an installed tool only when these match the options in its uv-receipt.toml
        # (else it resolves anew); offline, a mismatch fails instead of downloading.
        uv_toml += f'offline = true\nexclude-newer = "{COMMIT_DATE}"\nlink-mode = "copy"\n'
    (home / ".config" / "uv" / "uv.toml").write_text(uv_toml)


def _build_step(name: str, command: Sequence[str], cwd: str, log: Path, **extra_env: str) -> None:
    """Run ``command`` in the build sandbox at ``cwd``; raise naming the step with the log's tail."""
    env = {"PATH": _sandbox_path(), "HOME": ROOT_HOME, "LANG": "C.UTF-8", "SSL_CERT_FILE": CA_BUNDLE,
           "NODE_EXTRA_CA_CERTS": CA_BUNDLE, "UV_PYTHON_DOWNLOADS": "never", "UV_LINK_MODE": "copy",
           **extra_env}  # fmt: skip
    argv = [
        *_sandbox_argv(CACHE_DIR / "home", CACHE_DIR / "data", building=True),
        "--chdir",
        cwd,
        "--",
        *command,
    ]
    with log.open("a") as out:
        out.write(f"\n=== {name}: {' '.join(command)} (in {cwd})\n")
        out.flush()
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  timeout=STEP_TIMEOUT_S, check=False)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise MCPAtlasEnvError(
                f"build step {name!r} timed out after {STEP_TIMEOUT_S}s; log {log}"
            ) from exc
    if done.returncode != 0:
        raise MCPAtlasEnvError(
            f"build step {name!r} failed (exit {done.returncode}): {' '.join(command)}\n"
            f"log {log}, tail:\n{_tail(log)}"
        )


def envsubst(text: str, env: dict[str, str]) -> str:
    """GNU envsubst: ``$NAME`` and ``${NAME}`` become the variable's value, empty when unset."""
    pattern = r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))"
    return re.sub(pattern, lambda m: env.get(m.group(1) or m.group(2), ""), text)


def _extract(archive: Path, into: Path) -> Path:
    """Extract a source tarball whose members share one top folder; return that folder."""
    with tarfile.open(archive) as tar:
        tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        tar.extractall(into, filter="data")
    if len(tops) != 1:
        raise MCPAtlasEnvError(f"{archive}: expected one top-level folder, found {sorted(tops)}")
    return into / tops.pop()


def _prepare_sources() -> None:
    """The service at agent-environment/, /data's template at data/, the two npm sources in build/."""
    src = _extract(SOURCES["mcp-atlas"], CACHE_DIR / "build") / "services" / "agent-environment"
    shutil.copytree(src / "data", CACHE_DIR / "data", symlinks=True)
    shutil.copytree(src, _app_dir(), symlinks=True, ignore=shutil.ignore_patterns("data", "dev_scripts"))
    package = _app_dir() / "src" / "agent_environment"
    # entrypoint.sh: `envsubst < mcp_server_template.json > mcp_server_config.json`, no API keys set.
    template = (package / "mcp_server_template.json").read_text()
    (package / "mcp_server_config.json").write_text(envsubst(template, {}))
    for name in ("desktop-commander", "code-executor"):
        (CACHE_DIR / "build" / name).symlink_to(_extract(SOURCES[name], CACHE_DIR / "build").name)


NOTES = f"""MCP-Atlas agent-environment {COMMIT}, built by tests/mcp_atlas_env.py

Differences from the Docker image (services/agent-environment/Dockerfile):
- The git submodule clones of /data/repos/git_submodule_info.csv are skipped (no GitHub here):
  /data/repos holds only memory_mcp_server and mcp_code_executor_workspace.
- Only the 8 offline servers' packages are installed: {", ".join(OFFLINE_SERVERS)}.
- npm packages are installed globally into {NPM_PREFIX} (image: /usr) with the host's npm, resolved
  --before {COMMIT_DATE} (mcp-server-code-runner: {NPM_PINS["mcp-server-code-runner@0.1.7"]}, this
  registry dates 0.1.7 after the commit; the code executor: no --before, its only import is its exact
  @modelcontextprotocol/sdk 0.6.0). uv tools and the code-executor workspace: --exclude-newer
  {COMMIT_DATE} (the image resolved them on its build day).
- /agent-environment/node_modules links to those installs: `npx name@version` finds a package there
  without the registry manifest it otherwise fetches first (the registry lacks two of them).
- ~/.npmrc and ~/.config/uv/uv.toml in each run's fresh HOME say offline (uv.toml also repeats the
  tools' install options, which uvx must match to reuse them).
- @geobio/code_execution_server is packed from commit a584f76 (package.json 0.2.0) as 0.2.1, the
  template's pin.
- desktop-commander 0.2.7 is packed from its v0.2.7 source; @vscode/ripgrep's binary (downloaded
  from GitHub by its install script) is Debian's rg 13.0.0 (upstream version of v13.0.0-10).
- uvicorn runs as `.venv/bin/python -m uvicorn agent_environment.main:app` (image: `uv run python -m
  uvicorn ...`) from a read-only /agent-environment (bytecode compiled at build), on 127.0.0.1 and a
  free port (image: 0.0.0.0:1984), inside bubblewrap.
- Python 3.12 is this machine's ({{python}}), first on PATH as the image's
  /usr/local/bin/python3 is.
"""


def _build_into_home() -> None:
    log = CACHE_DIR / "build.log"
    for name in ("home", "npm-global", "build"):
        (CACHE_DIR / name).mkdir(parents=True, exist_ok=True)
    _write_user_config(CACHE_DIR / "home", offline=False)
    _prepare_sources()
    python = str(find_python312())
    workspace = f"{DATA}/repos/mcp_code_executor_workspace"
    before = ["--exclude-newer", COMMIT_DATE]
    _build_step(
        "agent-environment venv",
        ["uv", "sync", "--frozen", "--no-dev", "--compile-bytecode", "--python", python],
        APP,
        log,
    )
    _build_step("code-executor workspace", ["uv", "sync", "--python", python, *before], workspace, log)
    for pin in UV_TOOL_PINS:
        _build_step(
            f"uv tool {pin}", ["uv", "tool", "install", "--python", python, *before, pin], ROOT_HOME, log
        )
    npm_global = ["npm", "install", "--global", "--no-audit", "--no-fund", "--before"]
    for pin, date in NPM_PINS.items():
        _build_step(f"npm {pin}", [*npm_global, date, pin], ROOT_HOME, log)
    desktop, executor = f"{BUILD_DIR}/desktop-commander", f"{BUILD_DIR}/code-executor"
    # Its install script would download ripgrep from GitHub: skipped here, Debian's rg put in place.
    _build_step(
        "desktop-commander deps", ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], desktop, log
    )
    _build_step("desktop-commander pack", ["npm", "pack", "--pack-destination", BUILD_DIR], desktop, log)
    tarball = f"{BUILD_DIR}/wonderwhy-er-desktop-commander-0.2.7.tgz"
    _build_step(
        "desktop-commander install", [*npm_global, COMMIT_DATE, "--ignore-scripts", tarball], ROOT_HOME, log
    )
    _build_step("code-executor version", ["npm", "pkg", "set", f"version={CODE_EXECUTOR_PIN}"], executor, log)
    _build_step("code-executor pack", ["npm", "pack", "--ignore-scripts", "--pack-destination", BUILD_DIR],
                executor, log)  # fmt: skip
    tarball = f"{BUILD_DIR}/geobio-code_execution_server-{CODE_EXECUTOR_PIN}.tgz"
    # No --before: this registry dates every mcp-framework ^0.1.12 after the commit. It is not
    # imported anyway; the server runs on its exact pin @modelcontextprotocol/sdk 0.6.0.
    _build_step("code-executor install", [*npm_global[:-1], tarball], ROOT_HOME, log)
    installed = CACHE_DIR / "npm-global" / "lib" / "node_modules" / "@wonderwhy-er" / "desktop-commander"
    ripgreps = list(installed.glob("**/node_modules/@vscode/ripgrep"))
    if len(ripgreps) != 1:
        raise MCPAtlasEnvError(f"expected one @vscode/ripgrep under {installed}, found {ripgreps}")
    (ripgreps[0] / "bin").mkdir(exist_ok=True)
    shutil.copy2(shutil.which("rg") or "rg", ripgreps[0] / "bin" / "rg")
    _link_npx_tree()
    (CACHE_DIR / "NOTES.txt").write_text(NOTES.replace("{python}", python))


def _link_npx_tree() -> None:
    """``/agent-environment/node_modules``: links to the global installs and their bins.

    ``npx name@version`` looks for the package in its cwd's tree (the servers' cwd is the app's,
    the image's WORKDIR) and, when it is missing there, fetches its registry manifest before it
    looks at global installs. The registry has neither desktop-commander 0.2.7 nor
    @geobio/code_execution_server, and runs are offline: found in this tree, each package runs
    from its own isolated global install with no registry access."""
    modules = CACHE_DIR / "npm-global" / "lib" / "node_modules"
    tree = _app_dir() / "node_modules"
    (tree / ".bin").mkdir(parents=True)
    packages = [p for p in modules.iterdir() if not p.name.startswith("@")]
    packages += [p for scope in modules.glob("@*") for p in scope.iterdir()]
    for package in packages:
        relative = package.relative_to(modules)
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        (tree / relative).symlink_to(f"{NPM_PREFIX}/lib/node_modules/{relative}")
    for binary in (CACHE_DIR / "npm-global" / "bin").iterdir():
        (tree / ".bin" / binary.name).symlink_to(f"{NPM_PREFIX}/bin/{os.readlink(binary)}")


def build() -> Path:
    """Build the environment once under ``CACHE_DIR`` (idempotent, safe against concurrent builders);
    return ``CACHE_DIR``. Raises ``MCPAtlasEnvError`` naming the failed step."""
    if STAMP.is_file():
        return CACHE_DIR
    if reason := unavailable_reason():
        raise MCPAtlasEnvError(f"cannot build MCP-Atlas's agent-environment here: {reason}")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR.parent / f".{COMMIT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if STAMP.is_file():
            return CACHE_DIR
        started = time.monotonic()
        # Leftovers of an interrupted build go; the download caches (in home/) stay.
        for name in ("agent-environment", "data", "npm-global", "build", "home/.local", "NOTES.txt"):
            path = CACHE_DIR / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        _build_into_home()
        seconds = round(time.monotonic() - started, 1)
        pending = CACHE_DIR / ".built.tmp"
        pending.write_text(json.dumps({"commit": COMMIT, "build_seconds": seconds}) + "\n")
        pending.replace(STAMP)
    return CACHE_DIR


def build_seconds() -> float | None:
    """How long the cold build that made the cache took (None if not built)."""
    try:
        return float(json.loads(STAMP.read_text())["build_seconds"])
    except (OSError, ValueError, KeyError):
        return None


def fresh_data(tmp_path: Path) -> Path:
    """A private copy of the built ``/data`` under ``tmp_path`` (servers write into it)."""
    if not STAMP.is_file():
        raise MCPAtlasEnvError(f"MCP-Atlas's environment is not built ({STAMP} missing): call build()")
    target = tmp_path / "mcp-atlas-data"
    shutil.copytree(CACHE_DIR / "data", target, symlinks=True)
    return target


def template_servers() -> list[str]:
    """The server names of MCP-Atlas's ``mcp_server_template.json`` (36 at 5b6220c)."""
    template = _app_dir() / "src" / "agent_environment" / "mcp_server_template.json"
    return list(json.loads(template.read_text())["mcpServers"])


@dataclass
class AgentEnv:
    """A running agent-environment: its URL, process, log and PID namespace."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    pid_namespace: str = ""
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=120)

    def list_tools(self) -> list[dict[str, Any]]:
        """POST /list-tools, as MCP-Atlas's harness lists them (no body)."""
        response = self.client.post("/list-tools")
        response.raise_for_status()
        tools: list[dict[str, Any]] = response.json()
        return tools

    def call_tool(self, name: str, arguments: dict[str, Any]) -> tuple[int, Any]:
        """POST /call-tool with the harness's exact body; (HTTP status, JSON body)."""
        response = self.client.post("/call-tool", json={"tool_name": name, "tool_args": arguments})
        return response.status_code, response.json()

    def enabled_servers(self) -> dict[str, Any]:
        """GET /enabled-servers: ``servers`` [[name, "OK" | "ERROR_NOT_ONLINE"]], counts."""
        response = self.client.get("/enabled-servers")
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def sandbox_pids(self) -> list[int]:
        """Host PIDs of every process in this environment's PID namespace (empty once stopped)."""
        return _pids_in_namespace(self.pid_namespace)


def _pids_in_namespace(namespace: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "pid") == namespace:
                    pids.append(int(entry.name))
    return pids


def _namespace_of_child(bwrap_pid: int, deadline: float) -> str:
    """The PID namespace bwrap made (its first child's), read as soon as that child exists."""
    mine = os.readlink("/proc/self/ns/pid")
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()
            for child in children:
                namespace = os.readlink(f"/proc/{child}/ns/pid")
                if namespace != mine:
                    return namespace
        time.sleep(0.02)
    raise MCPAtlasEnvError(f"bwrap (pid {bwrap_pid}) made no PID namespace")


def _wait_ready(env: AgentEnv, servers: Sequence[str], deadline: float) -> None:
    """Until /enabled-servers reports every server OK; raise with the log's tail otherwise.

    The app answers only after its start-up listed every server's tools; a server that failed
    there stays ERROR_NOT_ONLINE (the app runs on without it), so a short grace is enough."""
    last, answered = "no answer yet", None
    while time.monotonic() < deadline:
        if env.process.poll() is not None:
            raise MCPAtlasEnvError(
                f"agent-environment exited with {env.process.returncode} before it was up; "
                f"log {env.log_path}, tail:\n{_tail(env.log_path)}"
            )
        try:
            status = env.enabled_servers()
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            states = dict(status["servers"])
            if set(states) == set(servers) and all(s == "OK" for s in states.values()):
                return
            answered = answered or time.monotonic()
            last = f"servers {states}"
            if time.monotonic() - answered > SERVER_GRACE_S:
                break
        time.sleep(0.25)
    raise MCPAtlasEnvError(
        f"agent-environment not up with {list(servers)} ({last}); log {env.log_path}, "
        f"tail:\n{_tail(env.log_path)}"
    )


def _stop(process: subprocess.Popen[bytes], namespace: str) -> None:
    """SIGTERM bwrap's process group, SIGKILL after 10 s; wait until its PID namespace is empty."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
            break
    deadline = time.monotonic() + 10
    # --die-with-parent kills the namespace's PID 1 with bwrap; the kernel then kills the rest.
    while namespace and _pids_in_namespace(namespace) and time.monotonic() < deadline:
        time.sleep(0.05)


@contextlib.contextmanager
def running(enabled_servers: Sequence[str], data_dir: Path, *, timeout_s: float = 240) -> Iterator[AgentEnv]:
    """MCP-Atlas's agent-environment with ``ENABLED_SERVERS`` = ``enabled_servers`` and
    ``data_dir`` (use ``fresh_data``) bound at ``/data``; stopped, PID namespace and all, on exit."""
    if not STAMP.is_file():
        raise MCPAtlasEnvError(f"MCP-Atlas's environment is not built ({STAMP} missing): call build()")
    known = template_servers()
    unknown = sorted(set(enabled_servers) - set(known))
    if unknown or not enabled_servers:
        raise MCPAtlasEnvError(
            f"enabled_servers must name servers of MCP-Atlas's template (got {list(enabled_servers)}, "
            f"unknown {unknown}); it has {sorted(known)}"
        )
    with tempfile.TemporaryDirectory(prefix="mcp-atlas-env-") as scratch:
        home = Path(scratch) / "root"  # a fresh HOME: desktop-commander keeps its config there
        home.mkdir()
        _write_user_config(home, offline=True)
        log_path = Path(scratch) / "agent-environment.log"
        port = free_port()
        command = [f"{APP}/.venv/bin/python", "-m", "uvicorn", "agent_environment.main:app",
                   "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        argv = [*_sandbox_argv(home, data_dir.resolve(), building=False), "--chdir", APP, "--", *command]
        # Only what the image's process has (PATH, HOME, LANG) and the server list; the MCP SDK
        # passes HOME and PATH (and LOGNAME, SHELL, TERM, USER: unset here) on to each server.
        env = {
            "PATH": _sandbox_path(),
            "HOME": ROOT_HOME,
            "LANG": "C.UTF-8",
            "ENABLED_SERVERS": ",".join(enabled_servers),
        }
        with log_path.open("wb") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, start_new_session=True)  # fmt: skip
        agent = AgentEnv(f"http://127.0.0.1:{port}", process, log_path)
        try:
            deadline = time.monotonic() + timeout_s
            agent.pid_namespace = _namespace_of_child(process.pid, deadline)
            _wait_ready(agent, enabled_servers, deadline)
            yield agent
        finally:
            agent.client.close()
            _stop(process, agent.pid_namespace)


@pytest.fixture(scope="session")
def mcp_atlas_home() -> Path:
    """The built environment (built on first use; ``make test`` builds it beforehand). Skips where
    it cannot work here, fails instead under ``ATLASRUN_REQUIRE_MCP_ATLAS_ENV=1``."""
    if reason := unavailable_reason():
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"MCP-Atlas's agent-environment cannot run here ({REQUIRE_ENV}=1): {reason}")
        pytest.skip(f"MCP-Atlas's agent-environment cannot run here: {reason}")
    try:
        return build()
    except MCPAtlasEnvError as exc:
        pytest.fail(str(exc))


def _main(argv: Sequence[str]) -> int:
    if list(argv) != ["build"]:
        print(f"usage: {sys.argv[0]} build", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        home = build()
    except MCPAtlasEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"MCP-Atlas agent-environment {COMMIT} ready at {home} ({time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


# desktop-commander's get_config holds a random id drawn at install and usage counters with times:
# they differ between any two starts of the server, on either side.
CONFIG_NOISE = re.compile(r'"clientId": "[0-9a-f-]+"|"usageStats": \{.*?\n  \}', re.S)


def without_config_noise(text: str) -> str:
    return CONFIG_NOISE.sub("<masked>", text)
