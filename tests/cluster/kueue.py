"""The real Kueue (sigs.k8s.io/kueue v0.15.0) against the project's control plane.

``Kueue(cp)`` installs Kueue's CRDs and its webhooks for its own resources and batch Jobs, then
runs the ``kueue`` controller manager built by ``build-kueue.sh`` (from the Go module proxy) as a
child process, with the cluster admin's kubeconfig; a context manager::

    with ControlPlane() as cp, Kueue(cp) as kueue:
        kueue.cluster_queue("team", {"cpu": "1", "memory": "1Gi"})
        kueue.local_queue("evals", "team-a", "team")

How it differs from a Deployment of Kueue, and why:
- The API version Kueue v0.15 works in is ``v1beta2``, while its CRDs store ``v1beta1`` and rely on
  its conversion webhook; here ``v1beta2`` is made the storage version instead (a fresh cluster
  has nothing stored), so no conversion is ever needed.
- TLS: ``internalCertManagement`` is off (it issues certificates for ``<service>.<ns>.svc``, which
  the API server cannot reach here). The webhook server gets a certificate for 127.0.0.1 from
  the control plane's test CA, and the webhook configurations call it by URL with that CA.
  Kueue then insists on a metrics certificate at the fixed path /etc/kueue/metrics/certs: the
  process runs in its own mount namespace with a temporary directory bound over /etc (nothing
  on the host changes; Kueue needs nothing else from /etc).
- ``VisibilityOnDemand`` is off (an aggregated API server on the fixed port 8082); leader
  election is off; only the ``batch/job`` integration is enabled.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Self

import httpx
import yaml

from cluster.controlplane import ControlPlane, free_ports, stop_process, wait_for

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-kueue.sh"
API = "/apis/kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"


class KueueMissing(RuntimeError):
    """Kueue is not built yet (run tests/cluster/build-kueue.sh)."""


def find_kueue(build: bool = False) -> tuple[Path, Path]:
    """(kueue binary, directory of its CRDs and webhook manifests) from ``build-kueue.sh``."""
    cmd = ["bash", str(BUILD_SCRIPT)] + ([] if build else ["--check"])
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if build else subprocess.PIPE, text=True)
    if proc.returncode == 3:
        raise KueueMissing(f"{(proc.stderr or '').strip()}\nbuild it with: bash {BUILD_SCRIPT}")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr}")
    paths = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return Path(paths["KUEUE"]), Path(paths["KUEUE_CRDS"])


def kueue_or_skip() -> tuple[Path, Path]:
    """Kueue for a test, else a skip saying how to build it (a failure with ATLASRUN_REQUIRE_CLUSTER)."""
    import pytest

    try:
        return find_kueue()
    except KueueMissing as exc:
        if os.environ.get("ATLASRUN_REQUIRE_CLUSTER"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def _crds(directory: Path) -> list[dict[str, Any]]:
    """Kueue's CRDs with ``v1beta2`` as the storage version (see the module docstring)."""
    out = []
    for path in sorted(directory.glob("kueue.x-k8s.io_*.yaml")):
        crd = yaml.safe_load(path.read_text())
        names = {v["name"] for v in crd["spec"]["versions"]}
        if "v1beta2" in names:
            for version in crd["spec"]["versions"]:
                version["storage"] = version["name"] == "v1beta2"
        crd["spec"].pop("conversion", None)
        out.append(crd)
    return out


