"""Issue 22, part 2: a second real node (cluster.node_netns: its own network namespace, containerd,
kubelet and kube-router) beside the session's node, and losing it.

- The operator's NetworkPolicy allows and blocks the same connections across nodes: a pod of the
  second node to the host (its own kube-router enforces), a pod of the first node to listeners
  reached through the second node's link.
- Node loss mid-sweep: 2 models x 42 items running on both nodes; the second node dies (every
  process SIGKILLed, its network namespace deleted). The node lifecycle controller marks it
  NotReady after ``--node-monitor-grace-period``; the test then does what the runbook says an
  operator of a bare-metal cluster does for a machine that is gone for good (a cloud's node
  controller deletes the Node object instead, with the same effect): it applies the
  ``node.kubernetes.io/out-of-service`` taint. PodGC marks the lost pods Failed with a
  DisruptionTarget condition, the Jobs replace them on the first node (the podFailurePolicy
  ignores disruptions: no retry is spent), and the run completes with every item counted once.
- Drain: a sweep's pods land on both nodes (the scheduler puts them there); ``kubectl drain`` of
  the second node mid-sweep: evicted pods are retried on the first node, not counted as failures.
- The operator's leader on the lost node: the chart's two replicas are spread over the nodes; the
  standby takes the Lease and finishes the run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.controlplane import wait_for
from cluster.node import node_cluster  # noqa: F401  (fixture)
from cluster.node_netns import NetnsNode
from cluster.node_run import NodeRunEnv, node_run_env  # noqa: F401  (fixture)
from cluster.test_node_networkpolicy import Listeners, egress_policy, probe_under_policy
from cluster.test_node_operator_pod import SYSTEM, leader_pod, operator_from_chart

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1800)]

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


@pytest.fixture
def node_b(node_run_env: NodeRunEnv) -> Iterator[NetnsNode]:  # noqa: F811
    env = node_run_env
    with NetnsNode(env.cp, env.node, index=1) as b:
        print(
            f"\nsecond node up in {b.startup_seconds:.1f}s: "
            + ", ".join(f"{k} {v:.1f}s" for k, v in b.timings.items())
        )
        yield b


def _node_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"].get("nodeName", ""))


def _ready(env: NodeRunEnv, node: str) -> str:
    out = env.cp.kubectl(
        "get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False
    )
    return out.stdout.strip()


def _sweep(env: NodeRunEnv, name: str, repeats: int) -> dict[str, Any]:
    manifest = env.manifest(name, itemsPerJob=14, itemsPerPod=5)
    manifest["spec"]["repeats"] = repeats
    manifest["spec"]["parallelism"] = 8
    for model in manifest["spec"]["models"]:
        model["maxConcurrency"] = 8
    return manifest


def _assert_counted_once(env: NodeRunEnv, run: dict[str, Any], name: str, per_model: int) -> None:
    status = run["status"]
    assert status["phase"] == "Succeeded", status
    assert status["progress"] == f"{2 * per_model}/{2 * per_model}", status
    sharp, sloppy = status["models"]["sharp"], status["models"]["sloppy"]
    assert (sharp["scored"], sharp["passed"]) == (per_model, per_model), sharp
    # sloppy passes 3 of the 6 tasks, every repeat alike
    assert (sloppy["scored"], sloppy["passed"]) == (per_model, per_model // 2), sloppy
    keys = env.s3_keys(f"node/{name}/tasks/")
    assert len(keys) == 2 * per_model and len(set(keys)) == len(keys), keys


def test_the_operator_policy_holds_for_a_pod_of_the_second_node(
    node_run_env: NodeRunEnv,  # noqa: F811
    node_b: NetnsNode,
    tmp_path: Path,
) -> None:
    env = node_run_env
    # A probe pod of the second node, to the host's listeners over the link (as another machine
    # reaches them): its own kube-router enforces the policy. A probe pod of the first node, to
    # listeners in the second node's namespace (reached through its link): the first's does.
    for probe_node, listen_ns, target, ns in (
        (node_b, None, env.node.ip, "two-node-netpol-b"),
        (env.node, node_b.netns, node_b.node_ip, "two-node-netpol-a"),
    ):
        listeners = Listeners(target, 4, netns=listen_ns)
        try:
            go, model, s3, undeclared = listeners.ports
            policy = egress_policy(ns, f"{target}/32", [go, model, s3])
            ip, results = probe_under_policy(
                env.cp, probe_node, listeners, ns, policy, tmp_path, target=target
            )
        finally:
            listeners.close()
            env.cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        print(f"\nprobe on {probe_node.name} ({ip}) to {target}: {results}")
        assert ip.startswith(probe_node.pod_cidr.rsplit(".", 1)[0] + "."), (ip, probe_node.pod_cidr)
        assert (results[str(model)], results[str(s3)]) == ("ok", "ok"), (probe_node.name, results)
        assert results[str(undeclared)] in ("refused", "timeout"), (probe_node.name, results)
        assert listeners.accepted[undeclared] == 0, probe_node.name


def test_losing_a_node_mid_sweep_completes_on_the_other_with_every_item_once(
    node_run_env: NodeRunEnv,  # noqa: F811
    node_b: NetnsNode,
) -> None:
    env = node_run_env
    name, since = "lose", len(env.provider.requests)
    timeline: dict[str, float] = {}
    with env.operator():
        t0 = time.monotonic()
        env.create_run(_sweep(env, name, repeats=7))

        def working_on_b() -> bool:
            pods = env.recorder.of_run(name)
            on_b = [p for p in pods if _node_of(p) == node_b.name and p["status"].get("phase") == "Running"]
            done = int(env.get_run(name).get("status", {}).get("progress", "0/0").split("/")[0])
            return bool(on_b) and done >= 10

        wait_for(working_on_b, 600, "the sweep running on the second node, 10 items done", interval=0.5)
        killed_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # creationTimestamp's form
        lost = node_b.lose()
        timeline["killed"] = lost - t0
        on_b_at_loss = {
            p["metadata"]["name"]
            for p in env.recorder.of_run(name)
            if _node_of(p) == node_b.name and p["status"].get("phase") not in ("Succeeded", "Failed")
        }
        wait_for(lambda: _ready(env, node_b.name) == "Unknown", 180, "the lost node NotReady", interval=0.5)
        timeline["node NotReady"] = time.monotonic() - t0
        env.cp.kubectl("taint", "node", node_b.name, OUT_OF_SERVICE)
        timeline["out-of-service taint"] = time.monotonic() - t0

        def lost_pods_failed() -> bool:
            pods = {p["metadata"]["name"]: p for p in env.recorder.of_run(name)}
            return all(
                pods.get(n, {}).get("status", {}).get("phase") == "Failed" or n not in pods
                for n in on_b_at_loss
            )

        wait_for(lost_pods_failed, 300, "the lost node's pods marked Failed", interval=0.5)
        timeline["lost pods Failed"] = time.monotonic() - t0
        run = env.wait_phase(name, {"Succeeded", "Failed"}, timeout=900)
        timeline["run complete"] = time.monotonic() - t0
    print(
        f"\nnode loss timeline (s since the run was created): {timeline}; pods on B at loss: {len(on_b_at_loss)}"
    )
    _assert_counted_once(env, run, name, 42)
    # The rest of the sweep, the lost pods' items included, ran in pods created on the surviving
    # node after the kill.
    after = [
        p
        for p in env.recorder.of_run(name)
        if p["metadata"]["creationTimestamp"] >= killed_at and _node_of(p) == env.node.name
    ]
    assert after, "no pod was created on the surviving node after the kill"
    assert on_b_at_loss, "nothing was running on the lost node"
    # Every (model, task) reached the model, and every one of the 84 items at least once.
    starts = env.first_turns(since)
    assert len(set(starts)) == 12, sorted(set(starts))
    assert len(starts) >= 2 * 42, len(starts)


def test_draining_a_node_mid_sweep_retries_its_items_elsewhere(
    node_run_env: NodeRunEnv,  # noqa: F811
    node_b: NetnsNode,
) -> None:
    """Also where the scheduler puts a sweep's pods when two nodes are Ready: on both."""
    env = node_run_env
    name = "drain"
    with env.operator():
        t0 = time.monotonic()
        env.create_run(_sweep(env, name, repeats=3))

        def running_on_b() -> bool:
            return any(
                _node_of(p) == node_b.name and p["status"].get("phase") == "Running"
                for p in env.recorder.of_run(name)
            )

        wait_for(running_on_b, 600, "a pod of the sweep running on the second node", interval=0.5)
        wait_for(
            lambda: any(_node_of(p) == env.node.name for p in env.recorder.of_run(name)),
            120,
            "a pod of the sweep on the first node",
            interval=0.5,
        )
        drain = env.cp.kubectl(
            "drain",
            node_b.name,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=300s",
            timeout=360,
        )
        drained = time.monotonic() - t0
        run = env.wait_phase(name, {"Succeeded", "Failed"}, timeout=900)
    print(
        f"\ndrain at {drained:.1f}s ({drain.stdout.count('evicted')} evicted); run complete at {time.monotonic() - t0:.1f}s"
    )
    _assert_counted_once(env, run, name, 18)
    assert "evicted" in drain.stdout, drain.stdout
    for model in ("sharp", "sloppy"):
        m = run["status"]["models"][model]
        assert (m.get("errored", 0), m.get("excluded", 0)) == (0, 0), m


