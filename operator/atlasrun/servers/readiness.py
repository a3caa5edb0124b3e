"""What a catalog's servers need before they can run here: installed, keys set, egress.

``atlas servers list`` shows it per server; ``atlas validate --catalog`` counts the tasks each
missing key, egress or install would unlock (a task needs every server its reference uses).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from atlasrun.servers.catalog import Catalog, ServerSpec
from atlasrun.servers.install import is_installed
from atlasrun.tasks.model import Task


def egress_text(spec: ServerSpec) -> str:
    """``host:port`` (or ``cidr:port``) pairs the entry declares, comma separated; "" if none."""
    ports = spec.egress.ports or [443]
    targets = spec.egress.hosts + spec.egress.cidrs
    if not targets and spec.egress.ports:
        targets = ["any host"]
    return ", ".join(f"{t}:{p}" for t in targets for p in ports)


@dataclass(frozen=True)
class Readiness:
    """One server's state on this machine."""

    server: str
    installed: bool
    keys_missing: list[str] = field(default_factory=list)
    keys_set: list[str] = field(default_factory=list)
    egress: str = ""


def readiness(spec: ServerSpec, environ: Mapping[str, str] | None = None) -> Readiness:
    env = os.environ if environ is None else environ
    return Readiness(
        server=spec.name,
        installed=spec.package is None or is_installed(spec),
        keys_missing=[k for k in spec.secrets if not env.get(k)],
        keys_set=[k for k in spec.secrets if env.get(k)],
        egress=egress_text(spec),
    )


def runs_here(spec: ServerSpec, environ: Mapping[str, str] | None = None) -> bool:
    """Enabled when a run file does not list its servers: every key set, and installable (a
    pin no registry here serves must be installed already). Like MCP-Atlas's default, which
    enables the key-free servers plus those whose keys are configured."""
    state = readiness(spec, environ)
    unavailable = spec.package is not None and spec.package.unavailable and not state.installed
    return not state.keys_missing and not unavailable


def blocker(spec: ServerSpec, environ: Mapping[str, str] | None = None) -> str:
    """Why ``runs_here`` is false for ``spec``, in words, with its egress ("" when it is true)."""
    state = readiness(spec, environ)
    why = []
    if state.keys_missing:
        why.append(f"key(s) {', '.join(state.keys_missing)} not set")
    if not state.installed and spec.package is not None and spec.package.unavailable:
        why.append(f"not installed: {spec.package.unavailable}")
    if why and state.egress:
        why.append(f"egress to {state.egress}")
    return ", ".join(why)


def needs_lines(
    catalog: Catalog, tasks: Iterable[Task], environ: Mapping[str, str] | None = None
) -> list[str]:
    """One line per server the tasks need that is not ready offline: what it needs and how many
    tasks need it ("ddg-search: 2 task(s) need egress to duckduckgo.com:443")."""
    table = catalog.by_name()
    count: dict[str, int] = {}
    for task in tasks:
        for server in task.required_servers:
            count[server] = count.get(server, 0) + 1
    lines = []
    for server in sorted(count, key=lambda s: (-count[s], s)):
        n = count[server]
        spec = table.get(server)
        if spec is None:
            lines.append(f"{server}: {n} task(s) need it; the catalog has no such server")
            continue
        state = readiness(spec, environ)
        wants = []
        if state.keys_missing:
            wants.append(f"key(s) {', '.join(state.keys_missing)} (not set)")
        if state.egress:
            wants.append(f"egress to {state.egress}")
        if not state.installed:
            why = f" ({spec.package.unavailable})" if spec.package and spec.package.unavailable else ""
            wants.append(f"`atlas servers install {server}`{why}")
        if wants:
            lines.append(f"{server}: {n} task(s) need {'; '.join(wants)}")
    return lines
