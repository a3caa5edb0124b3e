"""Cluster-mode manifests: the CRD (generated from the run spec), Jobs, network policies, image pins.

Rendered objects are checked three ways: by assertions here, by ``kubernetes-validate --strict``
against the OpenAPI schemas of Kubernetes 1.31-1.37 (a pinned tool in its own venv, see
tests/tools.py), and (``cluster`` mark) by a real kube-apiserver: CEL rules, printer columns,
the status subresource, PodSecurity ``restricted`` and garbage collection through owner refs.
"""

from __future__ import annotations

import re
import subprocess
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from atlasrun.cluster.operator import crd as crd_module
from atlasrun.cluster.operator.crd import RunStatus, build_crd, render_yaml
from atlasrun.cluster.operator.images import is_pinned, servers_used, unpinned_images
from atlasrun.cluster.operator.manifests import (
    LABEL_RUN,
    api_key_env,
    job_name,
    label_value,
    render_job,
    render_network_policy,
)
from atlasrun.cluster.wire.contract import EXIT_INPUT, LABEL_QUEUE, TasksRef, WorkUnit
from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import Catalog, Egress, ServerSpec
from atlasrun.tasks.model import TaskLimits
from tools import KUBERNETES_VERSIONS, ToolInstallError, ensure_kubernetes_validate

ROOT = Path(__file__).resolve().parents[1]
DIGEST = "sha256:" + "ab" * 32
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
UID = "6f1c2e4a-0000-4000-8000-000000000001"


def server(name: str, port: int, **extra: Any) -> ServerSpec:
    return ServerSpec(
        name=name, command=f"mcp-server-{name}", image=f"ghcr.io/atlasrun/{name}@{DIGEST}", port=port, **extra
    )


SERVERS = [
    server("filesystem", 8001, env={"ROOT": "{data_dir}", "PORT_HINT": "{port}"}),
    server(
        "search",
        8002,
        secrets=["SEARCH_API_KEY"],
        egress=Egress(hosts=["api.search.example"], cidrs=["203.0.113.0/24"], ports=[443]),
    ),
]


def make_body(**cluster: Any) -> RunSpecBody:
    return RunSpecBody.model_validate(
        {
            "tasks": {"configMap": "tasks"},
            "models": [
                {
                    "name": "gpt-4o",
                    "apiKeySecret": {"name": "openai", "key": "api-key"},
                    "egress": {"hosts": ["api.openai.com"], "cidrs": ["198.51.100.0/24"]},
                },
                {
                    "name": "claude",
                    "model": "anthropic/claude-sonnet-4",
                    "apiKeySecret": {"name": "anthropic", "key": "k"},
                },
            ],
            "judges": [
                {"name": "deterministic"},
                {
                    "name": "grader",
                    "model": "gemini/gemini-2.0-flash",
                    "apiKeySecret": {"name": "gem", "key": "k"},
                    "egress": {"hosts": ["*.googleapis.com"], "ports": [443]},
                },
            ],
            "cluster": cluster,
        }
    )


TASKS_SHA = "cd" * 32


def make_unit(chunk: int = 3, items: int = 2, **tasks: Any) -> WorkUnit:
    ref = TasksRef(sha256=TASKS_SHA, **(tasks or {"uri": f"s3://results/runs/tasks/{TASKS_SHA}"}))
    return WorkUnit(
        run="demo",
        model="gpt-4o",
        chunk=chunk,
        items=[("sum-numbers", r) for r in range(items)],
        tasks=ref,
        results_uri="s3://results/runs/demo/",
    )


def make_job(
    body: RunSpecBody | None = None,
    servers: list[ServerSpec] = SERVERS,
    unit: WorkUnit | None = None,
    **kw: Any,
) -> dict[str, Any]:
    body = body or make_body()
    args: dict[str, Any] = {
        "runner_image": f"ghcr.io/atlasrun/runner@{DIGEST}",
        "spec_configmap": "atlasrun-demo",
        "s3_secret": "s3-creds",
        "s3_endpoint": "http://10.1.2.3:9000",
        "parallelism": 2,
    } | kw
    return render_job("demo", UID, "evals", body, body.models[0], unit or make_unit(), servers, **args)


def containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    spec = job["spec"]["template"]["spec"]
    return list(spec.get("initContainers", [])) + list(spec["containers"])


