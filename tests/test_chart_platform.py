"""The chart's shared-cluster values (policy, runPlacement, runEgress, kueue, admissionPolicy) rendered
by the real helm: the operator reads them through envFrom with its own parsers, a change rolls
it, the schema refuses bad values, and the ValidatingAdmissionPolicy is well formed. Its behaviour
on a real API server is in tests/cluster/test_platform.py; the CRD upgrade in
tests/cluster/test_crd_upgrade.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.cluster.operator.egress import RunEgress
from atlasrun.cluster.operator.placement import chart_defaults
from atlasrun.cluster.operator.policy import Policy
from atlasrun.cluster.operator.queueing import default_queue
from test_chart import CHART, DIGEST, chart_tools, one, render, run_helm, values_file

README = CHART / "README.md"


@pytest.fixture(scope="module")
def helm() -> Path:
    try:
        return Path(chart_tools.ensure_helm())
    except chart_tools.ToolInstallError as exc:
        pytest.fail(f"{exc}\n(run: .venv/bin/python charts/tools.py helm)")


def deployment_annotations(docs: list[dict[str, Any]]) -> dict[str, str]:
    return dict(one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"])


def test_operator_reads_the_policy_configmap_with_its_own_parsers(helm: Path) -> None:
    docs = render(helm, "-f", str(values_file("platform")))
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    (source,) = container["envFrom"]
    (configmap,) = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == source["configMapRef"]["name"]
    ]
    env = configmap["data"]
    policy = Policy.from_env(env)
    assert policy.allowed_api_hosts == ["api.openai.com", "*.openai.azure.com"]
    assert policy.namespace_api_hosts == {"team-a": ["llm.team-a.internal"], "sandbox": []}
    placement = chart_defaults(env)
    assert placement.priority_class_name == "atlasrun-batch" and placement.data_volume_size == "4Gi"
    egress = RunEgress.from_env(env)
    assert egress.object_store is not None and egress.object_store.ports == [9000]
    assert egress.dns[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == "openshift-dns"
    assert default_queue(env) == "evals"
    defaults = render(helm, "--set", f"image.digest={DIGEST}")
    (cm,) = [d for d in defaults if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-policy")]
    assert Policy.from_env(cm["data"]) == Policy() and RunEgress.from_env(cm["data"]) == RunEgress()
    assert default_queue(cm["data"]) is None


def test_a_changed_policy_rolls_the_operator_and_nothing_else_does(helm: Path) -> None:
    base = ["--set", f"image.digest={DIGEST}"]
    first = deployment_annotations(render(helm, *base))["checksum/policy"]
    for change in (
        "policy.allowUnpinnedImages=true",
        "runPlacement.dataVolumeSize=8Gi",
        "runEgress.objectStore.ports[0]=9000",
        "kueue.defaultQueueName=team-a",
    ):
        assert deployment_annotations(render(helm, *base, "--set", change))["checksum/policy"] != first, (
            change
        )
    assert (
        deployment_annotations(render(helm, *base, "--set", "resyncSeconds=60"))["checksum/policy"] == first
    )
    with_pod_annotation = deployment_annotations(render(helm, *base, "--set", "podAnnotations.team=evals"))
    assert with_pod_annotation == {"checksum/policy": first, "team": "evals"}


def test_admission_policy_renders_only_when_enabled(helm: Path) -> None:
    assert not [d for d in render(helm, "--set", f"image.digest={DIGEST}") if "Admission" in d["kind"]]
    docs = render(helm, "-f", str(values_file("platform")), "--set", "watchNamespaces={team-a,sandbox}")
    vap, binding = one(docs, "ValidatingAdmissionPolicy"), one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == vap["metadata"]["name"] and binding["spec"][
        "validationActions"
    ] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]
    assert selector["values"] == ["team-a", "sandbox"]
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert all(v["reason"] == "Forbidden" for v in vap["spec"]["validations"])
    patterns = next(v for v in vap["spec"]["variables"] if v["name"] == "hostPatterns")["expression"]
    assert r"'team-a': r'^(llm\.team-a\.internal)$'" in patterns and "'sandbox': r'^()$'" in patterns
    default = next(v for v in vap["spec"]["variables"] if v["name"] == "hostPattern")["expression"]
    assert r"^(api\.openai\.com|.*\.openai\.azure\.com)$" in default


def test_operator_may_read_kueue_workloads(helm: Path) -> None:
    role = next(
        d
        for d in render(helm, "--set", f"image.digest={DIGEST}")
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "atlasrun"
    )
    rules = [r for r in role["rules"] if "kueue.x-k8s.io" in r["apiGroups"]]
    assert rules == [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "patch"]}
    ]


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ("runEgress.objectStore.ports[0]=70000", "runEgress.objectStore.ports"),
        ("runEgress.dnsServers=x", "runEgress"),
        ("policy.allowedApiHosts[0]=bad host'", "policy.allowedApiHosts"),
        ("policy.namespaceApiHosts.team=x", "policy.namespaceApiHosts.team"),
        ("admissionPolicy.enabled=yes", "admissionPolicy.enabled"),
        ("kueue.defaultQueueName=Team_A", "kueue.defaultQueueName"),
    ],
)
def test_schema_refuses_bad_platform_values(helm: Path, bad: str, where: str) -> None:
    proc = run_helm(helm, "template", "atlasrun", str(CHART), "--set", f"image.digest={DIGEST}", "--set", bad)
    assert proc.returncode != 0 and where.split(".")[0] in proc.stderr, proc.stderr


def test_readme_documents_the_tested_crd_upgrade() -> None:
    from cluster.test_crd_upgrade import UPGRADE_CRD

    text = README.read_text()
    command = "kubectl " + " ".join(UPGRADE_CRD).replace(str(CHART.parents[1]) + "/", "")
    assert command in text, command
    assert "helm upgrade atlasrun charts/atlasrun" in text
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    assert tuple(int(x) for x in version.split(".")) > (0, 1, 0)
