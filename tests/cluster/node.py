"""A real Kubernetes node for the node tests: containerd + kubelet + kube-scheduler + kube-router
(NetworkPolicy firewall only) against a :class:`cluster.controlplane.ControlPlane`.

    with ControlPlane() as cp, Node(cp) as node:
        node.name                 # the Node object's name (Ready when start() returns)
        node.ip                   # the pod bridge's address: pods reach host services there
        node.crictl / node.ctr    # helpers for the node's runtime

Binaries come from ``tests/cluster/build-node.sh`` (``make node``; cached under
~/.cache/atlasrun/node). Needs root. Everything it creates (processes, mounts, network namespaces,
the bridge, iptables rules) is removed by :meth:`Node.stop`. Pytest code uses :func:`node_paths_or_skip`:
a skip naming what is missing, a failure when ``ATLASRUN_REQUIRE_NODE`` is set (CI).
"""

from __future__ import annotations

import atexit
import fcntl
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Self

import pytest

from cluster.controlplane import ControlPlane, binaries_or_skip, free_ports, stop_process, wait_for

BUILD_SCRIPT = Path(__file__).with_name("build-node.sh")
POD_CIDR = "10.244.0.0/24"
BRIDGE = "atlasrun0"
BRIDGE_IP = "10.244.0.1"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
# One test session's nodes per host at a time: the bridge, the pod CIDRs, iptables chains and
# kube-router's state are host-wide. A second test run waits here (and says so) instead of
# fighting over them; a second node of the same session (cluster.node_netns) runs under this lock.
HOST_LOCK = Path(os.environ.get("ATLASRUN_NODE_LOCK", "/run/lock/atlasrun-node.lock"))


class NodeUnavailable(RuntimeError):
    """Root or the node binaries are missing."""


def node_paths(build: bool = False) -> dict[str, str]:
    """NAME -> path of the node binaries (build-node.sh's output); :class:`NodeUnavailable` if absent."""
    if os.geteuid() != 0:
        raise NodeUnavailable("the node tests need root (containerd, kubelet, iptables)")
    args = ["bash", str(BUILD_SCRIPT)] + ([] if build else ["--check"])
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NodeUnavailable(f"node binaries not built (run `make node`): {proc.stderr.strip()[-400:]}")
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def node_paths_or_skip() -> dict[str, str]:
    try:
        return node_paths()
    except NodeUnavailable as exc:
        if os.environ.get("ATLASRUN_REQUIRE_NODE"):
            pytest.fail(f"ATLASRUN_REQUIRE_NODE is set but {exc}")
        pytest.skip(str(exc))


