"""The MCP-Atlas harness (the peer), installed and run locally for ``bench/versus.py``.

Installed from ``/work/shared/vendor/mcp-atlas-<commit>.src.tar.gz`` (or ``$ATLAS_PEER_SRC``)
into ``~/.cache/atlasrun/peer/<commit>``, never into this repository: the TS harness from its
``package-lock.json`` (``npm ci``, ``tsc``), the FastAPI agent-environment from its ``uv.lock``
(``uv sync --frozen``). It is given the server binaries AtlasRun installed (``make servers``),
so both harnesses drive the same filesystem, memory, git and calculator servers.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx

COMMIT = "5b6220c"
SOURCE = Path(os.environ.get("ATLAS_PEER_SRC", f"/work/shared/vendor/mcp-atlas-{COMMIT}.src.tar.gz"))
HOME = Path.home() / ".cache" / "atlasrun" / "peer" / COMMIT
ROOT = HOME / f"mcp-atlas-{COMMIT}" / "services"
HARNESS, ENVIRONMENT = ROOT / "agent-harness", ROOT / "agent-environment"
TOOLS = ["calculator_calculate", "filesystem_list_allowed_directories", "memory_read_graph", "git_git_status"]


def _run(args: list[str], cwd: Path, log: Path) -> None:
    with log.open("a") as out:
        done = subprocess.run(["nice", "-n", "10", *args], cwd=cwd, stdout=out, stderr=out, check=False)
    if done.returncode:
        raise RuntimeError(f"peer install step failed: {' '.join(args)} (exit {done.returncode}; log {log})")


def install() -> None:
    """Extract and build the peer once (idempotent); raises RuntimeError naming the failed step."""
    HOME.mkdir(parents=True, exist_ok=True)
    log = HOME / "install.log"
    if not ROOT.exists():
        if not SOURCE.exists():
            raise RuntimeError(f"peer source not found: {SOURCE}")
        with tarfile.open(SOURCE) as archive:
            archive.extractall(HOME, filter="data")
    if not (HARNESS / "dist" / "index.js").exists():
        _run(["npm", "ci", "--no-audit", "--no-fund"], HARNESS, log)
        _run(["npx", "tsc"], HARNESS, log)
    if not (ENVIRONMENT / ".venv" / "bin" / "uvicorn").exists():
        uv = HOME / "uvtool" / "bin" / "uv"
        if not uv.exists():
            _run([sys.executable, "-m", "venv", str(HOME / "uvtool")], HOME, log)
            _run([str(HOME / "uvtool" / "bin" / "pip"), "install", "-q", "uv"], HOME, log)
        _run([str(uv), "sync", "--frozen", "--no-dev", "--python", "python3"], ENVIRONMENT, log)


def _server_config(data: Path) -> dict[str, object]:
    from atlasrun.servers.catalog import load_catalog
    from atlasrun.servers.install import install_dir

    catalog = load_catalog()
    servers: dict[str, object] = {}
    for name in ("calculator", "filesystem", "memory", "git"):
        spec = catalog.get(name)
        rendered = spec.render({"install_dir": str(install_dir(spec)), "data_dir": str(data)})
        entry: dict[str, object] = {"command": rendered.command, "args": rendered.args, "image": "local"}
        if rendered.env:
            entry["env"] = rendered.env
        if rendered.cwd:
            entry["cwd"] = rendered.cwd
        servers[name] = entry
    return {"mcpServers": servers}


class Peer:
    """The agent-environment (uvicorn) and the harness (node) as child processes."""

    def __init__(self, api_base: str, data: Path, work: Path) -> None:
        self.api_base, self.data, self.work = api_base, data, work
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env_port, self.harness_port = _free_port(), _free_port()

    def __enter__(self) -> Peer:
        config = ENVIRONMENT / "src" / "agent_environment" / "mcp_server_config.json"
        config.write_text(json.dumps(_server_config(self.data), indent=2))
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.work)}
        log = (self.work / "peer.log").open("ab")
        self.procs.append(
            subprocess.Popen(
                [str(ENVIRONMENT / ".venv" / "bin" / "uvicorn"), "agent_environment.main:app",
                 "--host", "127.0.0.1", "--port", str(self.env_port), "--log-level", "warning"],
                cwd=ENVIRONMENT / "src",
                env={**base, "ENABLED_SERVERS": "calculator,filesystem,memory,git"},
                stdout=log, stderr=log,
            )
        )  # fmt: skip
        _wait(f"http://127.0.0.1:{self.env_port}/", self.procs[-1])
        self.procs.append(
            subprocess.Popen(
                ["node", "dist/index.js"],
                cwd=HARNESS,
                env={**base, "PORT": str(self.harness_port), "LLM_BASE_URL": self.api_base,
                     "LLM_API_KEY": "bench", "MCP_SANDBOX_URL": f"http://127.0.0.1:{self.env_port}",
                     "LOG_LEVEL": "warn"},
                stdout=log, stderr=log,
            )
        )  # fmt: skip
        _wait(f"http://127.0.0.1:{self.harness_port}/health", self.procs[-1])
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    async def run(self, n: int, concurrency: int) -> float:
        """``n`` one-call tasks at ``concurrency``; returns tasks/s (raises if one did not answer)."""
        slots = asyncio.Semaphore(concurrency)
        url = f"http://127.0.0.1:{self.harness_port}/v2/mcp_eval/run_agent"
        limits = httpx.Limits(max_connections=concurrency + 4)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:

            async def one(i: int) -> None:
                body = {
                    "model": "openai/instant",
                    "messages": [{"role": "user", "content": f"What is 2+3? ({i})"}],
                    "enabledTools": TOOLS,
                    "image": "local",
                    "task_id": f"t-{i}",
                }
                async with slots:
                    response = await client.post(url, json=body)
                if response.status_code != 200 or "The result is" not in response.text:
                    raise RuntimeError(f"peer task failed: {response.status_code} {response.text[:300]}")

            started = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))
            return n / (time.perf_counter() - started)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"peer process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"peer did not answer {url} within {timeout_s:.0f}s")
