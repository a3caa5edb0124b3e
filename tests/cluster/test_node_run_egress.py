"""The run NetworkPolicy the operator derives from a spec, enforced on the real node (kube-router).

Unlike test_node_networkpolicy.py (a policy of the operator's shape written by hand), the policy
here is ``manifests.render_network_policy`` of a run spec: the model endpoint is reachable only
because it is the model's ``apiBase`` (no egress declared for it), the object store because it
is the S3 endpoint, the "go" port through the model's declared ``egress``; a listener on a port
of the same host that nothing derives stays unreachable."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from atlasrun.cluster.operator.manifests import render_network_policy
from atlasrun.cluster.wire.contract import ANNOTATION_EGRESS as ANNOTATION
from atlasrun.runspec.run import RunSpecBody
from cluster.controlplane import ControlPlane
from cluster.node import Node, node_cluster  # noqa: F401  (fixture)
from cluster.test_node_networkpolicy import Listeners, listeners, probe_under_policy  # noqa: F401

pytestmark = [pytest.mark.cluster, pytest.mark.node]


def test_rendered_run_policy_allows_derived_destinations_only(
    node_cluster: tuple[ControlPlane, Node],  # noqa: F811
    listeners: Listeners,  # noqa: F811
    tmp_path: Path,
) -> None:
    cp, node = node_cluster
    t0 = time.monotonic()
    go, model, s3, undeclared = listeners.ports
    ns = "run-egress"
    body = RunSpecBody.model_validate(
        {
            "tasks": {"configMap": "t"},
            "models": [
                {
                    "name": "m",
                    "apiBase": f"http://{node.ip}:{model}/v1",
                    "egress": {"cidrs": [f"{node.ip}/32"], "ports": [go]},
                }
            ],
        }
    )
    policy = render_network_policy(
        "derived", ns, "uid-unused", body, [], s3_endpoint=f"http://{node.ip}:{s3}"
    )
    assert policy is not None
    del policy["metadata"]["ownerReferences"]  # no AtlasRun here: the garbage collector would delete it
    assert json.loads(policy["metadata"]["annotations"][ANNOTATION]) == {
        f"{node.ip}/32": sorted([go, model, s3])
    }

    ip, results = probe_under_policy(cp, node, listeners, ns, policy, tmp_path)  # go reached, or no results
    print(f"\nprobe from {ip} under the derived run policy: {results} ({time.monotonic() - t0:.1f}s)")
    assert results[str(model)] == "ok"  # the model's apiBase
    assert results[str(s3)] == "ok"  # the S3 endpoint
    assert results[str(undeclared)] in ("refused", "timeout")
    assert listeners.accepted[undeclared] == 0
    cp.kubectl("delete", "namespace", ns, "--wait=false")