def env_names(container: dict[str, Any]) -> list[str]:
    return [e["name"] for e in container.get("env", [])]


# ---------------------------------------------------------------- names


def test_job_name_is_deterministic_bounded_and_distinct() -> None:
    keys = [
        ("demo", UID, "gpt-4o", 0),
        ("demo", UID, "gpt-4o", 1),
        ("demo", UID, "gpt_4o", 0),
        ("demo", UID, "GPT-4o", 0),
        ("demo-gpt", UID, "4o", 0),
        ("demo", "another-uid", "gpt-4o", 0),  # a recreated run never meets its predecessor's Jobs
        ("x" * 200, UID, "m" * 200, 99999),
        ("x" * 200, UID, "m" * 199 + "n", 99999),
        ("", "", "", 0),
        ("run", UID, "anthropic/claude", 3),
    ]
    names = [job_name(*k) for k in keys]
    assert names == [job_name(*k) for k in keys]  # deterministic (an operator restart renders the same names)
    assert len(set(names)) == len(keys)  # keys that sanitize alike still differ by their hash
    for name in names:
        # pod names add "-<index>-<5 random>": the Job name leaves room for a 5-digit index
        assert len(name) <= 52 and DNS_LABEL.match(name), name
    assert names[0].startswith("demo-gpt-4o-c0-")
    assert len({job_name("run", UID, f"model-{i}", c) for i in range(200) for c in range(30)}) == 6000


def test_label_values_are_valid_and_readable_when_possible() -> None:
    assert label_value("gpt-4o") == "gpt-4o"
    long, slashed = label_value("m" * 100), label_value("anthropic/claude")
    assert slashed.startswith("anthropic-claude-") and len(long) <= 63
    assert label_value("a/b") != label_value("a-b")
    assert api_key_env(make_body().models[0]) == "OPENAI_API_KEY"
    assert api_key_env(make_body().models[1]) == "ANTHROPIC_API_KEY"


# ---------------------------------------------------------------- the Job


def test_job_runs_servers_as_native_sidecars_with_restricted_security() -> None:
    job = make_job()
    pod = job["spec"]["template"]["spec"]
    sidecars = pod["initContainers"]
    assert [c["name"] for c in sidecars] == ["mcp-filesystem", "mcp-search"]
    for sidecar, srv in zip(sidecars, SERVERS, strict=False):
        assert sidecar["restartPolicy"] == "Always" and sidecar["image"] == srv.image
        assert "startupProbe" not in sidecar  # sidecars start together; the runner waits for ports
        assert sidecar["readinessProbe"]["tcpSocket"]["port"] == srv.port
        assert {"name": "ATLAS_SERVER_PORT", "value": str(srv.port)} in sidecar["env"]
    assert {"name": "ROOT", "value": "/data"} in sidecars[0]["env"]  # placeholders filled in
    assert {"name": "PORT_HINT", "value": "8001"} in sidecars[0]["env"]
    (runner,) = pod["containers"]
    assert runner["name"] == "runner" and runner["command"] == ["atlas", "run-task"]
    assert runner["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {"name": "spec", "mountPath": "/etc/atlasrun", "readOnly": True} in runner["volumeMounts"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for container in containers(job):
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["requests"] and container["resources"]["limits"]
        assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])
    assert containers(job)[0]["securityContext"] is not containers(job)[1]["securityContext"]


def test_runner_env_follows_the_contract_and_only_it_sees_model_keys() -> None:
    job = make_job()
    runner = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in runner["env"]}
    values = {k: e.get("value") for k, e in env.items()}
    assert values["ATLAS_RUN_SPEC"] == "/etc/atlasrun/run.yaml"
    unit = WorkUnit.model_validate_json(values["ATLAS_WORK_UNIT"])
    assert unit == make_unit() and unit.item(1) == ("sum-numbers", 1)
    assert (
        unit.tasks.uri == f"s3://results/runs/tasks/{TASKS_SHA}"
        and unit.results_uri == "s3://results/runs/demo/"
    )
    assert "ATLAS_TASKS" not in values  # tasks travel by reference, never through etcd
    assert values["AWS_ENDPOINT_URL"] == "http://10.1.2.3:9000"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "s3-creds"
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "openai", "key": "api-key"}
    assert env["GEMINI_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "gem",
        "key": "k",
    }  # the LLM judge's
    assert "ANTHROPIC_API_KEY" not in env  # another model's key stays out of this Job
    secret_refs = [
        (c["name"], e["valueFrom"]["secretKeyRef"]["name"])
        for c in containers(job)
        for e in c["env"]
        if "valueFrom" in e
    ]
    assert {s for c, s in secret_refs if c != "runner"} == {"atlasrun-server-search"}  # the server's own
    assert ("mcp-search", "atlasrun-server-search") in secret_refs
    assert not any(e.get("value") and "key" in e["name"].lower() for c in containers(job) for e in c["env"])


