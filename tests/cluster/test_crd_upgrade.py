"""Upgrading the chart keeps existing AtlasRuns: the documented CRD step, then ``helm upgrade``.

Helm never upgrades what a chart ships under ``crds/``, so the chart README's upgrade is
``kubectl apply --server-side --force-conflicts -f charts/atlasrun/crds/atlasrun.yaml`` and then
``helm upgrade``. This test runs exactly that on the real API server, from the CRD of chart 0.1.0
(``data/atlasrun-crd-0.1.0.yaml``: no placement, no field descriptions) created the way
``helm install`` creates it, with runs (spec and status) made under it: after the upgrade they
are unchanged, still editable where the spec allows, still immutable where it does not, and new
fields (``spec.cluster.placement``) are kept instead of pruned. ``helm upgrade`` of the release
with new policy values changes the Deployment's ``checksum/policy`` annotation (the operator rolls).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.controlplane import ControlPlane, binaries_or_skip, wait_for
from cluster.tenant import crd_established

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "atlasrun"
PREVIOUS_CRD = Path(__file__).resolve().parent / "data" / "atlasrun-crd-0.1.0.yaml"
RUNS = "/apis/atlasrun.dev/v1alpha1/namespaces/evals/atlasruns"
MERGE = {"Content-Type": "application/merge-patch+json"}
DIGEST = "sha256:" + "ab" * 32
# The chart README's upgrade step, verbatim (test_chart_platform.py checks the README has it).
UPGRADE_CRD = ("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds" / "atlasrun.yaml"))


@pytest.fixture(scope="module")
def cp() -> Iterator[ControlPlane]:
    with ControlPlane(binaries_or_skip()) as plane:
        yield plane


def run(name: str, **cluster: Any) -> dict[str, Any]:
    return {
        "apiVersion": "atlasrun.dev/v1alpha1",
        "kind": "AtlasRun",
        "metadata": {"name": name},
        "spec": {
            "tasks": {"configMap": "starter-tasks"},
            "models": [{"name": "m", "model": "openai/m", "apiBase": "https://api.openai.com/v1"}],
            "parallelism": 2,
            "cluster": {"runnerImage": "registry.example/runner@" + DIGEST, **cluster},
        },
    }


def helm_bin() -> Path:
    from charts.tools import ensure_helm

    return Path(ensure_helm())


def helm(cp: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(helm_bin()), *args, f"--kubeconfig={cp.kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_crd_upgrade_keeps_runs_and_accepts_new_fields(cp: ControlPlane) -> None:
    api = cp.client()
    # helm install creates crds/ with a plain create (no server-side apply field manager).
    cp.kubectl("create", "-f", str(PREVIOUS_CRD))
    wait_for(lambda: crd_established(cp), 60, "the 0.1.0 CRD established")
    cp.create_namespace("evals")
    for manifest in (run("old-plain"), run("old-suspended", suspend=True)):
        api.post(RUNS, json=manifest).raise_for_status()
    status = {"phase": "Running", "progress": "3/12", "observedGeneration": 1}
    api.patch(f"{RUNS}/old-plain/status", json={"status": status}, headers=MERGE).raise_for_status()
    placed = run("placed-before", placement={"nodeSelector": {"pool": "eval"}})
    created = api.post(RUNS, json=placed)
    created.raise_for_status()
    assert "placement" not in created.json()["spec"]["cluster"]  # the 0.1.0 schema prunes it
    before = {r["metadata"]["name"]: r for r in api.get(RUNS).json()["items"]}

    result = cp.kubectl(*UPGRADE_CRD)
    assert "serverside-applied" in result.stdout, result.stdout + result.stderr
    wait_for(lambda: crd_established(cp), 60, "the upgraded CRD established")
    crd = api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/atlasruns.atlasrun.dev").json()
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    schema = root["spec"]
    assert "placement" in schema["properties"]["cluster"]["properties"]
    assert schema["properties"]["tasks"]["description"]  # descriptions arrived (kubectl explain)

    after = {r["metadata"]["name"]: r for r in api.get(RUNS).json()["items"]}
    assert sorted(after) == sorted(before)
    for name, old in before.items():
        new = after[name]
        assert new["metadata"]["uid"] == old["metadata"]["uid"], name
        # The API server applies the new schema's defaults when it reads a stored object: fields
        # added since 0.1.0 (spec.cluster.itemsPerPod, status.schemaVersion) appear with their
        # defaults, nothing else moves.
        assert new["spec"] == _with_new_defaults(old["spec"], schema), name
        assert new.get("status") == _with_new_defaults(old.get("status"), root["status"]), name
    assert after["old-plain"]["status"]["progress"] == "3/12"

    # Still editable where the spec allows, immutable where it does not (CEL transition rules).
    path = f"{RUNS}/old-suspended"
    api.patch(
        path, json={"spec": {"cluster": {"suspend": False}, "parallelism": 4}}, headers=MERGE
    ).raise_for_status()
    refused = api.patch(path, json={"spec": {"repeats": 3}}, headers=MERGE)
    assert refused.status_code == 422 and "spec.repeats is immutable" in refused.text
    # New fields are kept now.
    kept = api.post(RUNS, json=run("placed-after", placement={"nodeSelector": {"pool": "eval"}}))
    kept.raise_for_status()
    assert kept.json()["spec"]["cluster"]["placement"] == {"nodeSelector": {"pool": "eval"}}
    explained = cp.kubectl("explain", "atlasrun.spec.cluster.placement").stdout
    assert "nodeSelector" in explained and "Pod nodeSelector" in explained


def test_helm_upgrade_rolls_the_operator_when_the_policy_changes(cp: ControlPlane) -> None:
    api = cp.client()
    if not crd_established(cp):  # run alone: the CRD as an install from this chart has it
        cp.kubectl(*UPGRADE_CRD)
        wait_for(lambda: crd_established(cp), 60, "the CRD established")
    cp.create_namespace("atlasrun-system")
    common = ["--namespace", "atlasrun-system", "--set", f"image.digest={DIGEST}", "--skip-crds"]
    helm(cp, "install", "atlasrun", str(CHART), *common)
    deployment = "/apis/apps/v1/namespaces/atlasrun-system/deployments/atlasrun"

    def annotation() -> str:
        d = api.get(deployment).json()
        return str(d["spec"]["template"]["metadata"]["annotations"]["checksum/policy"])

    first = annotation()
    chart_label = api.get(deployment).json()["metadata"]["labels"]["helm.sh/chart"]
    assert chart_label == f"atlasrun-{yaml.safe_load((CHART / 'Chart.yaml').read_text())['version']}"
    helm(cp, "upgrade", "atlasrun", str(CHART), *common, "--set", "policy.allowedApiHosts[0]=api.openai.com")
    assert annotation() != first
    configmap = api.get("/api/v1/namespaces/atlasrun-system/configmaps/atlasrun-policy").json()
    assert json.loads(configmap["data"]["ATLASRUN_POLICY"])["allowedApiHosts"] == ["api.openai.com"]
    # An upgrade that changes nothing else keeps the checksum (no needless restarts).
    before = annotation()
    helm(
        cp,
        "upgrade",
        "atlasrun",
        str(CHART),
        *common,
        "--set",
        "policy.allowedApiHosts[0]=api.openai.com",
        "--set",
        "resyncSeconds=120",
    )
    assert annotation() == before


def _with_new_defaults(old: Any, schema: dict[str, Any]) -> Any:
    """``old`` with the defaults the upgraded ``schema`` gives to object fields it lacks."""
    if not isinstance(old, dict):
        return old
    props = schema.get("properties", {})
    out = {k: _with_new_defaults(v, props.get(k, {})) for k, v in old.items()}
    for key, sub in props.items():
        if key not in out and "default" in sub:
            out[key] = sub["default"]
    return out
