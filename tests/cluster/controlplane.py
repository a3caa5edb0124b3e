"""A real, throw-away Kubernetes control plane for the cluster-mode tests.

``ControlPlane`` runs etcd, kube-apiserver and kube-controller-manager as child processes on
127.0.0.1 (random free ports; certificates, kubeconfigs and logs in a temporary directory, etcd's
data in /dev/shm when available) and stops them on exit (SIGTERM, wait, SIGKILL); if the test
process is killed outright they get SIGTERM from the kernel (PR_SET_PDEATHSIG via setpriv)::

    with ControlPlane() as cp:
        cp.kubeconfig                      # admin kubeconfig (client cert in group system:masters)
        cp.server                          # https://127.0.0.1:<port>
        cp.token_kubeconfig(token)         # kubeconfig that authenticates with a bearer token
        cp.service_account_token(ns, sa)   # TokenRequest for a ServiceAccount (e.g. the operator's)
        cp.user_kubeconfig("alice", ["devs"])  # kubeconfig for any user/groups (client cert)
        cp.client(token=...)               # httpx.Client on the API server (admin by default)
        cp.kubectl("get", "pods", "-A")    # the kubectl built alongside the server

What is real: authentication (x509 client certs, ServiceAccount tokens), ``Node,RBAC``
authorization, the default admission chain plus PodSecurity and NodeRestriction, and every
default kube-controller-manager controller (job, garbage collector, ttl-after-finished,
serviceaccount, namespace, ...), each with its own ServiceAccount credentials. What is not:
there is no scheduler and no kubelet, so pods stay Pending unless a test writes their status.

The binaries come from ``tests/cluster/build-controlplane.sh`` (etcd from Debian's etcd-server,
the rest built from the k8s.io/kubernetes module pinned in ``controlplane/go.mod`` and cached
under ``~/.cache/atlasrun/k8s/<version>/``). ``find_binaries()`` only looks them up; it raises
``BinariesMissing`` until that script has run (or builds them itself with ``build=True``).
The certificates come from the small ``atlasrun-pki`` helper built by the same script, so
neither openssl nor a Python crypto package is needed.

Set ``ATLASRUN_KEEP_CONTROLPLANE=1`` to keep the temporary directory (logs, etcd data,
kubeconfigs) after exit.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx

from atlasrun.servers.instance import free_port

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-controlplane.sh"
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "atlasrun-admin"

T = TypeVar("T")


def stop_process(proc: subprocess.Popen[bytes] | None, grace: float) -> None:
    """SIGTERM ``proc`` if it still runs, wait up to ``grace`` seconds, then SIGKILL and reap it."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace)


class GiveUp(Exception):
    """Raised by a ``wait_for`` check to stop waiting at once (e.g. the process died)."""


