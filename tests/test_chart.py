"""The Helm chart (charts/atlasrun), checked with the real tools rather than by reading YAML alone.

- ``helm`` (v3, built from the ``helm.sh/helm/v3`` Go module by ``charts/tools.py``) lints the chart
  with ``--strict`` and renders it with the default values and the variants in
  ``charts/atlasrun/ci/*-values.yaml``; ``values.schema.json`` makes helm reject bad values.
- Every rendered object passes ``kubernetes-validate --strict`` for each Kubernetes version in
  ``tests/tools.py``, except the monitoring.coreos.com objects (ServiceMonitor, PrometheusRule:
  no schemas there), which are checked structurally.
- The RBAC is least privilege: exactly the rules the operator needs (cross-checked against the
  API calls in operator.py), no secrets, pods/exec, pods/log or wildcards.
- The PrometheusRule passes ``promtool check rules`` and ``promtool test rules`` (each alert fires
  on a synthetic bad series and stays quiet on a healthy one).
- Every Grafana panel's PromQL is run against a real Prometheus (the Debian package) scraping a
  real exporter built from ``atlasrun.cluster.metrics``, and must return data.
- (``cluster`` mark) ``helm install`` on a real kube-apiserver, then the operator, run with the
  Deployment's args and env and the chart ServiceAccount's token, reconciles runs without a 403.

Tools: ``.venv/bin/python charts/tools.py helm prometheus`` and
``.venv/bin/python tests/tools.py kubernetes-validate`` (``make chart-tools tools``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server

from atlasrun.cluster import metrics as metrics_module
from atlasrun.cluster.crd import render_yaml
from atlasrun.cluster.metrics import Metrics
from atlasrun.servers.instance import free_port
from tools import KUBERNETES_VERSIONS, ensure_kubernetes_validate
from tools import ToolInstallError as KubernetesValidateInstallError

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "atlasrun"
RELEASE, NAMESPACE = "atlasrun", "atlasrun-system"
FULLNAME = "atlasrun"  # the release name already contains the chart name
METRICS_JOB = f"{FULLNAME}-metrics"
DIGEST = "sha256:" + "ab" * 32
VARIANTS = sorted(p.name.removesuffix("-values.yaml") for p in (CHART / "ci").glob("*-values.yaml"))
MONITORING_GROUP = "monitoring.coreos.com"


def _load_chart_tools() -> Any:
    """charts/tools.py (imported by path: tests/tools.py already owns the name ``tools``)."""
    spec = importlib.util.spec_from_file_location("atlasrun_chart_tools", ROOT / "charts" / "tools.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


chart_tools = _load_chart_tools()


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return chart_tools.ensure_helm()
    except chart_tools.ToolInstallError as exc:
        pytest.fail(f"{exc}\n(run: .venv/bin/python charts/tools.py helm)")


@pytest.fixture(scope="session")
def prom_tools() -> Any:
    try:
        return chart_tools.ensure_prometheus()
    except chart_tools.ToolInstallError as exc:
        pytest.fail(f"{exc}\n(run as root: .venv/bin/python charts/tools.py prometheus)")


@pytest.fixture(scope="session")
def kubernetes_validate() -> Path:
    try:
        return ensure_kubernetes_validate()
    except KubernetesValidateInstallError as exc:
        pytest.fail(f"{exc}\n(run: .venv/bin/python tests/tools.py kubernetes-validate)")


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], check=False, capture_output=True, text=True, timeout=120)


def values_file(variant: str) -> Path:
    return CHART / "ci" / f"{variant}-values.yaml"


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds", *args)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@pytest.fixture(scope="module")
def rendered(helm: Path) -> dict[str, list[dict[str, Any]]]:
    return {variant: render(helm, "-f", str(values_file(variant))) for variant in VARIANTS}


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def dashboards(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """file name -> dashboard JSON, from the ConfigMaps the Grafana sidecar loads."""
    found = {}
    for cm in of_kind(docs, "ConfigMap"):
        if cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1":
            for key, text in cm["data"].items():
                found[key] = json.loads(text)
    return found


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold their panels


# ---------------------------------------------------------------- the chart and its tools


def test_tools_are_pinned_and_idempotent(helm: Path, prom_tools: Any) -> None:
    assert helm == chart_tools.ensure_helm()  # second call: the cached build, no rebuild
    assert helm.parent.parent.name == f"helm-{chart_tools.HELM_VERSION}"
    proc = run_helm(helm, "version", "--template", "{{ .Version }}")
    assert proc.stdout.strip() == chart_tools.HELM_VERSION
    assert re.match(
        r"^promtool, version [0-9]+\.",
        subprocess.run(
            [str(prom_tools.promtool), "--version"], capture_output=True, text=True, check=True
        ).stdout,
    )


def test_chart_crd_is_the_generated_crd() -> None:
    """crds/ in the chart is a copy of crds/atlasrun.yaml (`python -m atlasrun.cluster.crd`)."""
    chart_crd = (CHART / "crds" / "atlasrun.yaml").read_text()
    assert chart_crd == (ROOT / "crds" / "atlasrun.yaml").read_text(), (
        "charts/atlasrun/crds/atlasrun.yaml is stale: cp crds/atlasrun.yaml charts/atlasrun/crds/"
    )
    assert chart_crd == render_yaml()


@pytest.mark.parametrize("variant", [None, *VARIANTS])
def test_lint_strict(helm: Path, variant: str | None) -> None:
    args = ["-f", str(values_file(variant))] if variant else []
    proc = run_helm(helm, "lint", "--strict", str(CHART), *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "0 chart(s) failed" in out and "[WARNING]" not in out and "[ERROR]" not in out, out


def test_the_operator_image_digest_is_required(helm: Path) -> None:
    proc = run_helm(helm, "template", RELEASE, str(CHART))
    assert proc.returncode != 0
    assert "image.digest is required" in proc.stderr and "sha256" in proc.stderr


def test_images_lock_pins_install(helm: Path) -> None:
    """The install command of the chart's README, with the digests of images/images.lock."""
    lock_path = ROOT / "images" / "images.lock"
    images = (yaml.safe_load(lock_path.read_text()) or {}).get("images", {}) if lock_path.exists() else {}
    if not {"operator", "runner"} <= set(images):
        pytest.skip("images/images.lock has no operator and runner digests yet (images/build.sh)")
    operator, runner = images["operator"], images["runner"]
    assert (
        operator.split("@")[0] == yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]
    )
    docs = render(
        helm,
        "--set",
        f"image.repository={operator.split('@')[0]}",
        "--set",
        f"image.digest={operator.split('@')[1]}",
        "--set",
        f"runnerImage.repository={runner.split('@')[0]}",
        "--set",
        f"runnerImage.digest={runner.split('@')[1]}",
    )
    c = container(docs)
    assert c["image"] == operator
    assert {"name": "ATLAS_RUNNER_IMAGE", "value": runner} in c["env"]


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        (["--set", "image.digest=latest"], "/image/digest"),
        (["--set", "image.digest=sha256:ABCDEF"], "/image/digest"),
        (["--set", "image.repository=ghcr.io/atlasrun/operator:latest"], "/image/repository"),
        (["--set", "runnerImage.repository=ghcr.io/atlasrun/runner"], "/runnerImage/digest"),
        (["--set", "watchNamespaces={Evals_A}"], "/watchNamespaces/0"),
        (["--set", "metrics.port=0"], "/metrics/port"),
        (["--set", "logFormat=xml"], "/logFormat"),
        (
            ["--set", "prometheusRule.alerts.runBlocked.for=5 minutes"],
            "/prometheusRule/alerts/runBlocked/for",
        ),
        (["--set", "networkPolicy.operator.enabled=true"], "/networkPolicy/operator/apiServerCIDRs"),
        (["--set", "replicaCount=2"], "additional properties 'replicaCount' not allowed"),
        (["--set", "runPlacement.activeDeadlineSeconds=0"], "/runPlacement/activeDeadlineSeconds"),
        (["--set", "policy.allowUnpinnedImages=maybe"], "/policy/allowUnpinnedImages"),
    ],
)
def test_schema_rejects_bad_values(helm: Path, bad: list[str], where: str) -> None:
    for command in (["template", RELEASE], ["lint", "--strict"]):
        proc = run_helm(helm, *command, str(CHART), "--set", f"image.digest={DIGEST}", *bad)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, f"helm {command[0]} accepted {bad}"
        assert "values don't meet the specifications of the schema" in out and where in out, out