def static_image_tar(binary: Path, image: str, out: Path, labels: dict[str, str] | None = None) -> None:
    """An OCI image archive named ``image`` holding only ``/<binary name>`` (a static binary) as
    its entrypoint, user 65535 (no registry serves images here: the pause image is made this way).
    ``labels`` go into the image config, so they change the image ID."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tar.gettarinfo(str(binary), arcname=binary.name)
        info.uid = info.gid = 65535
        info.mtime = 0
        with open(binary, "rb") as f:
            tar.addfile(info, f)
    layer_raw = layer.getvalue()
    layer_gz = gzip.compress(layer_raw, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": [f"/{binary.name}"],
            "User": "65535:65535",
            **({"Labels": labels} if labels else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_raw).hexdigest()]},
    }
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest, len(data)

    cfg_digest, cfg_size = blob(json.dumps(config).encode())
    layer_digest, layer_size = blob(layer_gz)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": cfg_digest,
            "size": cfg_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": layer_size,
            }
        ],
    }
    man_digest, man_size = blob(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": man_digest,
                "size": man_size,
                "annotations": {
                    "io.containerd.image.name": image,
                    "org.opencontainers.image.ref.name": image.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    with tarfile.open(out, "w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add("blobs/sha256/" + digest.split(":", 1)[1], data)


class Node:
    """One node on this host; a context manager. Needs root."""

    def __init__(
        self, cp: ControlPlane, paths: dict[str, str] | None = None, *, name: str = "atlasrun-node"
    ) -> None:
        self.cp = cp
        self.paths = paths or node_paths()
        self.name = name
        # The pod network of this node: its bridge, the pods' range, the bridge's address (the
        # pods' gateway) and the address the node registers (here the same; a node in its own
        # network namespace, cluster.node_netns, registers its link to the host instead).
        self.bridge, self.pod_cidr, self.ip = BRIDGE, POD_CIDR, BRIDGE_IP
        self.node_ip = BRIDGE_IP
        self.cgroup_root = ""  # the kubelet's cgroupRoot ("" = the hierarchy's root)
        self.workdir = Path()
        self.startup_seconds = 0.0
        self.timings: dict[str, float] = {}
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._iptables: list[tuple[str, list[str]]] = []  # (table, chain + rule) we inserted
        self._bridge = False
        self._chains_before: dict[tuple[str, str], set[str]] | None = None
        self.registry = ""  # host:port of the node's image registry (docker-registry on loopback)
        self._lock: IO[str] | None = None
        self._kubelet_args: list[str] = []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        self._take_host_lock()
        t0 = time.monotonic()
        self.workdir = Path(tempfile.mkdtemp(prefix="atlasrun-node-", dir="/var/tmp"))
        atexit.register(self.stop)
        self._chains_before = _chains()
        try:
            self._network()
            self._step("containerd", self._start_containerd)
            self._step("pause image", self._import_pause)
            self._step("kubelet (node Ready)", self._start_kubelet)
            self._step("kube-scheduler", self._start_scheduler)
            self._step("kube-router", self._start_kube_router)
            self._step("registry", self._start_registry)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop every process (newest first), then remove pods' mounts and netns, the bridge, our
        iptables rules, kube-router's chains and the work directory."""
        atexit.unregister(self.stop)
        while self._procs:
            stop_process(self._procs.pop()[1], 20)
        if self.workdir != Path():
            self._kill_containers()
            self._kill_leftover_shims()
            self._unmount_under(self.workdir)
        if self.paths.get("KUBE_ROUTER") and self.workdir != Path():
            subprocess.run([self.paths["KUBE_ROUTER"], "--cleanup-config"], capture_output=True, check=False)
        if self._chains_before is not None:
            _remove_new_chains(self._chains_before)
            self._chains_before = None
        for table, rule in reversed(self._iptables):
            subprocess.run(["iptables", "-t", table, "-D", *rule], capture_output=True, check=False)
        self._iptables.clear()
        if self._bridge:
            subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
            self._bridge = False
        if self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = Path()
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None

    def _take_host_lock(self) -> None:
        HOST_LOCK.parent.mkdir(parents=True, exist_ok=True)
        lock = open(HOST_LOCK, "a+")  # noqa: SIM115  (held until stop())
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            print(
                f"\nnode: {HOST_LOCK} is held by {lock.read().strip() or 'another run'}; waiting", flush=True
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}\n")
        lock.flush()
        self._lock = lock
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """What a killed earlier run (SIGKILL: no teardown) left behind; we hold the host lock, so
        nothing else uses these: its shims and containers, mounts, bridge, work directories."""
        foreign = False
        for old in Path("/var/tmp").glob("atlasrun-node-*"):
            users = _processes_using(old)
            if users:  # a node of code that does not take the host lock: never touch it
                print(
                    f"\nnode: {old} is in use by pids {users[:5]}, a node not holding {HOST_LOCK}", flush=True
                )
                foreign = True
                continue
            self.workdir = old
            self._kill_containers()
            self._kill_leftover_shims()
            self._unmount_under(old)
            shutil.rmtree(old, ignore_errors=True)
            if self.paths.get("KUBE_ROUTER"):
                subprocess.run(
                    [self.paths["KUBE_ROUTER"], "--cleanup-config"], capture_output=True, check=False
                )
        self.workdir = Path()
        if foreign:
            return  # its bridge and rules are its own (if its bridge exists, start() fails clearly)
        for rule in (
            ["FORWARD", "-s", POD_CIDR, "-j", "ACCEPT"],
            ["FORWARD", "-d", POD_CIDR, "-j", "ACCEPT"],
        ):
            while subprocess.run(["iptables", "-D", *rule], capture_output=True).returncode == 0:
                pass
        if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0:
            subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)

    # ------------------------------------------------------------------ helpers
    def log(self, component: str) -> str:
        return (self.workdir / f"{component}.log").read_text(errors="replace")

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.paths["CTR"], "--address", str(self._sock), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=True,
        )

    def push_oci_archive(self, archive: Path, repo: str) -> str:
        """Push an OCI archive to the node's registry as is (skopeo, blobs unchanged, so the
        manifest digest is the archive's); returns ``host:port/repo@sha256:...``."""
        digest_file = self.workdir / f"{repo.replace('/', '_')}.digest"
        subprocess.run(
            [
                "skopeo",
                "copy",
                "--quiet",
                "--dest-tls-verify=false",
                "--preserve-digests",
                "--digestfile",
                str(digest_file),
                f"oci-archive:{archive}",
                f"docker://{self.registry}/{repo}:latest",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return f"{self.registry}/{repo}@{digest_file.read_text().strip()}"

    def import_static_image(self, binary: Path, image: str) -> None:
        """Make ``image`` (a single static binary) available on the node without a registry."""
        tar = self.workdir / f"{binary.name}.tar"
        static_image_tar(binary, image, tar)
        self.ctr("images", "import", "--local", str(tar))

    def restart_kubelet(self, down_seconds: float = 0.0) -> float:
        """Stop the kubelet (SIGTERM; pods and containers keep running under containerd), wait
        ``down_seconds``, start it again with the same flags; returns seconds until Ready again."""
        for i, (name, proc) in enumerate(self._procs):
            if name == "kubelet":
                proc.terminate()
                proc.wait(timeout=30)
                del self._procs[i]
                break
        time.sleep(down_seconds)
        t = time.monotonic()
        self._spawn("kubelet", self._kubelet_args)
        self._wait_ready()
        return time.monotonic() - t

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's processes through containerd (``containerd://<id>`` or ``<id>``)."""
        self.ctr("tasks", "kill", "--signal", "SIGKILL", container_id.removeprefix("containerd://"))

    def expose_api_server(self) -> str:
        """Make the ``kubernetes`` Service (its ClusterIP, port 443) reach the API server from pods,
        as kube-proxy would: DNAT to the API server on loopback (``route_localnet`` on the bridge
        only). Pods reach the ClusterIP through their default route. Returns the ClusterIP."""
        ip = self.cp.kubectl(
            "get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}"
        )
        cluster_ip = ip.stdout.strip()
        api_port = self.cp.server.rsplit(":", 1)[1]
        Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1")
        rule = ["PREROUTING", "-i", BRIDGE, "-d", cluster_ip, "-p", "tcp", "--dport", "443"]
        self._insert_rule("nat", [*rule, "-j", "DNAT", "--to-destination", f"127.0.0.1:{api_port}"])
        return cluster_ip

    def _insert_rule(self, table: str, rule: list[str]) -> None:
        subprocess.run(["iptables", "-t", table, "-I", *rule], check=True, capture_output=True)
        self._iptables.append((table, rule))

    @property
    def netns_prefix(self) -> list[str]:
        """The command prefix that runs a node process where it belongs (here: the host)."""
        return []

    @property
    def _sock(self) -> Path:
        return self.workdir / "containerd.sock"

    def _step(self, what: str, fn: object) -> None:
        t = time.monotonic()
        assert callable(fn)
        fn()
        self.timings[what] = time.monotonic() - t

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        args = [*self.netns_prefix, *args]
        setpriv = shutil.which("setpriv")
        if setpriv:
            args = [setpriv, "--pdeathsig", "TERM", "--", *args]
        with open(self.workdir / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._procs.append((name, proc))
        return proc

    def _alive(self, name: str) -> None:
        for n, proc in self._procs:
            if n == name and proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.log(name)[-3000:]}")

    def _network(self) -> None:
        subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True, capture_output=True)
        self._bridge = True
        subprocess.run(["ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE], check=True)
        subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
        policy = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True, check=True)
        if "-P FORWARD ACCEPT" not in policy.stdout:
            for rule in (
                ["FORWARD", "-s", POD_CIDR, "-j", "ACCEPT"],
                ["FORWARD", "-d", POD_CIDR, "-j", "ACCEPT"],
            ):
                self._insert_rule("filter", rule)
        self._write_cni()

    def _write_cni(self) -> None:
        cni = self.workdir / "cni"
        cni.mkdir()
        (cni / "10-atlasrun.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "atlasrun",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": self.bridge,
                            "isGateway": True,
                            # A default route in each pod's netns (via the bridge): Service IPs
                            # such as the `kubernetes` Service are reached through it (expose_api_server).
                            "isDefaultGateway": True,
                            "ipMasq": False,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": self.pod_cidr, "gateway": self.ip}]],
                                "dataDir": str(self.workdir / "cni-ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                }
            )
        )

    def _start_containerd(self) -> None:
        root, state, certs = self.workdir / "containerd", self.workdir / "run", self.workdir / "certs.d"
        certs.mkdir()
        bin_dir = self.workdir / "bin"
        bin_dir.mkdir()
        os.symlink(self.paths["CONTAINERD_SHIM"], bin_dir / "containerd-shim-runc-v2")
        (self.workdir / "containerd.toml").write_text(
            f"""version = 3
root = "{root}"
state = "{state}"
[grpc]
  address = "{self._sock}"
[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{self.paths["CNI_BIN_DIR"]}"]
    conf_dir = "{self.workdir / "cni"}"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "{self.paths["RUNC"]}"
[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{certs}"
"""
        )
        env_path = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        proc = self._spawn(
            "containerd",
            [
                "env",
                f"PATH={env_path}",
                self.paths["CONTAINERD"],
                "--config",
                str(self.workdir / "containerd.toml"),
            ],
        )

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"containerd exited:\n{self.log('containerd')[-3000:]}")
            return self._sock.exists()

        wait_for(up, 60, "containerd socket")

    def _import_pause(self) -> None:
        tar = self.workdir / "pause.tar"
        static_image_tar(Path(self.paths["PAUSE"]), PAUSE_IMAGE, tar)
        wait_for(lambda: self.ctr("version").returncode == 0, 30, "containerd API")
        self.ctr("images", "import", "--local", str(tar))

    def _start_kubelet(self) -> None:
        pki = self.cp.workdir
        assert pki is not None
        kubeconfig = self.cp.user_kubeconfig(f"system:node:{self.name}", ["system:nodes"])
        (port,) = free_ports(1)
        # Signed by the cluster CA, so the API server verifies the kubelet (kubectl logs/exec).
        cert, key = self.cp.serving_cert(f"kubelet-{self.name}", self.node_ip, self.name)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.node_ip,
            "port": port,
            "readOnlyPort": 0,
            "tlsCertFile": str(cert),
            "tlsPrivateKeyFile": str(key),
            "healthzPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cp.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "failCgroupV1": False,
            "containerRuntimeEndpoint": f"unix://{self._sock}",
            "resolvConf": "",
            "podCIDR": self.pod_cidr,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            # No image garbage collection: the tests own their images (imported, pushed, pulled by
            # digest) and a shared host's disk can pass 85% while other work runs; the kubelet then
            # deleted a probe image a test had just imported (its first detection was earlier).
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "registerNode": True,
            "serializeImagePulls": False,
        }
        if self.cgroup_root:
            config["cgroupRoot"] = self.cgroup_root
        (self.workdir / "kubelet.json").write_text(json.dumps(config))
        self._kubelet_args = [
            self.paths["KUBELET"],
            f"--config={self.workdir / 'kubelet.json'}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.workdir / 'kubelet'}",
            f"--cert-dir={self.workdir / 'kubelet-pki'}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.node_ip}",
            "--v=1",
        ]
        self._spawn("kubelet", self._kubelet_args)
        self._wait_ready()

    def _wait_ready(self) -> None:
        def ready() -> bool:
            self._alive("kubelet")
            out = self.cp.kubectl(
                "get",
                "node",
                self.name,
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                check=False,
            )
            return out.returncode == 0 and out.stdout.strip() == "True"

        wait_for(ready, 120, f"node {self.name} Ready")

    def _start_scheduler(self) -> None:
        (port,) = free_ports(1)
        self._spawn(
            "kube-scheduler",
            [
                self.paths["KUBE_SCHEDULER"],
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--authentication-kubeconfig={self.cp.kubeconfig}",
                f"--authorization-kubeconfig={self.cp.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
            ],
        )
        time.sleep(0.5)
        self._alive("kube-scheduler")

    def _start_kube_router(self) -> None:
        self._spawn(
            "kube-router",
            [
                self.paths["KUBE_ROUTER"],
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--hostname-override={self.name}",
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--metrics-port=0",
                "--health-port=0",
            ],
        )
        time.sleep(1.0)
        self._alive("kube-router")

    def _start_registry(self) -> None:
        (port,) = free_ports(1)
        self.registry = f"127.0.0.1:{port}"
        config = self.workdir / "registry.yml"
        config.write_text(
            json.dumps(
                {
                    "version": 0.1,
                    "storage": {"filesystem": {"rootdirectory": str(self.workdir / "registry")}},
                    "http": {"addr": self.registry},
                    "log": {"level": "warn"},
                }
            )
        )
        hosts = self.workdir / "certs.d" / self.registry
        hosts.mkdir(parents=True)
        (hosts / "hosts.toml").write_text(
            f'server = "http://{self.registry}"\n[host."http://{self.registry}"]\n  capabilities = ["pull", "resolve"]\n'
        )
        proc = self._spawn("registry", [self.paths["REGISTRY"], "serve", str(config)])

        def up() -> bool:
            self._alive("registry")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return False

        wait_for(up, 30, "registry")
        del proc

    def _kill_containers(self) -> None:
        """Kill and delete the runc containers whose bundles live in our state dir (and only those)."""
        runc = self.paths.get("RUNC", "runc")
        for root in Path("/run/containerd/runc").glob("*"):
            out = subprocess.run(
                [runc, "--root", str(root), "list", "--format", "json"], capture_output=True, text=True
            )
            for c in json.loads(out.stdout or "null") or []:
                if str(c.get("bundle", "")).startswith(str(self.workdir)):
                    subprocess.run(
                        [runc, "--root", str(root), "delete", "--force", c["id"]], capture_output=True
                    )

    def _kill_leftover_shims(self) -> None:
        """containerd shims outlive containerd by design: kill the ones serving our state dir."""
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit():
                continue
            try:
                cmdline = (proc_dir / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                cmdline
                and cmdline[0].endswith(b"containerd-shim-runc-v2")
                and str(self.workdir).encode() in b" ".join(cmdline)
            ):
                try:
                    os.kill(int(proc_dir.name), 9)
                except ProcessLookupError:
                    pass
        # Their containers are in our cgroups/netns; runc deletes them with the state dir below.

    @staticmethod
    def _unmount_under(root: Path) -> None:
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for mnt in sorted((m for m in mounts if m.startswith(str(root))), key=len, reverse=True):
            subprocess.run(["umount", "-l", mnt], capture_output=True, check=False)


