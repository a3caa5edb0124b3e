"""The pod's servers as the runner reaches them: each a sidecar serving streamable HTTP on
``127.0.0.1:<port>``; the catalog rewritten to it, and the wait for its port."""

from __future__ import annotations

import asyncio
import json
import os
import time

from atlasrun.errors import InputError
from atlasrun.runner.plan import Plan
from atlasrun.servers.catalog import Catalog
from atlasrun.servers.selection import task_servers

SIDECAR_HOST = "127.0.0.1"


def sidecar_url(port: int) -> str:
    return f"http://{SIDECAR_HOST}:{port}/mcp"


def port_overrides(variable: str = "ATLAS_SERVER_PORTS") -> dict[str, int]:
    """``ATLAS_SERVER_PORTS`` (JSON ``{"server": port}``): where a node runs sidecars on other ports
    than the catalog's (e.g. the tests' node stand-in, where pods share one loopback);
    ``ATLAS_CONTROL_PORTS`` the same for their control endpoints."""
    raw = os.environ.get(variable)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(k): int(v) for k, v in data.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise InputError(f"not a JSON object of server ports: {exc}", where=variable) from exc


def sidecar_catalog(catalog: Catalog, needed: list[str]) -> Catalog:
    """``catalog`` with each ``needed`` server reached over streamable HTTP on its sidecar port."""
    rewritten = []
    overrides = port_overrides()
    for name in needed:
        spec = catalog.get(name)
        if name in overrides:
            spec = spec.model_copy(update={"port": overrides[name]})
        if not spec.port:
            raise InputError(
                f"server {name!r} has no 'port': in cluster mode it is a sidecar serving "
                f"http://{SIDECAR_HOST}:<port>/mcp",
                where="servers",
            )
        rewritten.append(
            spec.model_copy(
                update={
                    "transport": "http",
                    "url": sidecar_url(spec.port),
                    "command": None,
                    "args": [],
                    "env": {},
                    "cwd": None,
                    "package": None,
                    # The sidecar owns the data: it sees the pod's own copy at the data mount,
                    # so the runner keeps no copy of its own and maps no paths.
                    "isolate_data": False,
                    "data_scope": "server",
                    "mount_data": False,
                    "shared_data": [],
                    "path_aliases": {},
                }
            )
        )
    return catalog.merged(rewritten)


def needed_servers(plan: Plan, task_id: str) -> list[str]:
    """The servers the engine will connect to for this task (its enabled tools' servers)."""
    for task in plan.tasks:
        if task.id == task_id:
            return task_servers(task, plan.enabled_servers).connect
    return []


async def wait_for_ports(ports: dict[str, int], timeout_s: float) -> list[str]:
    """Wait until every sidecar port accepts connections; returns the servers that never did."""
    deadline = time.monotonic() + timeout_s
    waiting = dict(ports)
    while waiting:
        for name, port in list(waiting.items()):
            try:
                _, writer = await asyncio.open_connection(SIDECAR_HOST, port)
                writer.close()
                del waiting[name]
            except OSError:
                pass
        if not waiting or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.1)
    return sorted(waiting)
