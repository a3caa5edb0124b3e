"""Entrypoint of an AtlasRun MCP server sidecar image (see images/mcp-server/Dockerfile).

Serves the image's stdio MCP server over streamable HTTP at ``/mcp`` (and SSE at ``/sse``)
through mcp-proxy, listening on ``0.0.0.0:$ATLAS_SERVER_PORT`` (default 8000): the pod's
tcpSocket probes reach it on the pod IP, the runner at ``127.0.0.1:<port>``.

The server's command, default arguments and working directory were fixed at build time in
``/opt/server/server.json`` from the catalog entry; arguments given to the container
(Kubernetes ``args``) replace the default arguments. Catalog placeholders are filled in
here, at start-up, so one image works for any ``dataMount``:

- ``{install_dir}`` -> ``/opt/server``
- ``{data_dir}``    -> ``$ATLAS_DATA_DIR`` (default ``/data``)
- ``{scratch_dir}`` -> ``$TMPDIR`` (default ``/tmp``)
- ``{port}``        -> ``$ATLAS_SERVER_PORT``

The entry's ``path_aliases`` (``{"python": "python3"}``: commands the server runs under another
name) become links in ``$TMPDIR/.atlas-path``, put first on the server's PATH.

``ATLAS_SIDECAR_SPEC`` and ``ATLAS_MCP_PROXY`` move the spec and mcp-proxy (for tests outside
the image). The whole container environment is passed to the server (``--pass-environment``): the pod
spec carries the catalog entry's ``env`` and the server's secrets. Nothing is written
outside ``/tmp`` and the data directory, so the root filesystem can be read-only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys

SPEC = os.environ.get("ATLAS_SIDECAR_SPEC", "/opt/server/server.json")
PROXY = os.environ.get("ATLAS_MCP_PROXY", "/opt/mcp-proxy/bin/mcp-proxy")
_PLACEHOLDER = re.compile(r"\{(install_dir|data_dir|scratch_dir|port)\}")


def fail(message: str) -> None:
    print(f"atlas-mcp-sidecar: {message}", file=sys.stderr)
    sys.exit(2)


def _alias_dir(aliases: dict[str, str], scratch: str) -> str:
    """A directory of links ``alias -> the command found on PATH`` (the server's ``path_aliases``)."""
    directory = os.path.join(scratch, ".atlas-path")
    os.makedirs(directory, exist_ok=True)
    for alias, command in aliases.items():
        found = shutil.which(command)
        if found is None:
            fail(f"path alias {alias} -> {command}: no {command} on PATH")
        link = os.path.join(directory, alias)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(found, link)
    return directory


def main(argv: list[str]) -> None:
    try:
        with open(SPEC, encoding="utf-8") as fh:
            spec = json.load(fh)
    except (OSError, ValueError) as exc:
        fail(f"cannot read the server spec {SPEC}: {exc}")
    port = os.environ.get("ATLAS_SERVER_PORT", "8000").strip() or "8000"
    if not port.isdigit() or not 0 < int(port) < 65536:
        fail(f"ATLAS_SERVER_PORT must be a TCP port (1-65535), got {port!r}")
    values = {
        "install_dir": spec.get("install_dir", "/opt/server"),
        "data_dir": os.environ.get("ATLAS_DATA_DIR") or "/data",
        "scratch_dir": os.environ.get("TMPDIR") or "/tmp",
        "port": port,
    }

    def fill(text: str) -> str:
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)

    command = fill(spec["command"])
    args = [fill(a) for a in (argv or spec.get("args", []))]
    cwd = fill(spec.get("cwd") or "{data_dir}")
    if not os.path.isdir(cwd):
        fail(
            f"the server's working directory {cwd} does not exist (mount the data volume there "
            "or set ATLAS_DATA_DIR)"
        )
    aliases = spec.get("path_aliases") or {}
    if aliases:
        os.environ["PATH"] = (
            _alias_dir(aliases, values["scratch_dir"]) + os.pathsep + os.environ.get("PATH", "")
        )
    host = os.environ.get("ATLAS_SERVER_HOST", "0.0.0.0")
    log_level = os.environ.get("ATLAS_PROXY_LOG_LEVEL", "WARNING")
    proxy = [
        PROXY,
        "--host",
        host,
        "--port",
        port,
        "--log-level",
        log_level,
        "--pass-environment",
        "--cwd",
        cwd,
        "--",
        command,
        *args,
    ]
    os.execv(PROXY, proxy)


if __name__ == "__main__":
    main(sys.argv[1:])
