"""The tools that render, lint and check the Helm chart, each pinned and cached under ~/.cache/atlasrun/tools.

- ``ensure_helm()``: the ``helm`` CLI built from the ``helm.sh/helm/v3`` Go module (through the
  Go module proxy) with the same ldflags as Helm's own Makefile, into
  ``<tools>/helm-<version>/bin/helm``. Needs ``go`` (a toolchain at least as new as the module's
  ``go`` directive; ``GOTOOLCHAIN=local``, so no toolchain is downloaded behind your back).
- ``ensure_prometheus()``: ``prometheus`` and ``promtool`` from the Debian package ``prometheus``
  (apt-get when run as root). The package's systemd unit is never left running: the tests start
  their own Prometheus on 127.0.0.1 and stop it.

Both are idempotent: a stamp file marks a finished install and a lock file serializes concurrent
installers (``make chart-tools`` and a test run can race safely)::

    .venv/bin/python charts/tools.py helm prometheus
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TOOLS_DIR = Path(os.environ.get("ATLASRUN_TOOLS_DIR", Path.home() / ".cache" / "atlasrun" / "tools"))
HELM_MODULE = "helm.sh/helm/v3"
HELM_VERSION = "v3.22.0"
# The Kubernetes version Helm assumes when no cluster is asked (``.Capabilities.KubeVersion`` in
# ``helm template``/``helm lint``, and lint's deprecation checks). Helm's Makefile derives it from
# the k8s.io/client-go module its go.mod requires: v0.37.x -> 1.37.
HELM_KUBE_VERSION = ("1", "37")
HELM_BUILD_TIMEOUT_S = 1800
PROMETHEUS_PACKAGE = "prometheus"
# apt-get waits for a dpkg lock held by another install (a second build, unattended-upgrades).
APT_LOCK_WAIT = ("-o", "DPkg::Lock::Timeout=900")


class ToolInstallError(RuntimeError):
    pass


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolInstallError(f"{' '.join(cmd)}: {exc}") from exc
    if proc.returncode != 0:
        raise ToolInstallError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    """An exclusive lock on ``<tools>/.<name>.lock``, so concurrent installers wait for each other."""
    TOOLS_DIR.mkdir(parents=True, exist_ok=True)
    with open(TOOLS_DIR / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


# ---------------------------------------------------------------- helm


def helm_path(version: str = HELM_VERSION) -> Path:
    return TOOLS_DIR / f"helm-{version}" / "bin" / "helm"


def ensure_helm(version: str = HELM_VERSION) -> Path:
    """The ``helm`` binary of ``version``, built with ``go install`` on first use (about a minute
    with a warm module cache, a few minutes cold)."""
    exe = helm_path(version)
    stamp = exe.parent.parent / ".installed"
    if stamp.exists() and exe.exists():
        return exe
    with _lock(f"helm-{version}"):
        if stamp.exists() and exe.exists():
            return exe
        # `go` on PATH, else the toolchain tests/cluster/build-controlplane.sh fetched on a bare machine.
        fetched = sorted((Path.home() / ".cache" / "atlasrun" / "k8s" / "toolchain").glob("*/go/bin/go"))
        go = shutil.which("go") or (str(fetched[-1]) if fetched else None)
        if go is None:
            raise ToolInstallError(
                f"building helm {version} needs the Go toolchain (`go` on PATH, or "
                "run `make controlplane` first, which fetches one)"
            )
        home = exe.parent.parent
        shutil.rmtree(home, ignore_errors=True)
        home.parent.mkdir(parents=True, exist_ok=True)
        major, minor = HELM_KUBE_VERSION
        ldflags = " ".join(
            [
                "-s",
                "-w",
                f"-X {HELM_MODULE}/internal/version.version={version}",
                f"-X {HELM_MODULE}/pkg/lint/rules.k8sVersionMajor={major}",
                f"-X {HELM_MODULE}/pkg/lint/rules.k8sVersionMinor={minor}",
                f"-X {HELM_MODULE}/pkg/chartutil.k8sVersionMajor={major}",
                f"-X {HELM_MODULE}/pkg/chartutil.k8sVersionMinor={minor}",
            ]
        )
        with tempfile.TemporaryDirectory(dir=home.parent, prefix=f".helm-{version}-") as tmp:
            env = {
                **os.environ,
                "GOBIN": str(Path(tmp) / "bin"),
                "CGO_ENABLED": "0",
                "GOTOOLCHAIN": "local",
                "GOFLAGS": "-buildvcs=false",
            }
            _run(
                [go, "install", "-trimpath", "-ldflags", ldflags, f"{HELM_MODULE}/cmd/helm@{version}"],
                env=env,
                timeout=HELM_BUILD_TIMEOUT_S,
            )
            built = Path(tmp) / "bin" / "helm"
            reported = _run([str(built), "version", "--template", "{{ .Version }}"]).strip()
            if reported != version:
                raise ToolInstallError(f"built helm reports version {reported!r}, expected {version!r}")
            home.mkdir(parents=True)
            os.replace(Path(tmp) / "bin", home / "bin")
        stamp.touch()
    return exe


# ---------------------------------------------------------------- prometheus


@dataclass(frozen=True)
class PrometheusTools:
    prometheus: Path
    promtool: Path


def _find_prometheus() -> PrometheusTools | None:
    found = [
        shutil.which(n) or (f"/usr/bin/{n}" if Path(f"/usr/bin/{n}").exists() else None)
        for n in ("prometheus", "promtool")
    ]
    if all(found):
        return PrometheusTools(Path(found[0]), Path(found[1]))  # type: ignore[arg-type]
    return None


def _stop_packaged_service() -> None:
    """Installing the package may start (and enable) its service; nothing of ours should run
    unasked. Stop it through systemd when there is one, else end the daemon apt started (it runs
    as user ``prometheus``; a Prometheus of ours or of a test is never touched)."""
    if shutil.which("systemctl") and Path("/run/systemd/system").is_dir():
        subprocess.run(
            ["systemctl", "disable", "--now", PROMETHEUS_PACKAGE], check=False, capture_output=True
        )
    proc = subprocess.run(
        ["pgrep", "-u", "prometheus", "-x", "prometheus"], check=False, capture_output=True, text=True
    )
    for pid in map(int, proc.stdout.split()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline
        and subprocess.run(
            ["pgrep", "-u", "prometheus", "-x", "prometheus"], check=False, capture_output=True
        ).returncode
        == 0
    ):
        time.sleep(0.2)


def ensure_prometheus() -> PrometheusTools:
    """``prometheus`` and ``promtool`` from the Debian package, apt-get installed when missing and root."""
    found = _find_prometheus()
    if found:
        return found
    with _lock("prometheus"):
        found = _find_prometheus()
        if found:
            return found
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise ToolInstallError(
                "prometheus/promtool are missing; install the Debian package "
                f"`{PROMETHEUS_PACKAGE}` (apt-get install prometheus, as root)"
            )
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", *APT_LOCK_WAIT, "update", "-qq"], env=env)
        try:
            _run(
                [
                    "apt-get",
                    *APT_LOCK_WAIT,
                    "install",
                    "-y",
                    "-qq",
                    "--no-install-recommends",
                    PROMETHEUS_PACKAGE,
                ],
                env=env,
            )
        finally:
            _stop_packaged_service()
        found = _find_prometheus()
        if found is None:
            raise ToolInstallError(
                f"the `{PROMETHEUS_PACKAGE}` package did not provide prometheus and promtool"
            )
        return found


if __name__ == "__main__":
    tools = {"helm": ensure_helm, "prometheus": ensure_prometheus}
    wanted = sys.argv[1:] or list(tools)
    unknown = [t for t in wanted if t not in tools]
    if unknown:
        sys.exit(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(tools)}")
    for tool in wanted:
        try:
            print(tools[tool]())
        except ToolInstallError as exc:
            sys.exit(f"error: {exc}")
