"""Pure functions rendering the Kubernetes objects of a run (see ``atlasrun.cluster``).

One Indexed Job per (model, chunk of ``cluster.itemsPerJob`` items; ``cluster.itemsPerPod`` of them
per completion index, run in sequence by one pod), named deterministically by
``job_name``, and one network policy per run (``render_network_policy``). Conventions the other
pieces rely on:

- The run's ConfigMap (``spec_configmap``) holds ``run.yaml`` (the run file, no tasks); it is
  mounted read-only at ``/etc/atlasrun`` in the runner. The tasks travel by reference: the
  ``WorkUnit`` in ``ATLAS_WORK_UNIT`` names the pinned task document (``s3://.../tasks/<sha256>``,
  or the user's own ConfigMap, mounted at ``/etc/atlasrun-tasks``, when there is no object
  storage) and the chunk's plan (``s3://.../plans/<sha256>``: completion index -> item), so the
  Job and its pods have the same small size whatever the chunk's; without object storage the
  items are listed inline.
- Each task server is a native sidecar (an initContainer with ``restartPolicy: Always``)
  named ``mcp-<server>``. Its image's entrypoint serves the server over streamable HTTP at
  ``/mcp`` on ``$ATLAS_SERVER_PORT`` (``ServerSpec.port``); the runner reaches it at
  ``127.0.0.1:<port>``. The readiness probe is a tcpSocket probe, which the kubelet
  sends to the pod IP, so the bridge must listen on all interfaces (the policy denies ingress).
  Placeholders in the server's env are filled in: ``{port}``, ``{data_dir}`` (the run's
  ``dataMount``, a per-pod emptyDir shared with the runner) and ``{scratch_dir}`` (``/tmp``).
  A chunk's pods carry the sidecars of every server its items need.
- A server's ``secrets`` (env var names) come from the Secret ``atlasrun-server-<server>``
  (key = env var name), in that server's container only. The model's (and LLM judges')
  API keys come from ``apiKeySecret`` into the runner's env only.
- podFailurePolicy: the runner's exit 2 (bad input) fails that index at once (FailIndex);
  pod disruptions (eviction, preemption) are ignored; infrastructure exits (3, 4) and crashes
  count against ``backoffLimitPerIndex`` (``cluster.backoffLimit``). ``maxFailedIndexes`` is the
  chunk's size, so one bad item never stops the others.
- Network policies cannot name hosts: the vanilla policy lists declared hostnames in the
  ``atlasrun.dev/egress-hosts`` annotation and allows only declared CIDRs; the Cilium policy
  allows the hostnames through ``toFQDNs``.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
import math
import re
from collections import defaultdict
from typing import Any

from atlasrun.cluster.operator.egress import RunEgress, cilium_endpoints, declared_egress
from atlasrun.cluster.operator.egress import annotation as egress_annotation
from atlasrun.cluster.operator.placement import apply_job_placement, merged
from atlasrun.cluster.wire.contract import (
    ANNOTATION_EGRESS,
    ANNOTATION_EGRESS_HOSTS,
    ANNOTATION_EGRESS_NOTE,
    ANNOTATION_MODEL,
    APP,
    CONTROL_PORT_OFFSET,
    CPU_FROM_CGROUP,
    ENV_CONTROL_PORT,
    ENV_CONTROL_PORTS,
    ENV_CPU_SOURCE,
    ENV_DATA_DIR,
    ENV_DATA_SOURCE,
    ENV_RUN_SPEC,
    ENV_SERVER_NAME,
    ENV_SERVER_PORT,
    ENV_TERMINATION_LIMIT,
    ENV_WORK_UNIT,
    EXIT_INPUT,
    KIND,
    LABEL_APP,
    LABEL_CHUNK,
    LABEL_MODEL,
    LABEL_RUN,
    RUNNER,
    WorkUnit,
    control_port,
    termination_limit,
)
from atlasrun.errors import InputError
from atlasrun.runspec.run import API_VERSION, JudgeSpec, Limits, ModelSpec, Placement, RunSpecBody
from atlasrun.servers.catalog import ServerSpec
from atlasrun.tasks.model import TaskLimits

SPEC_DIR = "/etc/atlasrun"
RUN_SPEC_FILE = "run.yaml"  # the run file in the spec ConfigMap (not runner.record.RUN_FILE)
TASKS_DIR = "/etc/atlasrun-tasks"
SIDECAR_PREFIX = "mcp-"
DATA_SOURCE = "data-source"
DATA_SOURCE_PATH = "/data-source"
UID = 65532
DEADLINE_MARGIN_S = 120
DEFAULT_EGRESS_PORTS = (443,)
RUNNER_RESOURCES = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
# A server sidecar idles between the tool calls of its item: its CPU is spent at (re)start, which
# the limit allows in bursts. The request is what the scheduler reserves for it while idle; at
# 100m, a pod of the seven starter servers reserved a whole core and a 2-core node ran one such
# pod at a time (placement.sidecarResources raises it for servers that compute).
SIDECAR_RESOURCES = {"requests": {"cpu": "25m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# ---------------------------------------------------------------- names and labels


def _digest(*parts: object, length: int = 12) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:length]


def job_name(run: str, run_uid: str, model: str, chunk: int) -> str:
    """``<run>-<model>-c<chunk>`` as a DNS-1123 label (<= 63 characters; with the completion
    index suffix pod names stay valid), readable prefix truncated as needed, ending in 10 hex
    digits of sha256 over the exact key, the run's UID included (a recreated run never meets its
    predecessor's Jobs)."""
    digest = _digest(run, run_uid, model, chunk, length=10)
    readable = re.sub(r"[^a-z0-9]+", "-", f"{run}-{model}-c{chunk}".lower()).strip("-")
    readable = readable[: 52 - len(digest) - 1].rstrip("-")
    return f"{readable}-{digest}" if readable else f"j{digest}"


