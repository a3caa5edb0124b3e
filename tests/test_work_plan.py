"""The plan travels by reference: a chunk's items go to object storage once, content-addressed
(``<prefix>/plans/<sha256>``); the Job carries only the reference. Real S3 (moto's server), the
real ``atlas run-task`` reading the plan, and the rendered Job's size."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from atlasrun.cluster.operator.manifests import render_job
from atlasrun.cluster.pod.termination import batch_exit, compact_batch
from atlasrun.cluster.wire.contract import ChunkPlan, PlanRef, TasksRef, WorkUnit
from atlasrun.cluster.wire.records import TaskSummary
from atlasrun.cluster.wire.store import S3Results, StoreError, read_plan, store_plan
from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import ServerSpec
from atlasrun.testing.scripted_provider import ScriptedProvider
from test_run_task import (  # noqa: F401  (fixtures)
    BUCKET,
    OBJECT_KEY,
    RESULTS_URI,
    S3Server,
    pod_env,
    run_task,
    s3,
    sidecar,
    solver,
    stored_keys,
    termination,
)

PLANS = f"s3://{BUCKET}/bench/plans/"
SHA = "c" * 64
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


def opener(endpoint: str) -> Any:
    return lambda uri: S3Results(uri, endpoint, attempts=2, backoff_s=0.01, env=CREDS)


def test_plan_bytes_are_canonical_and_verified() -> None:
    plan = ChunkPlan(items=[("t1", 0), ("t2", 0)])
    data = plan.to_bytes()
    assert data == ChunkPlan(items=[("t1", 0), ("t2", 0)]).to_bytes()  # same content, same name
    digest = hashlib.sha256(data).hexdigest()
    assert ChunkPlan.from_bytes(data, digest) == plan
    with pytest.raises(ValueError, match="sha256"):
        ChunkPlan.from_bytes(data.replace(b"t2", b"t3"), digest)
    with pytest.raises(ValueError):
        ChunkPlan.from_bytes(b'{"items": []}', hashlib.sha256(b'{"items": []}').hexdigest())


def test_work_unit_v1_still_reads_and_v2_resolves_its_plan() -> None:
    tasks = TasksRef(sha256=SHA, uri=f"s3://{BUCKET}/bench/tasks/{SHA}")
    v1 = json.dumps(
        {
            "schema_version": 1,
            "run": "r",
            "model": "m",
            "chunk": 0,
            "items": [["t1", 0], ["t2", 1]],
            "tasks": tasks.model_dump(),
            "results_uri": RESULTS_URI,
        }
    )
    old = WorkUnit.model_validate_json(v1)  # what an older operator put in a Job's env
    assert old.size == 2 and old.item(1) == ("t2", 1) and old.plan is None
    plan = ChunkPlan(items=[("t1", 0), ("t2", 1)])
    ref = PlanRef(sha256=hashlib.sha256(plan.to_bytes()).hexdigest(), uri=PLANS + "x", size=2)
    unit = WorkUnit(schema_version=2, run="r", model="m", chunk=0, plan=ref, tasks=tasks, results_uri="")
    assert unit.size == 2 and unit.items == []
    with pytest.raises(LookupError, match="resolve"):
        unit.item(0)
    assert unit.resolve(plan).item(1) == ("t2", 1)
    with pytest.raises(ValueError, match="lists 1 items"):
        unit.resolve(ChunkPlan(items=[("t1", 0)]))


def render(unit: WorkUnit) -> dict[str, Any]:
    body = RunSpecBody.model_validate(
        {
            "tasks": {"uri": f"s3://{BUCKET}/in/tasks.yaml"},
            "models": [{"name": "m", "model": "openai/m"}],
            "output": {"bucket": BUCKET},
        }
    )
    calc = ServerSpec(name="calculator", command="x", image="r/c@sha256:" + "a" * 64, port=9000)
    return render_job(
        "r",
        "uid",
        "ns",
        body,
        body.models[0],
        unit,
        [calc],
        runner_image="r/runner@sha256:" + "a" * 64,
        spec_configmap="cm",
        s3_secret=None,
        s3_endpoint=None,
        parallelism=4,
    )


def test_job_size_does_not_grow_with_its_chunk() -> None:
    tasks = TasksRef(sha256=SHA, uri=f"s3://{BUCKET}/bench/tasks/{SHA}")
    sizes = {}
    for n in (10, 1000):
        items = [(f"task-{i:05d}", 2) for i in range(n)]
        digest = hashlib.sha256(ChunkPlan(items=items).to_bytes()).hexdigest()
        ref = PlanRef(sha256=digest, uri=PLANS + digest, size=n)
        unit = WorkUnit(schema_version=2, run="r", model="m", chunk=0, plan=ref, tasks=tasks, results_uri="")
        job = render(unit)
        assert job["spec"]["completions"] == n and job["spec"]["maxFailedIndexes"] == n
        sizes[n] = len(json.dumps(job["spec"]["template"]))
    inline = render(unit.model_copy(update={"plan": None, "items": items, "schema_version": 1}))
    assert (
        len(json.dumps(inline["spec"]["template"])) > sizes[1000] + 15_000
    )  # ~19 bytes per item saved in every pod
    assert sizes[1000] - sizes[10] == 2  # the size field's digits: a 1,000-item chunk's pod is as small
    print(f"pod template: {sizes[1000]} bytes with the plan by reference, any chunk size")


@pytest.mark.servers
def test_plan_round_trip_gone_altered_and_store_down(s3: S3Server) -> None:  # noqa: F811
    open_store = opener(s3.endpoint)
    plan = ChunkPlan(items=[("a", 0), ("b", 0)])
    ref = store_plan(PLANS, plan, open_store)
    assert ref.uri == PLANS + ref.sha256 and ref.size == 2
    assert store_plan(PLANS, plan, open_store) == ref  # idempotent: the name is the content
    assert read_plan(ref, open_store) == plan
    gone = ref.model_copy(update={"uri": PLANS + "0" * 64})
    with pytest.raises(InputError, match="plan is gone") as missing:
        read_plan(gone, open_store, where="ATLAS_WORK_UNIT plan")
    assert missing.value.where == "ATLAS_WORK_UNIT plan" and "0" * 64 in str(missing.value)
    s3.client().put_object(Bucket=BUCKET, Key=f"bench/plans/{ref.sha256}", Body=b'{"items":[["a",0]]}')
    with pytest.raises(InputError, match="sha256"):
        read_plan(ref, open_store)
    s3.down()
    with pytest.raises(StoreError):
        read_plan(ref, open_store)


def plan_env(env: dict[str, str], s3: S3Server, ref: PlanRef, index: int, per_pod: int = 1) -> dict[str, str]:  # noqa: F811
    data = Path(env["ATLAS_TASKS"]).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    s3.client().put_object(Bucket=BUCKET, Key=f"bench/tasks/{digest}", Body=data)
    unit = WorkUnit(
        schema_version=2,
        run="calc-run",
        model="solver",
        chunk=0,
        plan=ref,
        per_pod=per_pod,
        tasks=TasksRef(sha256=digest, uri=f"s3://{BUCKET}/bench/tasks/{digest}", name="tasks.yaml"),
        results_uri=RESULTS_URI,
    )
    out = {
        k: v
        for k, v in env.items()
        if k not in ("ATLAS_TASKS", "ATLAS_TASK_ID", "ATLAS_MODEL", "ATLAS_REPEAT")
    }
    return {**out, "ATLAS_WORK_UNIT": unit.to_env(), "JOB_COMPLETION_INDEX": str(index)}


@pytest.mark.servers
def test_pod_reads_its_item_from_the_plan_and_names_a_missing_one(
    tmp_path: Path,
    s3: S3Server,  # noqa: F811
    sidecar: int,  # noqa: F811
) -> None:
    with ScriptedProvider(solver) as provider:
        env = pod_env(tmp_path, s3, provider, sidecar)
        plan = ChunkPlan(items=[("add-numbers", 1), ("add-numbers", 0)])
        ref = store_plan(PLANS, plan, opener(s3.endpoint))
        proc = run_task(plan_env(env, s3, ref, index=1))  # index 1: repeat 0
        assert proc.returncode == 0, proc.stderr
        summary = termination(env)
        assert (summary["task"], summary["repeat"], summary["status"]) == ("add-numbers", 0, "scored")
        assert OBJECT_KEY in stored_keys(s3)

        proc = run_task(plan_env(env, s3, ref, index=2))
        assert proc.returncode == 2 and "outside 0..1" in termination(env)["reason"]
        gone = ref.model_copy(update={"uri": PLANS + "f" * 64})
        proc = run_task(plan_env(env, s3, gone, index=0))
        summary = termination(env)
        assert proc.returncode == 2 and summary["error_kind"] == "input"
        assert "plan is gone" in summary["reason"] and "f" * 64 in summary["reason"]
        down = plan_env(env, s3, ref, index=0)
        s3.down()
        proc = run_task(down)
        assert proc.returncode == 4 and termination(env)["error_kind"] == "storage"


@pytest.mark.servers
def test_a_pod_runs_several_items_in_sequence_and_reports_each(
    tmp_path: Path,
    s3: S3Server,  # noqa: F811
    sidecar: int,  # noqa: F811
) -> None:
    with ScriptedProvider(solver) as provider:
        env = pod_env(tmp_path, s3, provider, sidecar)
        items = [("add-numbers", 0), ("no-such-task", 0), ("add-numbers", 1)]
        ref = store_plan(PLANS, ChunkPlan(items=items), opener(s3.endpoint))
        proc = run_task(plan_env(env, s3, ref, index=0, per_pod=2))  # items 0 and 1
        assert proc.returncode == 0, proc.stderr  # one bad item does not fail the other's index
        summary = termination(env)
        assert summary["status"] == "batch" and summary["exit_code"] == 0
        got = [(i["task"], i["status"], i.get("error_kind")) for i in summary["items"]]
        assert got == [("add-numbers", "scored", None), ("no-such-task", "error", "input")]
        assert "no-such-task" in summary["items"][1]["reason"] and OBJECT_KEY in stored_keys(s3)
        # Index 1 holds the one remaining item: a single summary, naming what is wrong.
        proc = run_task(plan_env(env, s3, ref, index=1, per_pod=2))
        assert proc.returncode == 2 and "repeat 1 is out of range" in termination(env)["reason"]
        proc = run_task(plan_env(env, s3, ref, index=2, per_pod=2))
        assert proc.returncode == 2 and "outside 0..1" in termination(env)["reason"]
        # A retried pod keeps what is stored and does not call the model again.
        calls = len(provider.requests)
        proc = run_task(plan_env(env, s3, ref, index=0, per_pod=2))
        assert proc.returncode == 0 and len(provider.requests) == calls
        assert [i["status"] for i in termination(env)["items"]] == ["scored", "error"]


def test_batch_exit_and_its_termination_message_fit() -> None:
    assert batch_exit([0, 0]) == 0 and batch_exit([0, 2]) == 0 and batch_exit([2, 2]) == 2
    assert batch_exit([0, 3, 2]) == 3 and batch_exit([3, 4, 0]) == 4 and batch_exit([1, 0]) == 3
    long = TaskSummary(task="t" * 60, repeat=0, status="error", reason="x" * 3000, exit_code=3)
    text = compact_batch([long] * 20, 3)
    data = json.loads(text)
    assert len(text.encode()) <= 4000 and len(data["items"]) == 20 and data["exit_code"] == 3
    too_many = json.loads(compact_batch([long] * 60, 3))  # the stored results then tell
    assert too_many["items"] == [] and too_many["truncated"] is True


def test_operator_maps_a_pods_batch_summary_to_its_items() -> None:
    """Completion index i of a Job with itemsPerPod 2 ran positions 2i and 2i+1: each gets the
    outcome its own summary gives; a cut-short batch message is no outcome (never a score)."""
    from atlasrun.cluster.operator.observe import Observer
    from atlasrun.cluster.operator.reconcile import JobObs

    tasks = TasksRef(sha256=SHA, uri=f"s3://{BUCKET}/bench/tasks/{SHA}")
    unit = WorkUnit(
        run="r",
        model="m",
        chunk=0,
        items=[("a", 0), ("b", 0), ("c", 0)],
        tasks=tasks,
        results_uri="",
        per_pod=2,
    )
    job = {
        "spec": {
            "template": {
                "spec": {"containers": [{"env": [{"name": "ATLAS_WORK_UNIT", "value": unit.to_env()}]}]}
            }
        }
    }

    def pod(name: str, index: int, phase: str, message: dict[str, Any]) -> dict[str, Any]:
        terminated = {"message": json.dumps(message)}
        return {
            "metadata": {
                "name": name,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            },
            "status": {
                "phase": phase,
                "containerStatuses": [{"name": "runner", "state": {"terminated": terminated}}],
            },
        }

    batch = {
        "status": "batch",
        "exit_code": 0,
        "items": [{"status": "scored", "passed": True}, {"status": "scored", "passed": False}],
    }
    bad = {"status": "error", "error_kind": "input", "reason": "input: task 'c' is not in the run's tasks"}
    obs = JobObs(
        name="j",
        model="m",
        chunk=0,
        completions=2,
        parallelism=2,
        completed=frozenset({0}),
        failed_indexes=frozenset({1}),
        finished=True,
    )
    observer = Observer(api=object(), settings=None)  # type: ignore[arg-type]
    outcomes, error = observer._outcomes(
        job, obs, [pod("j-0", 0, "Succeeded", batch), pod("j-1", 1, "Failed", bad)]
    )
    assert error is None and outcomes is not None
    assert [(outcomes[p].status, outcomes[p].passed) for p in (0, 1)] == [("scored", True), ("scored", False)]
    assert (
        outcomes[2].status == "error"
        and outcomes[2].error_kind == "input"
        and "'c'" in (outcomes[2].reason or "")
    )
    cut = {"status": "batch", "exit_code": 0, "items": [], "truncated": True}
    outcomes, _ = observer._outcomes(
        job, obs, [pod("j-0", 0, "Succeeded", cut), pod("j-1", 1, "Failed", bad)]
    )
    assert outcomes is not None and 0 not in outcomes and 1 not in outcomes  # decide records them as errors