def test_data_volume_is_copied_into_each_pods_own_data_before_the_servers_start() -> None:
    pod = make_job(make_body(dataVolume={"configMap": {"name": "workspace"}}))["spec"]["template"]["spec"]
    seed = pod["initContainers"][0]
    assert seed["name"] == "seed-data" and "restartPolicy" not in seed  # a plain init container, runs first
    assert seed["command"] == [
        "find", "/data-source", "-mindepth", "1", "-maxdepth", "1", "-exec", "cp", "-a", "{}", "/data/", ";",
    ]  # fmt: skip
    assert {"name": "data-source", "configMap": {"name": "workspace"}} in pod["volumes"]
    assert {"name": "data", "emptyDir": {"sizeLimit": "2Gi"}} in pod["volumes"]  # writes stay in the pod
    assert seed["securityContext"]["readOnlyRootFilesystem"] is True
    assert "seed-data" not in [c["name"] for c in make_job()["spec"]["template"]["spec"]["initContainers"]]
    # The pod's 12 KiB of termination messages are shared by every container, seed and sidecars
    # included: the runner is told its share (a longer message would be cut and read as none).
    for spec in (pod, make_job()["spec"]["template"]["spec"]):
        (runner,) = spec["containers"]
        share = 12 * 1024 // (len(spec["initContainers"]) + 1) - 16
        limit = {e["name"]: e.get("value") for e in runner["env"]}["ATLAS_TERMINATION_LIMIT"]
        assert int(limit) == min(4000, share), (limit, len(spec["initContainers"]))


def test_job_metadata_owner_policy_and_kueue() -> None:
    job = make_job(make_body(queueName="team-a", suspend=True, backoffLimit=3, ttlSecondsAfterFinished=60))
    meta, spec = job["metadata"], job["spec"]
    assert meta["name"] == job_name("demo", UID, "gpt-4o", 3) and meta["namespace"] == "evals"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "atlasrun.dev/v1alpha1",
            "kind": "AtlasRun",
            "name": "demo",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["labels"][LABEL_QUEUE] == "team-a"
    assert meta["labels"]["app.kubernetes.io/name"] == "atlasrun" and meta["labels"][LABEL_RUN] == "demo"
    assert meta["labels"]["atlasrun.dev/model"] == "gpt-4o" and meta["labels"]["atlasrun.dev/chunk"] == "3"
    pod_labels = spec["template"]["metadata"]["labels"]
    assert pod_labels[LABEL_RUN] == "demo" and LABEL_QUEUE not in pod_labels
    assert meta["annotations"]["atlasrun.dev/model"] == "gpt-4o"
    assert spec["suspend"] is True and spec["ttlSecondsAfterFinished"] == 60
    # One Indexed Job per chunk: each index one item, retried on its own, never stopping the others.
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 2 and spec["parallelism"] == 2
    assert spec["backoffLimitPerIndex"] == 3 and spec["maxFailedIndexes"] == 2 and "backoffLimit" not in spec
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "FailIndex",
        "onExitCodes": {"containerName": "runner", "operator": "In", "values": [EXIT_INPUT]},
    }
    assert rules[1]["action"] == "Ignore" and rules[1]["onPodConditions"][0]["type"] == "DisruptionTarget"
    assert len(rules) == 2  # infrastructure exits (3, 4) and crashes count against backoffLimitPerIndex
    pod = spec["template"]["spec"]
    assert pod["activeDeadlineSeconds"] == 900 + 60 * 2 + 120 and "activeDeadlineSeconds" not in spec
    assert LABEL_QUEUE not in make_job()["metadata"]["labels"]
    longer = make_job(task_limits=TaskLimits(task_timeout_s=3000))["spec"]["template"]["spec"]
    assert longer["activeDeadlineSeconds"] == 3000 + 60 * 2 + 120
    short = make_job(make_body(activeDeadlineSeconds=77))["spec"]["template"]["spec"]
    assert short["activeDeadlineSeconds"] == 77
    assert make_job(parallelism=9)["spec"]["parallelism"] == 2  # never more than the chunk's items


