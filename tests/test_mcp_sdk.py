"""The harness imports the MCP SDK's client side only (atlasrun/servers/mcp_sdk.py), and the SDK
stays whole for any other code in the process: its package ``__init__`` runs on first use."""

from __future__ import annotations

import json
import subprocess
import sys

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
