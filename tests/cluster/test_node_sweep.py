"""Scenario 2 (issue 11): a real AtlasRun sweep, 2 scripted models x 6 starter tasks, in real pods.

Real: the project's runner and sidecar images (images/build.sh, pulled by digest from the node's
registry), containerd + runc, native sidecars (initContainers with restartPolicy Always), the
API server's PodSecurity admission at ``restricted``, termination messages, moto's S3. The run's
status must equal ``atlas run`` of the same items on this host."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.runner.local import run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.starter.workspace import create_workspace
from cluster.node import node_cluster  # noqa: F401  (fixture)
from cluster.node_run import MODEL_KEY, SERVER_PORTS, NodeRunEnv, node_run_env  # noqa: F401
from cluster.tenant import tasks_yaml

# The first test here may build the images (minutes on a bare machine, then cached by content).
pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(2400)]


def _ts(state: dict[str, Any], key: str) -> str:
    return str(next(iter(state.values()))[key])


def _runner_exit(pod: dict[str, Any]) -> int | None:
    for c in pod["status"].get("containerStatuses", []):
        if c["name"] == "runner" and "terminated" in c.get("state", {}):
            return int(c["state"]["terminated"]["exitCode"])
    return None


def test_sweep_in_real_pods_matches_atlas_run(
    node_run_env: NodeRunEnv,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = node_run_env
    t0 = time.monotonic()
    manifest = env.manifest("sweep")
    with env.operator():
        env.create_run(manifest)
        run = env.wait_phase("sweep", {"Succeeded", "Failed"}, timeout=1800)
    wall = time.monotonic() - t0
    status = run["status"]
    assert run["status"]["phase"] == "Succeeded", status
    assert status["progress"] == "12/12"

    # Every item ran in a real pod that passed restricted admission, with its sidecars started
    # before the runner and stopped after it, and its result read from the termination message.
    # The operator deletes a counted pod, so the recorder's last look at one can fall between the
    # runner's exit and the sidecars' stop (phase still Running): a pod counts once its runner exited 0.
    seen = env.recorder.of_run("sweep")
    pods = [p for p in seen if _runner_exit(p) == 0]
    assert len(pods) >= 12, [(p["metadata"]["name"], p["status"].get("phase")) for p in seen]
    assert any(p["status"].get("phase") == "Succeeded" for p in pods), "no pod seen Succeeded"
    for pod in pods:
        st = pod["status"]
        runner = next(c for c in st["containerStatuses"] if c["name"] == "runner")
        assert runner["imageID"].endswith(env.images["runner"].split("@", 1)[1])
        assert runner["state"]["terminated"]["message"]
        sidecars = [c for c in st.get("initContainerStatuses", []) if c["name"].startswith("mcp-")]
        assert sidecars, pod["metadata"]["name"]
        for side in sidecars:
            server = side["name"].removeprefix("mcp-")
            assert side["imageID"].endswith(env.images[f"mcp-{server}"].split("@", 1)[1])
            state = side["state"].get("terminated") or side["state"].get("running")
            assert state, (pod["metadata"]["name"], side)
            assert state["startedAt"] <= runner["state"]["terminated"]["startedAt"], (
                pod["metadata"]["name"],
                side,
            )
            if st.get("phase") == "Succeeded":  # every sidecar stopped, after the runner
                stopped = side["state"]["terminated"]["finishedAt"]
                assert stopped >= runner["state"]["terminated"]["finishedAt"], (pod["metadata"]["name"], side)
        assert pod["metadata"]["annotations"].get("atlasrun.dev/model") in ("sharp", "sloppy")

    # The same items locally with `atlas run`: the same numbers.
    local_spec = {k: v for k, v in manifest["spec"].items() if k not in ("cluster", "output")}
    (tmp_path / "tasks.yaml").write_text(tasks_yaml(env.tasks))
    local_spec["tasks"] = {"path": str(tmp_path / "tasks.yaml")}
    local_spec["servers"] = {"enabled": list(SERVER_PORTS)}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    (tmp_path / "run.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "atlasrun.dev/v1alpha1",
                "kind": "AtlasRun",
                "metadata": {"name": "local"},
                "spec": local_spec,
            }
        )
    )
    workspace = create_workspace(tmp_path / "workspace")
    local = run_local(load_run_spec(tmp_path / "run.yaml"), tmp_path / "out", workspace, progress=False)
    for model in ("sharp", "sloppy"):
        ours, theirs = status["models"][model], local.summary["models"][model]
        assert (ours["scored"], ours["passed"]) == (theirs["scored"], theirs["passed"]), (model, ours, theirs)
        assert ours["passRate"] == pytest.approx(theirs["pass_rate"])
        assert ours["meanCoverage"] == pytest.approx(theirs["mean_coverage"], abs=1e-3)
    assert status["models"]["sharp"]["passRate"] == 1.0

    keys = env.s3_keys("node/sweep/tasks/")
    assert len(keys) == 12, keys
    assert MODEL_KEY not in yaml.safe_dump(run)
    print(f"\nsweep 2x6 on the real node: {wall:.1f}s, {len(pods)} pods; status {status['models']}")
