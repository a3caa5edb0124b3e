"""The operator's settings, read once from the environment at start-up (``OperatorSettings.from_env``).

Every variable is ``ATLASRUN_<NAME>``; the ``ATLAS_<NAME>`` spelling of earlier versions is still
read, with one deprecation warning per variable. ``SETTINGS`` is the one table of them (name,
default, meaning), rendered in docs/architecture.md (a test keeps the two identical). A value
that does not parse is an ``InputError`` naming the variable: the operator does not start.

The chart's policy ConfigMap (tenancy policy, placement defaults, run egress, Kueue default queue)
arrives in ``ATLASRUN_*`` variables too; their own modules parse them (``policy``, ``placement``,
``egress``, ``queueing``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from atlasrun.cluster.operator.egress import RunEgress
from atlasrun.cluster.operator.placement import chart_defaults
from atlasrun.cluster.operator.policy import Policy
from atlasrun.cluster.operator.queueing import default_queue
from atlasrun.errors import InputError
from atlasrun.runspec.run import Placement

log = logging.getLogger("atlasrun.operator")
PREFIX, OLD_PREFIX = "ATLASRUN_", "ATLAS_"
T = TypeVar("T")

# name (after the prefix) -> (default, meaning): the table in docs/architecture.md
SETTINGS: dict[str, tuple[str, str]] = {
    "RUNNER_IMAGE": ("", "runner image for runs without `spec.cluster.runnerImage` (pinned by digest)"),
    "S3_ENDPOINT": ("", "object-store endpoint URL (MinIO, moto); empty: AWS's"),
    "METRICS_PORT": ("8080", "Prometheus `/metrics` port; 0: no metrics server"),
    "WORKERS": ("4", "runs reconciled at once"),
    "MIN_PASS_INTERVAL": ("1", "seconds between two passes of one run (events are coalesced)"),
    "RESYNC_SECONDS": ("300", "seconds between passes of a run when nothing happens (the safety net)"),
    "RETRY_INITIAL_SECONDS": ("1", "first delay after a failed pass; doubles per failure, with jitter"),
    "RETRY_MAX_SECONDS": ("300", "longest delay between retries of a failing run"),
    "LEADER_ELECTION": ("0", "1: only the replica holding the Lease acts"),
    "LEADER_NAMESPACE": ("", "namespace of the Lease; empty: `POD_NAMESPACE`, else the pod's own"),
    "LEASE_SECONDS": ("15", "Lease duration"),
    "LEASE_RENEW_SECONDS": ("5", "how often the leader renews the Lease"),
}
_warned: set[str] = set()


@dataclass(frozen=True)
class QueueSettings:
    workers: int = 4
    min_pass_interval_s: float = 1.0
    resync_s: float = 300.0


@dataclass(frozen=True)
class RetrySettings:
    initial_s: float = 1.0
    max_s: float = 300.0


@dataclass(frozen=True)
class LeaderSettings:
    enabled: bool = False
    namespace: str | None = None
    lease_s: float = 15.0
    renew_s: float = 5.0


@dataclass(frozen=True)
class OperatorSettings:
    runner_image: str | None = None
    s3_endpoint: str | None = None
    metrics_port: int = 8080
    queue: QueueSettings = field(default_factory=QueueSettings)
    retry: RetrySettings = field(default_factory=RetrySettings)
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    # The chart's policy ConfigMap (envFrom): tenancy policy, pod placement defaults, egress, Kueue.
    policy: Policy = field(default_factory=Policy)
    placement: Placement = field(default_factory=Placement)
    run_egress: RunEgress = field(default_factory=RunEgress)
    default_queue: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorSettings:
        env = _Env(environ)
        initial = env.number("RETRY_INITIAL_SECONDS", float, minimum=0.1)
        return cls(
            runner_image=env.text("RUNNER_IMAGE"),
            s3_endpoint=env.text("S3_ENDPOINT"),
            metrics_port=env.number("METRICS_PORT", int, minimum=0),
            queue=QueueSettings(
                workers=env.number("WORKERS", int, minimum=1),
                min_pass_interval_s=env.number("MIN_PASS_INTERVAL", float, minimum=0),
                resync_s=env.number("RESYNC_SECONDS", float, minimum=1),
            ),
            retry=RetrySettings(initial, env.number("RETRY_MAX_SECONDS", float, minimum=initial)),
            leader=LeaderSettings(
                enabled=env.text("LEADER_ELECTION") in ("1", "true", "True"),
                namespace=env.text("LEADER_NAMESPACE"),
                lease_s=env.number("LEASE_SECONDS", float, minimum=1),
                renew_s=env.number("LEASE_RENEW_SECONDS", float, minimum=0.1),
            ),
            policy=Policy.from_env(dict(environ)),
            placement=chart_defaults(dict(environ)),
            run_egress=RunEgress.from_env(environ),
            default_queue=default_queue(environ),
        )


class _Env:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def raw(self, name: str) -> tuple[str, str]:
        """(value, the variable it came from): ``ATLASRUN_<name>``, else ``ATLAS_<name>``, else
        the default (``SETTINGS``)."""
        new, old = PREFIX + name, OLD_PREFIX + name
        if new in self.environ:
            return self.environ[new].strip(), new
        if old in self.environ:
            if old not in _warned:
                _warned.add(old)
                log.warning("%s is deprecated: set %s instead (read as such for now)", old, new)
            return self.environ[old].strip(), old
        return SETTINGS[name][0], new

    def text(self, name: str) -> str | None:
        return self.raw(name)[0] or None

    def number(self, name: str, kind: Callable[[str], T], minimum: float) -> T:
        text, where = self.raw(name)
        try:
            value = kind(text or SETTINGS[name][0])
        except ValueError:
            raise InputError(f"{text!r} is not a number", where=where) from None
        if value < minimum:  # type: ignore[operator]
            raise InputError(f"{text!r} is below the minimum {minimum:g}", where=where)
        return value


def settings_table() -> str:
    """``SETTINGS`` as the Markdown table of docs/architecture.md."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| `{PREFIX}{n}` | {f'`{d}`' if d else '-'} | {m} |" for n, (d, m) in SETTINGS.items()]
    return "\n".join(rows)
