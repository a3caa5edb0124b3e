"""Which servers a cluster run's pods have as sidecars: the one answer the operator (which tasks run,
which sidecars a Job gets) and the pod (which servers its engine connects to) both use."""

from __future__ import annotations

from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import Catalog, ServerSpec
from atlasrun.servers.selection import enabled_servers


def servers_used(body: RunSpecBody, catalog: Catalog) -> list[ServerSpec]:
    """The servers a run enables (``spec.servers.enabled``, default all), inline entries included.

    Names not in the catalog are skipped here; planning the run reports them.
    """
    table = catalog.merged(body.servers.inline).by_name()
    names = enabled_servers(body.servers.enabled, table)
    return [table[n] for n in names if n in table]


def sidecar_servers(body: RunSpecBody, catalog: Catalog) -> list[str]:
    """The servers a cluster run's pods can have as sidecars: enabled, in the catalog (inline
    entries included) and with an image. The one answer for the operator (which tasks run, which
    sidecars a Job gets) and the pod (which servers its engine connects to): pass it as the
    ``enabled`` of ``servers.selection.task_servers``."""
    return [s.name for s in servers_used(body, catalog) if s.image]
