"""The operator's identity in tests: its ServiceAccount and RBAC exactly as the Helm chart renders them.

The chart is the single source of the operator's permissions, so the tests (and the
operator benchmark) install ``templates/serviceaccount.yaml`` and ``templates/rbac.yaml``
from ``helm template`` and run the operator with that ServiceAccount's token only.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from charts.tools import ensure_helm

from cluster.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[2]
RELEASE = "atlasrun"
DIGEST = "sha256:" + "0" * 64  # the chart requires a pinned operator image; nothing pulls it here


def install_operator_rbac(cp: ControlPlane, namespace: str, watch: list[str] | None = None) -> Path:
    """Apply the chart's ServiceAccount + RBAC (operator in ``namespace``, watching ``watch``);
    return a kubeconfig that authenticates as that ServiceAccount."""
    helm = ensure_helm()
    args = [
        str(helm),
        "template",
        RELEASE,
        str(REPO / "charts" / "atlasrun"),
        "--namespace",
        namespace,
        "--set",
        f"image.digest={DIGEST}",
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/rbac.yaml",
    ]
    for i, ns in enumerate(watch or [namespace]):
        args += ["--set", f"watchNamespaces[{i}]={ns}"]
    rendered = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    cp.kubectl("apply", "-f", "-", input=rendered)
    account = next(
        doc["metadata"]["name"]
        for doc in yaml.safe_load_all(rendered)
        if doc and doc.get("kind") == "ServiceAccount"
    )
    token = cp.service_account_token(namespace, account)
    # One file per namespace: the ServiceAccount has the same name in every tenant namespace, and
    # a shared file would hand one test's operator another namespace's identity.
    return cp.token_kubeconfig(token, name=f"{account}-{namespace}", namespace=namespace)
