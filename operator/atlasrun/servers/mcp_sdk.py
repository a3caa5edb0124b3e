"""The MCP SDK's client side, imported without the SDK's package-level imports of everything.

The ``mcp`` package's ``__init__`` imports its server side too (starlette, uvicorn, sse,
cryptography, the httpx2 transports, ...), and so does ``mcp.client``'s (the high-level
``Client``, caching, auth): importing ``mcp.client.stdio`` the usual way costs the harness
about 15 MB of resident memory and ~300 modules it never uses. ``defer_package_init`` puts
those two packages in ``sys.modules`` with their ``__init__`` not yet run, so their submodules
(the client session, the stdio transport, the exceptions) import alone. Nothing else in the
process sees a difference: the first attribute asked of such a package that is not one of its
already imported submodules (``from mcp import Client``, ``mcp.types``) runs its real
``__init__`` then, once.

Import the SDK's client names from here, never from ``mcp`` directly, so the deferral comes
first. Import the streamable-HTTP transport (``mcp.client.streamable_http``) only where an HTTP
server needs it, after this module.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from typing import Any

_init_lock = threading.RLock()


def defer_package_init(name: str) -> None:
    """Register package ``name`` whose ``__init__`` runs on first use of a name it defines.

    No-op if ``name`` is already imported (its ``__init__`` ran, or was deferred, already).
    The parent package, if any, must be imported (or deferred) first.
    """
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"cannot defer the __init__ of {name!r}: not an importable package")
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def run_init(attr: str) -> Any:
        with _init_lock:
            if "__getattr__" in module.__dict__:  # not yet run (by another thread, or re-entered)
                del module.__dict__["__getattr__"]
                loader.exec_module(module)
        return module.__dict__[attr] if attr in module.__dict__ else _missing(name, attr)

    module.__dict__["__getattr__"] = run_init
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _missing(package: str, attr: str) -> Any:
    raise AttributeError(f"module {package!r} has no attribute {attr!r}")


defer_package_init("mcp")
defer_package_init("mcp.client")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types import CONNECTION_CLOSED, PaginatedRequestParams, Tool  # noqa: E402

__all__ = [
    "CONNECTION_CLOSED",
    "ClientSession",
    "MCPError",
    "PaginatedRequestParams",
    "StdioServerParameters",
    "Tool",
    "defer_package_init",
    "stdio_client",
]