def test_losing_the_leaders_node_the_standby_finishes_the_run(
    node_run_env: NodeRunEnv,  # noqa: F811
    node_b: NetnsNode,
) -> None:
    """The chart's two operator replicas, spread over the two nodes; the leader's node dies
    mid-run: the replica on the surviving node takes the Lease and the run completes."""
    env, cp = node_run_env, node_run_env.cp
    name = "leader-lost"
    env.node.expose_api_server()
    node_b.expose_api_server()
    with operator_from_chart(env):
        pods = json.loads(cp.kubectl("get", "pods", "-n", SYSTEM, "-o", "json").stdout)["items"]
        where = {p["metadata"]["name"]: _node_of(p) for p in pods}
        assert sorted(where.values()) == sorted([env.node.name, node_b.name]), where  # spread
        leader = wait_for(lambda: leader_pod(env), 60, "an operator replica leads")
        if where[leader] != node_b.name:  # make the second node's replica the leader
            cp.kubectl("delete", "pod", leader, "-n", SYSTEM)
            leader = wait_for(
                lambda: (lp := leader_pod(env)) in where and where[lp] == node_b.name and lp,
                120,
                "the second node's replica leads",
            )
        t0 = time.monotonic()
        env.create_run(_sweep(env, name, repeats=2))
        wait_for(
            lambda: int(env.get_run(name).get("status", {}).get("progress", "0/0").split("/")[0]) >= 4,
            600,
            "4 items counted under the first leader",
            interval=0.5,
        )
        timeline = {"killed": node_b.lose() - t0}
        standby = wait_for(
            lambda: (lp := leader_pod(env)) and lp != leader and lp,
            120,
            "the standby takes the Lease",
            interval=0.5,
        )
        timeline["standby leads"] = time.monotonic() - t0
        assert where.get(standby, env.node.name) == env.node.name, (standby, where)
        wait_for(lambda: _ready(env, node_b.name) == "Unknown", 180, "the lost node NotReady", interval=0.5)
        cp.kubectl("taint", "node", node_b.name, OUT_OF_SERVICE)
        timeline["out-of-service taint"] = time.monotonic() - t0
        run = env.wait_phase(name, {"Succeeded", "Failed"}, timeout=900)
        timeline["run complete"] = time.monotonic() - t0
    print(f"\nleader lost with its node (s since the run was created): {timeline}; {leader} -> {standby}")
    _assert_counted_once(env, run, name, 12)
