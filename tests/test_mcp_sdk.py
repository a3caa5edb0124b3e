"""The harness imports the MCP SDK's client side only (atlasrun/servers/mcp_sdk.py), the SDK
stays whole for any other code in the process (its package ``__init__`` runs on first use), and
a server's failure still reaches the harness as a TransportError over stdio and over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.instance import ServerInstance, TransportError

# The SDK's server side and what only its package __init__ (or an HTTP server) pulls in.
SERVER_SIDE = (
    "mcp.server",
    "mcp.client.client",
    "starlette",
    "uvicorn",
    "sse_starlette",
    "httpx2",
    "cryptography",
)

PROBE = """
import json, sys
import atlasrun.runner.engine  # the harness: engine, agents, tool surface, server instances
harness = sorted(m for m in sys.modules if m.startswith(("mcp", "starlette", "uvicorn", "sse_starlette",
                                                         "httpx2", "cryptography")))
import mcp
from mcp import Client, ClientSession, StdioServerParameters
import mcp.types
from mcp.client import Client as ClientAgain
from atlasrun.servers import mcp_sdk
later = {
    "same_session_class": ClientSession is mcp_sdk.ClientSession,
    "same_tool_class": mcp.types.Tool is mcp_sdk.Tool,
    "client": Client is ClientAgain and Client.__module__,
    "server_side_now": "mcp.server" in sys.modules,
}
try:
    mcp.no_such_name
except AttributeError as exc:
    later["missing"] = str(exc)
print(json.dumps({"harness": harness, "later": later}))
"""


def run_probe() -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    return dict(json.loads(proc.stdout.splitlines()[-1]))


def test_the_harness_imports_the_client_side_only_and_the_sdk_stays_whole() -> None:
    found = run_probe()
    harness = found["harness"]
    assert isinstance(harness, list)
    assert {"mcp.client.session", "mcp.client.stdio", "mcp.shared.exceptions"} <= set(harness)
    server_side = [m for m in harness if m.startswith(SERVER_SIDE)]
    assert server_side == [], f"the harness imported {server_side[:8]}"
    # Whoever uses the package afterwards gets all of it: the deferred __init__ ran on first use.
    assert found["later"] == {
        "same_session_class": True,
        "same_tool_class": True,
        "client": "mcp.client.client",
        "server_side_now": True,
        "missing": "module 'mcp' has no attribute 'no_such_name'",
    }


def sandbox_of(command: str) -> int:
    """The pid of this process's child (the server's bwrap) whose command line runs ``command``."""
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        for child in Path(f"/proc/{os.getpid()}/task/{tid}/children").read_text().split():
            if command in Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace"):
                return int(child)
    raise AssertionError(f"no child process runs {command}")


@pytest.mark.servers
@pytest.mark.parametrize("server", ["calculator", "calculator-http"])
async def test_a_server_that_dies_gives_a_transport_error_naming_it(data_dir: Path, server: str) -> None:
    """Through the client-only SDK imports, over stdio and over streamable HTTP: a call after
    the server's sandbox was killed raises TransportError, and the instance reports itself broken."""
    instance = await ServerInstance(load_catalog().get(server), data_dir, "/data").start()
    try:
        assert await instance.call("calculate", {"expression": "6*7"}, 30) == ("42", False)
        if instance.pid is not None:  # an HTTP server: its own process group
            os.killpg(instance.pid, signal.SIGKILL)
        else:  # stdio: the sandbox under this process
            os.kill(sandbox_of("mcp-server-calculator"), signal.SIGKILL)
        with pytest.raises(TransportError, match=f"server '{server}'"):
            for _ in range(50):  # the death may be noticed by a later call (no timing asserted)
                await instance.call("calculate", {"expression": "1+1"}, 30)
                await asyncio.sleep(0.1)
        assert instance.broken and server in instance.broken
    finally:
        await instance.stop()
