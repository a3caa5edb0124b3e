"""Fresh server state between the items of one pod (``spec.cluster.itemsPerPod`` > 1).

Locally every task gets fresh state from the server pool (servers/pool.py): a new process, or the
same process on a data copy made fresh again. In a pod the servers are sidecars that outlive an
item, so between two items the runner does the same through each sidecar's control endpoint
(images/mcp-server/sidecar.py, ``127.0.0.1:<port + CONTROL_PORT_OFFSET>``):

1. ``POST /stop`` to every sidecar whose server must be a new process (stateful and not
   ``reuse-with-fresh-data``, or able to run code): the bridge kills the server's whole process
   tree (background processes a task started included) and empties its scratch directory.
   Only the servers the last item could reach (its task's servers: the runner connects to no
   other) are stopped; one it could not reach is as it started;
2. the pod's data volume is made equal to the pristine data again (``DataCopy.refresh``: what
   the item added is removed, what it changed or removed is copied back from the read-only
   ``spec.cluster.dataVolume`` mount, nothing else is copied; without a data volume, the pristine
   data is empty). The servers left running (stateless, or ``reuse-with-fresh-data``, proven by
   tests/test_isolation_reuse.py to keep no state outside their data) are idle meanwhile;
3. ``POST /start`` to the stopped ones, which answers once the new server answers ``initialize``.
   For a ``fresh: prestart`` server it asks for a spare too (``prestart=1``): the sidecar starts
   the next process while the item runs, and the next ``/start`` only switches it in (the local
   pool's ``prestart``, servers/pool.py). The sidecar's MCP endpoint is never restarted: it swaps
   the stdio server behind it (images/mcp-server/generations.py).

The record the data is restored to is taken before the first item, once every sidecar is up: what
a server writes into the data at start-up is part of the state each item starts from. Whatever
fails here leaves the pod's state unknown: the item fails as an infrastructure error
(``FreshStateError``) and the pod takes no further item (its Job retries them in a new pod).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from atlasrun.cluster.wire.contract import control_port
from atlasrun.servers.catalog import ServerSpec
from atlasrun.servers.scratch import DataCopy

CONTROL_HOST = "127.0.0.1"
STOP_TIMEOUT_S = 30.0


class FreshStateError(Exception):
    """The pod could not make its servers' state fresh for the next item."""


def needs_new_process(server: ServerSpec) -> bool:
    """A server whose state lives in its process (or that runs code, which can leave processes
    behind) is started again for every item; only data-only servers keep their process.

    The entry's own declaration decides (``stateful``, ``fresh``, ``executes_code``), also for a
    run file's inline entries: unlike the local sandbox (``may_execute_code``, the host's safety,
    which a run file cannot lower), this is the run's own correctness, and the pod is confined by
    Kubernetes. A run file that re-declares a server with only its image and port keeps its
    built-in declaration, so the starter servers proven reusable by tests/test_isolation_reuse.py
    are reused in pods too."""
    if not server.stateful:
        return False
    return server.fresh != "reuse-with-fresh-data" or server.executes_code


@dataclass
class Between:
    """What one reset between two items took (printed in the pod's log, kept for benchmarks)."""

    respawned: list[str] = field(default_factory=list)
    from_spare: list[str] = field(default_factory=list)  # of those: switched to a prestarted process
    data_copied: int = 0
    stop_s: float = 0.0
    data_s: float = 0.0
    start_s: float = 0.0

    def line(self) -> str:
        return (
            f"fresh state: respawned {', '.join(self.respawned) or 'none'} "
            f"({len(self.from_spare)} from a spare; stop {self.stop_s:.2f}s, start {self.start_s:.2f}s); "
            f"data reset in {self.data_s:.2f}s, "
            f"{self.data_copied} path(s) copied back"
        )


