"""Every destination a run's pods need, derived from the spec in one place.

``declared_egress(body, servers, s3_endpoint)`` lists (where, Egress) for: each model's and
judge's declared ``egress`` plus the host:port of its ``apiBase`` (so an endpoint needs no
separate declaration), each server's declared egress, and the object store. ``manifests.
egress_targets`` folds this list into NetworkPolicy rules; ``annotation(...)`` is the
human-readable summary put on the run's policy (``atlasrun.dev/egress``).
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from atlasrun.cluster.contract import ANNOTATION_EGRESS
from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import Egress, ServerSpec

ANNOTATION = ANNOTATION_EGRESS  # contract.py: one source of the run objects' keys


def endpoint_egress(url: str, where: str) -> Egress:
    """The host and port a URL connects to (default ports by scheme: http 80, otherwise 443)."""
    try:
        parts = urlsplit(url if "://" in url else f"https://{url}")
        port = parts.port
    except ValueError as exc:
        raise InputError(f"not a usable URL {url!r}: {exc}", where=where) from exc
    if not parts.hostname:
        raise InputError(f"cannot tell the host of {url!r}", where=where)
    return Egress(hosts=[parts.hostname], ports=[port or (80 if parts.scheme == "http" else 443)])


def declared_egress(
    body: RunSpecBody, servers: list[ServerSpec], s3_endpoint: str | None = None
) -> list[tuple[str, Egress]]:
    """(where, Egress) for everything the run's pods connect to, in spec order."""
    out: list[tuple[str, Egress]] = []
    endpoints = [("models", i, m.name, m.egress, m.api_base) for i, m in enumerate(body.models)]
    endpoints += [("judges", i, j.name, j.egress, j.api_base) for i, j in enumerate(body.judges)]
    for kind, i, name, egress, api_base in endpoints:
        out.append((f"spec.{kind}[{name}].egress", egress))
        if api_base:
            where = f"spec.{kind}[{i}].apiBase"
            out.append((where, endpoint_egress(api_base, where)))
    out += [(f"server {s.name!r} egress", s.egress) for s in servers]
    if s3_endpoint:
        out.append(("S3 endpoint", endpoint_egress(s3_endpoint, "S3 endpoint")))
    return [(where, e) for where, e in out if e.hosts or e.cidrs]


def annotation(cidrs: dict[str, set[int]], hosts: dict[str, set[int]]) -> str:
    """Compact JSON {"target": [ports]} of every allowed destination, sorted (for the annotation)."""
    merged = {t: sorted(p) for t, p in {**cidrs, **hosts}.items()}
    return json.dumps(dict(sorted(merged.items())), separators=(",", ":"))