def test_configmap_tasks_are_mounted_not_copied() -> None:
    unit = make_unit(path="/etc/atlasrun-tasks/tasks.yaml", name="tasks.yaml")
    pod = make_job(unit=unit, tasks_configmap=("starter-tasks", "tasks.yaml"))["spec"]["template"]["spec"]
    assert {
        "name": "tasks",
        "configMap": {
            "name": "starter-tasks",
            "items": [{"key": "tasks.yaml", "path": "tasks.yaml"}],
            "defaultMode": 0o444,
        },
    } in pod["volumes"]
    assert {"name": "tasks", "mountPath": "/etc/atlasrun-tasks", "readOnly": True} in pod["containers"][0][
        "volumeMounts"
    ]


def test_bad_servers_and_key_clashes_are_input_errors() -> None:
    with pytest.raises(InputError, match="port 8001 is also used by server 'filesystem'"):
        make_job(servers=[SERVERS[0], server("other", 8001)])
    with pytest.raises(InputError, match="needs an image"):
        make_job(servers=[ServerSpec(name="bare", command="x", port=9000)])
    with pytest.raises(InputError, match="needs the port"):
        make_job(servers=[ServerSpec(name="bare", command="x", image=f"x@{DIGEST}")])
    body = make_body()
    body.judges[1].api_key_env = "OPENAI_API_KEY"  # same variable, different Secret
    with pytest.raises(InputError, match="OPENAI_API_KEY would come from Secret gem/k"):
        make_job(body)


# ---------------------------------------------------------------- network policies


