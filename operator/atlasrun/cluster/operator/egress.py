"""Every destination a run's pods need, derived from the spec in one place.

``declared_egress(body, servers, s3_endpoint)`` lists (where, Egress) for: each model's and
judge's declared ``egress`` plus the host:port of its ``apiBase`` (so an endpoint needs no
separate declaration), each server's declared egress, and the object store. ``manifests.
egress_targets`` folds this list into NetworkPolicy rules; ``annotation(...)`` is the
human-readable summary put on the run's policy (``atlasrun.dev/egress``, shown by ``kubectl
describe networkpolicy``). ``RunEgress`` is the chart's ``runEgress`` value (env
``ATLASRUN_RUN_EGRESS``): which pods answer DNS (clusters label them differently) and the
in-cluster object store's pods (a Service name cannot be matched by a NetworkPolicy).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import Egress, ServerSpec

ENV_VAR = "ATLASRUN_RUN_EGRESS"
KUBE_DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}


class PeerRule(BaseModel):
    """NetworkPolicy peers (``to``) and TCP ports."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)
    to: list[dict[str, Any]] = Field(default_factory=list, description="NetworkPolicyPeer list.")
    ports: list[int] = Field(default_factory=list, description="TCP ports (empty: every port).")


class RunEgress(BaseModel):
    """The chart's ``runEgress`` values."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)
    dns: list[dict[str, Any]] = Field(
        default_factory=lambda: [dict(KUBE_DNS)],
        description="NetworkPolicyPeers the run pods may send DNS queries (UDP/TCP 53) to.",
    )
    object_store: PeerRule | None = Field(
        default=None, description="The in-cluster object store's pods (e.g. MinIO), allowed to every run."
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RunEgress:
        raw = environ.get(ENV_VAR, "").strip()
        try:
            return cls.model_validate(json.loads(raw)) if raw else cls()
        except (ValueError, ValidationError) as exc:
            raise InputError(f"invalid runEgress values: {exc}", where=ENV_VAR) from exc


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


_NAMESPACE_NAME = "kubernetes.io/metadata.name"


def cilium_endpoints(peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NetworkPolicyPeers (pod/namespace selectors) as Cilium endpoint selectors, so one chart
    value serves both policy flavours: the namespace's name becomes
    ``k8s:io.kubernetes.pod.namespace``, other namespace labels
    ``k8s:io.cilium.k8s.namespace.labels.<key>``, pod labels ``k8s:<key>``."""

    def keyed(selector: Mapping[str, Any] | None, key_of: Any) -> tuple[dict[str, str], list[dict[str, Any]]]:
        selector = selector or {}
        labels = {key_of(k): str(v) for k, v in (selector.get("matchLabels") or {}).items()}
        exprs = [{**e, "key": key_of(e["key"])} for e in selector.get("matchExpressions") or []]
        return labels, exprs

    def namespace_key(key: str) -> str:
        return (
            "k8s:io.kubernetes.pod.namespace"
            if key == _NAMESPACE_NAME
            else f"k8s:io.cilium.k8s.namespace.labels.{key}"
        )

    out = []
    for peer in peers:
        ns_labels, ns_exprs = keyed(peer.get("namespaceSelector"), namespace_key)
        pod_labels, pod_exprs = keyed(peer.get("podSelector"), lambda k: f"k8s:{k}")
        endpoint: dict[str, Any] = {"matchLabels": {**ns_labels, **pod_labels}}
        if ns_exprs or pod_exprs:
            endpoint["matchExpressions"] = ns_exprs + pod_exprs
        out.append(endpoint)
    return out
