"""The Helm chart (charts/atlasrun), checked with the real tools rather than by reading YAML alone.

- ``helm`` (v3, built from the ``helm.sh/helm/v3`` Go module by ``charts/tools.py``) lints the chart
  with ``--strict`` and renders it with the default values and the variants in
  ``charts/atlasrun/ci/*-values.yaml``; ``values.schema.json`` makes helm reject bad values.
- Every rendered object passes ``kubernetes-validate --strict`` for each Kubernetes version in
  ``tests/tools.py``, except the monitoring.coreos.com objects (ServiceMonitor, PrometheusRule:
  no schemas there), which are checked structurally.
- The RBAC is least privilege: exactly the rules the operator needs (cross-checked against the
  API calls in operator.py), no secrets, pods/exec, pods/log or wildcards.
- Monitoring objects (ServiceMonitor, PrometheusRule with promtool, dashboards):
  ``tests/test_metrics_chart.py``; every panel against a real Prometheus scraping the operator:
  ``tests/cluster/test_metrics_operator.py``.
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
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from atlasrun.cluster.operator.crd import render_yaml
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
    """crds/ in the chart is a copy of crds/atlasrun.yaml (`python -m atlasrun.cluster.operator.crd`)."""
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
    assert {"name": "ATLASRUN_RUNNER_IMAGE", "value": runner} in c["env"]


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
    extra_dashboard = ["ConfigMap"]  # two dashboards: platform and evaluator
    assert kinds["default"] == sorted(common + cluster_wide + extra_dashboard)
    assert kinds["monitoring"] == sorted(
        common + cluster_wide + extra_dashboard + ["PrometheusRule", "ServiceMonitor"]
    )
    assert kinds["cilium"] == sorted(common + cluster_wide + extra_dashboard + ["NetworkPolicy"])
    assert kinds["minimal"] == sorted(common + operator_rbac)  # the ConfigMap: policy, no dashboards
    # namespaced: a Role and RoleBinding per watched namespace; the only cluster-wide grant is
    # kopf's read-only scanning
    assert kinds["namespaced"] == sorted(
        common + policy + extra_dashboard + scanning_rbac + ["Role", "Role", "RoleBinding", "RoleBinding"]
    )
    namespaced = rendered["namespaced"]
    assert sorted(r["metadata"]["namespace"] for r in of_kind(namespaced, "Role")) == sorted(
        ["evals-a", "evals-b", NAMESPACE]
    )
    assert one(namespaced, "ClusterRole")["metadata"]["name"] == f"{FULLNAME}-kopf-scanning"


def test_prepull_pulls_the_runs_images_on_every_node_and_holds_nothing(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    assert not [d for v, docs in rendered.items() if v != "platform" for d in of_kind(docs, "DaemonSet")]
    values = yaml.safe_load(values_file("platform").read_text())
    runner = f"{values['runnerImage']['repository']}@{values['runnerImage']['digest']}"
    daemonset = one(rendered["platform"], "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["initContainers"]] == [runner, *values["prePull"]["images"]]
    assert all(c["command"] == ["true"] for c in pod["initContainers"])
    (hold,) = pod["containers"]
    assert hold["image"] == runner and hold["command"] == ["sleep", "infinity"]
    for c in [*pod["initContainers"], hold]:
        assert c["securityContext"]["readOnlyRootFilesystem"] and c["securityContext"]["capabilities"] == {
            "drop": ["ALL"]
        }
        assert c["resources"]["requests"] == {"cpu": "1m", "memory": "8Mi"}
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"]
    # `helm install --wait` (the quick-start's) returns once every node pulled: Helm counts a
    # DaemonSet ready at desired - maxUnavailable pods.
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert pod["nodeSelector"] == values["prePull"]["nodeSelector"]
    assert pod["tolerations"] == values["prePull"]["tolerations"]
    # Not the operator's pods: its Deployment and Service select component=operator.
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "prepull"
    assert daemonset["spec"]["selector"]["matchLabels"] == {
        k: v for k, v in labels.items() if k.startswith("app.kubernetes.io/")
    }


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
    assert args[:3] == ["run", "--module=atlasrun.cluster.operator.main", "--standalone"]
    assert "--liveness=http://0.0.0.0:8081/healthz" in args
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    for probe in ("livenessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["ATLASRUN_METRICS_PORT"] == "8080"
    if variant == "namespaced":
        assert [a for a in args if a.startswith("--namespace")] == [
            "--namespace=evals-a",
            "--namespace=evals-b",
        ]
        assert "--all-namespaces" not in args
    else:
        assert "--all-namespaces" in args and not any(a.startswith("--namespace") for a in args)
    if variant == "monitoring":
        assert env["ATLASRUN_RUNNER_IMAGE"] == f"ghcr.io/atlasrun/runner@{DIGEST}"
        assert env["ATLASRUN_S3_ENDPOINT"] == "http://minio.minio.svc:9000"
    elif variant == "platform":  # its prePull pulls the runner image it sets
        values = yaml.safe_load(values_file("platform").read_text())["runnerImage"]
        assert env["ATLASRUN_RUNNER_IMAGE"] == f"{values['repository']}@{values['digest']}"
        assert "ATLASRUN_S3_ENDPOINT" not in env
    else:
        assert "ATLASRUN_RUNNER_IMAGE" not in env and "ATLASRUN_S3_ENDPOINT" not in env
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
    cluster = ROOT / "operator" / "atlasrun" / "cluster" / "operator"
    source = "\n".join((cluster / f).read_text() for f in ("main.py", "observe.py", "act.py", "leader.py"))
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


# Monitoring (ServiceMonitor, PrometheusRule, dashboards): tests/test_metrics_chart.py and
# tests/cluster/test_metrics_operator.py.


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
        "ATLASRUN_METRICS_PORT": str(metrics_port),
        "ATLASRUN_MIN_PASS_INTERVAL": "1",
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
            "the run's Indexed Job (one task x two repeats)",
        )
        # two items, at the default 5 items per pod: one completion index runs both
        assert len(jobs) == 1 and jobs[0]["spec"]["completions"] == 1
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
        assert 'atlasrun_run_phase{namespace="evals",phase="Blocked",run="unpinned"} 1.0' in metrics_text
    finally:
        operator.terminate()
        try:
            operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
    log_text = log_path.read_text(errors="replace")
    # Each line after its "[date time,ms]" stamp: a stamp's milliseconds can read 403.
    denied = [
        line
        for line in log_text.splitlines()
        if re.search(r"\b403\b|[Ff]orbidden|Not enough permissions", line.split("] ", 1)[-1])
    ]
    assert not denied, "\n".join(denied)