def test_vanilla_policy_allows_dns_and_declared_egress_only() -> None:
    policy = render_network_policy(
        "demo", "evals", UID, make_body(), SERVERS, s3_endpoint="http://10.1.2.3:9000"
    )
    assert policy is not None and policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == UID
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {LABEL_RUN: "demo"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in spec  # all ingress denied
    dns = spec["egress"][0]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    allowed = {
        (b["ipBlock"]["cidr"], p["port"])
        for rule in spec["egress"][1:]
        for b in rule["to"]
        for p in rule["ports"]
    }
    assert allowed == {("198.51.100.0/24", 443), ("203.0.113.0/24", 443), ("10.1.2.3/32", 9000)}
    hosts = policy["metadata"]["annotations"]["atlasrun.dev/egress-hosts"].split()
    assert hosts == ["*.googleapis.com:443", "api.openai.com:443", "api.search.example:443"]
    assert render_network_policy("demo", "evals", UID, make_body(networkPolicy="none"), SERVERS) is None


def test_cilium_policy_allows_hostnames_by_fqdn() -> None:
    policy = render_network_policy(
        "demo",
        "evals",
        UID,
        make_body(networkPolicy="cilium"),
        SERVERS,
        s3_endpoint="https://minio.storage.svc:9000",
    )
    assert policy is not None and policy["apiVersion"] == "cilium.io/v2"
    spec = policy["spec"]
    assert spec["endpointSelector"] == {"matchLabels": {LABEL_RUN: "demo"}}
    assert spec["enableDefaultDeny"] == {"ingress": True, "egress": True}
    dns = spec["egress"][0]
    assert dns["toEndpoints"][0]["matchLabels"]["k8s:k8s-app"] == "kube-dns"
    assert {p["protocol"] for p in dns["toPorts"][0]["ports"]} == {"UDP", "TCP"}
    assert dns["toPorts"][0]["rules"] == {"dns": [{"matchPattern": "*"}]}
    fqdns = {
        (next(iter(f.values())), p["port"])
        for rule in spec["egress"]
        if "toFQDNs" in rule
        for f in rule["toFQDNs"]
        for p in rule["toPorts"][0]["ports"]
    }
    assert fqdns == {
        ("api.openai.com", "443"),
        ("api.search.example", "443"),
        ("*.googleapis.com", "443"),
        ("minio.storage.svc", "9000"),
    }
    assert {"matchPattern": "*.googleapis.com"} in [f for r in spec["egress"] for f in r.get("toFQDNs", [])]
    cidrs = {c["cidr"] for rule in spec["egress"] for c in rule.get("toCIDRSet", [])}
    assert cidrs == {"198.51.100.0/24", "203.0.113.0/24"}


def test_bad_egress_is_an_input_error() -> None:
    bad = server("bad", 8003, egress=Egress(cidrs=["10.0.0.0/33"]))
    with pytest.raises(InputError, match="server 'bad' egress: not a CIDR"):
        render_network_policy("demo", "evals", UID, make_body(), [bad])


# ---------------------------------------------------------------- images


def test_is_pinned() -> None:
    assert is_pinned(f"ghcr.io/atlasrun/runner@{DIGEST}")
    assert is_pinned(f"registry:5000/a/b:v1@{DIGEST}")
    for ref in [
        "ghcr.io/atlasrun/runner:1.0",
        "runner",
        f"@{DIGEST}",
        "runner@sha256:abc",
        "runner@sha512:" + "ab" * 64,
        "runner@sha256:" + "AB" * 32,
    ]:
        assert not is_pinned(ref), ref


def test_unpinned_images_names_each_image_and_the_fix() -> None:
    catalog = Catalog(
        servers=[
            server("filesystem", 8001),
            ServerSpec(name="git", command="g", image="git:latest"),
            ServerSpec(name="memory", command="m", image="mem@sha256:123"),
        ]
    )
    body = make_body(runnerImage="ghcr.io/atlasrun/runner:dev")
    messages = unpinned_images(body, catalog)
    assert len(messages) == 3
    assert messages[0].startswith(
        "spec.cluster.runnerImage 'ghcr.io/atlasrun/runner:dev' has no @sha256 digest"
    )
    assert "server 'git' image 'git:latest'" in messages[1] and "allowUnpinnedImages" in messages[1]
    assert "malformed sha256 digest" in messages[2]
    body.servers.enabled = ["filesystem"]
    body.cluster.runner_image = None
    assert unpinned_images(body, catalog, runner_image=f"r@{DIGEST}") == []
    assert "default runner image" in unpinned_images(body, catalog, runner_image="r:1")[0]
    body.servers.inline = [server("filesystem", 8001).model_copy(update={"image": "fs:2"})]
    assert [s.image for s in servers_used(body, catalog)] == ["fs:2"]  # inline entries replace catalog ones
    assert "server 'filesystem' image 'fs:2'" in unpinned_images(body, catalog, runner_image=f"r@{DIGEST}")[0]


# ---------------------------------------------------------------- the CRD


def _walk(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _walk(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _walk(value)


def _models(
    model: type[BaseModel], seen: dict[str, type[BaseModel]] | None = None
) -> dict[str, type[BaseModel]]:
    """Every pydantic model reachable from ``model`` through its fields, by class name."""
    seen = {} if seen is None else seen
    seen[model.__name__] = model
    for field in model.model_fields.values():
        stack: list[Any] = [field.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel) and tp.__name__ not in seen:
                _models(tp, seen)
            stack.extend(typing.get_args(tp))
    return seen


def _schema_at(schema: dict[str, Any], model: type[BaseModel]) -> list[dict[str, Any]]:
    """Every object schema in ``schema`` whose properties are exactly ``model``'s field aliases."""
    generate = model.model_config.get("alias_generator")
    want = {f.alias or (generate(n) if callable(generate) else n) for n, f in model.model_fields.items()}
    return [
        s for s in _walk(schema) if isinstance(s.get("properties"), dict) and set(s["properties"]) == want
    ]


def _spec_schema() -> dict[str, Any]:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_committed_crd_matches_the_code() -> None:
    committed = (ROOT / "crds" / "atlasrun.yaml").read_text()
    assert committed == render_yaml(), (
        "crds/atlasrun.yaml is stale: python -m atlasrun.cluster.operator.crd > crds/atlasrun.yaml"
    )
    assert yaml.safe_load(committed) == build_crd()


def test_crd_shape_and_printer_columns() -> None:
    crd = build_crd()
    assert crd["metadata"]["name"] == "atlasruns.atlasrun.dev"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == ("AtlasRun", "atlasruns", ["ar"])
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    cols = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert cols == {
        "Phase": ".status.phase",
        "Progress": ".status.progress",
        "Pass Rate": ".status.passRates",
        "Age": ".metadata.creationTimestamp",
    }
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["phase"]["enum"] == [
        "Pending",
        "Running",
        "Succeeded",
        "Failed",
        "Suspended",
        "Blocked",
    ]
    assert {
        "progress",
        "models",
        "passRates",
        "resultsURI",
        "conditions",
        "observedGeneration",
        "tasks",
    } <= set(status["properties"])
    assert "results" not in status["properties"]  # O(models): per-item outcomes live in object storage
    model_counts = status["properties"]["models"]["additionalProperties"]["properties"]
    assert {
        "pending",
        "running",
        "scored",
        "excluded",
        "errored",
        "passed",
        "passRate",
        "meanCoverage",
    } <= set(model_counts)


def test_crd_schema_is_structural_and_covers_every_spec_field() -> None:
    spec = _spec_schema()
    for node in _walk(spec):
        assert not {"$ref", "$defs", "anyOf", "allOf", "oneOf", "title"} & set(node), node
        assert node.get("additionalProperties") is not False
        if node.get("properties") is not None or "items" in node or "additionalProperties" in node:
            assert node.get("type") in ("object", "array"), node
    for name, model in _models(RunSpecBody).items():
        assert _schema_at(spec, model), f"{name}'s fields are missing from the CRD"
    props = spec["properties"]
    assert _nodoc(props["parallelism"]) == {"type": "integer", "default": 8, "minimum": 1, "maximum": 1024}
    assert props["passThreshold"]["exclusiveMinimum"] is True and props["passThreshold"]["minimum"] == 0
    model = props["models"]["items"]["properties"]
    assert _nodoc(model["params"]) == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert model["apiKeySecret"]["nullable"] is True and model["apiKeySecret"]["required"] == ["name", "key"]
    inline = props["servers"]["properties"]["inline"]["items"]["properties"]
    assert _nodoc(inline["env"]) == {"type": "object", "additionalProperties": {"type": "string"}}
    assert props["cluster"]["properties"]["networkPolicy"]["enum"] == ["vanilla", "cilium", "none"]


def _nodoc(schema: dict[str, Any]) -> dict[str, Any]:
    """A property's schema without its description (tests/test_crd_descriptions.py checks those)."""
    return {k: v for k, v in schema.items() if k != "description"}


def test_every_python_validator_has_a_cel_rule() -> None:
    """Field validators need a rule on their field; model validators one on the object or a field;
    ``model_post_init`` checks one on the object itself."""
    spec = _spec_schema()

    def rules(schema: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            *schema.get("x-kubernetes-validations", []),
            *schema.get("items", {}).get("x-kubernetes-validations", []),
        ]

    checked = 0
    for name, model in _models(RunSpecBody).items():
        (schema, *_) = _schema_at(spec, model)
        props = schema["properties"]
        generate = model.model_config.get("alias_generator")
        alias = {
            n: f.alias or (generate(n) if callable(generate) else n) for n, f in model.model_fields.items()
        }
        decorators = model.__pydantic_decorators__
        for validator in decorators.field_validators.values():
            for field in validator.info.fields:
                assert rules(props[alias[field]]), f"{name}.{field} has a Python validator but no CEL rule"
                checked += 1
        if decorators.model_validators:
            assert rules(schema) or any(rules(p) for p in props.values()), (
                f"{name}: model validator without CEL rule"
            )
            checked += 1
        if "model_post_init" in vars(model):
            assert rules(schema), f"{name}.model_post_init checks the object but the CRD has no rule on it"
            checked += 1
    assert checked >= 4


def test_status_model_round_trips_through_the_schema_fields() -> None:
    status = RunStatus.model_validate(
        {
            "phase": "Running",
            "progress": "1/4",
            "passRates": "gpt-4o=1.00",
            "models": {"gpt-4o": {"total": 4, "scored": 1, "passed": 1, "passRate": 1.0}},
            "resultsURI": "s3://b/p/demo/",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Running"}],
        }
    )
    dumped = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    props = crd_module.status_schema()["properties"]
    assert set(dumped) <= set(props)
    assert dumped["resultsURI"] == "s3://b/p/demo/" and dumped["models"]["gpt-4o"]["passRate"] == 1.0
    # a key the CRD does not declare would be pruned by the API server: the model refuses it
    with pytest.raises(ValueError, match="results"):
        RunStatus.model_validate({"phase": "Running", "results": {"j": {"s": "scored"}}})


# ---------------------------------------------------------------- kubernetes-validate --strict


@pytest.fixture(scope="module")
def kubernetes_validate() -> Path:
    try:
        return ensure_kubernetes_validate()
    except ToolInstallError as exc:
        pytest.fail(f"{exc}\n(run: .venv/bin/python tests/tools.py kubernetes-validate)")


def _write(path: Path, obj: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return path


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_strictly(kubernetes_validate: Path, tmp_path: Path, version: str) -> None:
    body = make_body(
        queueName="team-a", dataVolume={"persistentVolumeClaim": {"claimName": "data", "readOnly": True}}
    )
    files = [
        _write(tmp_path / "job.yaml", make_job(body)),
        _write(
            tmp_path / "netpol.yaml",
            render_network_policy("demo", "evals", UID, body, SERVERS, s3_endpoint="http://10.1.2.3:9000")
            or {},
        ),
        ROOT / "crds" / "atlasrun.yaml",
    ]
    proc = subprocess.run(
        [str(kubernetes_validate), "--strict", "-k", version, *map(str, files)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count("passed for resource") == 3 and "WARN" not in out and "ERROR" not in out, out


# ---------------------------------------------------------------- a real API server


@pytest.fixture(scope="module")
def control_plane() -> Iterator[Any]:
    from cluster.controlplane import ControlPlane, binaries_or_skip

    with ControlPlane(binaries_or_skip()) as plane:
        yield plane


@pytest.mark.cluster
def test_api_server_enforces_the_crd_and_accepts_the_manifests(control_plane: Any) -> None:
    from cluster.controlplane import wait_for

    cp, ns = control_plane, "evals"
    cp.create_namespace(ns, {"pod-security.kubernetes.io/enforce": "restricted"})
    runs = f"/apis/atlasrun.dev/v1alpha1/namespaces/{ns}/atlasruns"
    cp.kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "atlasrun.yaml"))
    with cp.client() as c:

        def established() -> bool:
            crd = c.get(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/atlasruns.atlasrun.dev"
            ).json()
            return any(
                x["type"] == "Established" and x["status"] == "True"
                for x in crd.get("status", {}).get("conditions", [])
            )

        wait_for(established, 60, "the AtlasRun CRD to be Established")
        wait_for(lambda: c.get(runs).status_code == 200, 60, "the atlasruns resource to be served")

        def create(name: str, spec: dict[str, Any]) -> Any:
            return c.post(
                runs,
                params={"fieldValidation": "Strict"},
                json={
                    "apiVersion": "atlasrun.dev/v1alpha1",
                    "kind": "AtlasRun",
                    "metadata": {"name": name},
                    "spec": spec,
                },
            )

        valid = {
            "tasks": {"configMap": "tasks"},
            "models": [{"name": "gpt-4o", "params": {"temperature": 0}}],
            "judges": [{"name": "deterministic"}],
            "cluster": {"queueName": "team-a"},
        }
        created = create("demo", valid)
        assert created.status_code == 201, created.text
        run = created.json()
        assert run["spec"]["parallelism"] == 8 and run["spec"]["models"][0]["maxConcurrency"] == 4  # defaults
        assert run["spec"]["models"][0]["params"] == {"temperature": 0}  # free-form params kept
        RunSpecBody.model_validate(run["spec"])  # what the API server stores, pydantic accepts

        bad = {
            "parallelism": ({**valid, "parallelism": 0}, "spec.parallelism"),
            "two sources": (
                {**valid, "tasks": {"configMap": "t", "uri": "s3://b/tasks.yaml"}},
                "spec.tasks: Invalid value: give exactly one of path, uri, configMap, dataset",
            ),
            "no source": ({**valid, "tasks": {}}, "give exactly one of path, uri, configMap, dataset"),
            "duplicate models": (
                {**valid, "models": [{"name": "a"}, {"name": "a"}]},
                "spec.models: Invalid value: models: names must be unique",
            ),
            "duplicate judges": (
                {**valid, "judges": [{"name": "j"}, {"name": "j"}]},
                "judges: names must be unique",
            ),
            "server name": (
                {**valid, "servers": {"inline": [{"name": "Bad_Name", "command": "x"}]}},
                "spec.servers.inline[0].name",
            ),
            "stdio without command": (
                {**valid, "servers": {"inline": [{"name": "s"}]}},
                "transport stdio needs 'command'",
            ),
            "unknown field": ({**valid, "paralelism": 3}, 'unknown field "spec.paralelism"'),
            "network policy": (
                {**valid, "cluster": {"networkPolicy": "calico"}},
                "spec.cluster.networkPolicy",
            ),
        }
        for i, (case, (spec, expected)) in enumerate(bad.items()):
            response = create(f"bad-{i}", spec)
            assert response.status_code in (400, 422), f"{case}: {response.status_code} {response.text}"
            assert expected in response.json()["message"], f"{case}: {response.json()['message']}"

        # The status subresource keeps what RunStatus declares; kubectl shows the printer columns.
        status = RunStatus.model_validate(
            {
                "phase": "Running",
                "progress": "1/4",
                "passRates": "gpt-4o=1.00",
                "resultsURI": "s3://b/demo/",
                "models": {
                    "gpt-4o": {
                        "total": 4,
                        "pending": 3,
                        "scored": 1,
                        "passed": 1,
                        "passRate": 1.0,
                        "coverageSum": 1.0,
                        "chunksDone": "0",
                    }
                },
                "tasks": {"sha256": "ab" * 32, "uri": "s3://b/tasks/" + "ab" * 32, "count": 4},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Running",
                        "lastTransitionTime": "2025-01-01T00:00:00Z",
                    }
                ],
            }
        )
        patch = {"status": status.model_dump(by_alias=True, mode="json", exclude_none=True)}
        r = c.patch(
            f"{runs}/demo/status",
            json=patch,
            params={"fieldValidation": "Strict"},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["status"]["tasks"] == patch["status"]["tasks"]
        assert r.json()["status"]["models"]["gpt-4o"]["chunksDone"] == "0"
        assert r.json()["status"]["models"]["gpt-4o"]["passRate"] == 1.0
        table = cp.kubectl("get", "ar", "-n", ns).stdout
        assert re.search(r"NAME\s+PHASE\s+PROGRESS\s+PASS RATE\s+AGE", table), table
        assert re.search(r"demo\s+Running\s+1/4\s+gpt-4o=1.00", table), table

        # The rendered Job and NetworkPolicy are accepted as they are; their pods pass PodSecurity
        # "restricted"; deleting the run garbage-collects them through the owner references.
        body = RunSpecBody.model_validate(run["spec"])
        job = render_job(
            "demo",
            run["metadata"]["uid"],
            ns,
            body,
            body.models[0],
            make_unit(),
            SERVERS,
            runner_image=f"ghcr.io/atlasrun/runner@{DIGEST}",
            spec_configmap="atlasrun-demo",
            s3_secret="s3",
            s3_endpoint="http://10.1.2.3:9000",
        )
        job["spec"]["suspend"] = True  # no pods: nothing would run them here
        policy = render_network_policy("demo", ns, run["metadata"]["uid"], body, SERVERS)
        assert policy is not None
        r = c.post(f"/apis/batch/v1/namespaces/{ns}/jobs", json=job, params={"fieldValidation": "Strict"})
        assert r.status_code == 201, r.text
        r = c.post(
            f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
            json=policy,
            params={"fieldValidation": "Strict"},
        )
        assert r.status_code == 201, r.text
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": ns},
            "spec": job["spec"]["template"]["spec"],
        }
        r = c.post(
            f"/api/v1/namespaces/{ns}/pods", json=pod, params={"dryRun": "All", "fieldValidation": "Strict"}
        )
        assert r.status_code == 201, r.text
        assert not r.headers.get("warning"), r.headers.get("warning")

        # (The garbage collector picks up a new CRD's resources at its next discovery sync, ~30 s.)
        assert c.delete(f"{runs}/demo").status_code == 200
        for path in (
            f"/apis/batch/v1/namespaces/{ns}/jobs/{job['metadata']['name']}",
            f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{policy['metadata']['name']}",
        ):
            wait_for(lambda path=path: c.get(path).status_code == 404, 90, f"garbage collection of {path}")
