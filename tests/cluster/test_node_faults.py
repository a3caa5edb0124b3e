"""Scenario 4 (issue 11): faults on the real node, each during a real AtlasRun (1 model x 3 tasks,
the three pods at once).

- A pod evicted through the Eviction API mid-item: the Job's podFailurePolicy ignores the
  disruption, the item runs again in a new pod, exactly once more; nothing lost or duplicated.
- The kubelet restarted mid-run: the run completes with every item scored, none lost.
- A sidecar's container killed (SIGKILL through containerd) mid-item: the kubelet restarts the
  native sidecar and the item is scored in the same pod, once (not an infrastructure error).

The scripted model holds the item's first request (``env.gate``) while the fault is injected, so
the fault always lands while that item's runner is mid-task."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from cluster.controlplane import wait_for
from cluster.node import node_cluster  # noqa: F401  (fixture)
from cluster.node_run import NodeRunEnv, item_of, node_run_env  # noqa: F401  (fixture)

# The first test here may build the images (minutes on a bare machine, then cached by content).
pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(2400)]


TASKS = ["release-commit", "platform-team-commits", "release-meeting-actions"]


def _one_model(env: NodeRunEnv, name: str, **cluster: Any) -> dict[str, Any]:
    manifest = env.manifest(name, **cluster)
    manifest["spec"]["models"] = manifest["spec"]["models"][:1]  # sharp: every item passes
    manifest["spec"]["tasks"]["ids"] = TASKS
    manifest["spec"]["parallelism"] = 3
    return manifest


def _finished(env: NodeRunEnv, name: str, since: int) -> dict[str, Any]:
    run = env.wait_phase(name, {"Succeeded", "Failed"}, timeout=1500)
    status = run["status"]
    assert status["phase"] == "Succeeded", status
    assert status["progress"] == "3/3", status
    sharp = status["models"]["sharp"]
    assert sharp["scored"] + sharp["errored"] + sharp["excluded"] == 3, sharp
    assert len(env.s3_keys(f"node/{name}/tasks/")) == 3
    starts = Counter(env.first_turns(since))
    assert set(starts) == {("sharp", t) for t in TASKS}, starts
    return run


def test_evicted_pod_item_runs_again_once(node_run_env: NodeRunEnv) -> None:  # noqa: F811
    env = node_run_env
    since, t0 = len(env.provider.requests), time.monotonic()
    target = ("sharp", "release-commit")
    env.gate.arm(*target)
    with env.operator():
        env.create_run(_one_model(env, "evict"))
        assert env.gate.arrived.wait(1200), "the item never reached the model"
        pod = env.running_pod("evict", target)
        name = pod["metadata"]["name"]
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
        env.api.post(
            f"/api/v1/namespaces/{env.namespace}/pods/{name}/eviction", json=eviction
        ).raise_for_status()
        wait_for(
            lambda: (
                env.api.get(f"/api/v1/namespaces/{env.namespace}/pods/{name}").status_code == 404
                or env.recorder.pods[pod["metadata"]["uid"]]["status"].get("phase") in ("Failed", "Succeeded")
            ),
            120,
            f"evicted pod {name} gone",
        )
        env.gate.release()
        run = _finished(env, "evict", since)
    starts = Counter(env.first_turns(since))
    assert starts[target] == 2, starts  # the evicted attempt and its one re-run
    assert all(n == 1 for item, n in starts.items() if item != target), starts
    assert run["status"]["models"]["sharp"]["passed"] == 3
    evicted = env.recorder.pods[pod["metadata"]["uid"]]
    conditions = {c["type"]: c for c in evicted["status"].get("conditions", [])}
    assert conditions.get("DisruptionTarget", {}).get("status") == "True", conditions
    print(f"\neviction: item re-run once, run Succeeded in {time.monotonic() - t0:.1f}s")


def test_kubelet_restart_loses_no_item(node_run_env: NodeRunEnv) -> None:  # noqa: F811
    env = node_run_env
    since, t0 = len(env.provider.requests), time.monotonic()
    target = ("sharp", "platform-team-commits")
    env.gate.arm(*target)
    with env.operator():
        env.create_run(_one_model(env, "kubelet-restart"))
        assert env.gate.arrived.wait(1200), "the item never reached the model"
        ready_after = env.node.restart_kubelet(down_seconds=5)
        env.gate.release()
        run = _finished(env, "kubelet-restart", since)
    assert run["status"]["models"]["sharp"]["passed"] == 3
    starts = Counter(env.first_turns(since))
    print(
        f"\nkubelet restart: Ready again {ready_after:.1f}s after its start, run Succeeded in "
        f"{time.monotonic() - t0:.1f}s; item starts {dict(starts)}"
    )


def test_killed_sidecar_restarts_and_the_item_is_counted_once(node_run_env: NodeRunEnv) -> None:  # noqa: F811
    env = node_run_env
    since, t0 = len(env.provider.requests), time.monotonic()
    target = ("sharp", "release-meeting-actions")  # one server: filesystem
    env.gate.arm(*target)
    with env.operator():
        env.create_run(_one_model(env, "sidecar-kill"))
        assert env.gate.arrived.wait(1200), "the item never reached the model"
        pod = env.running_pod("sidecar-kill", target)
        path = f"/api/v1/namespaces/{env.namespace}/pods/{pod['metadata']['name']}"
        side = next(c for c in pod["status"]["initContainerStatuses"] if c["name"] == "mcp-filesystem")
        env.node.kill_container(side["containerID"])

        def restarted() -> bool:
            st = env.api.get(path).json()["status"]
            cs = next(c for c in st["initContainerStatuses"] if c["name"] == "mcp-filesystem")
            return bool(cs["restartCount"] >= 1 and cs.get("ready"))

        wait_for(restarted, 120, "the killed sidecar restarted and Ready")
        env.gate.release()
        run = _finished(env, "sidecar-kill", since)
    starts = Counter(env.first_turns(since))
    pods = [p for p in env.recorder.of_run("sidecar-kill") if item_of(p, env.s3) == target]
    outcome = [
        (p["metadata"]["name"], p["status"].get("phase"), _runner_exit(p), _restarts(p, "mcp-filesystem"))
        for p in pods
    ]
    sharp = run["status"]["models"]["sharp"]
    print(
        f"\nsidecar kill: run Succeeded in {time.monotonic() - t0:.1f}s; pods of the item "
        f"(name, phase, runner exit, sidecar restarts): {outcome}; starts {starts[target]}; status {sharp}"
    )
    assert _restarts(env.recorder.pods[pod["metadata"]["uid"]], "mcp-filesystem") >= 1
    assert sharp["scored"] + sharp["errored"] + sharp["excluded"] == 3
    assert sharp["errored"] == 0, sharp
    # What happens (observed here; the issue expected an infrastructure error and a retry): the
    # kubelet restarts the native sidecar, the runner's next call reaches the restarted server, and
    # the item is scored in the same pod, once, with no retry.
    # One pod, its runner exited 0. Its phase may still read Running: the operator deletes a counted
    # pod, and the recorder's last look can fall between the runner's exit and the sidecars' stop.
    assert [code for _, _, code, _ in outcome] == [0], outcome
    assert all(phase in ("Running", "Succeeded") for _, phase, _, _ in outcome), outcome
    assert starts[target] == 1, starts


def _runner_exit(pod: dict[str, Any]) -> int | None:
    for c in pod["status"].get("containerStatuses", []):
        if c["name"] == "runner" and "terminated" in c.get("state", {}):
            return int(c["state"]["terminated"]["exitCode"])
    return None


def _restarts(pod: dict[str, Any], container: str) -> int:
    for c in pod["status"].get("initContainerStatuses", []):
        if c["name"] == container:
            return int(c.get("restartCount", 0))
    return 0
