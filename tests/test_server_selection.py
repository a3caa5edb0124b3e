"""Which servers a run enables and a task needs: one meaning of ``spec.servers.enabled`` (omitted =
every server, ``[]`` = none) in the local planner, the operator's task parse and the pod's runner;
``spec.servers.catalog`` refused up front in a cluster run (operator, ``atlas validate``, CRD)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.cluster.operator.crd import build_crd
from atlasrun.cluster.operator.images import (
    CATALOG_IN_CLUSTER,
    CATALOG_IN_CLUSTER_RULE,
    cluster_catalog,
    cluster_spec_problems,
)
from atlasrun.cluster.operator.observe import _parse
from atlasrun.cluster.pod.inputs import Inputs, load_spec
from atlasrun.cluster.wire.sidecars import sidecar_servers
from atlasrun.runner.plan import build_catalog, plan_run
from atlasrun.runspec.run import RunSpecBody, load_run_spec
from atlasrun.servers.catalog import load_catalog
from conftest import SUM_TASK, write_run, write_tasks

PIN = "@sha256:" + "0" * 64
CALC_TASK: dict[str, Any] = {
    "id": "calc-only",
    "prompt": "What is 12 plus 30?",
    "domain": "Analytics",
    "enabled_tools": ["calculator_calculate"],
    "claims": ["The sum is 42"],
    "reference_answer": "The sum is 42.",
    "reference_trajectory": [
        {"calls": [{"name": "calculator_calculate", "arguments": {"expression": "12+30"}}]}
    ],
}
FS_TASK: dict[str, Any] = {
    "id": "read-notes",
    "prompt": "What is the launch code name in /data/notes.md?",
    "domain": "Files",
    "enabled_tools": ["filesystem_read_text_file"],
    "claims": ["The code name is BLUEBIRD"],
    "reference_answer": "BLUEBIRD.",
    "reference_trajectory": [
        {"calls": [{"name": "filesystem_read_text_file", "arguments": {"path": "/data/notes.md"}}]}
    ],
}
TASKS = [SUM_TASK, CALC_TASK, FS_TASK]


def sidecar(name: str, port: int) -> dict[str, Any]:
    """A catalog entry as a cluster run gives it: the built-in server with an image and a port."""
    entry = load_catalog().get(name).model_dump(by_alias=True, exclude_none=True)
    return {**entry, "image": f"registry.example/mcp-{name}{PIN}", "port": port}


def run_file(tmp_path: Path, enabled: list[str] | None) -> Path:
    servers: dict[str, Any] = {"inline": [sidecar("filesystem", 9101), sidecar("calculator", 9102)]}
    if enabled is not None:
        servers["enabled"] = enabled
    return write_run(
        tmp_path / "run.yaml",
        write_tasks(tmp_path / "tasks.yaml", TASKS),
        [{"name": "replay"}],
        servers=servers,
    )


def local_outcome(path: Path) -> tuple[set[str], set[str]]:
    """(planned task ids, excluded task ids) of the local planner."""
    plan = plan_run(load_run_spec(path))
    return {t.id for t in plan.tasks}, {e.task.id for e in plan.excluded}


def operator_outcome(path: Path) -> tuple[set[str], set[str]]:
    """(runnable, excluded) of the operator's parse of the same run, with the same task document."""
    spec = load_run_spec(path)
    data = Path(str(spec.spec.tasks.path)).read_bytes()
    runnable, excluded, _ = _parse(spec.spec, build_catalog(spec), "tasks.yaml", data)
    return {t.id for t in runnable}, {task_id for task_id, _ in excluded}


@pytest.mark.parametrize(
    ("enabled", "runnable"),
    [
        (None, {"sum-numbers", "calc-only", "read-notes"}),  # omitted: every server
        ([], set()),  # an empty list: none
        (["calculator"], {"calc-only"}),
    ],
)
def test_enabled_means_the_same_locally_and_in_the_operator(
    tmp_path: Path, enabled: list[str] | None, runnable: set[str]
) -> None:
    path = run_file(tmp_path, enabled)
    excluded = {t["id"] for t in TASKS} - runnable
    assert local_outcome(path) == (runnable, excluded)
    assert operator_outcome(path) == (runnable, excluded)


