"""The AtlasRun API on a real kube-apiserver: `kubectl explain` shows the field descriptions,
and the chart's aggregated ClusterRoles let namespace `edit` users create AtlasRuns while
`view` users only read them.

Needs the control-plane binaries (tests/cluster/build-controlplane.sh) and helm
(`.venv/bin/python charts/tools.py helm`).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.controlplane import ControlPlane, wait_for
from cluster.tenant import control_plane_with_crd

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "atlasrun"


def _helm() -> Path:
    spec = importlib.util.spec_from_file_location("atlasrun_chart_tools_rbac", REPO / "charts" / "tools.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return Path(module.ensure_helm())


@pytest.fixture(scope="module")
def cp() -> Iterator[ControlPlane]:
    with control_plane_with_crd() as plane:
        yield plane


def test_kubectl_explain_shows_descriptions(cp: ControlPlane) -> None:
    # The API server publishes a new CRD's OpenAPI a moment after it is Established.
    explain = lambda: cp.kubectl("explain", "atlasrun.spec.limits.maxTurns", check=False)  # noqa: E731
    out = wait_for(lambda: explain().stdout, 60, "kubectl explain atlasrun")
    assert "Model turns per task" in out
    out = cp.kubectl("explain", "atlasrun.spec.servers.inline.package.version").stdout
    assert "The exact pinned version." in out
    out = cp.kubectl("explain", "atlasrun.spec.cluster.placement.nodeSelector").stdout
    assert "Pod nodeSelector." in out


def _run(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "atlasrun.dev/v1alpha1",
        "kind": "AtlasRun",
        "metadata": {"name": name},
        "spec": {"tasks": {"path": "t.jsonl"}, "models": [{"name": "m"}]},
    }


def test_aggregated_roles_give_edit_create_and_view_read(cp: ControlPlane, tmp_path: Path) -> None:
    rendered = _render_chart(tmp_path)
    roles = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ClusterRole"]
    names = {r["metadata"]["name"] for r in roles if r["metadata"]["name"].startswith("atlasrun-")}
    assert {"atlasrun-view", "atlasrun-edit"} <= names
    manifest = tmp_path / "roles.yaml"
    manifest.write_text(yaml.safe_dump_all([r for r in roles if r["metadata"]["name"] in names]))
    cp.kubectl("apply", "-f", str(manifest))
    cp.create_namespace("team-a")
    for user, role in (("editor", "edit"), ("viewer", "view")):
        cp.kubectl(
            "create",
            "rolebinding",
            f"{user}-{role}",
            f"--clusterrole={role}",
            f"--user={user}",
            "-n",
            "team-a",
        )
    editor = cp.user_kubeconfig("editor", namespace="team-a")
    viewer = cp.user_kubeconfig("viewer", namespace="team-a")

    def can(kubeconfig: Path, verb: str) -> str:
        return cp.kubectl(
            "auth",
            "can-i",
            verb,
            "atlasruns.atlasrun.dev",
            "-n",
            "team-a",
            kubeconfig=kubeconfig,
            check=False,
        ).stdout.strip()

    # The clusterrole-aggregation controller folds the labelled roles into view/edit.
    wait_for(lambda: can(editor, "create") == "yes", 60, "edit aggregates atlasrun-edit")
    created = cp.kubectl("create", "-f", "-", kubeconfig=editor, input=json.dumps(_run("r1")), check=False)
    assert created.returncode == 0, created.stderr
    wait_for(lambda: can(viewer, "list") == "yes", 60, "view aggregates atlasrun-view")
    listed = cp.kubectl("get", "atlasruns", "-o", "name", kubeconfig=viewer)
    assert listed.stdout.strip() == "atlasrun.atlasrun.dev/r1"
    refused = cp.kubectl("create", "-f", "-", kubeconfig=viewer, input=json.dumps(_run("r2")), check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()
    deleted = cp.kubectl("delete", "atlasrun", "r1", kubeconfig=viewer, check=False)
    assert deleted.returncode != 0 and "forbidden" in deleted.stderr.lower()
    # No operator runs here: the run carries no finalizer, so an editor's delete completes.
    assert (
        cp.kubectl("get", "atlasrun", "r1", "-n", "team-a", "-o", "jsonpath={.metadata.finalizers}").stdout
        == ""
    )
    cp.kubectl("delete", "atlasrun", "r1", "--wait=true", "--timeout=30s", kubeconfig=editor)
    gone = cp.kubectl("get", "atlasrun", "r1", "-n", "team-a", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def _render_chart(tmp_path: Path) -> str:
    out = subprocess.run(
        [
            str(_helm()),
            "template",
            "rel",
            str(CHART),
            "--namespace",
            "atlasrun-system",
            "--set",
            "image.digest=sha256:" + "0" * 64,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return out.stdout