def label_value(text: str) -> str:
    """``text`` if it is a valid label value, else a sanitized prefix plus a hash of ``text``."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    digest = _digest(text, length=10)
    prefix = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[: 63 - len(digest) - 1]
    prefix = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", prefix)
    return f"{prefix}-{digest}" if prefix else digest


def _fit(name: str, limit: int) -> str:
    """A DNS name shortened to ``limit`` characters (a hash keeps shortened names distinct)."""
    if len(name) <= limit:
        return name
    return f"{name[: limit - 11].rstrip('-.')}-{_digest(name, length=10)}"


def owner_reference(run_name: str, run_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": run_name,
        "uid": run_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def run_labels(run_name: str) -> dict[str, str]:
    return {LABEL_APP: APP, LABEL_RUN: label_value(run_name)}


def work_labels(run_name: str, model: str, chunk: int) -> dict[str, str]:
    return {**run_labels(run_name), LABEL_MODEL: label_value(model), LABEL_CHUNK: str(chunk)}


def server_secret_name(server: str) -> str:
    return f"atlasrun-server-{server}"


def api_key_env(spec: ModelSpec | JudgeSpec) -> str:
    """The env var holding the key: ``apiKeyEnv``, else litellm's default for the provider
    prefix of the model id (``anthropic/...`` -> ``ANTHROPIC_API_KEY``; none -> ``OPENAI_API_KEY``)."""
    if spec.api_key_env:
        return spec.api_key_env
    model = spec.model or spec.name
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return re.sub(r"[^A-Z0-9]+", "_", provider.upper()) + "_API_KEY"


# ---------------------------------------------------------------- the Job


def _env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _key_env(body: RunSpecBody, model: ModelSpec) -> list[dict[str, Any]]:
    """API keys for the runner: the model's, then LLM judges'; one env var may carry one key only."""
    chosen: dict[str, tuple[str, str, str]] = {}
    sources: list[tuple[str, ModelSpec | JudgeSpec]] = [(f"spec.models[{model.name}]", model)]
    sources += [(f"spec.judges[{j.name}]", j) for j in body.judges if j.model]
    for where, spec in sources:
        if spec.api_key_secret is None:
            continue
        name, ref = api_key_env(spec), spec.api_key_secret
        seen = chosen.setdefault(name, (where, ref.name, ref.key))
        if seen[1:] != (ref.name, ref.key):
            raise InputError(
                f"{name} would come from Secret {ref.name}/{ref.key} here but from "
                f"{seen[1]}/{seen[2]} for {seen[0]}; set a distinct apiKeyEnv",
                where=where,
            )
    return [_secret_env(name, secret, key) for name, (_, secret, key) in chosen.items()]


def _container(
    name: str, image: str, resources: dict[str, Any], env: list[dict[str, Any]], mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "env": [_env("HOME", "/tmp"), *env],
        "resources": copy.deepcopy(resources),
        "securityContext": copy.deepcopy(_CONTAINER_SECURITY),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp", "subPath": name}, *mounts],
    }


def _check_servers(servers: list[ServerSpec]) -> None:
    ports: dict[int, str] = {}
    for server in servers:
        where = f"server {server.name!r}"
        if not server.image:
            raise InputError("cluster mode needs an image (name@sha256:...) for every server", where=where)
        if not server.port or not 0 < server.port < 65536:
            raise InputError("cluster mode needs the port (1-65535) its HTTP bridge listens on", where=where)
        if server.port in ports:
            raise InputError(
                f"port {server.port} is also used by server {ports[server.port]!r}; "
                "servers sharing a pod need distinct ports",
                where=where,
            )
        ports[server.port] = server.name
    for server in servers:  # each sidecar's control endpoint takes its port + CONTROL_PORT_OFFSET
        assert server.port
        control = control_port(server.port)
        if control >= 65536 or control in ports:
            taken = f"the port of server {ports[control]!r}" if control in ports else "out of range"
            raise InputError(
                f"its control port {control} (port + {CONTROL_PORT_OFFSET}) is {taken}; "
                f"choose a port at most {65535 - CONTROL_PORT_OFFSET} whose control port no server uses",
                where=f"server {server.name!r}",
            )


def _sidecar(server: ServerSpec, body: RunSpecBody, data_mount: dict[str, Any]) -> dict[str, Any]:
    assert server.image and server.port  # _check_servers
    port = server.port
    rendered = server.render({"port": str(port), "data_dir": body.data_mount, "scratch_dir": "/tmp"})
    env = [
        _env(ENV_SERVER_NAME, server.name),
        _env(ENV_SERVER_PORT, str(port)),
        _env(ENV_DATA_DIR, body.data_mount),
        _env(ENV_CONTROL_PORT, str(control_port(port))),
        _env(ENV_CPU_SOURCE, CPU_FROM_CGROUP),
    ]
    env += [_env(k, v) for k, v in sorted(rendered.env.items())]
    env += [_secret_env(s, server_secret_name(server.name), s) for s in server.secrets]
    name = _fit(SIDECAR_PREFIX + server.name, 63)
    # No startupProbe: the kubelet starts native sidecars in order, each after the previous one's
    # startup probe passed, so seven servers came up one after another (18-24 s a pod on the
    # node). They start together now; the runner waits for every port itself, for at most
    # limits.serverStartTimeout (an item whose server never listens fails as a server error).
    probe = {"tcpSocket": {"port": port}}
    return {
        **_container(name, server.image, SIDECAR_RESOURCES, env, [data_mount]),
        "restartPolicy": "Always",
        "ports": [{"containerPort": port, "protocol": "TCP"}],
        "readinessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
    }


def _seed_data(body: RunSpecBody, runner_image: str, data_mount: dict[str, Any]) -> list[dict[str, Any]]:
    """With ``spec.cluster.dataVolume``: copy it into the pod's own data volume before the servers
    start, so every task sees the same fresh data and no write reaches the shared source."""
    if not body.cluster.data_volume:
        return []
    seed = _container(
        "seed-data",
        runner_image,
        SIDECAR_RESOURCES,
        [],
        [{"name": DATA_SOURCE, "mountPath": DATA_SOURCE_PATH, "readOnly": True}, data_mount],
    )
    # Each top-level entry with cp -a (modes, times, links), never the data volume's root itself:
    # the runner's UID does not own that directory, so preserving its times would fail the copy.
    seed["command"] = [
        "find", DATA_SOURCE_PATH, "-mindepth", "1", "-maxdepth", "1",
        "-exec", "cp", "-a", "{}", f"{body.data_mount}/", ";",
    ]  # fmt: skip
    return [seed]


def _deadline(body: RunSpecBody, limits: Limits, n_servers: int, per_pod: int = 1) -> int:
    """The pod's ``activeDeadlineSeconds`` (one attempt of its ``per_pod`` items): the tasks'
    timeouts plus server start-up plus a margin; a pod past it fails and its index is retried."""
    if body.cluster.active_deadline_seconds:
        return body.cluster.active_deadline_seconds
    attempt = limits.task_timeout_s * per_pod + limits.server_start_timeout_s * max(1, n_servers)
    return math.ceil(attempt + DEADLINE_MARGIN_S)


def render_job(
    run_name: str,
    run_uid: str,
    namespace: str,
    body: RunSpecBody,
    model: ModelSpec,
    unit: WorkUnit,
    servers: list[ServerSpec],
    *,
    runner_image: str,
    spec_configmap: str,
    s3_secret: str | None,
    s3_endpoint: str | None,
    parallelism: int = 1,
    tasks_configmap: tuple[str, str] | None = None,
    task_limits: TaskLimits | None = None,
    placement: Placement | None = None,
) -> dict[str, Any]:
    """The Indexed Job running one chunk of one model's items: completion index ``i`` runs
    item ``i`` of the unit in its own pod (the chunk's servers as native sidecars plus the runner).

    ``tasks_configmap`` (name, key): mount the user's task ConfigMap (when there is no object
    storage; ``unit.tasks.path`` points into it). ``task_limits``: the longest per-task limits
    of the chunk, which lengthen the pods' deadline. ``placement``: the chart's defaults
    (``runPlacement``), under the run's ``spec.cluster.placement`` and the model's own (see
    ``placement.py``); with ``spec.cluster.queueName`` the Job is created suspended with the
    Kueue queue label, and Kueue unsuspends it once admitted."""
    _check_servers(servers)
    limits = body.limits.for_task(task_limits or TaskLimits())
    labels = work_labels(run_name, model.name, unit.chunk)
    annotations = {ANNOTATION_MODEL: model.name}
    data_mount = {"name": "data", "mountPath": body.data_mount}
    env = [
        _env(ENV_RUN_SPEC, f"{SPEC_DIR}/{RUN_SPEC_FILE}"),
        _env(ENV_WORK_UNIT, unit.to_env()),
        _env("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
        _env("PYTHONDONTWRITEBYTECODE", "1"),
        _env(ENV_CPU_SOURCE, CPU_FROM_CGROUP),
        _env(ENV_CONTROL_PORTS, json.dumps({s.name: control_port(s.port or 0) for s in servers})),
    ]
    if s3_endpoint:
        env.append(_env("AWS_ENDPOINT_URL", s3_endpoint))
    if s3_secret:
        env += [
            _secret_env("AWS_ACCESS_KEY_ID", s3_secret, "AWS_ACCESS_KEY_ID"),
            _secret_env("AWS_SECRET_ACCESS_KEY", s3_secret, "AWS_SECRET_ACCESS_KEY"),
            _secret_env("AWS_SESSION_TOKEN", s3_secret, "AWS_SESSION_TOKEN", optional=True),
            _secret_env("AWS_REGION", s3_secret, "AWS_REGION", optional=True),
        ]
    env += _key_env(body, model)
    mounts: list[dict[str, Any]] = [{"name": "spec", "mountPath": SPEC_DIR, "readOnly": True}, data_mount]
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "data", "emptyDir": {"sizeLimit": "2Gi"}},
        {"name": "spec", "configMap": {"name": spec_configmap, "defaultMode": 0o444}},
    ]
    if tasks_configmap:
        mounts.append({"name": "tasks", "mountPath": TASKS_DIR, "readOnly": True})
        volumes.append(
            {
                "name": "tasks",
                "configMap": {
                    "name": tasks_configmap[0],
                    "items": [{"key": tasks_configmap[1], "path": unit.tasks.name}],
                    "defaultMode": 0o444,
                },
            }
        )
    if body.cluster.data_volume:
        volumes.append({"name": DATA_SOURCE, **body.cluster.data_volume})
        # The pristine data, read-only: the runner makes the data volume equal to it again
        # between a pod's items (cluster/pod/fresh.py).
        mounts.append({"name": DATA_SOURCE, "mountPath": DATA_SOURCE_PATH, "readOnly": True})
        env.append(_env(ENV_DATA_SOURCE, DATA_SOURCE_PATH))
    runner = {
        **_container(RUNNER, runner_image, RUNNER_RESOURCES, env, mounts),
        "command": ["atlas", "run-task"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    init_containers = [
        *_seed_data(body, runner_image, data_mount),
        *(_sidecar(s, body, data_mount) for s in servers),
    ]
    runner["env"].append(_env(ENV_TERMINATION_LIMIT, str(termination_limit(len(init_containers) + 1))))
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "activeDeadlineSeconds": _deadline(body, limits, len(servers), unit.per_pod),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": init_containers,
        "containers": [runner],
        "volumes": volumes,
    }
    size = unit.indexes
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(run_name, run_uid, model.name, unit.chunk),
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": annotations,
            "ownerReferences": [owner_reference(run_name, run_uid)],
        },
        "spec": {
            "suspend": body.cluster.suspend,
            "completionMode": "Indexed",
            "completions": size,
            "parallelism": max(0, min(parallelism, size)),
            "backoffLimitPerIndex": body.cluster.backoff_limit,
            "maxFailedIndexes": size,
            "podReplacementPolicy": "Failed",
            "ttlSecondsAfterFinished": body.cluster.ttl_seconds_after_finished,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailIndex",
                        "onExitCodes": {
                            "containerName": RUNNER,
                            "operator": "In",
                            "values": [EXIT_INPUT],
                        },
                    },
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                ]
            },
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec},
        },
    }
    effective = merged(placement, body.cluster.placement, model.placement)
    return apply_job_placement(job, effective, body.cluster.queue_name)


# ---------------------------------------------------------------- the network policy


def egress_targets(
    body: RunSpecBody, servers: list[ServerSpec], s3_endpoint: str | None = None
) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """Every destination ``egress.declared_egress`` derives (models' and judges' declared egress
    and apiBase hosts, servers' egress, the S3 endpoint), as ({cidr: ports}, {hostname: ports}).
    Hosts that are IP addresses become /32 or /128 CIDRs; an entry without ports means 443."""
    declared = declared_egress(body, servers, s3_endpoint)
    cidrs: dict[str, set[int]] = defaultdict(set)
    hosts: dict[str, set[int]] = defaultdict(set)
    for where, egress in declared:
        ports = set(egress.ports or DEFAULT_EGRESS_PORTS)
        if not all(0 < p < 65536 for p in ports):
            raise InputError(f"ports must be 1-65535, got {sorted(ports)}", where=where)
        for cidr in egress.cidrs:
            try:
                cidrs[str(ipaddress.ip_network(cidr, strict=False))] |= ports
            except ValueError as exc:
                raise InputError(f"not a CIDR: {exc}", where=where) from exc
        for host in egress.hosts:
            try:
                cidrs[str(ipaddress.ip_network(host))] |= ports
            except ValueError:
                hosts[host.lower().rstrip(".")] |= ports
    return dict(cidrs), dict(hosts)


def _grouped(targets: dict[str, set[int]]) -> list[tuple[list[str], list[int]]]:
    """Targets sharing the same ports, as (sorted targets, sorted ports), deterministic."""
    by_ports: dict[tuple[int, ...], list[str]] = defaultdict(list)
    for target, ports in targets.items():
        by_ports[tuple(sorted(ports))].append(target)
    return sorted((sorted(t), list(p)) for p, t in by_ports.items())


def _policy_metadata(run_name: str, namespace: str, run_uid: str) -> dict[str, Any]:
    return {
        "name": _fit(f"{run_name}-egress", 253),
        "namespace": namespace,
        "labels": run_labels(run_name),
        "ownerReferences": [owner_reference(run_name, run_uid)],
    }


def render_network_policy(
    run_name: str,
    namespace: str,
    run_uid: str,
    body: RunSpecBody,
    servers: list[ServerSpec],
    *,
    s3_endpoint: str | None = None,
    run_egress: RunEgress | None = None,
) -> dict[str, Any] | None:
    """The run's policy per ``spec.cluster.networkPolicy``: ``vanilla`` (NetworkPolicy),
    ``cilium`` (CiliumNetworkPolicy with toFQDNs) or ``none`` (None). Ingress is denied; egress
    is allowed to DNS (UDP+TCP 53 to ``run_egress.dns``, default kube-dns), the in-cluster object
    store (``run_egress.objectStore``) and the destinations derived from the spec only; the
    ``atlasrun.dev/egress`` annotation lists every derived destination with its ports."""
    mode = body.cluster.network_policy
    if mode == "none":
        return None
    cidrs, hosts = egress_targets(body, servers, s3_endpoint)
    metadata = _policy_metadata(run_name, namespace, run_uid)
    metadata["annotations"] = {ANNOTATION_EGRESS: egress_annotation(cidrs, hosts)}
    selector = {"matchLabels": {LABEL_RUN: label_value(run_name)}}
    run_egress = run_egress or RunEgress()
    if mode == "cilium":
        return _cilium(metadata, selector, cidrs, hosts, run_egress)
    dns = {
        "to": copy.deepcopy(run_egress.dns),
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    egress = [dns] + [
        {
            "to": [{"ipBlock": {"cidr": c}} for c in group],
            "ports": [{"protocol": "TCP", "port": p} for p in ports],
        }
        for group, ports in _grouped(cidrs)
    ]
    store = run_egress.object_store
    if store and store.to:
        rule: dict[str, Any] = {"to": copy.deepcopy(store.to)}
        if store.ports:
            rule["ports"] = [{"protocol": "TCP", "port": p} for p in store.ports]
        egress.append(rule)
    if hosts:
        metadata["annotations"].update(
            {
                ANNOTATION_EGRESS_HOSTS: " ".join(
                    f"{h}:{','.join(map(str, sorted(p)))}" for h, p in sorted(hosts.items())
                ),
                ANNOTATION_EGRESS_NOTE: "a NetworkPolicy cannot match hostnames: these hosts are reachable "
                "only through declared cidrs (or use spec.cluster.networkPolicy: cilium)",
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {"podSelector": selector, "policyTypes": ["Ingress", "Egress"], "egress": egress},
    }


def _cilium(
    metadata: dict[str, Any],
    selector: dict[str, Any],
    cidrs: dict[str, set[int]],
    hosts: dict[str, set[int]],
    run_egress: RunEgress,
) -> dict[str, Any]:
    def to_ports(ports: list[int]) -> list[dict[str, Any]]:
        return [{"ports": [{"port": str(p), "protocol": "TCP"} for p in ports]}]

    dns = {
        "toEndpoints": cilium_endpoints(run_egress.dns),
        "toPorts": [
            {
                "ports": [{"port": "53", "protocol": "UDP"}, {"port": "53", "protocol": "TCP"}],
                "rules": {"dns": [{"matchPattern": "*"}]},
            }
        ],
    }
    egress = [dns]
    egress += [
        {"toCIDRSet": [{"cidr": c} for c in group], "toPorts": to_ports(ports)}
        for group, ports in _grouped(cidrs)
    ]
    egress += [
        {
            "toFQDNs": [{"matchPattern" if "*" in h else "matchName": h} for h in group],
            "toPorts": to_ports(ports),
        }
        for group, ports in _grouped(hosts)
    ]
    store = run_egress.object_store
    if store and store.to:
        rule: dict[str, Any] = {"toEndpoints": cilium_endpoints(store.to)}
        if store.ports:
            rule["toPorts"] = to_ports(store.ports)
        egress.append(rule)
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": metadata,
        "spec": {
            "endpointSelector": selector,
            "enableDefaultDeny": {"ingress": True, "egress": True},
            "egress": egress,
        },
    }
