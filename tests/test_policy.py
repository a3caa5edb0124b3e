"""Tenancy policy (atlasrun.cluster.operator.policy): violations name the spec field they concern."""

from __future__ import annotations

import json

import pytest

from atlasrun.cluster.operator.policy import ENV_VAR, Policy, blocked, check
from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody

PINNED = "ghcr.io/x/runner@sha256:" + "a" * 64


def body(**extra: object) -> RunSpecBody:
    raw = {"tasks": {"path": "t.jsonl"}, "models": [{"name": "m"}], **extra}
    return RunSpecBody.model_validate(raw)


def paths(spec: RunSpecBody, policy: Policy) -> list[str]:
    return [v.path for v in check(spec, policy)]


def test_default_policy_accepts_plain_run() -> None:
    assert check(body(cluster={"runnerImage": PINNED}), Policy()) == []


def test_host_path_data_volume_is_refused_by_default() -> None:
    spec = body(cluster={"dataVolume": {"hostPath": {"path": "/etc"}}})
    [violation] = check(spec, Policy())
    assert violation.path == "spec.cluster.dataVolume.hostPath"
    assert "hostPath is not allowed" in violation.message
    ok = body(cluster={"dataVolume": {"persistentVolumeClaim": {"claimName": "d"}}})
    assert check(ok, Policy()) == []
    assert check(spec, Policy(allowed_volume_types=["hostPath"])) == []


def test_api_hosts_allow_list_covers_models_and_judges() -> None:
    spec = body(
        models=[
            {"name": "a", "apiBase": "https://x.openai.azure.com/v1"},
            {"name": "b", "apiBase": "http://evil:80"},
        ],
        judges=[{"name": "j", "model": "gpt", "apiBase": "https://api.example.com"}],
    )
    policy = Policy(allowed_api_hosts=["*.openai.azure.com"])
    assert paths(spec, policy) == ["spec.models[1].apiBase", "spec.judges[0].apiBase"]
    assert check(spec, Policy()) == []  # None: any host
    assert len(check(spec, Policy(allowed_api_hosts=[]))) == 3


def test_unpinned_images_refused_unless_policy_allows() -> None:
    spec = body(
        cluster={"runnerImage": "runner:latest", "allowUnpinnedImages": True},
        servers={
            "inline": [
                {"name": "s", "command": "srv", "image": "srv:1"},
                {"name": "t", "command": "t", "image": PINNED},
            ]
        },
    )
    assert paths(spec, Policy()) == [
        "spec.cluster.allowUnpinnedImages",
        "spec.cluster.runnerImage",
        "spec.servers.inline[0].image",
    ]
    assert check(spec, Policy(allow_unpinned_images=True)) == []


def test_policy_from_env_uses_chart_value_names() -> None:
    env = {ENV_VAR: json.dumps({"allowedVolumeTypes": ["configMap"], "allowedApiHosts": ["h"]})}
    policy = Policy.from_env(env)
    assert policy.allowed_volume_types == ["configMap"] and policy.allowed_api_hosts == ["h"]
    assert Policy.from_env({}) == Policy()
    with pytest.raises(InputError, match=ENV_VAR):
        Policy.from_env({ENV_VAR: '{"allowHostPath": true}'})


def test_reasons_and_blocked_condition_name_the_field() -> None:
    spec = body(
        models=[{"name": "a", "apiBase": "https://evil.example/v1"}],
        cluster={"dataVolume": {"hostPath": {"path": "/"}}, "allowUnpinnedImages": True},
    )
    violations = check(spec, Policy(allowed_api_hosts=["*.openai.azure.com"]))
    assert [v.reason for v in violations] == [
        "VolumeTypeNotAllowed",
        "ApiHostNotAllowed",
        "UnpinnedImageNotAllowed",
    ]
    reason, message = blocked(violations) or ("", "")
    assert reason == "VolumeTypeNotAllowed"
    for field in (
        "spec.cluster.dataVolume.hostPath",
        "spec.models[0].apiBase",
        "spec.cluster.allowUnpinnedImages",
    ):
        assert field in message
    assert blocked([]) is None


def test_unpinned_images_without_the_opt_out_are_left_to_the_operators_pin_check() -> None:
    # Blocked/UnpinnedImage (observe) already refuses them; the policy only rules on the opt-out.
    assert check(body(cluster={"runnerImage": "runner:latest"}), Policy()) == []


def test_observe_blocks_a_violating_run_before_any_api_call() -> None:
    from atlasrun.cluster.operator.observe import Observer
    from atlasrun.cluster.operator.reconcile import decide
    from atlasrun.cluster.operator.settings import OperatorSettings

    run = {
        "metadata": {"name": "r", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": {
            "tasks": {"configMap": "t"},
            "models": [{"name": "m", "apiBase": "https://api.elsewhere.example/v1"}],
            "cluster": {"runnerImage": PINNED, "dataVolume": {"hostPath": {"path": "/etc"}}},
        },
    }
    policy = Policy(allowed_api_hosts=["api.openai.com"])
    observer = Observer(settings=OperatorSettings(policy=policy))
    snapshot = observer.snapshot(run)
    d = decide(snapshot)
    assert d.phase == "Blocked"
    blocked_condition = next(c for c in d.status["conditions"] if c["type"] == "Blocked")
    assert (blocked_condition["status"], blocked_condition["reason"]) == ("True", "VolumeTypeNotAllowed")
    [(kind, reason, message)] = d.events
    assert (kind, reason) == ("Warning", "VolumeTypeNotAllowed")
    assert "spec.cluster.dataVolume.hostPath" in message and "spec.models[0].apiBase" in message


def test_namespace_api_hosts_replace_the_cluster_list_there() -> None:
    spec = body(models=[{"name": "a", "apiBase": "https://llm.team-a.internal/v1"}])
    policy = Policy(
        allowed_api_hosts=["api.openai.com"], namespace_api_hosts={"team-a": ["*.team-a.internal"]}
    )
    assert check(spec, policy, "team-a") == []
    [violation] = check(spec, policy, "team-b")
    assert violation.reason == "ApiHostNotAllowed" and "api.openai.com" in violation.message
    [violation] = check(spec, Policy(namespace_api_hosts={"sandbox": []}), "sandbox")
    assert "in namespace sandbox" in violation.message and "allowed: none" in violation.message
    assert Policy.from_env(
        {ENV_VAR: json.dumps({"namespaceApiHosts": {"x": ["h"]}})}
    ).namespace_api_hosts == {"x": ["h"]}
