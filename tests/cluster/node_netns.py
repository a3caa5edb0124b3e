"""A second real node on this host, in its own network namespace: its own containerd, kubelet and
kube-router (the NetworkPolicy firewall for its pods), joined to the first node's cluster.

    with NetnsNode(cp, primary, index=1) as b:   # primary: the cluster.node.Node of the session
        b.name                                   # Ready when start() returns
        b.lose()                                 # the machine dies: processes killed, netns gone

Its network, as two machines on one link would have it:

- a network namespace ``atlasrun-n<i>`` joined to the host by a veth pair (host ``10.246.<i>.1``,
  node ``10.246.<i>.2``, the address it registers); its pods' bridge, range ``10.244.<i>.0/24``,
  lives inside it; the host routes that range to the node, and the node's default route is the
  host, so pods of both nodes reach each other (and host services on the first node's bridge
  address) without NAT: NetworkPolicy sees the pods' own addresses;
- the host's loopback services the node needs (the API server, the image registry) are reached
  at the same ``127.0.0.1:<port>`` inside the namespace: a DNAT there sends them over the link,
  where a DNAT on the host hands them to loopback, so the kubeconfigs and image names are the
  first node's;
- its kubelet's pods live under their own cgroup root (``/atlasrun-n<i>``), apart from the first
  kubelet's ``/kubepods``.

:meth:`lose` is what a machine's death looks like to the cluster: the kubelet, containerd, the
shims and every container are SIGKILLed and the namespace is deleted, with no goodbye to the API
server. :meth:`stop` removes everything it created, the Node object and its pods included.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Self

from cluster.controlplane import ControlPlane, wait_for
from cluster.node import Node

CGROUP_FS = Path("/sys/fs/cgroup")


class NetnsNode(Node):
    """A node in its own network namespace; ``primary`` is the node that owns the registry and
    the scheduler (cluster-wide parts). Needs root; the primary holds the host lock."""

    def __init__(self, cp: ControlPlane, primary: Node, *, index: int = 1) -> None:
        if not 1 <= index <= 200:
            raise ValueError(f"node index {index}: 1..200")
        super().__init__(cp, primary.paths, name=f"atlasrun-node-{index}")
        self.primary = primary
        self.index = index
        self.netns = f"atlasrun-n{index}"
        self.bridge = f"atlasrun{index}"
        self.pod_cidr = f"10.244.{index}.0/24"
        self.ip = f"10.244.{index}.1"
        self.host_end, self.node_end = f"arn{index}h", f"arn{index}n"
        self.link_host_ip, self.node_ip = f"10.246.{index}.1", f"10.246.{index}.2"
        self.cgroup_root = f"/atlasrun-n{index}"
        self.lost_at: float | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        t0 = time.monotonic()
        self.workdir = Path(self.primary.workdir.parent / f"{self.primary.workdir.name}-n{self.index}")
        self.workdir.mkdir()
        try:
            self._remove_leftovers_of_a_killed_run()
            self._step("network namespace", self._network)
            self._step("containerd", self._start_containerd)
            self._share_registry()
            self._step("pause image", self._import_pause)
            self._make_cgroup_root()
            self._step("kubelet (node Ready)", self._start_kubelet)
            self._step("kube-router", self._start_kube_router)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def lose(self) -> float:
        """The node dies at once: SIGKILL to its kubelet, containerd, kube-router, shims and
        containers, then its network namespace is deleted. Returns the time (monotonic)."""
        for _, proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for _, proc in self._procs:
            proc.wait(timeout=30)
        self._procs.clear()
        self._kill_leftover_shims()
        self._kill_cgroup_processes()
        self._delete_netns()
        self.lost_at = time.monotonic()
        return self.lost_at

    def stop(self) -> None:
        """Stop (or finish losing) the node, then remove its Node object and the pods bound to
        it (force: no kubelet will confirm), its mounts, cgroups, links and work directory."""
        if self.workdir == Path():
            return
        if self.lost_at is None:
            self.lose()
        self._forget_in_api()
        self._kill_containers()
        self._unmount_under(self.workdir)
        self._remove_cgroup_root()
        for table, rule in reversed(self._iptables):
            subprocess.run(["iptables", "-t", table, "-D", *rule], capture_output=True, check=False)
        self._iptables.clear()
        subprocess.run(["ip", "link", "del", self.host_end], capture_output=True, check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = Path()

    # ------------------------------------------------------------------ network
    @property
    def netns_prefix(self) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.netns}"]

    def _in_ns(self, *args: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.netns, *args], check=True, capture_output=True)

    def _remove_leftovers_of_a_killed_run(self) -> None:
        """A SIGKILLed test run left this index's namespace, link, host rules or cgroups (its work
        directory went with the primary's clean-up; we run under the primary's host lock)."""
        self._delete_netns()
        for table, chain in (("filter", "FORWARD"), ("nat", "PREROUTING")):
            rules = subprocess.run(
                ["iptables", "-t", table, "-S", chain], capture_output=True, text=True, check=False
            ).stdout.splitlines()
            for rule in rules:
                words = rule.split()
                if words[:1] == ["-A"] and (self.pod_cidr in words or self.host_end in words):
                    subprocess.run(
                        ["iptables", "-t", table, "-D", *words[1:]], capture_output=True, check=False
                    )
        self._remove_cgroup_root()

    def _network(self) -> None:
        ns, h, n = self.netns, self.host_end, self.node_end
        for cmd in (
            ["ip", "netns", "add", ns],
            ["ip", "link", "add", h, "type", "veth", "peer", "name", n],
            ["ip", "link", "set", n, "netns", ns],
            ["ip", "addr", "add", f"{self.link_host_ip}/30", "dev", h],
            ["ip", "link", "set", h, "up"],
            ["ip", "route", "add", self.pod_cidr, "via", self.node_ip],
        ):
            subprocess.run(cmd, check=True, capture_output=True)
        for cmd in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{self.node_ip}/30", "dev", n],
            ["ip", "link", "set", n, "up"],
            ["ip", "route", "add", "default", "via", self.link_host_ip],
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{self.ip}/24", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
            # (/proc/sys/net is the namespace's own; no procps needed)
            [
                "sh",
                "-c",
                f"echo 1 > /proc/sys/net/ipv4/ip_forward; echo 1 > /proc/sys/net/ipv4/conf/{n}/route_localnet",
            ],
        ):
            self._in_ns(*cmd)
        policy = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True, check=True)
        if "-P FORWARD ACCEPT" not in policy.stdout:
            for rule in (
                ["FORWARD", "-s", self.pod_cidr, "-j", "ACCEPT"],
                ["FORWARD", "-d", self.pod_cidr, "-j", "ACCEPT"],
            ):
                self._insert_rule("filter", rule)
        Path(f"/proc/sys/net/ipv4/conf/{h}/route_localnet").write_text("1")
        # Loopback services of the host, at the same address inside the namespace.
        api_port = int(self.cp.server.rsplit(":", 1)[1])
        registry_port = int(self.primary.registry.rsplit(":", 1)[1])
        for port in (api_port, registry_port):
            self._loopback_tunnel(port)
        self._in_ns(
            "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "127.0.0.1", "-o", n, "-j", "MASQUERADE"
        )
        self._write_cni()

    def _loopback_tunnel(self, port: int) -> None:
        """``127.0.0.1:port`` inside the namespace reaches ``127.0.0.1:port`` of the host."""
        self._in_ns(
            "iptables", "-t", "nat", "-A", "OUTPUT", "-d", "127.0.0.1", "-p", "tcp", "--dport", str(port),
            "-j", "DNAT", "--to-destination", f"{self.link_host_ip}:{port}",
        )  # fmt: skip
        rule = ["PREROUTING", "-i", self.host_end, "-d", self.link_host_ip, "-p", "tcp", "--dport", str(port)]
        self._insert_rule("nat", [*rule, "-j", "DNAT", "--to-destination", f"127.0.0.1:{port}"])

    def expose_api_server(self) -> str:
        """As :meth:`Node.expose_api_server`, for pods on this node: the ClusterIP's port 443
        goes over the link to the host's tunnel end, then to the API server on loopback."""
        cluster_ip = self.primary.expose_api_server()
        api_port = self.cp.server.rsplit(":", 1)[1]
        self._in_ns(
            "iptables", "-t", "nat", "-A", "PREROUTING", "-i", self.bridge, "-d", cluster_ip, "-p", "tcp",
            "--dport", "443", "-j", "DNAT", "--to-destination", f"{self.link_host_ip}:{api_port}",
        )  # fmt: skip
        return cluster_ip

    def _share_registry(self) -> None:
        """The primary's registry mirror entries (its name is the same here, through the tunnel)."""
        for hosts in (self.primary.workdir / "certs.d").glob("*/hosts.toml"):
            target = self.workdir / "certs.d" / hosts.parent.name
            target.mkdir(parents=True, exist_ok=True)
            (target / "hosts.toml").write_text(hosts.read_text())
        self.registry = self.primary.registry

    def _delete_netns(self) -> None:
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.host_end], capture_output=True, check=False)

    # ------------------------------------------------------------------ cgroups
    def _hierarchies(self) -> list[Path]:
        return [d for d in CGROUP_FS.iterdir() if d.is_dir() and not d.is_symlink()]

    def _make_cgroup_root(self) -> None:
        for h in self._hierarchies():
            try:
                (h / self.cgroup_root.lstrip("/")).mkdir(exist_ok=True)
            except OSError:
                pass  # a hierarchy we may not write (the kubelet says if it needs it)

    def _kill_cgroup_processes(self) -> None:
        for _ in range(20):
            pids = self._cgroup_pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for h in self._hierarchies():
            root = h / self.cgroup_root.lstrip("/")
            if root.is_dir():
                for procs in root.rglob("cgroup.procs"):
                    try:
                        pids.update(int(x) for x in procs.read_text().split())
                    except OSError:
                        continue
        return pids

    def _remove_cgroup_root(self) -> None:
        self._kill_cgroup_processes()
        for h in self._hierarchies():
            root = h / self.cgroup_root.lstrip("/")
            if root.is_dir():
                for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    try:
                        d.rmdir()
                    except OSError:
                        pass
                try:
                    root.rmdir()
                except OSError:
                    pass

    # ------------------------------------------------------------------ the API's view
    def _forget_in_api(self) -> None:
        """What a cloud's node lifecycle does for a deleted machine: the Node object goes; its
        pods, which no kubelet will ever confirm, are removed at once."""
        self.cp.kubectl("delete", "node", self.name, "--wait=false", "--ignore-not-found", check=False)
        selector = f"spec.nodeName={self.name}"
        self.cp.kubectl(
            "delete", "pods", "-A", "--field-selector", selector, "--force", "--grace-period=0",
            "--ignore-not-found", check=False,
        )  # fmt: skip

        def gone() -> bool:
            out = self.cp.kubectl(
                "get", "pods", "-A", "--field-selector", selector, "-o", "name", check=False
            )
            return out.returncode == 0 and not out.stdout.strip()

        try:
            wait_for(gone, 30, f"pods of {self.name} removed")
        except TimeoutError:
            pass  # a Job's tracking finalizer holds a pod until its Job is gone (the test's cleanup)
