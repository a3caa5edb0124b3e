"""What a pod's work cost in CPU: the runner's own CPU-seconds plus each sidecar's, as their
containers account them (issue 22, part 3: the operator exports per-run CPU-seconds).

In a pod (``ATLAS_CPU_SOURCE=cgroup``, set by the operator's manifests) each container reads its
own cgroup: cgroup v2 ``cpu.stat`` ``usage_usec``, or v1 ``cpuacct.usage`` (nanoseconds). That
counts every process the container ran, reaped or not. Elsewhere (a test's node stand-in, where
containers are processes of the host) a process counts itself and its reaped children
(``getrusage``); a sidecar adds its live descendants (images/mcp-server/sidecar.py, which cannot
import this module: its copy of the cgroup reader is the same few lines).

The sidecars answer on their control endpoint, ``GET /healthz`` -> ``{"cpu_s": ...}``. A sidecar
that does not answer is left out and named: the figure is then a lower bound, said in the log.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from pathlib import Path

import httpx

CPU_SOURCE_ENV = "ATLAS_CPU_SOURCE"
CGROUP = "cgroup"
CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_USAGE = ("cpuacct/cpuacct.usage", "cpu,cpuacct/cpuacct.usage", "cpuacct.usage")
HEALTH_TIMEOUT_S = 5.0


def container_cpu_seconds(root: Path = CGROUP_ROOT) -> float | None:
    """CPU-seconds of this container's cgroup so far, or None if no accounting file is readable."""
    try:
        for line in (root / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    except (OSError, ValueError):
        pass
    for name in V1_USAGE:
        try:
            return int((root / name).read_text().strip()) / 1e9
        except (OSError, ValueError):
            continue
    return None


def own_cpu_seconds(env: Mapping[str, str] = os.environ) -> float:
    """This container's CPU-seconds (its cgroup in a pod; this process and its reaped children
    elsewhere)."""
    if env.get(CPU_SOURCE_ENV) == CGROUP and (seconds := container_cpu_seconds()) is not None:
        return seconds
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def pod_cpu_seconds(control_urls: Mapping[str, str]) -> tuple[dict[str, float], list[str]]:
    """(CPU-seconds by container: ``runner`` and every sidecar that answered, the sidecars that
    did not). The pod's figure is their sum."""
    spent, missing = {"runner": round(own_cpu_seconds(), 3)}, []
    with httpx.Client(timeout=HEALTH_TIMEOUT_S) as client:
        for name, url in sorted(control_urls.items()):
            try:
                seconds = client.get(f"{url}/healthz").json().get("cpu_s")
            except (httpx.HTTPError, ValueError, AttributeError):
                seconds = None
            if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
                spent[name] = round(float(seconds), 3)
            else:
                missing.append(name)
    return spent, missing


def cpu_line(spent: Mapping[str, float]) -> str:
    """``pod CPU: 12.3 s (runner 5.1, git 1.2, ...)``: what each container cost, largest first."""
    parts = ", ".join(
        f"{name} {seconds:.1f}" for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1])
    )
    return f"pod CPU: {sum(spent.values()):.1f} s ({parts})"
