"""Image references must be pinned by digest (``name@sha256:<64 hex>``).

A tag can be moved to different bits between two Jobs of the same run; a digest cannot.
``unpinned_images`` lists every image a run would use that is not pinned, one message each;
the operator blocks the run with those messages unless ``spec.cluster.allowUnpinnedImages``.
"""

from __future__ import annotations

import re

from atlasrun.cluster.wire.sidecars import servers_used
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import BUILTIN_CATALOGS, Catalog, is_builtin, load_catalog

_DIGEST = re.compile(r"@(?P<algo>[a-z0-9]+(?:[.+_-][a-z0-9]+)*):(?P<hex>[0-9a-zA-Z=_-]+)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
HOW = "pin it as name@sha256:<64 hex digits>, or set spec.cluster.allowUnpinnedImages: true"


def is_pinned(ref: str) -> bool:
    """True for ``repo[:tag]@sha256:<64 lowercase hex>`` with a non-empty repository."""
    return _problem(ref) is None


def _problem(ref: str) -> str | None:
    ref = ref.strip()
    match = _DIGEST.search(ref)
    if match is None:
        return "has no @sha256 digest"
    if not ref[: match.start()]:
        return "has a digest but no repository name"
    if match["algo"] != "sha256":
        return f"uses digest algorithm {match['algo']!r}, not sha256"
    if not _SHA256.match(match["hex"]):
        return f"has a malformed sha256 digest ({len(match['hex'])} characters; 64 lowercase hex digits expected)"
    return None


CATALOG_IN_CLUSTER = (
    "spec.servers.catalog: in a cluster run only a built-in catalog by name ("
    + ", ".join(BUILTIN_CATALOGS)
    + "); a catalog file is read from the machine running `atlas run`, the operator and the pods "
    "cannot read it: define those servers in spec.servers.inline"
)
# The CRD's CEL rule with the same meaning as ``cluster_spec_problems``' catalog check.
CATALOG_IN_CLUSTER_RULE = (
    "!has(self.catalog) || self.catalog in [" + ", ".join(f"'{name}'" for name in BUILTIN_CATALOGS) + "]"
)


def cluster_catalog(body: RunSpecBody) -> Catalog:
    """A cluster run's servers: its built-in catalog (starter unless ``spec.servers.catalog`` names
    another), ``servers.inline`` over it. A catalog file is refused before this (cluster_spec_problems)."""
    catalog = load_catalog(body.servers.catalog if is_builtin(body.servers.catalog) else None)
    return catalog.merged(body.servers.inline) if body.servers.inline else catalog


BACKEND_IN_CLUSTER = (
    "spec.servers.backend: mcp-atlas-env (a running MCP-Atlas agent-environment) is for local runs "
    "(`atlas run`) only; in a cluster run the servers are the pods' sidecars: remove backend and url"
)


def cluster_spec_problems(body: RunSpecBody) -> list[str]:
    """What a valid run file may hold but a cluster run cannot honour, one message per field.

    The operator blocks such a run (InvalidSpec) before creating anything, ``atlas validate``
    reports it, and the CRD refuses it (a CEL rule with the same message)."""
    problems = [CATALOG_IN_CLUSTER] if body.servers.catalog and not is_builtin(body.servers.catalog) else []
    if body.servers.backend != "local":
        problems.append(BACKEND_IN_CLUSTER)
    return problems


def unpinned_images(body: RunSpecBody, catalog: Catalog, runner_image: str | None = None) -> list[str]:
    """One message per image the run uses that is not pinned by digest.

    ``runner_image`` is the operator's default runner image, used when
    ``spec.cluster.runnerImage`` is not set. Servers without an image are not reported
    here (``manifests.render_job`` rejects them); ``allowUnpinnedImages`` is the caller's call.
    """
    refs: list[tuple[str, str]] = []
    if body.cluster.runner_image:
        refs.append(("spec.cluster.runnerImage", body.cluster.runner_image))
    elif runner_image:
        refs.append(("the operator's default runner image", runner_image))
    refs += [(f"server {s.name!r} image", s.image) for s in servers_used(body, catalog) if s.image]
    messages = []
    for where, ref in refs:
        problem = _problem(ref)
        if problem:
            messages.append(f"{where} {ref!r} {problem}; {HOW}")
    return messages
