"""Scenario 3 (issue 11): NetworkPolicy egress is enforced on the real node (kube-router firewall).

A restricted pod under a policy shaped like the operator's (ingress denied; egress to DNS and the
declared host:ports only) reaches the declared "model endpoint" and "object storage" ports on the
host, while a listener of the test on an undeclared port of the same host is refused/times out.
The probe waits for a go-byte that the test sends only once kube-router holds the pod's rules."""

from __future__ import annotations

import ctypes
import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.controlplane import ControlPlane, GiveUp, wait_for
from cluster.node import Node, node_cluster  # noqa: F401  (fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.node]
PROBE_SRC = Path(__file__).with_name("probe") / "probe.c"
PROBE_IMAGE = "atlasrun.test/probe:1"


class Listeners:
    """TCP listeners on ``host`` (a node's address); ``go`` is answered only after ``release()``.
    With ``netns`` (a name under /run/netns) the sockets are made inside that network namespace."""

    def __init__(self, host: str, n: int, netns: str | None = None) -> None:
        if netns is None:
            self.socks = [socket.create_server((host, 0)) for _ in range(n)]
        else:
            self.socks = _sockets_in(netns, host, n)
        self.ports = [s.getsockname()[1] for s in self.socks]
        self.released = threading.Event()
        self.accepted: dict[int, int] = dict.fromkeys(self.ports, 0)
        for i, s in enumerate(self.socks):
            threading.Thread(target=self._serve, args=(s, i == 0), daemon=True).start()

    def _serve(self, s: socket.socket, is_go: bool) -> None:
        port = s.getsockname()[1]  # not after close(), which may come between accept and here
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            self.accepted[port] += 1
            try:  # a probe attempt that gave up (its connect timed out) may have reset its end
                if is_go:
                    self.released.wait()
                    conn.sendall(b"g")
            except OSError:
                pass
            finally:
                conn.close()

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        for s in self.socks:
            s.close()


def _sockets_in(netns: str, host: str, n: int) -> list[socket.socket]:
    """Listening sockets made by a thread that entered ``netns`` (setns changes only the calling
    thread's namespace; a socket stays in the namespace it was made in)."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def make() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            with open(f"/run/netns/{netns}") as ns:
                if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {netns}")
            made.extend(socket.create_server((host, 0)) for _ in range(n))
        except BaseException as exc:  # re-raised in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made


CLONE_NEWNET = 0x40000000


@pytest.fixture
def listeners(node_cluster: tuple[ControlPlane, Node]) -> Iterator[Listeners]:  # noqa: F811
    ls = Listeners(node_cluster[1].ip, 4)
    yield ls
    ls.close()


def probe_under_policy(
    cp: ControlPlane,
    node: Node,
    listeners: Listeners,
    ns: str,
    policy: dict[str, Any],
    tmp_path: Path,
    target: str | None = None,
) -> tuple[str, dict[str, str]]:
    """Apply ``policy`` and a restricted probe pod on ``node``, labelled like a run's pod (the
    policy's ``podSelector``), in ``ns``; once that node's kube-router holds the pod's rules,
    release the go-listener. The probe connects to the listeners at ``target`` (default: the
    node's bridge address). Returns (pod IP, {port: ok|refused|timeout|error}) for the listeners
    after the go port."""
    probe = tmp_path / "probe"
    subprocess.run(["gcc", "-Os", "-static", "-o", str(probe), str(PROBE_SRC)], check=True)
    node.import_static_image(probe, PROBE_IMAGE)
    cp.create_namespace(ns, {"pod-security.kubernetes.io/enforce": "restricted"})
    labels = policy["spec"]["podSelector"]["matchLabels"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": ns, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "nodeName": node.name,
            "containers": [
                {
                    "name": "probe",
                    "image": PROBE_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": [target or node.ip, *map(str, listeners.ports)],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
        },
    }
    cp.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [policy, pod]})
    )

    def pod_ip() -> str:
        return cp.kubectl("get", "pod", "probe", "-n", ns, "-o", "jsonpath={.status.podIP}").stdout.strip()

    ip = wait_for(pod_ip, 120, "probe pod IP")

    def firewalled() -> bool:
        rules = subprocess.run(
            [*node.netns_prefix, "iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
        ).stdout
        return any("KUBE-POD-FW" in ln and ip in re.split(r"[\s/]", ln) for ln in rules.splitlines())

    wait_for(firewalled, 120, f"kube-router rules for pod {ip}")
    listeners.release()

    def message() -> str:
        state = probe_state()
        terminated = state.get("terminated")
        if terminated and not terminated.get("message"):
            raise GiveUp(f"the probe ended without a result: {terminated}; {probe_story()}")
        if not terminated:
            raise RuntimeError(f"probe not finished: {state}")
        return str(terminated["message"])

    def probe_state() -> dict[str, Any]:
        jsonpath = "jsonpath={.status.containerStatuses[0].state}"
        out = cp.kubectl("get", "pod", "probe", "-n", ns, "-o", jsonpath).stdout
        return json.loads(out) if out.strip() else {}

    def probe_story() -> str:
        logs = cp.kubectl("logs", "probe", "-n", ns, check=False)
        return f"logs: {logs.stdout!r} {logs.stderr!r}; accepted per listener: {listeners.accepted}"

    try:
        found = wait_for(message, 120, "probe result")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; {probe_story()}") from exc
    return ip, dict(ln.split("=", 1) for ln in found.splitlines())


def egress_policy(ns: str, cidr: str, ports: list[int]) -> dict[str, Any]:
    """The shape of the operator's vanilla run policy (cluster/operator/manifests.py): ingress
    denied; egress to cluster DNS and to ``ports`` of ``cidr`` only; selects pods labelled
    ``atlasrun.dev/run: netpol`` (the probe's)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "run-egress", "namespace": ns},
        "spec": {
            "podSelector": {"matchLabels": {"atlasrun.dev/run": "netpol"}},
            "policyTypes": ["Ingress", "Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                            },
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
                {
                    "to": [{"ipBlock": {"cidr": cidr}}],
                    "ports": [{"protocol": "TCP", "port": p} for p in ports],
                },
            ],
        },
    }


def test_egress_allow_list_enforced(
    node_cluster: tuple[ControlPlane, Node],  # noqa: F811
    listeners: Listeners,
    tmp_path: Path,
) -> None:
    cp, node = node_cluster
    t0 = time.monotonic()
    go, model, s3, undeclared = listeners.ports
    ns = "node-netpol"
    host = f"{node.ip}/32"
    policy = egress_policy(ns, host, [go, model, s3])
    ip, results = probe_under_policy(cp, node, listeners, ns, policy, tmp_path)
    print(f"\nprobe from {ip}: {results} ({time.monotonic() - t0:.1f}s)")
    assert results[str(model)] == "ok"
    assert results[str(s3)] == "ok"
    assert results[str(undeclared)] in ("refused", "timeout")
    assert listeners.accepted[undeclared] == 0
    cp.kubectl("delete", "namespace", ns, "--wait=false")
