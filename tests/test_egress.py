"""Egress derivation (atlasrun.cluster.operator.egress): every destination of a run from its spec."""

from __future__ import annotations

import json

import pytest

from atlasrun.cluster.operator.egress import (
    ENV_VAR,
    KUBE_DNS,
    RunEgress,
    annotation,
    declared_egress,
)
from atlasrun.cluster.wire.contract import ANNOTATION_EGRESS as ANNOTATION
from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import Egress, ServerSpec


def test_api_bases_servers_and_object_store_are_derived() -> None:
    body = RunSpecBody.model_validate(
        {
            "tasks": {"path": "t.jsonl"},
            "models": [
                {"name": "a", "apiBase": "http://llm.internal:8000/v1"},
                {"name": "b", "egress": {"cidrs": ["10.1.0.0/16"], "ports": [8443]}},
            ],
            "judges": [{"name": "j", "model": "gpt", "apiBase": "https://api.example.com"}],
        }
    )
    server = ServerSpec(name="web", command="x", egress=Egress(hosts=["search.example.org"]))
    got = {
        where: (e.hosts, e.cidrs, e.ports)
        for where, e in declared_egress(body, [server], "http://minio:9000")
    }
    assert got == {
        "spec.models[0].apiBase": (["llm.internal"], [], [8000]),
        "spec.models[b].egress": ([], ["10.1.0.0/16"], [8443]),
        "spec.judges[0].apiBase": (["api.example.com"], [], [443]),
        "server 'web' egress": (["search.example.org"], [], []),
        "S3 endpoint": (["minio"], [], [9000]),
    }
    with pytest.raises(InputError, match="apiBase"):
        declared_egress(
            body.model_copy(update={"models": [body.models[0].model_copy(update={"api_base": "http://"})]}),
            [],
        )


def test_annotation_lists_targets_and_ports() -> None:
    text = annotation({"10.0.0.0/8": {443, 80}}, {"api.example.com": {443}})
    assert json.loads(text) == {"10.0.0.0/8": [80, 443], "api.example.com": [443]}


def _run(**cluster: object) -> RunSpecBody:
    return RunSpecBody.model_validate(
        {
            "tasks": {"configMap": "t"},
            "models": [
                {"name": "a", "apiBase": "http://10.9.8.7:8000/v1"},
                {
                    "name": "b",
                    "egress": {"hosts": ["api.openai.com"], "cidrs": ["0.0.0.0/0"], "ports": [443]},
                },
            ],
            "cluster": cluster,
        }
    )


def test_network_policy_rules_come_from_the_derived_destinations() -> None:
    from atlasrun.cluster.operator.manifests import render_network_policy

    server = ServerSpec(name="web", command="x", egress=Egress(cidrs=["203.0.113.0/24"], ports=[8443]))
    policy = render_network_policy("r", "ns", "uid", _run(), [server], s3_endpoint="http://10.0.0.9:9000")
    assert policy is not None
    rules = {
        (peer["ipBlock"]["cidr"], port["port"])
        for rule in policy["spec"]["egress"][1:]
        for peer in rule["to"]
        for port in rule["ports"]
    }
    # The apiBase host:port needs no separate egress declaration.
    assert rules == {
        ("10.9.8.7/32", 8000),
        ("0.0.0.0/0", 443),
        ("203.0.113.0/24", 8443),
        ("10.0.0.9/32", 9000),
    }
    assert json.loads(policy["metadata"]["annotations"][ANNOTATION]) == {
        "0.0.0.0/0": [443],
        "10.0.0.9/32": [9000],
        "10.9.8.7/32": [8000],
        "203.0.113.0/24": [8443],
        "api.openai.com": [443],
    }
    assert policy["spec"]["egress"][0]["to"] == [KUBE_DNS]


def test_chart_run_egress_sets_dns_peers_and_the_object_store() -> None:
    from atlasrun.cluster.operator.manifests import render_network_policy

    openshift_dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "openshift-dns"}},
        "podSelector": {"matchLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}},
    }
    minio = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}}
    values = {"dns": [openshift_dns], "objectStore": {"to": [minio], "ports": [9000]}}
    run_egress = RunEgress.from_env({ENV_VAR: json.dumps(values)})
    policy = render_network_policy("r", "ns", "uid", _run(), [], run_egress=run_egress)
    assert policy is not None
    egress = policy["spec"]["egress"]
    assert egress[0]["to"] == [openshift_dns] and {p["port"] for p in egress[0]["ports"]} == {53}
    assert egress[-1] == {"to": [minio], "ports": [{"protocol": "TCP", "port": 9000}]}
    assert RunEgress.from_env({}) == RunEgress() and RunEgress().dns == [KUBE_DNS]
    with pytest.raises(InputError, match=ENV_VAR):
        RunEgress.from_env({ENV_VAR: '{"dnsServers": []}'})


def test_cilium_policy_uses_the_same_dns_and_object_store_values() -> None:
    from atlasrun.cluster.operator.manifests import render_network_policy

    values = {
        "dns": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "openshift-dns"}},
                "podSelector": {"matchLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}},
            }
        ],
        "objectStore": {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {"team": "storage"}},
                    "podSelector": {"matchLabels": {"app": "minio"}},
                }
            ],
            "ports": [9000],
        },
    }
    policy = render_network_policy(
        "r", "ns", "uid", _run(networkPolicy="cilium"), [], run_egress=RunEgress.model_validate(values)
    )
    assert policy is not None and policy["kind"] == "CiliumNetworkPolicy"
    egress = policy["spec"]["egress"]
    assert egress[0]["toEndpoints"] == [
        {
            "matchLabels": {
                "k8s:io.kubernetes.pod.namespace": "openshift-dns",
                "k8s:dns.operator.openshift.io/daemonset-dns": "default",
            }
        }
    ]
    assert egress[-1] == {
        "toEndpoints": [
            {"matchLabels": {"k8s:io.cilium.k8s.namespace.labels.team": "storage", "k8s:app": "minio"}}
        ],
        "toPorts": [{"ports": [{"port": "9000", "protocol": "TCP"}]}],
    }
    default = render_network_policy("r", "ns", "uid", _run(networkPolicy="cilium"), [])
    assert default is not None
    assert default["spec"]["egress"][0]["toEndpoints"] == [
        {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}}
    ]


def test_an_unusable_api_base_blocks_the_run_before_anything_is_rendered() -> None:
    from atlasrun.cluster.operator.observe import Observer
    from atlasrun.cluster.operator.reconcile import decide

    run = {
        "metadata": {"name": "r", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {
            "tasks": {"configMap": "t"},
            "models": [{"name": "m", "apiBase": "http://[::1/v1"}],
            "cluster": {"runnerImage": "ghcr.io/x/runner@sha256:" + "a" * 64},
        },
    }
    snapshot = Observer().snapshot(run)
    d = decide(snapshot)
    blocked = next(c for c in d.status["conditions"] if c["type"] == "Blocked")
    assert d.phase == "Blocked" and blocked["reason"] == "InvalidSpec"
    assert "spec.models[0].apiBase" in blocked["message"]
