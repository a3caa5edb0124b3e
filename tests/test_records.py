"""The persisted records: versioned, typed error kinds, collision-free per-task names, safe appends,
and one meaning of ``servers.enabled``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from atlasrun.cluster.operator.images import servers_used
from atlasrun.cluster.operator.metrics import Metrics
from atlasrun.cluster.operator.outcomes import outcome_of as reconcile_record
from atlasrun.cluster.operator.reconcile import decide
from atlasrun.cluster.wire import usage
from atlasrun.cluster.wire.contract import ENV_WORK_UNIT, EXIT_RETRY, Phase, TasksRef, WorkUnit
from atlasrun.cluster.wire.records import RunStatus, TaskSummary, read_summary, status_dump
from atlasrun.diagnostics.model import Diagnosis
from atlasrun.diagnostics.store import DiagnosesLog
from atlasrun.judge.base import JudgeInfo
from atlasrun.runner.local import run_local
from atlasrun.runner.record import RUN_FILE, ImportInfo, RunRecord, read_record
from atlasrun.runspec.run import RunSpecBody, load_run_spec
from atlasrun.scoring.records import CURRENT_VERSION, RecordVersionError
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.scoring.store import ResultsDir, append_line, record_key, task_record_name
from atlasrun.scoring.summary import SUMMARY_FILE, ModelSummary, RunSummary
from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.selection import enabled_servers, task_servers
from atlasrun.tasks.model import Task
from conftest import SUM_TASK, write_run, write_tasks

JUDGE = JudgeInfo(name="deterministic", kind="deterministic", version="1")


def scored(task_id: str = "t", model: str = "m", repeat: int = 0) -> TaskResult:
    return TaskResult(
        task_id=task_id, model=model, repeat=repeat, status="scored", coverage=1.0, passed=True, judge=JUDGE
    )


def errored(kind: ErrorKind, task_id: str = "t") -> TaskResult:
    return TaskResult(task_id=task_id, model="m", status="error", error_kind=kind, reason=f"{kind}: x")


# --- versions ------------------------------------------------------------------------------------


def test_every_record_round_trips_with_its_version(tmp_path: Path) -> None:
    store = ResultsDir(tmp_path)
    full = errored(ErrorKind.JUDGE).model_copy(update={"task": Task.model_validate(SUM_TASK)})
    store.append(full)
    line = json.loads((tmp_path / "results.jsonl").read_text())
    assert line["schema_version"] == CURRENT_VERSION and line["error_kind"] == "judge" and "task" not in line
    assert store.load()[full.key] == full.model_copy(update={"task": None})
    assert store.load_full(full) == full

    summary = RunSummary(
        run="r", judge=JUDGE, judges=[JUDGE], pass_threshold=0.75, models={"m": ModelSummary(errored=1)}
    )
    record = RunRecord(atlasrun_version="0.1.0", servers=["calculator"], tasks=3)
    for name, value in ((SUMMARY_FILE, summary), (RUN_FILE, record)):
        store.write_record(name, value)
        assert json.loads((tmp_path / name).read_text())["schema_version"] == CURRENT_VERSION
        assert read_record(tmp_path / name, type(value)) == value

    log = DiagnosesLog(tmp_path)
    diagnosis = Diagnosis(
        model="m", task_id="t", status="diagnosed", primary_mode="unclassified", judge=JUDGE
    )
    log.append(diagnosis)
    assert log.load() == {diagnosis.key: diagnosis}


def test_unknown_versions_are_refused_naming_file_line_and_version(tmp_path: Path) -> None:
    store = ResultsDir(tmp_path)
    store.append(scored("a"))
    future = {**json.loads(scored("b").model_dump_json()), "schema_version": 99}
    append_line(store.jsonl, json.dumps(future))
    with pytest.raises(RecordVersionError, match=r"results\.jsonl line 2: task result has schema_version 99"):
        store.load()

    (tmp_path / "diagnoses.jsonl").write_text('{"schema_version": "3", "model": "m"}\n')
    with pytest.raises(
        RecordVersionError, match=r"diagnoses\.jsonl line 1: diagnosis has schema_version '3'"
    ):
        DiagnosesLog(tmp_path).load()

    for name, model in ((SUMMARY_FILE, RunSummary), (RUN_FILE, RunRecord)):
        (tmp_path / name).write_text(json.dumps({"schema_version": 7}))
        with pytest.raises(RecordVersionError, match=rf"{name}: .* schema_version 7; this AtlasRun reads"):
            read_record(tmp_path / name, model)


def test_previous_unversioned_records_still_load(tmp_path: Path) -> None:
    """Version 1 (no schema_version) is today's results directories: the error kind is derived once."""
    old = [
        {"task_id": "a", "model": "m", "status": "error", "reason": "judge failed on 1/2 claims"},
        {"task_id": "b", "model": "m", "status": "error", "reason": "infra: server exited"},
        {"task_id": "c", "model": "m", "status": "excluded", "reason": "needs server(s) not enabled: git"},
        {"task_id": "d", "model": "m", "status": "error", "reason": "provider: provider failed: 503"},
        {"task_id": "e", "model": "m", "status": "error", "reason": "something new"},
        {"task_id": "f", "model": "m", "status": "scored", "coverage": 1.0, "passed": True},
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    # the per-task JSON at its version-1 path (slugs only) is still found
    (tmp_path / "tasks" / "m").mkdir(parents=True)
    (tmp_path / "tasks" / "m" / "a.r0.json").write_text(json.dumps(old[0]))
    store = ResultsDir(tmp_path)
    kinds = {k[1]: r.error_kind for k, r in store.load().items()}
    assert kinds == {
        "a": ErrorKind.JUDGE,
        "b": ErrorKind.SERVER_TRANSPORT,
        "c": ErrorKind.SERVER_NOT_ENABLED,
        "d": ErrorKind.PROVIDER,
        "e": ErrorKind.OTHER,
        "f": None,
    }
    full = store.load_full(store.load()[("m", "a", 0)])
    assert full is not None and full.error_kind == ErrorKind.JUDGE

    (tmp_path / RUN_FILE).write_text(
        json.dumps({"atlasrun_version": "0.1.0", "imported_from": "/x.csv", "tasks": None, "model": "m"})
    )
    (tmp_path / RUN_FILE).write_text(
        json.dumps(
            {**json.loads((tmp_path / RUN_FILE).read_text()), "pass_threshold": 0.75, "scores": ["/s.csv"]}
        )
    )
    record = read_record(tmp_path / RUN_FILE, RunRecord)
    assert record is not None and record.imported == ImportInfo(
        imported_from="/x.csv", model="m", pass_threshold=0.75, scores=["/s.csv"]
    )


def test_error_kind_is_required_exactly_when_not_scored() -> None:
    with pytest.raises(ValueError, match="needs an error_kind"):
        TaskResult(task_id="t", model="m", status="error", reason="judge failed on 1/1 claims")
    with pytest.raises(ValueError, match="has no error_kind"):
        TaskResult(task_id="t", model="m", status="scored", error_kind=ErrorKind.JUDGE)


def test_metrics_count_errors_by_the_typed_kind() -> None:
    """A judge failure is counted as ``judge`` (it was ``other`` when kinds were read from reasons)."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    record = reconcile_record(
        TaskSummary(status="error", error_kind="judge", reason="judge failed"), "m", failed=False
    )
    assert record.error_kind == "judge"
    lost = reconcile_record(None, "m", failed=True, failure="BackoffLimitExceeded")
    assert lost.error_kind == "job_failed"
    spent = usage.ModelUsage()
    for outcome in (record, lost):  # as the run's status folds them
        spent = usage.fold(spent, outcome.usage, outcome.error)
    totals = spent.model_dump(by_alias=True)
    metrics.run_seen(
        {"metadata": {"namespace": "ns", "name": "run"}, "status": {"models": {"m": {"usage": totals}}}}
    )
    for kind in ("judge", "job_failed"):
        labels = {"namespace": "ns", "run": "run", "model": "m", "kind": kind}
        assert registry.get_sample_value("atlasrun_item_errors_total", labels) == 1.0


# --- per-task names -----------------------------------------------------------------------------


def test_record_keys_never_collide_and_fit_a_file_name() -> None:
    ids = ["日本", "中国", "a/b", "a_b", "a b", "x", "", "." * 3, "t" * 300, "t" * 301, "ü" * 200]
    keys = [record_key(i) for i in ids]
    assert len(set(keys)) == len(ids)
    assert all(len(task_record_name("m" * 300, i, 99).rsplit("/", 1)[1].encode()) < 255 for i in ids)
    assert all("/" not in k and k not in (".", "..") for k in keys)
    assert record_key("a/b").startswith("a_b-")  # still readable


@pytest.mark.servers
def test_colliding_ids_run_resume_and_keep_their_own_transcripts(tmp_path: Path, data_dir: Path) -> None:
    pytest.importorskip("mcp")
    ids = ["日本", "中国", "a/b", "a_b", "long-" + "x" * 251]  # the longest id accepted: 256 characters
    tasks = [dict(SUM_TASK, id=i, reference_answer=f"The sum of the numbers is 42 [{i}].") for i in ids]
    run_file = write_run(
        tmp_path / "run.yaml", write_tasks(tmp_path / "tasks.yaml", tasks), [{"name": "replay"}]
    )
    out = tmp_path / "out"
    first = run_local(load_run_spec(run_file), out, data_dir, progress=False)
    assert sorted(r.task_id for r in first.results) == sorted(ids)
    assert all(r.status == "scored" for r in first.results)
    second = run_local(load_run_spec(run_file), out, data_dir, progress=False)
    assert second.skipped == len(ids)  # resumed: every task kept, none rerun
    store = ResultsDir(out)
    for key, line in store.load().items():
        transcript = store.load_transcript(line)
        assert transcript is not None and transcript.final_answer.endswith(f"[{key[1]}].")
    assert len(list((out / "tasks").rglob("*.json"))) == len(ids)


# --- appends ------------------------------------------------------------------------------------


def test_a_last_line_without_newline_is_kept_and_only_a_torn_line_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    lines = [scored(f"t{i}").model_dump_json() for i in range(30)]
    path.write_text("\n".join(lines))  # a user's edit: no newline after the last line
    append_line(path, scored("t30").model_dump_json())
    assert len(ResultsDir(tmp_path).load()) == 31  # 30 kept + the new one (29 before)

    with path.open("a") as fh:
        fh.write(lines[0][:40])  # a write torn by a kill
    append_line(path, scored("t31").model_dump_json())
    text = path.read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 32
    assert all(json.loads(line) for line in text.splitlines())

    big = "x" * 200_000  # the last line is longer than one backwards read
    path.write_text(lines[0] + "\n" + json.dumps({"schema_version": 2, "pad": big}))
    append_line(path, lines[1])
    assert [len(line) for line in path.read_text().splitlines()][1] > 200_000
    path.write_text(lines[0] + "\n" + '{"pad": "' + big)
    append_line(path, lines[1])
    assert path.read_text() == lines[0] + "\n" + lines[1] + "\n"
    path.write_text('{"torn')  # the whole file is one torn line
    append_line(path, lines[1])
    assert path.read_text() == lines[1] + "\n"


# --- servers ------------------------------------------------------------------------------------


def test_enabled_servers_omitted_means_all_and_empty_means_none() -> None:
    catalog = load_catalog()
    names = [s.name for s in catalog.servers]
    assert enabled_servers(None, names) == sorted(names)
    assert enabled_servers([], names) == []
    assert enabled_servers(["calculator"], names) == ["calculator"]
    # cluster mode: the images and Jobs of a run come from the same function
    body = lambda enabled: RunSpecBody.model_validate(  # noqa: E731
        {"tasks": {"path": "t"}, "models": [{"name": "m"}], "servers": {"enabled": enabled}}
    )
    assert servers_used(body([]), catalog) == []
    assert [s.name for s in servers_used(body(["calculator"]), catalog)] == ["calculator"]
    task = Task.model_validate(SUM_TASK)
    needs = task_servers(task, enabled_servers([], names))
    assert needs.missing == ["filesystem", "calculator"] and needs.connect == []
    needs = task_servers(task, ["filesystem", "calculator"])
    assert needs.missing == [] and needs.connect == ["filesystem", "calculator"] and needs.hidden_tools == []


def test_local_run_with_no_servers_enabled_excludes_tasks_that_need_one(
    tmp_path: Path, data_dir: Path
) -> None:
    run_file = write_run(
        tmp_path / "run.yaml",
        write_tasks(tmp_path / "tasks.yaml", [SUM_TASK]),
        [{"name": "replay"}],
        servers={"enabled": []},
    )
    outcome = run_local(load_run_spec(run_file), tmp_path / "out", data_dir, progress=False)
    [result] = outcome.results
    assert result.status == "excluded" and result.error_kind == ErrorKind.SERVER_NOT_ENABLED
    assert outcome.summary["models"]["replay"]["excluded_by_kind"] == {"server_not_enabled": 1}
    record: Any = read_record(tmp_path / "out" / RUN_FILE, RunRecord)
    assert record.servers == []


def test_previous_unversioned_summary_and_diagnoses_still_load(tmp_path: Path) -> None:
    """The version before ``schema_version`` (1) of summary.json and diagnoses.jsonl is read too."""
    summary = RunSummary(
        run="r", judge=JUDGE, judges=[JUDGE], pass_threshold=0.75, models={"m": ModelSummary()}
    )
    old_summary = {k: v for k, v in json.loads(summary.model_dump_json()).items() if k != "schema_version"}
    (tmp_path / SUMMARY_FILE).write_text(json.dumps(old_summary))
    loaded = read_record(tmp_path / SUMMARY_FILE, RunSummary)
    assert loaded is not None and loaded.models == summary.models and loaded.schema_version == CURRENT_VERSION

    diagnosis = Diagnosis(model="m", task_id="t", status="diagnosed", primary_mode="no_tool_use", judge=JUDGE)
    old_line = {k: v for k, v in json.loads(diagnosis.model_dump_json()).items() if k != "schema_version"}
    (tmp_path / "diagnoses.jsonl").write_text(json.dumps(old_line) + "\n")
    assert DiagnosesLog(tmp_path).load() == {diagnosis.key: diagnosis}


# --- cluster records: termination message, work unit, AtlasRun status ------------------------


def test_termination_summary_round_trips_and_reads_the_previous_shape() -> None:
    result = errored(ErrorKind.PROVIDER).model_copy(update={"tool_calls": 2, "wall_s": 1.23456})
    summary = TaskSummary.of_result(result, "s3://b/r/x.json", EXIT_RETRY)
    message = json.dumps(summary.to_message())
    assert read_summary(message, "pod p") == summary and summary.schema_version == CURRENT_VERSION
    assert summary.infra is True and summary.wall_s == 1.235
    unversioned = {k: v for k, v in summary.to_message().items() if k != "schema_version"}
    assert read_summary(json.dumps(unversioned), "pod p") == summary  # written by an older runner
    assert read_summary("not json", "pod p") is None and read_summary('{"other": 1}', "pod p") is None
    # a newer runner's message is not dropped: the outcome is an error naming the version
    newer = read_summary(json.dumps({**summary.to_message(), "schema_version": 9}), "pod p")
    assert newer is not None and newer.status == "error" and newer.error_kind == "harness"
    assert newer.reason and "pod p: termination message has schema_version 9" in newer.reason


def test_batch_termination_message_holds_one_summary_per_item() -> None:
    """A pod that ran several items writes ``status: batch`` with their summaries, in order."""
    items = [TaskSummary.of_result(scored(task_id=t)) for t in ("a", "b")]
    batch = TaskSummary(status="batch", exit_code=0, items=items)
    read = read_summary(json.dumps(batch.to_message()), "pod p")
    assert read == batch and read.items is not None and [i.task for i in read.items] == ["a", "b"]
    assert "items" not in items[0].to_message()  # a single item's message does not carry the field


def test_work_unit_round_trips_and_refuses_an_unknown_version() -> None:
    unit = WorkUnit(
        run="r",
        model="m",
        chunk=0,
        items=[("t", 0)],
        tasks=TasksRef(sha256="a" * 64, uri="s3://b/t"),
        results_uri="s3://b/r/",
    )
    assert WorkUnit.from_json(unit.to_env(), ENV_WORK_UNIT) == unit
    previous = {**json.loads(unit.to_env()), "schema_version": 1}  # the version before this one
    assert WorkUnit.from_json(json.dumps(previous), ENV_WORK_UNIT) == unit
    with pytest.raises(RecordVersionError, match=f"{ENV_WORK_UNIT}: work unit has schema_version 3"):
        WorkUnit.from_json(json.dumps({**previous, "schema_version": 3}), ENV_WORK_UNIT)


def test_run_status_is_written_through_the_model_and_read_back() -> None:
    written = status_dump(
        RunStatus.model_validate(
            {
                "phase": Phase.RUNNING,
                "progress": "1/2",
                "models": {"m": {"total": 2, "scored": 1, "passed": 1, "passRate": 1.0}},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Running",
                        "lastTransitionTime": "2026-11-25T19:00:00Z",
                    }
                ],
            }
        )
    )
    assert written["schemaVersion"] == CURRENT_VERSION and written["phase"] == "Running"
    assert written["conditions"][0]["lastTransitionTime"] == "2026-11-25T19:00:00Z"  # unchanged: no re-patch
    assert "kopf" not in written and "running" not in written  # only what the operator set
    read = RunStatus.from_data(written, "AtlasRun ns/r")
    assert read.models["m"].pass_rate == 1.0 and status_dump(read) == written
    older = {k: v for k, v in written.items() if k != "schemaVersion"}  # before status was versioned
    assert RunStatus.from_data(older, "AtlasRun ns/r").phase == Phase.RUNNING
    with pytest.raises(RecordVersionError, match="AtlasRun ns/r: AtlasRun status has schema_version 5"):
        RunStatus.from_data({**written, "schemaVersion": 5}, "AtlasRun ns/r")
    with pytest.raises(ValueError, match="passRates"):  # an undeclared key would be pruned: refused
        RunStatus.model_validate({"phase": "Running", "models": {"m": {"passRates": 1}}})


def test_every_decision_status_is_a_valid_run_status() -> None:
    """``reconcile.decide`` writes its status through ``records.status_dump`` (the CRD's model)."""
    from test_reconcile import applied, body, snap, tasks

    first = decide(snap(body(), tasks(3)))
    assert first.status["schemaVersion"] == CURRENT_VERSION
    assert RunStatus.from_data(first.status, "decision").phase == first.phase == Phase.RUNNING
    again = decide(snap(body(), tasks(3), status=applied({}, first)))  # nothing changed: no write
    assert again.status_patch == {}


def test_a_batch_termination_message_is_one_task_summary_of_item_summaries() -> None:
    """The pod writes a ``batch`` TaskSummary whose items are TaskSummary too (one schema): reasons
    are cut first, then usage dropped, and what fits is read back by the operator's reader."""
    from atlasrun.cluster.pod.termination import compact_batch
    from atlasrun.cluster.wire.records import USAGE_FIELDS

    assert set(USAGE_FIELDS) <= set(TaskSummary.model_fields)
    item = TaskSummary(
        status="error", task="t" * 60, model="m", repeat=0, error_kind="provider", reason="x" * 3000,
        tool_calls=3, tokens={"prompt": 10, "completion": 2}, result="s3://b/r/x.json", exit_code=3,
    )  # fmt: skip
    entry = item.for_batch()
    assert (entry.model, entry.result, entry.exit_code, entry.tool_calls) == (None, None, None, 3)
    assert entry.reason == "x" * 200 + "..."
    text = compact_batch([item] * 20, 3)
    read = read_summary(text, "pod")
    assert len(text.encode()) <= 4000 and read is not None and read.status == "batch"
    assert read.exit_code == 3 and read.items is not None and len(read.items) == 20
    assert all(i.task == item.task and i.error_kind == "provider" for i in read.items)
    assert read.items[0].tool_calls is None  # usage went before the items did
    few = read_summary(compact_batch([item] * 2, 0), "pod")
    assert few is not None and few.items is not None and few.items[0].tool_calls == 3
    cut = read_summary(compact_batch([item] * 60, 3), "pod")
    assert cut is not None and cut.items == [] and cut.truncated is True  # the stored results tell


def test_folded_usage_survives_the_status_dump() -> None:
    """The run status is written with ``exclude_unset``: errors by kind and tool errors folded into
    a model's usage must be "set" fields, or the status loses them (found by the operator metrics
    test: ``usage.errors`` missing after the wire split)."""
    from atlasrun.cluster.wire.usage import ItemUsage, ModelUsage, fold

    item = ItemUsage(tool_errors=(("filesystem/tool_error", 2),))
    usage = fold(fold(ModelUsage(), item, None), ItemUsage(), "provider")
    dumped = usage.model_dump(by_alias=True, mode="json", exclude_unset=True)
    assert dumped["errors"] == {"provider": 1}
    assert dumped["toolErrors"] == {"filesystem/tool_error": 2}