def _processes_using(path: Path) -> list[int]:
    """Live processes whose command line names ``path`` (a node's containerd, kubelet, shims)."""
    pids = []
    for proc_dir in Path("/proc").iterdir():
        if proc_dir.name.isdigit():
            try:
                if str(path).encode() in (proc_dir / "cmdline").read_bytes():
                    pids.append(int(proc_dir.name))
            except OSError:
                continue
    return pids


def _chains() -> dict[tuple[str, str], set[str]]:
    """(iptables binary, table) -> chain names, to find the chains kubelet/kube-router add."""
    out: dict[tuple[str, str], set[str]] = {}
    for ipt in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            r = subprocess.run([ipt, "-t", table, "-S"], capture_output=True, text=True, check=False)
            out[(ipt, table)] = {ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("-N ")}
    return out


def _remove_new_chains(before: dict[tuple[str, str], set[str]]) -> None:
    """Delete the chains created since ``before`` and every rule jumping to them."""
    for (ipt, table), names in _chains().items():
        new = names - before.get((ipt, table), set())
        if not new:
            continue
        rules = subprocess.run([ipt, "-t", table, "-S"], capture_output=True, text=True, check=False).stdout
        for ln in rules.splitlines():
            words = ln.split()
            if (
                words[:1] == ["-A"]
                and words[1] not in new
                and any(words[i + 1] in new for i, w in enumerate(words[:-1]) if w in ("-j", "-g"))
            ):
                subprocess.run([ipt, "-t", table, "-D", *words[1:]], capture_output=True, check=False)
        for chain in new:
            subprocess.run([ipt, "-t", table, "-F", chain], capture_output=True, check=False)
        for chain in new:
            subprocess.run([ipt, "-t", table, "-X", chain], capture_output=True, check=False)


# How fast the cluster notices a lost node (docs/runbook.md, "A node is lost"): the kubelet renews
# its Lease every 10 s; after 20 s without one the node is NotReady (upstream default 50 s) and its
# pods are tainted for eviction. Checked every 2 s (default 5 s).
NODE_LIFECYCLE = ("--node-monitor-grace-period=20s", "--node-monitor-period=2s")

_shared: list[tuple[ControlPlane, Node]] = []


@pytest.fixture(scope="session")
def node_cluster() -> Iterator[tuple[ControlPlane, Node]]:
    """A control plane and one real node for the whole session (skips without root/binaries).
    Test modules import this fixture, which makes one fixture per module: the first one starts
    the node and stops it at the end of the session, the others reuse it."""
    if _shared:
        yield _shared[0]
        return
    paths = node_paths_or_skip()
    with (
        ControlPlane(binaries_or_skip(), controller_manager_args=NODE_LIFECYCLE) as cp,
        Node(cp, paths) as node,
    ):
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in node.timings.items())
        print(f"\nnode up in {node.startup_seconds:.1f}s ({steps}); control plane {cp.startup_seconds:.1f}s")
        _shared.append((cp, node))
        try:
            yield cp, node
        finally:
            _shared.clear()
