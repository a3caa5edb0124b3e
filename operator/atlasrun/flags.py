"""Command-line flags that lower layers name in their error messages.

Kept free of imports so that building the ``atlas`` parser stays cheap.
"""

UNSAFE_FLAG = "--unsafe-host-exec"
UNSAFE_HELP = (
    "where bubblewrap is missing, let every local server (not only code runners) run unconfined on "
    "this host, with the runner's user and files and without resource limits"
)
CATALOG_HELP = (
    "the server catalog: a built-in one by name (starter, the default; mcp-atlas: MCP-Atlas's 36 "
    "servers under its names and pins) or a catalog file"
)