def _webhooks(manifests: Path, port: int, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations for its own resources and batch Jobs, called by URL."""
    out = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc:
            continue
        kept = []
        for hook in doc.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if not groups & {"kueue.x-k8s.io", "batch"}:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca).decode(),
            }
            kept.append(hook)
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        doc["webhooks"] = kept
        out.append(doc)
    return out


class Kueue:
    def __init__(self, cp: ControlPlane, binary: Path | None = None, manifests: Path | None = None) -> None:
        if binary is None or manifests is None:
            binary, manifests = find_kueue()
        self.cp, self.binary, self.manifests = cp, binary, manifests
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir: Path | None = None
        self.health_port = 0

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "kueue.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.workdir else ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        cp = self.cp
        assert cp.workdir is not None
        self.workdir = Path(tempfile.mkdtemp(prefix="atlasrun-kueue-"))
        webhook_port, health_port = free_ports(2)
        self.health_port = health_port
        crds = _crds(self.manifests)
        cp.kubectl("apply", "--server-side", "-f", "-", input="\n---\n".join(yaml.safe_dump(c) for c in crds))
        for crd in crds:
            name = crd["metadata"]["name"]
            wait_for(
                lambda n=name: (
                    "True"
                    in cp.kubectl(
                        "get",
                        "crd",
                        n,
                        "-o",
                        "jsonpath={.status.conditions[?(@.type=='Established')].status}",
                    ).stdout
                ),
                60,
                f"CRD {name} established",
            )
        with cp.client() as api:
            if api.get(f"/api/v1/namespaces/{NAMESPACE}").status_code == 404:
                cp.create_namespace(NAMESPACE, wait_for_default_sa=False)
        # Certificates: the webhook server's for 127.0.0.1, and the metrics one Kueue demands.
        pki = cp.workdir / "pki"
        subprocess.run(
            [str(cp.binaries.pki), "serving", str(pki), "kueue", "127.0.0.1", "localhost"], check=True
        )
        certs = self.workdir / "webhook-certs"
        etc = self.workdir / "etc"
        metrics_certs = etc / "kueue" / "metrics" / "certs"
        for directory in (certs, metrics_certs):
            directory.mkdir(parents=True)
            shutil.copy(pki / "kueue.crt", directory / "tls.crt")
            shutil.copy(pki / "kueue.key", directory / "tls.key")
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["batch/job"]},
        }
        config_path = self.workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        args = [
            "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", 'mount --bind "$1" /etc && shift && exec "$@"', "sh", str(etc),
            str(self.binary), f"--config={config_path}", "--feature-gates=VisibilityOnDemand=false",
            "--zap-log-level=3",
        ]  # fmt: skip
        setpriv = shutil.which("setpriv")
        if setpriv:
            args = [setpriv, "--pdeathsig", "TERM", "--", *args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                args,
                env={**os.environ, "KUBECONFIG": str(cp.kubeconfig)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"kueue exited ({self.proc.returncode}):\n{self.log()[-4000:]}")
            return httpx.get(f"http://127.0.0.1:{health_port}/readyz", timeout=2).status_code == 200

        try:
            wait_for(ready, 120, "Kueue ready")
            # Webhooks only once the server answers (failurePolicy: Fail).
            hooks = _webhooks(self.manifests / "webhook.yaml", webhook_port, (pki / "ca.crt").read_bytes())
            cp.kubectl(
                "apply", "--server-side", "-f", "-", input="\n---\n".join(yaml.safe_dump(h) for h in hooks)
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_process(self.proc, 20)
        if self.workdir and not os.environ.get("ATLASRUN_KEEP_CONTROLPLANE"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ queues

    def apply(self, obj: dict[str, Any]) -> None:
        self.cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))

    def resource_flavor(self, name: str = "default") -> None:
        self.apply(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}}
        )

    def cluster_queue(self, name: str, quota: dict[str, str], flavor: str = "default") -> None:
        """A ClusterQueue for every namespace with ``quota`` (nominal) of ``flavor``."""
        self.resource_flavor(flavor)
        self.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": sorted(quota),
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [
                                        {"name": r, "nominalQuota": q} for r, q in sorted(quota.items())
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
        )

    def local_queue(self, namespace: str, name: str, cluster_queue: str) -> None:
        self.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": cluster_queue},
            }
        )

    def workloads(self, namespace: str) -> list[dict[str, Any]]:
        with self.cp.client() as api:
            r = api.get(f"{API}/namespaces/{namespace}/workloads")
            r.raise_for_status()
            return list(r.json()["items"])
