"""The tool-name convention, in one place: a tool is exposed as ``{server}_{tool}``.

Server names use hyphens, never underscores, so the first underscore splits a
qualified name unambiguously (``cli-mcp-server_run_command`` -> server
``cli-mcp-server``, tool ``run_command``).
"""

from __future__ import annotations

import re

from atlasrun.errors import InputError

SERVER_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


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
