"""The tool-name convention, in one place: a tool is exposed as ``{server}_{tool}``.

Server names use hyphens, never underscores, so the first underscore splits a
qualified name unambiguously (``cli-mcp-server_run_command`` -> server
``cli-mcp-server``, tool ``run_command``).
"""

from __future__ import annotations

import re

from atlasrun.errors import InputError

SERVER_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")

# Names found in older MCP-Atlas task rows, mapped as the MCP-Atlas harness and EvalScope map them
# (agent-environment TOOL_NAME_MAPPINGS): the server part was spelled differently then.
LEGACY_TOOL_NAMES = {
    "brave_brave_web_search": "brave-search_brave_web_search",
}
LEGACY_SERVER_NAMES = {"MongoDB": "mongodb"}  # MongoDB_find -> mongodb_find, for every MongoDB tool


def canonical(name: str) -> str:
    """The current ``{server}_{tool}`` spelling of a tool name (legacy spellings mapped)."""
    if name in LEGACY_TOOL_NAMES:
        return LEGACY_TOOL_NAMES[name]
    server, sep, tool = name.partition("_")
    if sep and server in LEGACY_SERVER_NAMES:
        return f"{LEGACY_SERVER_NAMES[server]}_{tool}"
    return name


def validate_server_name(name: str) -> None:
    if not SERVER_NAME.match(name):
        raise InputError(
            f"server name {name!r} must be lowercase letters, digits and hyphens (no underscores)",
            where="server name",
        )


def qualify(server: str, tool: str) -> str:
    return f"{server}_{tool}"


def split(qualified: str) -> tuple[str, str]:
    """Split ``server_tool`` into (server, tool); raises ValueError if there is no server part."""
    server, sep, tool = qualified.partition("_")
    if not sep or not server or not tool or not SERVER_NAME.match(server):
        raise ValueError(f"tool name {qualified!r} is not of the form server_tool")
    return server, tool


def server_of(qualified: str) -> str:
    return split(qualified)[0]