class BinariesMissing(RuntimeError):
    """The control-plane binaries are not built yet (run tests/cluster/build-controlplane.sh)."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path
    pki: Path


def find_binaries(build: bool = False) -> Binaries:
    """Paths of the control-plane binaries, from ``build-controlplane.sh``.

    With ``build=False`` nothing is installed or compiled (``--check``): ``BinariesMissing`` is
    raised if anything is absent. With ``build=True`` the script installs/builds what is missing
    (a cold build takes 10-16 minutes on 2 cores) and its progress goes to this process's stderr.
    """
    cmd = ["bash", str(BUILD_SCRIPT)] + ([] if build else ["--check"])
    proc = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=None if build else subprocess.PIPE, text=True, check=False
    )
    if proc.returncode == 3 and not build:
        raise BinariesMissing(f"{(proc.stderr or '').strip()}\nbuild them with: bash {BUILD_SCRIPT}")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stderr or '').strip()}")
    paths = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return Binaries(
        etcd=Path(paths["ETCD"]),
        kube_apiserver=Path(paths["KUBE_APISERVER"]),
        kube_controller_manager=Path(paths["KUBE_CONTROLLER_MANAGER"]),
        kubectl=Path(paths["KUBECTL"]),
        pki=Path(paths["ATLASRUN_PKI"]),
    )


def binaries_or_skip() -> Binaries:
    """The binaries for a test, else a pytest skip saying how to build them (a failure when
    ``ATLASRUN_REQUIRE_CLUSTER`` is set, as in CI)."""
    import pytest

    try:
        return find_binaries()
    except BinariesMissing as exc:
        if os.environ.get("ATLASRUN_REQUIRE_CLUSTER"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Call ``check`` until it returns something truthy (returned) or ``timeout`` runs out.

    Exceptions raised by ``check`` count as "not yet" (the last one is reported on timeout),
    except ``GiveUp``, which propagates.
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except GiveUp:
            raise
        except Exception as exc:
            last = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last!r})" if last else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1, below the ephemeral range (``free_port``)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on loopback; a context manager."""

    def __init__(
        self,
        binaries: Binaries | None = None,
        *,
        controllers: str = "*",
        apiserver_args: Sequence[str] = (),
        controller_manager_args: Sequence[str] = (),
        startup_timeout: float = 180.0,
        keep: bool | None = None,
    ) -> None:
        self.binaries = binaries or find_binaries()
        self.controllers = controllers
        self.apiserver_args = list(apiserver_args)
        self.controller_manager_args = list(controller_manager_args)
        self.startup_timeout = startup_timeout
        self.keep = bool(os.environ.get("ATLASRUN_KEEP_CONTROLPLANE")) if keep is None else keep
        self.workdir: Path | None = None
        self.server = ""
        self.startup_seconds = 0.0
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._logs: dict[str, Path] = {}
        self._counter = 0
        self._extra_dirs: list[Path] = []

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        if self._procs:
            raise RuntimeError("control plane already started")
        t0 = time.monotonic()
        self.workdir = Path(tempfile.mkdtemp(prefix="atlasrun-k8s-"))
        atexit.register(self.stop)
        try:
            self._make_pki()
            etcd_client, etcd_peer, api_port, kcm_port = free_ports(4)
            self._start_etcd(etcd_client, etcd_peer)
            self._start_apiserver(api_port, etcd_client)
            self._start_controller_manager(kcm_port)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop every process this object started (newest first): SIGTERM, wait, SIGKILL."""
        atexit.unregister(self.stop)
        while self._procs:
            stop_process(self._procs.pop()[1], 15)
        if not self.keep:
            for d in [self.workdir, *self._extra_dirs]:
                if d:
                    shutil.rmtree(d, ignore_errors=True)
            self._extra_dirs.clear()

    # ------------------------------------------------------------------ public helpers
    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (user ``atlasrun-admin``, group ``system:masters``)."""
        return self._path("admin.kubeconfig")

    @property
    def processes(self) -> dict[str, subprocess.Popen[bytes]]:
        """The running components by name (``etcd``, ``kube-apiserver``, ``kube-controller-manager``)."""
        return dict(self._procs)

    @property
    def ca_file(self) -> Path:
        return self._path("pki/ca.crt")

    def log(self, component: str) -> str:
        """What ``etcd``, ``kube-apiserver`` or ``kube-controller-manager`` has logged so far."""
        return self._logs[component].read_text(errors="replace")

    def token_kubeconfig(self, token: str, name: str | None = None, namespace: str | None = None) -> Path:
        """A kubeconfig that authenticates with ``token`` (e.g. a ServiceAccount token)."""
        name = name or self._unique("token")
        return self._write_kubeconfig(name, {"token": token}, namespace)

    def user_kubeconfig(self, user: str, groups: Iterable[str] = (), namespace: str | None = None) -> Path:
        """A kubeconfig for an arbitrary user and groups (a client certificate signed by the test CA)."""
        name = self._unique("user")
        self._pki("client", name, user, *groups)
        pki = self._path("pki")
        auth = {
            "client-certificate-data": _b64(pki / f"{name}.crt"),
            "client-key-data": _b64(pki / f"{name}.key"),
        }
        return self._write_kubeconfig(name, auth, namespace)

    def serving_cert(self, name: str, *hosts: str) -> tuple[Path, Path]:
        """A serving certificate and key for ``hosts`` (IPs or DNS names) signed by the cluster CA."""
        self._pki("serving", name, *hosts)
        return self._path(f"pki/{name}.crt"), self._path(f"pki/{name}.key")

    def service_account_token(
        self, namespace: str, name: str, *, expiration_seconds: int = 3600, create: bool = False
    ) -> str:
        """A bound token for ServiceAccount ``namespace/name`` via the TokenRequest API."""
        with self.client() as c:
            if create:
                r = c.post(
                    f"/api/v1/namespaces/{namespace}/serviceaccounts",
                    json={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
                )
                if r.status_code != 409:
                    r.raise_for_status()
            r = c.post(
                f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                json={
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "spec": {"expirationSeconds": expiration_seconds},
                },
            )
            r.raise_for_status()
            return str(r.json()["status"]["token"])

    def ssl_context(self, client_cert: str | None = "admin") -> ssl.SSLContext:
        """TLS context trusting the test CA, presenting the admin client certificate (or
        ``pki/<client_cert>.crt``; none with ``client_cert=None``)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if client_cert:
            pki = self._path("pki")
            ctx.load_cert_chain(str(pki / f"{client_cert}.crt"), str(pki / f"{client_cert}.key"))
        return ctx

    def client(self, *, token: str | None = None, timeout: float = 30.0) -> httpx.Client:
        """An httpx client on the API server: admin (client cert) or, with ``token``, that token."""
        if token is None:
            return httpx.Client(base_url=self.server, verify=self.ssl_context(), timeout=timeout)
        return httpx.Client(
            base_url=self.server,
            verify=self.ssl_context(None),
            timeout=timeout,
            headers={"Authorization": f"Bearer {token}"},
        )

    def create_namespace(
        self, name: str, labels: dict[str, str] | None = None, *, wait_for_default_sa: bool = True
    ) -> dict[str, Any]:
        """Create a namespace; by default wait until the ServiceAccount controller has made its
        ``default`` ServiceAccount (pods are rejected by admission until then)."""
        with self.client() as c:
            r = c.post(
                "/api/v1/namespaces",
                json={
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels or {}},
                },
            )
            r.raise_for_status()
            if wait_for_default_sa:
                wait_for(
                    lambda: c.get(f"/api/v1/namespaces/{name}/serviceaccounts/default").status_code == 200,
                    60,
                    f"the default ServiceAccount in namespace {name}",
                )
            return dict(r.json())

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        check: bool = True,
        input: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run the kubectl built with the server (admin kubeconfig unless ``kubeconfig`` is given)."""
        cmd = [str(self.binaries.kubectl), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=timeout, check=check)

    # ------------------------------------------------------------------ internals
    def _path(self, rel: str) -> Path:
        if self.workdir is None:
            raise RuntimeError("control plane not started")
        return self.workdir / rel

    def _unique(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}-{self._counter}"

    def _pki(self, command: str, *args: str, directory: str = "pki") -> None:
        subprocess.run(
            [str(self.binaries.pki), command, str(self._path(directory)), *args],
            check=True,
            capture_output=True,
            text=True,
        )

    def _make_pki(self) -> None:
        self._pki("ca")
        self._pki(
            "serving",
            "apiserver",
            "127.0.0.1",
            "localhost",
            SERVICE_IP,
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
        self._pki("client", "admin", ADMIN_USER, "system:masters")
        self._pki("client", "kube-controller-manager", "system:kube-controller-manager")
        # The API server's identity towards kubelets (kubectl logs/exec/port-forward go through it).
        self._pki("client", "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
        self._pki("sa-key")
        # The aggregation layer's front proxy gets its own CA, as in kubeadm clusters.
        self._pki("ca", directory="pki/front-proxy")
        self._pki("client", "client", "front-proxy-client", directory="pki/front-proxy")

    def _write_kubeconfig(
        self, name: str, user: dict[str, str], namespace: str | None = None, filename: str | None = None
    ) -> Path:
        context: dict[str, str] = {"cluster": "atlasrun", "user": name}
        if namespace:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "atlasrun",
                    "cluster": {"server": self.server, "certificate-authority-data": _b64(self.ca_file)},
                }
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": context}],
            "current-context": name,
        }
        path = self._path(filename or f"{name}.kubeconfig")
        path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML, for every client
        path.chmod(0o600)
        return path

    def _client_cert_kubeconfig(self, name: str) -> Path:
        pki = self._path("pki")
        return self._write_kubeconfig(
            name,
            {
                "client-certificate-data": _b64(pki / f"{name}.crt"),
                "client-key-data": _b64(pki / f"{name}.key"),
            },
            filename=f"{name}.kubeconfig",
        )

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log_path = self._path(f"{name}.log")
        self._logs[name] = log_path
        # If this process dies without stopping us (SIGKILL, a hung test killed by CI), the
        # children get SIGTERM from the kernel instead of running on: util-linux's setpriv sets
        # PR_SET_PDEATHSIG and execs the command (the signal follows the thread that started
        # the control plane, so start it from a thread that outlives it, e.g. the main one).
        setpriv = shutil.which("setpriv")
        if setpriv:
            args = [setpriv, "--pdeathsig", "TERM", "--", *args]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
            )
        self._procs.append((name, proc))
        return proc

    def _wait_healthy(
        self, name: str, proc: subprocess.Popen[bytes], check: Callable[[], bool], timeout: float
    ) -> None:
        def ready() -> bool:
            if proc.poll() is not None:
                raise _Exited(proc.returncode)
            return check()

        try:
            wait_for(ready, timeout, f"{name} to become ready")
        except (_Exited, TimeoutError) as exc:
            tail = "\n".join(self.log(name).splitlines()[-40:])
            raise RuntimeError(
                f"{name} did not start: {exc}\n--- last lines of {self._logs[name]} ---\n{tail}"
            ) from None

    def _remaining(self, t0: float) -> float:
        return max(5.0, self.startup_timeout - (time.monotonic() - t0))

    def _etcd_data_dir(self) -> Path:
        # etcd fsyncs every write and this etcd (3.4) has no --unsafe-no-fsync: keep its
        # throw-away data in RAM when /dev/shm is there.
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            self._extra_dirs.append(Path(tempfile.mkdtemp(prefix="atlasrun-etcd-", dir=shm)))
            return self._extra_dirs[-1]
        return self._path("etcd-data")

    def _start_etcd(self, client_port: int, peer_port: int) -> None:
        client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        proc = self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=atlasrun",
                f"--data-dir={self._etcd_data_dir()}",
                "--quota-backend-bytes=1073741824",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=atlasrun={peer}",
                "--initial-cluster-state=new",
                "--logger=zap",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            r = httpx.get(f"{client}/health", timeout=2)
            return r.status_code == 200 and r.json().get("health") == "true"

        self._wait_healthy("etcd", proc, healthy, self.startup_timeout)

    def _start_apiserver(self, port: int, etcd_port: int) -> None:
        t0 = time.monotonic()
        pki = self._path("pki")
        self.server = f"https://127.0.0.1:{port}"
        proc = self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self._path('apiserver-certs')}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Front proxy (aggregation layer); also publishes the requestheader CA that
                # delegating components such as kube-controller-manager expect to find.
                f"--requestheader-client-ca-file={pki / 'front-proxy/ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki / 'front-proxy/client.crt'}",
                f"--proxy-client-key-file={pki / 'front-proxy/client.key'}",
                # To a kubelet (logs, exec): a client certificate, and the kubelet's serving
                # certificate checked against the cluster CA (a node gets one: serving_cert()).
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                "--kubelet-preferred-address-types=InternalIP",
                "--authorization-mode=Node,RBAC",
                # Added to the default admission chain (which already has PodSecurity since 1.25).
                "--enable-admission-plugins=NodeRestriction,PodSecurity",
                # Let PodSecurity (not the cluster-wide switch) decide about privileged pods.
                "--allow-privileged=true",
                # The endpoint reconciler would publish 127.0.0.1 as the `kubernetes` Service
                # endpoint, which Endpoints validation rejects (loopback); no pod can reach it anyway.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *self.apiserver_args,
            ],
        )
        ctx = self.ssl_context()

        def ready() -> bool:
            r = httpx.get(f"{self.server}/readyz", verify=ctx, timeout=5)
            return r.status_code == 200

        self._wait_healthy("kube-apiserver", proc, ready, self._remaining(t0))
        self._client_cert_kubeconfig("admin")

    def _start_controller_manager(self, port: int) -> None:
        t0 = time.monotonic()
        pki = self._path("pki")
        kubeconfig = self._client_cert_kubeconfig("kube-controller-manager")
        proc = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self._path('kcm-certs')}",
                "--leader-elect=false",
                f"--controllers={self.controllers}",
                # Every controller acts as its own ServiceAccount (kube-system/job-controller, ...),
                # as in a real cluster, so their RBAC is exercised too.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--cluster-name=atlasrun",
                "--allocate-node-cidrs=false",
                # Default is /usr/libexec/kubernetes/..., which it would create on the host.
                f"--flex-volume-plugin-dir={self._path('flexvolume')}",
                "--profiling=false",
                *self.controller_manager_args,
            ],
        )

        def healthy() -> bool:
            r = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=5)
            return r.status_code == 200

        self._wait_healthy("kube-controller-manager", proc, healthy, self._remaining(t0))
        if self.controllers == "*" or "serviceaccount-controller" in self.controllers.split(","):
            # The controllers have started once the ServiceAccount controller has done its first sync.
            with self.client() as c:
                self._wait_healthy(
                    "kube-controller-manager",
                    proc,
                    lambda: c.get("/api/v1/namespaces/default/serviceaccounts/default").status_code == 200,
                    self._remaining(t0),
                )


class _Exited(GiveUp):
    def __init__(self, code: int | None) -> None:
        super().__init__(f"exited with status {code}")