def test_kube_version_floor(helm: Path) -> None:
    ok = run_helm(
        helm, "template", RELEASE, str(CHART), "--set", f"image.digest={DIGEST}", "--kube-version", "1.31.0"
    )
    old = run_helm(
        helm, "template", RELEASE, str(CHART), "--set", f"image.digest={DIGEST}", "--kube-version", "1.30.0"
    )
    assert ok.returncode == 0, ok.stderr
    assert old.returncode != 0 and "incompatible with Kubernetes v1.30.0" in old.stderr


# ---------------------------------------------------------------- what each variant renders


def test_variants_render_the_expected_objects(rendered: dict[str, list[dict[str, Any]]]) -> None:
    kinds = {v: sorted(d["kind"] for d in docs) for v, docs in rendered.items()}
    common = ["ConfigMap", "CustomResourceDefinition", "Deployment", "Service", "ServiceAccount"]
    common += ["Role", "RoleBinding"]  # leader election's Lease (leaderElection.enabled, default true)
    operator_rbac = ["ClusterRole", "ClusterRoleBinding"]
    scanning_rbac = ["ClusterRole", "ClusterRoleBinding"]  # rbac.kopfScanning (default true)
    policy = ["ConfigMap"]  # values.policy for the operator
    user_roles = ["ClusterRole", "ClusterRole"]  # atlasrun-view/atlasrun-edit (userRoles.create)
    cluster_wide = operator_rbac + scanning_rbac + user_roles + policy
    assert kinds["default"] == sorted(common + cluster_wide)
    assert kinds["monitoring"] == sorted(common + cluster_wide + ["PrometheusRule", "ServiceMonitor"])
    assert kinds["cilium"] == sorted(common + cluster_wide + ["NetworkPolicy"])
    assert kinds["minimal"] == sorted(common + operator_rbac)  # the ConfigMap: policy, no dashboards
    # namespaced: a Role and RoleBinding per watched namespace; the only cluster-wide grant is
    # kopf's read-only scanning
    assert kinds["namespaced"] == sorted(
        common + policy + scanning_rbac + ["Role", "Role", "RoleBinding", "RoleBinding"]
    )
    namespaced = rendered["namespaced"]
    assert sorted(r["metadata"]["namespace"] for r in of_kind(namespaced, "Role")) == sorted(
        ["evals-a", "evals-b", NAMESPACE]
    )
    assert one(namespaced, "ClusterRole")["metadata"]["name"] == f"{FULLNAME}-kopf-scanning"


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("variant", VARIANTS)
def test_deployment_is_locked_down_and_pinned(
    rendered: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    docs = rendered[variant]
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    c = container(docs)
    # Two replicas, one leader (a Lease): rolling updates are safe.
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"] == {"type": "RollingUpdate"}
    assert c["image"] == f"ghcr.io/atlasrun/operator@{DIGEST}"
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"] == {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp"}  # the only writable path
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert c["command"] == ["kopf"]
    args = c["args"]
    assert args[:3] == ["run", "--module=atlasrun.cluster.operator", "--standalone"]
    assert "--liveness=http://0.0.0.0:8081/healthz" in args
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    for probe in ("livenessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["ATLAS_METRICS_PORT"] == "8080"
    if variant == "namespaced":
        assert [a for a in args if a.startswith("--namespace")] == [
            "--namespace=evals-a",
            "--namespace=evals-b",
        ]
        assert "--all-namespaces" not in args
    else:
        assert "--all-namespaces" in args and not any(a.startswith("--namespace") for a in args)
    if variant == "monitoring":
        assert env["ATLAS_RUNNER_IMAGE"] == f"ghcr.io/atlasrun/runner@{DIGEST}"
        assert env["ATLAS_S3_ENDPOINT"] == "http://minio.minio.svc:9000"
    else:
        assert "ATLAS_RUNNER_IMAGE" not in env and "ATLAS_S3_ENDPOINT" not in env
    service = one(docs, "Service")
    assert service["metadata"]["name"] == METRICS_JOB
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_operator_network_policy(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["cilium"]
    policy = one(docs, "NetworkPolicy")["spec"]
    assert (
        policy["podSelector"]["matchLabels"].items()
        <= one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    )
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert [r["ports"] for r in policy["ingress"]] == [
        [{"protocol": "TCP", "port": 8080}],
        [{"protocol": "TCP", "port": 8081}],
    ]
    dns, api, extra = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert api["to"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}] and {p["port"] for p in api["ports"]} == {
        443,
        6443,
    }
    assert extra["to"] == [{"ipBlock": {"cidr": "10.96.12.0/24"}}]


# ---------------------------------------------------------------- RBAC

EXPECTED_RULES = {
    ("atlasrun.dev", "atlasruns"): {"get", "list", "watch", "patch"},
    ("atlasrun.dev", "atlasruns/status"): {"patch", "update"},
    ("atlasrun.dev", "atlasruns/finalizers"): {"update"},
    ("batch", "jobs"): {"create", "get", "list", "watch", "patch", "delete"},
    ("", "pods"): {"get", "list", "watch"},
    ("", "configmaps"): {"create", "get"},
    ("networking.k8s.io", "networkpolicies"): {"create", "get"},
    ("", "events"): {"create", "patch", "list"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("kueue.x-k8s.io", "workloads"): {"get", "list", "patch"},  # cluster/queueing.py
}
CILIUM_RULE = {("cilium.io", "ciliumnetworkpolicies"): {"create", "get"}}
FORBIDDEN_RESOURCES = {
    "secrets",
    "pods/exec",
    "pods/log",
    "pods/attach",
    "pods/portforward",
    "pods/proxy",
    "nodes/proxy",
    "serviceaccounts/token",
}
FORBIDDEN_VERBS = {"*", "escalate", "bind", "impersonate", "deletecollection"}


def grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, (
            rule
        )  # no nonResourceURLs, no resourceNames games
        for group, resource in itertools.product(rule["apiGroups"], rule["resources"]):
            out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_rbac_is_least_privilege(rendered: dict[str, list[dict[str, Any]]], variant: str) -> None:
    docs = rendered[variant]
    roles = of_kind(docs, "ClusterRole") + of_kind(docs, "Role")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field] and not any("*" in v for v in rule[field]), (
                    role["metadata"],
                    rule,
                )
            assert not set(rule["resources"]) & FORBIDDEN_RESOURCES, (role["metadata"], rule)
            assert not set(rule["verbs"]) & FORBIDDEN_VERBS, (role["metadata"], rule)
    # atlasrun-view/-edit are not bound: they aggregate into the built-in view/edit/admin roles.
    user_roles = [r for r in roles if r["metadata"]["name"] in ("atlasrun-view", "atlasrun-edit")]
    if variant not in ("minimal", "namespaced"):
        runs = ("atlasrun.dev", "atlasruns")
        by_name = {r["metadata"]["name"]: grants(r) for r in user_roles}
        assert by_name["atlasrun-view"][runs] == {"get", "list", "watch"}
        assert by_name["atlasrun-edit"] == {runs: {"create", "update", "patch", "delete"}}
        labels = {r["metadata"]["name"]: r["metadata"]["labels"] for r in user_roles}
        assert labels["atlasrun-view"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
        assert labels["atlasrun-edit"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    else:
        assert not user_roles
    roles = [r for r in roles if r not in user_roles]
    operator_roles = [
        r for r in roles if not r["metadata"]["name"].endswith(("-kopf-scanning", "-leader-election"))
    ]
    (lease,) = [r for r in roles if r["metadata"]["name"].endswith("-leader-election")]
    assert grants(lease) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
    expected = EXPECTED_RULES | (CILIUM_RULE if variant == "cilium" else {})
    for role in operator_roles:
        assert grants(role) == expected, role["metadata"]
    scanning = [r for r in roles if r["metadata"]["name"].endswith("-kopf-scanning")]
    crds = {("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"}}
    if variant == "minimal":  # rbac.kopfScanning: false
        assert not scanning
    elif variant == "namespaced":
        (scan,) = scanning
        assert grants(scan) == crds | {("", "namespaces"): {"get", "list", "watch"}}
    else:
        (scan,) = scanning
        assert grants(scan) == crds
    assert {r["kind"] for r in operator_roles} == {"Role" if variant == "namespaced" else "ClusterRole"}
    # every role is bound to the operator's ServiceAccount, and only to it
    sa = one(docs, "ServiceAccount")["metadata"]
    bindings = of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding")
    assert len(bindings) == len(roles)
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": NAMESPACE}]
        role = next(
            r
            for r in roles
            if r["metadata"]["name"] == binding["roleRef"]["name"]
            and r["kind"] == binding["roleRef"]["kind"]
            and r["metadata"].get("namespace") == binding["metadata"].get("namespace")
        )
        assert role


_CALL = re.compile(r"\.(create|read|list|delete|patch|replace)_namespaced_(\w+?)(?:_status)?\(")
_RESOURCES = {
    "config_map": "configmaps",
    "pod": "pods",
    "job": "jobs",
    "network_policy": "networkpolicies",
    "event": "events",
    "lease": "leases",
}
_VERBS = {
    "create": "create",
    "read": "get",
    "list": "list",
    "delete": "delete",
    "patch": "patch",
    "replace": "update",
}


def test_rbac_covers_every_api_call_of_the_operator(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The Kubernetes API calls of the operator (beyond kopf's own, listed in EXPECTED_RULES) are granted."""
    cluster = ROOT / "operator" / "atlasrun" / "cluster"
    source = "\n".join(
        (cluster / f).read_text() for f in ("operator.py", "observe.py", "act.py", "leader.py")
    )
    calls = _CALL.findall(source)
    assert calls, "no API calls found: has the operator's client usage changed?"
    (role,) = [r for r in of_kind(rendered["cilium"], "ClusterRole") if r["metadata"]["name"] == FULLNAME]
    (lease,) = [
        r for r in of_kind(rendered["cilium"], "Role") if r["metadata"]["name"].endswith("-leader-election")
    ]
    granted = grants(role)
    for key, verbs in grants(lease).items():
        granted.setdefault(key, set()).update(verbs)
    by_resource: dict[str, set[str]] = {}
    for (_, resource), verbs in granted.items():
        by_resource.setdefault(resource, set()).update(verbs)
    for verb, kind in calls:
        if kind == "custom_object" and verb == "patch":  # the run's status: act.py's only patch of a run
            assert "patch" in by_resource.get("atlasruns/status", set())
            continue
        if kind == "custom_object":
            resources = set(re.findall(r'"(\w+)", (?:ns|namespace), "(\w+)"', source))
            assert resources, "a custom-object call with an unexpected shape"
            for resource in (r for _, r in resources):
                assert _VERBS[verb] in by_resource.get(resource, set()), (verb, resource)
            continue
        resource = _RESOURCES.get(kind)
        assert resource, (
            f"operator.py calls {verb}_namespaced_{kind}: add it to the chart's RBAC and this map"
        )
        assert _VERBS[verb] in by_resource.get(resource, set()), f"RBAC lacks {_VERBS[verb]} on {resource}"


# ---------------------------------------------------------------- kubernetes-validate --strict


def _validatable(
    rendered: dict[str, list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Distinct rendered objects: (checked by kubernetes-validate, monitoring.coreos.com ones)."""
    seen: dict[str, dict[str, Any]] = {}
    for docs in rendered.values():
        for doc in docs:
            seen.setdefault(hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest(), doc)
    docs = list(seen.values())
    monitoring = [d for d in docs if d["apiVersion"].startswith(MONITORING_GROUP + "/")]
    return [d for d in docs if d not in monitoring], monitoring


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_objects_validate_strictly(
    rendered: dict[str, list[dict[str, Any]]], kubernetes_validate: Path, tmp_path: Path, version: str
) -> None:
    docs, monitoring = _validatable(rendered)
    assert {d["kind"] for d in monitoring} == {"ServiceMonitor", "PrometheusRule"}
    assert {d["kind"] for d in docs} >= {
        "CustomResourceDefinition",
        "Deployment",
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "NetworkPolicy",
    }
    files = []
    for i, doc in enumerate(docs):
        files.append(tmp_path / f"{i:02d}-{doc['kind'].lower()}.yaml")
        files[-1].write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = subprocess.run(
        [str(kubernetes_validate), "--strict", "-k", version, *map(str, files)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count("passed for resource") == len(files) and "WARN" not in out and "ERROR" not in out, out


DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def test_monitoring_objects_are_well_formed(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """ServiceMonitor and PrometheusRule, checked against the prometheus-operator API by hand."""
    docs = rendered["monitoring"]
    service = one(docs, "Service")
    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert (
        sm["metadata"]["namespace"] == NAMESPACE
        and sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    )
    assert set(sm["spec"]) == {"selector", "namespaceSelector", "endpoints"}
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert (
        endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["path"] == "/metrics"
    )
    assert DURATION.match(endpoint["interval"]) and DURATION.match(endpoint["scrapeTimeout"])
    assert "jobLabel" not in sm["spec"]  # job = the Service's name, which OperatorDown matches

    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and set(rule["spec"]) == {"groups"}
    alerts = {}
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["name"]
        for r in group["rules"]:
            assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
            assert isinstance(r["expr"], str) and DURATION.match(r["for"])
            assert r["labels"]["severity"] in {"info", "warning", "critical"}
            assert r["annotations"]["summary"] and r["annotations"]["description"]
            assert all(isinstance(v, str) for v in (r["labels"] | r["annotations"]).values())
            alerts[r["alert"]] = r
    assert set(alerts) == {
        "AtlasRunBlocked",
        "AtlasRunTaskErrorRatioHigh",
        "AtlasRunPassRateDrop",
        "AtlasRunOperatorDown",
    }
    assert f'job="{METRICS_JOB}"' in alerts["AtlasRunOperatorDown"]["expr"]
    assert f'namespace="{NAMESPACE}"' in alerts["AtlasRunOperatorDown"]["expr"]


# ---------------------------------------------------------------- alert rules with promtool


def rules_file(rendered: dict[str, list[dict[str, Any]]], tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(one(rendered["monitoring"], "PrometheusRule")["spec"], sort_keys=False))
    return path


def test_alert_rules_pass_promtool_check(
    rendered: dict[str, list[dict[str, Any]]], prom_tools: Any, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [str(prom_tools.promtool), "check", "rules", str(rules_file(rendered, tmp_path))],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 4 rules found" in proc.stdout, proc.stdout


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    return {"series": name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


def test_alerts_fire_on_bad_series_only(
    rendered: dict[str, list[dict[str, Any]]], prom_tools: Any, tmp_path: Path
) -> None:
    """``promtool test rules``: each alert fires for the broken run/model/target and not for the healthy one."""
    target = {"job": METRICS_JOB, "namespace": NAMESPACE, "instance": "10.1.2.3:8080"}
    series = [
        _series("atlasrun_runs", {**target, "run": "stuck", "phase": "Blocked"}, "1x20"),
        _series("atlasrun_runs", {**target, "run": "fine", "phase": "Blocked"}, "0x20"),
        _series("atlasrun_runs", {**target, "run": "fine", "phase": "Running"}, "1x20"),
        # 30% of gpt's work items error, 5% of claude's (counters grow per minute)
        _series(
            "atlasrun_tasks_total", {**target, "run": "sweep", "model": "gpt", "outcome": "passed"}, "0+7x40"
        ),
        _series(
            "atlasrun_tasks_total", {**target, "run": "sweep", "model": "gpt", "outcome": "error"}, "0+3x40"
        ),
        _series(
            "atlasrun_task_errors_total",
            {**target, "run": "sweep", "model": "gpt", "kind": "provider"},
            "0+3x40",
        ),
        _series(
            "atlasrun_tasks_total",
            {**target, "run": "sweep", "model": "claude", "outcome": "passed"},
            "0+19x40",
        ),
        _series(
            "atlasrun_tasks_total",
            {**target, "run": "sweep", "model": "claude", "outcome": "error"},
            "0+1x40",
        ),
        _series(
            "atlasrun_task_errors_total",
            {**target, "run": "sweep", "model": "claude", "kind": "infra"},
            "0+1x40",
        ),
        # gpt's pass rate falls from 0.9 to 0.6 at minute 10; claude's holds
        _series("atlasrun_pass_rate", {**target, "run": "sweep", "model": "gpt"}, "0.9x9 0.6x30"),
        _series("atlasrun_pass_rate", {**target, "run": "sweep", "model": "claude"}, "0.8x40"),
        # the operator's target goes down at minute 10
        _series("up", target, "1x9 0x30"),
    ]
    tests = {
        "rule_files": [str(rules_file(rendered, tmp_path))],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": "AtlasRunBlocked", "exp_alerts": []},  # pending for 5m
                    {
                        "eval_time": "8m",
                        "alertname": "AtlasRunBlocked",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "run": "stuck"},
                                "exp_annotations": {
                                    "summary": "AtlasRun stuck is blocked",
                                    "description": "AtlasRun stuck has been in phase Blocked for 5m: its spec is invalid, an "
                                    "image is not pinned by digest, or its tasks cannot be loaded. The Ready "
                                    "condition says which (kubectl describe atlasrun stuck).",
                                },
                            }
                        ],
                    },
                    {"eval_time": "8m", "alertname": "AtlasRunOperatorDown", "exp_alerts": []},
                    {
                        "eval_time": "17m",
                        "alertname": "AtlasRunOperatorDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "critical"},
                                "exp_annotations": {
                                    "summary": "The AtlasRun operator is down",
                                    "description": f"No healthy scrape of the AtlasRun operator (job {METRICS_JOB} in namespace "
                                    f"{NAMESPACE}) for 5m: runs are not reconciled and no new Jobs start "
                                    f"(kubectl -n {NAMESPACE} get pods).",
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "25m",
                        "alertname": "AtlasRunTaskErrorRatioHigh",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "run": "sweep", "model": "gpt"},
                                "exp_annotations": {
                                    "summary": "Many errored tasks in AtlasRun sweep for model gpt",
                                    "description": "30% of the work items of run sweep, model gpt, finished in the last 15m "
                                    "ended in an error (threshold 0.2). Errors are infrastructure, provider or "
                                    "judge failures, not wrong answers: see atlasrun_task_errors_total by kind "
                                    "and the run's TaskError events.",
                                },
                            }
                        ],
                    },
                    {"eval_time": "8m", "alertname": "AtlasRunPassRateDrop", "exp_alerts": []},
                    {
                        "eval_time": "30m",
                        "alertname": "AtlasRunPassRateDrop",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "run": "sweep",
                                    "model": "gpt",
                                    **target,
                                },
                                "exp_annotations": {
                                    "summary": "Pass rate of gpt dropped in AtlasRun sweep",
                                    "description": "The pass rate of model gpt in run sweep is 30% below its maximum of the "
                                    "last 1h (alert threshold: a drop of 0.2), with at least 20 tasks "
                                    "scored.",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = subprocess.run(
        [str(prom_tools.promtool), "test", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- Grafana dashboards


def test_dashboards_are_configmaps_for_the_grafana_sidecar(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert not dashboards(rendered["minimal"])
    found = dashboards(rendered["monitoring"])
    assert set(found) == {p.name for p in (CHART / "dashboards").glob("*.json")} == {"atlasrun-overview.json"}
    cm = next(c for c in of_kind(rendered["monitoring"], "ConfigMap"))
    assert cm["metadata"]["annotations"] == {"grafana_folder": "AtlasRun"}
    for name, board in found.items():
        assert board["uid"] and board["title"] and board["schemaVersion"] >= 36, name
        ids = [p["id"] for p in panels(board)]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        cells: set[tuple[int, int]] = set()
        for p in panels(board):
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24, p["title"]
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & mine, f"{name}: panel {p['title']!r} overlaps another"
            cells |= mine
            if p["type"] != "row":
                assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
                assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        exprs = " ".join(t["expr"] for p in panels(board) for t in p.get("targets", []))
        for needed in (
            "atlasrun_pass_rate",
            "atlasrun_mean_coverage",
            "atlasrun_tasks_total",
            "atlasrun_task_duration_seconds_bucket",
            "atlasrun_task_errors_total",
            "atlasrun_tasks_pending",
            "atlasrun_runs",
            "histogram_quantile(0.5,",
            "histogram_quantile(0.95,",
            "sum by (kind)",
            "sum by (outcome)",
            "sum by (phase)",
        ):
            assert needed in exprs, f"{name}: no panel uses {needed}"


def _grafana_to_promql(expr: str) -> str:
    """A panel expression as Grafana sends it with "All" selected and a 1-minute rate interval."""
    return expr.replace("$__rate_interval", "1m").replace("$run", ".*").replace("$model", ".*")


def _feed(m: Metrics, stop: threading.Event) -> None:
    """A few runs, models and outcomes, as the operator would record them, until ``stop``."""
    outcomes = itertools.cycle(
        [
            {"s": "scored", "p": True, "c": 1.0, "w": 12.0},
            {"s": "scored", "p": False, "c": 0.5, "w": 45.0},
            {"s": "error", "r": "provider: 429 Too Many Requests", "w": 3.0},
            {"s": "scored", "p": True, "c": 0.75, "w": 8.0},
            {"s": "error", "r": "infra: sidecar mcp-filesystem exited", "w": None},
            {"s": "scored", "p": True, "c": 1.0, "w": 130.0},
            {"s": "error", "r": "job failed: DeadlineExceeded"},
        ]
    )
    models = ("gpt-4o", "claude-sonnet")
    finished = dict.fromkeys(models, 0)
    while True:
        for model in models:
            metrics_module.task_finished("sweep-a", {**next(outcomes), "m": model}, m)
            finished[model] += 1
        metrics_module.run_status(
            "sweep-a",
            "Running",
            {
                model: {
                    "passRate": 0.5 + (n % 5) / 10,
                    "meanCoverage": 0.6 + (n % 3) / 10,
                    "pending": max(0, 500 - n),
                }
                for model, n in finished.items()
            },
            m,
        )
        if stop.wait(0.25):
            return


@pytest.fixture(scope="module")
def prometheus(prom_tools: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus on 127.0.0.1 scraping an exporter of ``atlasrun.cluster.metrics`` every second.

    The scrape job carries the labels the chart's ServiceMonitor would give the operator's target
    (job = the metrics Service's name, namespace = the release's), so the alert expressions see
    what they would see in a cluster. Yields the base URL once a few scrapes have landed."""
    registry = CollectorRegistry()
    m = Metrics(registry=registry)
    metrics_module.task_finished("sweep-b", {"s": "scored", "p": True, "c": 1.0, "w": 20.0, "m": "gpt-4o"}, m)
    metrics_module.run_status(
        "sweep-b", "Succeeded", {"gpt-4o": {"passRate": 1.0, "meanCoverage": 1.0, "pending": 0}}, m
    )
    metrics_module.run_phase("sweep-c", "Blocked", m)
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(m, stop), daemon=True)
    feeder.start()
    exporter, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = free_port()
    workdir = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": METRICS_JOB,
                "static_configs": [
                    {"targets": [f"127.0.0.1:{exporter.server_port}"], "labels": {"namespace": NAMESPACE}}
                ],
            }
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    with open(workdir / "prometheus.log", "w") as log:
        proc = subprocess.Popen(
            [
                str(prom_tools.prometheus),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # ready, and at least 4 scrapes in: enough samples for rate() over 1m
            if proc.poll() is not None:
                pytest.fail(
                    f"prometheus exited with {proc.returncode}:\n{(workdir / 'prometheus.log').read_text()}"
                )
            try:
                ready = httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                ready = False
            if ready:
                result = query(base, f'count_over_time(up{{job="{METRICS_JOB}"}}[1m])')
                if result and float(result[0]["value"][1]) >= 4:
                    break
            if time.monotonic() > deadline:
                log_text = (workdir / "prometheus.log").read_text()
                pytest.fail(f"prometheus did not scrape the exporter in 60s:\n{log_text}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stop.set()
        feeder.join(timeout=5)
        exporter.shutdown()
        exporter.server_close()


def query(base: str, expr: str) -> list[dict[str, Any]]:
    """``/api/v1/query``: the result vector; fails the test on a PromQL error."""
    r = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", f"{expr}\n{body}"
    assert body["data"]["resultType"] in ("vector", "scalar"), body
    return body["data"]["result"]


def test_every_dashboard_panel_returns_data(
    rendered: dict[str, list[dict[str, Any]]], prometheus: str
) -> None:
    checked = 0
    for name, board in dashboards(rendered["monitoring"]).items():
        for p in panels(board):
            for target in p.get("targets", []):
                expr = _grafana_to_promql(target["expr"])
                result = query(prometheus, expr)
                assert result, f"{name}: panel {p['title']!r} returned no data: {expr}"
                values = [float(s["value"][1]) for s in result]
                assert any(math.isfinite(v) for v in values), (
                    f"{name}: {p['title']!r} has no finite value: {expr}"
                )
                legend = target.get("legendFormat", "")
                for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend):
                    assert all(label in s["metric"] for s in result), f"{p['title']!r}: no label {label!r}"
                checked += 1
        for variable in board["templating"]["list"]:
            if variable["type"] != "query":
                continue
            selector, label = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"]).groups()
            result = query(prometheus, _grafana_to_promql(selector))
            assert result and all(label in s["metric"] for s in result), variable["name"]
    assert checked >= 15


def test_alert_expressions_evaluate(rendered: dict[str, list[dict[str, Any]]], prometheus: str) -> None:
    rules = {
        r["alert"]: r["expr"]
        for g in one(rendered["monitoring"], "PrometheusRule")["spec"]["groups"]
        for r in g["rules"]
    }
    results = {alert: query(prometheus, expr) for alert, expr in rules.items()}
    # the exporter is up and its series carry the labels the rules select on
    assert results["AtlasRunOperatorDown"] == []
    assert [s["metric"]["run"] for s in results["AtlasRunBlocked"]] == ["sweep-c"]
    # 3 of every 7 fed work items error: above the 0.2 threshold for both models of sweep-a
    assert {(s["metric"]["run"], s["metric"]["model"]) for s in results["AtlasRunTaskErrorRatioHigh"]} == {
        ("sweep-a", "gpt-4o"),
        ("sweep-a", "claude-sonnet"),
    }
    assert query(
        prometheus, rules["AtlasRunOperatorDown"].replace(METRICS_JOB, "elsewhere")
    )  # absent() fires


# ---------------------------------------------------------------- installed on a real API server


@pytest.fixture(scope="module")
def control_plane() -> Iterator[Any]:
    from cluster.controlplane import ControlPlane, binaries_or_skip

    with ControlPlane(binaries_or_skip()) as plane:
        yield plane


def _allowed(api: httpx.Client, user: str, namespace: str, group: str, resource: str, verb: str) -> bool:
    sub = resource.split("/", 1)
    attrs = {"namespace": namespace, "group": group, "resource": sub[0], "verb": verb}
    if len(sub) == 2:
        attrs["subresource"] = sub[1]
    r = api.post(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        json={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{NAMESPACE}",
                    "system:authenticated",
                ],
                "resourceAttributes": attrs,
            },
        },
    )
    r.raise_for_status()
    return bool(r.json()["status"].get("allowed"))


@pytest.mark.cluster
def test_installed_chart_runs_the_operator_with_its_own_rbac(
    helm: Path, control_plane: Any, tmp_path: Path
) -> None:
    """``helm install`` on a real kube-apiserver (PodSecurity ``restricted`` in every namespace), then
    the operator, started with the Deployment's own args and env, authenticated as the chart's
    ServiceAccount, reconciles runs: ConfigMap, NetworkPolicy, Jobs, status, events, no 403."""
    from atlasrun.servers.catalog import load_catalog
    from cluster.controlplane import wait_for

    cp = control_plane
    restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
    cp.create_namespace(NAMESPACE, restricted)
    cp.create_namespace("evals", restricted)
    proc = run_helm(
        helm,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        f"--kubeconfig={cp.kubeconfig}",
        "-f",
        str(values_file("monitoring")),
        "--set",
        "metrics.serviceMonitor.enabled=false",
        "--set",
        "prometheusRule.enabled=false",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"installed in namespace {NAMESPACE}, watching all namespaces" in proc.stdout  # NOTES.txt
    api = cp.client()

    # The Deployment's pod is admitted under PodSecurity "restricted" (there is no scheduler: it stays Pending).
    pods = wait_for(
        lambda: api.get(f"/api/v1/namespaces/{NAMESPACE}/pods").json()["items"],
        60,
        "the operator's pod (created by the ReplicaSet controller)",
    )
    assert pods[0]["spec"]["serviceAccountName"] == FULLNAME

    user = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"
    for (group, resource), verbs in EXPECTED_RULES.items():
        for verb in verbs:
            assert _allowed(api, user, "evals", group, resource, verb), (group, resource, verb)
    for group, resource, verb in [
        ("", "secrets", "get"),
        ("", "secrets", "list"),
        ("", "pods/exec", "create"),
        ("", "pods/log", "get"),
        ("", "pods", "delete"),
        ("", "configmaps", "delete"),
        ("batch", "jobs", "update"),
        ("cilium.io", "ciliumnetworkpolicies", "create"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "delete"),
        ("", "namespaces", "list"),
        ("rbac.authorization.k8s.io", "roles", "create"),
    ]:
        assert not _allowed(api, user, "evals", group, resource, verb), (group, resource, verb)

    # A run for the operator: one task, one pinned sidecar, tasks from a ConfigMap.
    task = {
        "id": "add",
        "prompt": "What is 2+3?",
        "enabled_tools": ["calculator_calculate"],
        "claims": ["The answer is 5"],  # claims of 3 characters or fewer are skipped (MCP-Atlas)
        "reference_trajectory": [
            {"calls": [{"name": "calculator_calculate", "arguments": {"expression": "2+3"}}]}
        ],
    }
    api.post(
        "/api/v1/namespaces/evals/configmaps",
        json={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "tasks"},
            "data": {"tasks.yaml": yaml.safe_dump({"tasks": [task]})},
        },
    ).raise_for_status()
    calculator = load_catalog().get("calculator").model_dump(by_alias=True, exclude_none=True)
    calculator.update({"image": f"registry.example/atlasrun/mcp-calculator@{DIGEST}", "port": 9104})

    def atlasrun(name: str, runner_image: str | None = None) -> dict[str, Any]:
        cluster = {"runnerImage": runner_image} if runner_image else {}
        return {
            "apiVersion": "atlasrun.dev/v1alpha1",
            "kind": "AtlasRun",
            "metadata": {"name": name},
            "spec": {
                "tasks": {"configMap": "tasks"},
                "models": [{"name": "m1", "model": "openai/m1"}],
                "repeats": 2,
                "servers": {"inline": [calculator], "enabled": ["calculator"]},
                "cluster": cluster,
            },
        }

    deployment = one(render(helm, "-f", str(values_file("monitoring"))), "Deployment")
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    health, metrics_port = free_port(), free_port()
    args = [a.replace("0.0.0.0:8081", f"127.0.0.1:{health}") for a in c["args"]]
    from_configmaps = {  # envFrom, as the kubelet resolves it (env wins): the installed policy ConfigMap
        key: value
        for source in c.get("envFrom") or []
        for key, value in api.get(
            f"/api/v1/namespaces/{NAMESPACE}/configmaps/{source['configMapRef']['name']}"
        )
        .json()["data"]
        .items()
    }
    assert "ATLASRUN_POLICY" in from_configmaps
    env = {
        **os.environ,
        **from_configmaps,
        **{e["name"]: e["value"] for e in c["env"]},
        "ATLAS_METRICS_PORT": str(metrics_port),
        "ATLAS_RECONCILE_INTERVAL": "1",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(cp.token_kubeconfig(cp.service_account_token(NAMESPACE, FULLNAME))),
    }
    log_path = tmp_path / "operator.log"
    with open(log_path, "wb") as log:
        operator = subprocess.Popen(
            [sys.executable, "-m", c["command"][0], *args], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_for(
            lambda: httpx.get(f"http://127.0.0.1:{health}/healthz", timeout=2).status_code == 200,
            60,
            "kopf's liveness endpoint",
        )
        base = "/apis/atlasrun.dev/v1alpha1/namespaces/evals/atlasruns"
        api.post(base, json=atlasrun("good")).raise_for_status()  # runner image from the chart's env
        api.post(
            base, json=atlasrun("unpinned", "registry.example/atlasrun/runner:latest")
        ).raise_for_status()
        good = wait_for(
            lambda: (
                (r := api.get(f"{base}/good").json()).get("status", {}).get("phase") not in (None, "Pending")
                and r
            ),
            60,
            "run good reconciled",
        )
        blocked = wait_for(
            lambda: (r := api.get(f"{base}/unpinned").json()).get("status", {}).get("phase") and r,
            60,
            "run unpinned reconciled",
        )
        anonymous = "system:anonymous" in json.dumps(good["status"])
        assert not anonymous, (
            "the operator's Kubernetes client sent no bearer token: kubernetes==36.0.0 stores "
            "it where its own ApiClient never reads it (fixed in 36.0.1, kubernetes-client/"
            "python#2585); pin kubernetes>=36.0.1 in pyproject.toml"
        )
        assert good["status"]["phase"] == "Running", good["status"]["conditions"]
        assert blocked["status"]["phase"] == "Blocked", blocked["status"]
        jobs = wait_for(
            lambda: api.get("/apis/batch/v1/namespaces/evals/jobs").json()["items"],
            30,
            "the run's Indexed Job (one task x two repeats: two completion indexes)",
        )
        assert len(jobs) == 1 and jobs[0]["spec"]["completions"] == 2
        assert {j["spec"]["template"]["spec"]["containers"][0]["image"] for j in jobs} == {
            f"ghcr.io/atlasrun/runner@{DIGEST}"
        }
        assert api.get("/api/v1/namespaces/evals/configmaps/atlasrun-good").status_code == 200
        assert (
            api.get("/apis/networking.k8s.io/v1/namespaces/evals/networkpolicies/good-egress").status_code
            == 200
        )
        assert good["status"]["progress"] == "0/2"
        assert {c["type"]: c for c in blocked["status"]["conditions"]}["Blocked"]["reason"] == "UnpinnedImage"
        events = wait_for(
            lambda: (
                {
                    e["reason"]
                    for e in api.get("/api/v1/namespaces/evals/events").json()["items"]
                    if e["involvedObject"]["kind"] == "AtlasRun"
                }
                >= {"Started", "UnpinnedImage"}
            ),
            30,
            "the operator's events",
        )
        assert events
        metrics_text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert 'atlasrun_runs{phase="Blocked",run="unpinned"} 1.0' in metrics_text
    finally:
        operator.terminate()
        try:
            operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
    log_text = log_path.read_text(errors="replace")
    denied = [
        line for line in log_text.splitlines() if re.search(r"403|[Ff]orbidden|Not enough permissions", line)
    ]
    assert not denied, "\n".join(denied)
