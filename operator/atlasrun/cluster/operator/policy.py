"""Tenancy policy: what a cluster admin lets AtlasRuns in a namespace do.

The chart's ``policy`` values reach the operator as the ``ATLASRUN_POLICY`` environment
variable (JSON, camelCase like the values); ``Policy.from_env()`` reads it. ``check(spec,
policy)`` is pure: it returns every violation with the field path it concerns and a CamelCase
reason (``VolumeTypeNotAllowed``, ``ApiHostNotAllowed``, ``UnpinnedImageNotAllowed``); the
operator's observe step turns them into the ``Blocked`` condition (``blocked(...)``) instead of
creating Jobs, and its Event names the field. Unpinned images are the operator's own rule
(``Blocked/UnpinnedImage``) unless a run opts out with ``spec.cluster.allowUnpinnedImages``: the
policy decides whether that opt-out is allowed.
What a CEL rule in the CRD can check without cluster-specific values is checked there too;
this module is the one place the admin's values are enforced.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody

ENV_VAR = "ATLASRUN_POLICY"
# Kubernetes VolumeSource keys a run's data volume may use unless the admin says otherwise.
DEFAULT_VOLUME_TYPES = ("persistentVolumeClaim", "configMap", "secret", "emptyDir", "csi", "ephemeral")


class Policy(BaseModel):
    """The chart's ``policy`` values."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)
    allowed_volume_types: list[str] = Field(
        default_factory=lambda: list(DEFAULT_VOLUME_TYPES),
        description="VolumeSource kinds spec.cluster.dataVolume may use (hostPath is not allowed by default).",
    )
    allowed_api_hosts: list[str] | None = Field(
        default=None,
        description="Hosts (shell patterns, e.g. '*.openai.azure.com') a model's or judge's apiBase may "
        "name. None: any host; an empty list: no apiBase at all.",
    )
    namespace_api_hosts: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per-namespace allowedApiHosts: a namespace listed here uses its own list instead.",
    )
    allow_unpinned_images: bool = Field(
        default=False,
        description="Whether a run may set spec.cluster.allowUnpinnedImages and run images without @sha256.",
    )

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Policy:
        raw = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
        if not raw:
            return cls()
        try:
            return cls.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as exc:
            raise InputError(f"invalid tenancy policy: {exc}", where=ENV_VAR) from exc


VOLUME_TYPE_NOT_ALLOWED = "VolumeTypeNotAllowed"
API_HOST_NOT_ALLOWED = "ApiHostNotAllowed"
UNPINNED_IMAGE_NOT_ALLOWED = "UnpinnedImageNotAllowed"


@dataclass(frozen=True)
class Violation:
    path: str  # the spec field, e.g. "spec.models[1].apiBase"
    message: str
    reason: str = VOLUME_TYPE_NOT_ALLOWED

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _host(url: str) -> str:
    try:
        return (urlsplit(url if "//" in url else f"//{url}").hostname or "").lower()
    except ValueError:
        return ""


def _pinned(image: str) -> bool:
    return "@sha256:" in image


def check(spec: RunSpecBody, policy: Policy, namespace: str | None = None) -> list[Violation]:
    """Every way ``spec`` (a run in ``namespace``) breaks ``policy``, in field order; empty when
    it may run."""
    out: list[Violation] = []
    api_hosts = policy.allowed_api_hosts
    if namespace is not None and namespace in policy.namespace_api_hosts:
        api_hosts = policy.namespace_api_hosts[namespace]
    volume = spec.cluster.data_volume
    if volume:
        for kind in volume:
            if kind not in policy.allowed_volume_types:
                allowed = ", ".join(policy.allowed_volume_types) or "none"
                out.append(
                    Violation(
                        f"spec.cluster.dataVolume.{kind}",
                        f"volume type {kind} is not allowed (allowed: {allowed})",
                        VOLUME_TYPE_NOT_ALLOWED,
                    )
                )
    if api_hosts is not None:
        endpoints = [("models", i, m.api_base) for i, m in enumerate(spec.models)]
        endpoints += [("judges", i, j.api_base) for i, j in enumerate(spec.judges)]
        for kind, i, base in endpoints:
            if base is None:
                continue
            host = _host(base)
            if not any(fnmatch.fnmatchcase(host, pat.lower()) for pat in api_hosts):
                allowed = ", ".join(api_hosts) or "none"
                scope = f" in namespace {namespace}" if namespace in policy.namespace_api_hosts else ""
                out.append(
                    Violation(
                        f"spec.{kind}[{i}].apiBase",
                        f"host {host or base!r} is not an allowed API host{scope} (allowed: {allowed})",
                        API_HOST_NOT_ALLOWED,
                    )
                )
    if spec.cluster.allow_unpinned_images and not policy.allow_unpinned_images:
        reason = UNPINNED_IMAGE_NOT_ALLOWED
        out.append(
            Violation(
                "spec.cluster.allowUnpinnedImages", "unpinned images are not allowed on this cluster", reason
            )
        )
        images = [("spec.cluster.runnerImage", spec.cluster.runner_image)]
        images += [(f"spec.servers.inline[{i}].image", s.image) for i, s in enumerate(spec.servers.inline)]
        for path, image in images:
            if image and not _pinned(image):
                out.append(Violation(path, f"image {image!r} is not pinned by @sha256 digest", reason))
    return out


def blocked(violations: list[Violation]) -> tuple[str, str] | None:
    """The ``Blocked`` condition's (reason, message): the first violation's reason, every
    violation with its field in the message; None when there is none."""
    if not violations:
        return None
    detail = "; ".join(str(v) for v in violations)
    return violations[0].reason, f"refused by the cluster's AtlasRun policy: {detail}"