class PodState:
    """The pod's servers and data, made fresh between items."""

    def __init__(
        self,
        servers: Sequence[ServerSpec],
        data_root: Path,
        data_source: Path | None,
        control_ports: dict[str, int] | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.data_root = data_root
        self.start_timeout_s = start_timeout_s
        overrides = control_ports or {}
        self.respawn = {
            s.name: overrides.get(s.name) or control_port(s.port or 0)
            for s in servers
            if needs_new_process(s)
        }
        self.prestart = {s.name for s in servers if s.name in self.respawn and s.fresh == "prestart"}
        self._work = tempfile.TemporaryDirectory(prefix="atlas-fresh-")
        source = data_source
        if source is None:  # no data volume: the pristine data is an empty directory
            source = Path(self._work.name) / "empty"
            source.mkdir()
        # Only a stateful server writes (``stateful: false`` means no per-task state at all).
        writers = any(s.stateful for s in servers)
        self._data = DataCopy(source, data_root, Path(self._work.name) / ".clock") if writers else None
        self.resets: list[Between] = []

    def adopt(self) -> None:
        """Take the data volume as it is now (seeded, servers up, no item run) as the fresh state."""
        if self._data is not None:
            self._data.adopt()

    async def reset(self, used: Collection[str] | None = None) -> Between:
        """Make every server's state fresh for the next item; ``FreshStateError`` if any step fails.

        ``used``: the servers the last item could reach (its task's; the runner connects to no
        other). Only those are started again: a server no item reached since its start still has
        its start-up state, and the data it reads is reset here whoever wrote it."""
        respawn = {n: p for n, p in self.respawn.items() if used is None or n in used}
        between = Between(respawned=sorted(respawn))
        async with httpx.AsyncClient(timeout=httpx.Timeout(STOP_TIMEOUT_S)) as client:
            started = time.monotonic()
            await self._all(client, respawn, "stop", STOP_TIMEOUT_S)
            between.stop_s = time.monotonic() - started
            started = time.monotonic()
            try:
                if self._data is not None:
                    between.data_copied = len(await asyncio.to_thread(self._data.refresh))
            except OSError as exc:
                raise FreshStateError(f"the data volume could not be reset: {exc}") from exc
            between.data_s = time.monotonic() - started
            started = time.monotonic()
            between.from_spare = await self._all(
                client,
                respawn,
                f"start?timeout={self.start_timeout_s:g}",
                self.start_timeout_s + 10,
                spare=self.prestart,
            )
            between.start_s = time.monotonic() - started
        self.resets.append(between)
        return between

    async def _all(
        self,
        client: httpx.AsyncClient,
        servers: dict[str, int],
        action: str,
        timeout_s: float,
        spare: Collection[str] = (),
    ) -> list[str]:
        """``action`` on every server's control endpoint at once; ``spare``: those asked to start
        their next process ahead of need (``&prestart=1``)."""
        calls = [
            self._call(client, name, port, action + ("&prestart=1" if name in spare else ""), timeout_s)
            for name, port in servers.items()
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        failures = [str(r) for r in results if isinstance(r, BaseException)]
        if failures:
            raise FreshStateError("; ".join(sorted(failures)))
        return sorted(name for name, r in zip(servers, results, strict=True) if r is True)

    @staticmethod
    async def _call(client: httpx.AsyncClient, name: str, port: int, action: str, timeout_s: float) -> bool:
        """True if the sidecar switched in a process it had started ahead (``prestarted``)."""
        url = f"http://{CONTROL_HOST}:{port}/{action}"
        verb = action.split("?")[0]
        try:
            response = await client.post(url, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise FreshStateError(
                f"sidecar {name!r}: {verb} failed: no control endpoint at {url} ({type(exc).__name__}: {exc}); "
                "a server image without one cannot run several items per pod (spec.cluster.itemsPerPod: 1)"
            ) from exc
        if response.status_code != 200:
            try:
                detail = str(json.loads(response.text).get("error") or response.text)
            except (ValueError, AttributeError):
                detail = response.text
            raise FreshStateError(
                f"sidecar {name!r}: {verb} failed (HTTP {response.status_code}): {detail[:500]}"
            )
        try:
            return json.loads(response.text).get("prestarted") is True
        except (ValueError, AttributeError):
            return False

    def close(self) -> None:
        self._work.cleanup()