def test_a_server_without_an_image_is_no_sidecar_for_the_operator_nor_the_pod(tmp_path: Path) -> None:
    """Locally the calculator runs as a process; in the cluster it has no image, so no pod has it:
    the operator excludes the tasks that need it, and the pod's engine plans without it."""
    path = run_file(tmp_path, ["filesystem", "calculator"])
    doc = yaml.safe_load(path.read_text())
    del doc["spec"]["servers"]["inline"][1]["image"]
    path.write_text(yaml.safe_dump(doc))
    spec = load_run_spec(path)
    assert sidecar_servers(spec.spec, build_catalog(spec)) == ["filesystem"]
    assert local_outcome(path) == ({"sum-numbers", "calc-only", "read-notes"}, set())
    assert operator_outcome(path) == ({"read-notes"}, {"sum-numbers", "calc-only"})
    pod = load_spec(
        Inputs(
            run_spec=path, tasks=None, task_id="read-notes", model="replay", repeat=0, results_uri="s3://b/r/"
        )
    )
    assert pod.spec.servers.enabled == ["filesystem"]
    plan = plan_run(pod)
    assert ({t.id for t in plan.tasks}, {e.task.id for e in plan.excluded}) == operator_outcome(path)


def test_a_catalog_file_is_refused_for_a_cluster_run_a_builtin_name_is_not(tmp_path: Path) -> None:
    body = RunSpecBody.model_validate(
        {"tasks": {"configMap": "tasks"}, "models": [{"name": "m"}], "servers": {"catalog": "extra.yaml"}}
    )
    assert cluster_spec_problems(body) == [CATALOG_IN_CLUSTER]
    for builtin in (None, "starter", "mcp-atlas"):
        named = body.model_copy(update={"servers": body.servers.model_copy(update={"catalog": builtin})})
        assert cluster_spec_problems(named) == []
    # The operator's catalog for a built-in name is that catalog (MCP-Atlas's memory pin, not ours).
    atlas = body.model_copy(update={"servers": body.servers.model_copy(update={"catalog": "mcp-atlas"})})
    assert cluster_catalog(atlas).get("memory").package.version == "2025.8.4"  # type: ignore[union-attr]
    assert cluster_catalog(atlas).get("memory") != load_catalog().get("memory")
    # atlas validate names the field; the run is refused before any pod could exit 2 on it
    (tmp_path / "extra.yaml").write_text(yaml.safe_dump({"servers": []}))
    path = tmp_path / "cluster-run.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "atlasrun.dev/v1alpha1",
                "kind": "AtlasRun",
                "metadata": {"name": "c"},
                "spec": body.model_dump(by_alias=True, exclude_defaults=True),
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode != 0, proc.stdout
    assert f"error: {CATALOG_IN_CLUSTER}" in proc.stdout, proc.stdout
    # the CRD carries the same refusal as a CEL rule on spec.servers
    servers = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["servers"]
    assert CATALOG_IN_CLUSTER_RULE == "!has(self.catalog) || self.catalog in ['starter', 'mcp-atlas']"
    assert {"rule": CATALOG_IN_CLUSTER_RULE, "message": CATALOG_IN_CLUSTER} in servers[
        "x-kubernetes-validations"
    ]


def test_a_sidecar_keeps_mcp_atlas_result_handling_and_leaves_the_data_to_the_sidecar() -> None:
    """In a pod the sidecar sees the pod's own /data copy: the runner must not make a task data
    copy or map paths for it (found on the node: '/data' became the runner's temp copy), while the
    runner-side behaviour of an mcp-atlas entry (results as MCP-Atlas's stack, start calls) stays."""
    from atlasrun.cluster.pod.servers import sidecar_catalog

    catalog = load_catalog("mcp-atlas")
    ported = catalog.merged(
        [
            catalog.get(n).model_copy(update={"port": 9100 + i})
            for i, n in enumerate(["filesystem", "desktop-commander"])
        ]
    )
    rewritten = sidecar_catalog(ported, ["filesystem", "desktop-commander"])
    for name in ("filesystem", "desktop-commander"):
        spec = rewritten.get(name)
        assert (spec.transport, spec.url) == ("http", f"http://127.0.0.1:{ported.get(name).port}/mcp")
        assert (spec.data_scope, spec.mount_data, spec.isolate_data, spec.shared_data) == (
            "server",
            False,
            False,
            [],
        )
        assert spec.results == "mcp-atlas"
    assert rewritten.get("desktop-commander").start_calls == catalog.get("desktop-commander").start_calls
