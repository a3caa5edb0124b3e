"""``atlas rescore`` (new judges on saved answers, no agent or server work) and ``atlas audit`` (drift)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.agent.litellm_agent import LiteLLMAgent
from atlasrun.cli import main
from atlasrun.errors import EXIT_ITEM_ERRORS
from atlasrun.runner.local import RunOutcome, run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.scoring.store import ResultsDir
from atlasrun.servers.instance import ServerInstance
from atlasrun.starter.workspace import create_workspace
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from conftest import SUM_TASK, child_pids, write_run, write_tasks
from test_tasks import atlas_row, write_csv

pytestmark = pytest.mark.servers

STARTER = Path(__file__).resolve().parent.parent / "examples" / "starter" / "tasks.yaml"
MEMORY_TASK = dict(
    SUM_TASK,
    id="memory-task",
    enabled_tools=["memory_read_graph"],
    distractors=[],
    claims=["The graph is empty"],
    reference_answer="The graph is empty.",
    reference_trajectory=[{"calls": [{"name": "memory_read_graph", "arguments": {}}]}],
)


def verdict(label: str) -> Reply:
    return Reply(
        content=json.dumps({"coverage_outcome": label, "justification": "scripted", "confidence": 0.9})
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> RunOutcome:
    """replay scores two tasks, 'down' fails at the provider on both, a memory task is excluded."""
    root = tmp_path_factory.mktemp("rescore")
    data = root / "data"
    data.mkdir()
    (data / "numbers.txt").write_text("12\n30\n")
    tasks = [SUM_TASK, dict(SUM_TASK, id="sum-again"), MEMORY_TASK]
    with ScriptedProvider(
        lambda body: Reply(status=503, raw_body='{"error": {"message": "overloaded"}}')
    ) as down:
        run_file = write_run(
            root / "run.yaml",
            write_tasks(root / "tasks.yaml", tasks),
            [{"name": "replay"}, {"name": "down", "model": "openai/down", "apiBase": down.api_base}],
            servers={"enabled": ["filesystem", "calculator"]},
            limits={"retryBackoffSeconds": 0, "providerRetries": 0},
        )
        outcome = run_local(load_run_spec(run_file), root / "out", data, progress=False)
    statuses = sorted((r.model, r.task_id, r.status) for r in outcome.results)
    assert statuses == [
        ("down", "memory-task", "excluded"),
        ("down", "sum-again", "error"),
        ("down", "sum-numbers", "error"),
        ("replay", "memory-task", "excluded"),
        ("replay", "sum-again", "scored"),
        ("replay", "sum-numbers", "scored"),
    ]
    return outcome


@pytest.fixture
def no_agent_or_server_work(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*args: object, **kwargs: object) -> Any:
        raise AssertionError("rescore must not start servers or run agents")

    monkeypatch.setattr(ServerInstance, "start", refuse)
    monkeypatch.setattr(LiteLLMAgent, "run", refuse)


def test_rescore_with_a_strict_judge_changes_only_the_new_dir(
    finished_run: RunOutcome,
    tmp_path: Path,
    no_agent_or_server_work: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = finished_run.out
    before, processes = snapshot(old), set(child_pids(""))
    assert summary(old)["models"]["replay"]["pass_rate"] == 1.0
    new = tmp_path / "strict"
    with ScriptedProvider(lambda body: verdict("not_fulfilled")) as judge:
        code = main(
            [
                "rescore",
                str(old),
                "--judge",
                "openai/strict",
                "--judge-api-base",
                judge.api_base,
                "--out",
                str(new),
                "--no-preflight",  # the judge's requests are counted below
            ]
        )
    assert code == 0
    assert "replay" in capsys.readouterr().out
    assert len(judge.requests) == 2  # one claim per scored task; nothing for the provider failures
    assert snapshot(old) == before  # the source run is untouched
    assert set(child_pids("")) <= processes  # no server (or any other process) was started

    rows = summary(new)["models"]
    assert (rows["replay"]["scored"], rows["replay"]["passed"], rows["replay"]["pass_rate"]) == (2, 0, 0.0)
    assert rows["replay"]["mean_coverage"] == 0.0 and rows["replay"]["excluded"] == 1
    assert rows["down"]["errored"] == 2 and rows["down"]["scored"] == 0
    old_store, new_store = ResultsDir(old), ResultsDir(new)
    old_latest, new_latest = old_store.load(), new_store.load()
    assert sorted(new_latest) == sorted(old_latest)
    for key, line in new_latest.items():
        before_line = old_latest[key]
        full, original = new_store.load_full(line), old_store.load_full(before_line)
        assert full is not None and original is not None
        if original.transcript is not None:  # the agent's work is carried over byte for byte
            assert full.transcript is not None
            assert full.transcript.model_dump_json() == original.transcript.model_dump_json()
        if before_line.status != "scored":  # provider errors and exclusions are copied with their reason
            assert (line.status, line.reason) == (before_line.status, before_line.reason)
        else:
            assert line.status == "scored" and line.passed is False and line.coverage == 0.0
            assert line.judge is not None and line.judge.name == "openai/strict"
            assert [c.label for c in line.claims] == ["not_fulfilled"]
    assert any((r.reason or "").startswith("provider:") for r in new_latest.values())
    record = json.loads((new / "run.json").read_text())
    assert record["rescore"]["judges"] == ["openai/strict"] and record["judge"]["name"] == "openai/strict"


def test_rescore_with_a_garbage_judge_counts_errors_then_resumes(
    finished_run: RunOutcome, no_agent_or_server_work: None
) -> None:
    old = finished_run.out
    with ScriptedProvider(lambda body: Reply(content="Looks fine to me!")) as judge:
        rescore = [
            "rescore",
            str(old),
            "--judge",
            "openai/j",
            "--judge-api-base",
            judge.api_base,
            "--no-preflight",
        ]
        assert main(rescore) == EXIT_ITEM_ERRORS  # every claim's judging failed
    new = old.parent / f"{old.name}-rescored-openai_j"  # the default target
    replay = summary(new)["models"]["replay"]
    assert (replay["scored"], replay["errored"], replay["pass_rate"], replay["mean_coverage"]) == (
        0,
        2,
        None,
        None,
    )
    assert replay["error_reasons"] == {"judge failed on 1/1 claims": 2}
    failed = [r for r in ResultsDir(new).load().values() if r.model == "replay" and r.status == "error"]
    assert len(failed) == 2 and all(r.coverage is None and r.passed is None for r in failed)

    with ScriptedProvider(lambda body: verdict("fulfilled")) as judge:
        rescore[5] = judge.api_base
        assert main(rescore) == 0
    assert len(judge.requests) == 2  # only the judge failures were redone
    replay = summary(new)["models"]["replay"]
    assert (replay["scored"], replay["passed"], replay["errored"], replay["excluded"]) == (2, 2, 0, 1)
    assert summary(new)["models"]["down"]["errored"] == 2
    # a different judge never mixes into an existing rescore
    assert main(["rescore", str(old), "--judge", "deterministic", "--out", str(new)]) == 2


# --- audit -----------------------------------------------------------------------------------------


def atlas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args], capture_output=True, text=True, timeout=600
    )


def statuses(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {row["task"]: row["status"] for row in json.loads(proc.stdout)["tasks"]}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """The starter suite audited on a fresh workspace, recording the live outputs as a baseline."""
    root = tmp_path_factory.mktemp("audit")
    workspace = create_workspace(root / "workspace")
    record = root / "recorded.yaml"
    proc = atlas(
        "audit",
        str(STARTER),
        "--data-dir",
        str(workspace),
        "--out",
        str(root / "out"),
        "--record",
        str(record),
    )
    return root, record, proc


def test_audit_of_the_starter_suite_on_a_fresh_workspace_is_all_ok(
    baseline: tuple[Path, Path, subprocess.CompletedProcess[str]],
) -> None:
    root, record, proc = baseline
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "20 ok, 0 flagged" in proc.stdout
    report = json.loads((root / "out" / "audit.json").read_text())
    assert {r["status"] for r in report["tasks"]} == {"ok"} and len(report["tasks"]) == 20
    recorded = yaml.safe_load(record.read_text())["tasks"]
    calls = [c for t in recorded for turn in t["reference_trajectory"] for c in turn["calls"]]
    assert calls and all(isinstance(c.get("output"), str) for c in calls)


def test_audit_flags_exactly_the_tasks_a_corrupted_workspace_breaks(
    baseline: tuple[Path, Path, subprocess.CompletedProcess[str]],
) -> None:
    root, record, _ = baseline
    workspace = create_workspace(root / "corrupted")
    # a value a claim depends on: Engineering now has 7 people, the claim says 6 (no recorded outputs
    # for that task, so only the claim check can notice)
    employees = workspace / "hr" / "employees.csv"
    employees.write_text(
        employees.read_text().replace("Elena Petrova,Finance,", "Elena Petrova,Engineering,")
    )
    # a value no claim depends on: the tool outputs differ from the recorded baseline
    inventory = workspace / "inventory" / "inventory.csv"
    inventory.write_text(inventory.read_text().replace("Columbus,205,100", "Columbus,204,100"))
    # a file a reference call reads
    (workspace / "notes" / "oncall.md").unlink()
    tasks = yaml.safe_load(record.read_text())
    for task in tasks["tasks"]:
        calls = [c for turn in task["reference_trajectory"] for c in turn["calls"]]
        if task["id"] == "engineering-salaries":
            for call in calls:
                call.pop("output")
        if task["id"] == "q3-revenue-leader":  # whitespace differences are not drift
            calls[0]["output"] = calls[0]["output"].replace("\n", "  \r\n\t") + "\n\n"
    tasks_file = root / "recorded-edited.yaml"
    tasks_file.write_text(yaml.safe_dump(tasks, sort_keys=False))

    proc = atlas("audit", str(tasks_file), "--data-dir", str(workspace), "--json")
    assert proc.returncode == 1, proc.stderr
    flagged = {task: status for task, status in statuses(proc).items() if status != "ok"}
    assert flagged == {
        "engineering-salaries": "unsupported_claims",
        "reorder-restock-cost": "drifted",
        "warehouse-stock-value": "drifted",
        "oncall-handover": "unsolvable",
    }
    rows = {row["task"]: row for row in json.loads(proc.stdout)["tasks"]}
    assert "has 6 employees" in rows["engineering-salaries"]["details"][0]
    assert "Columbus,204" in rows["reorder-restock-cost"]["details"][0]
    assert "oncall.md" in rows["oncall-handover"]["details"][0]
    assert len(statuses(proc)) == 20


def test_audit_flags_a_missing_reference_tool_and_skips_disabled_servers(
    tmp_path: Path, data_dir: Path
) -> None:
    drifted_tool = dict(
        SUM_TASK,
        id="renamed-tool",
        enabled_tools=["filesystem_read_text_file", "filesystem_read_the_file", "calculator_calculate"],
        distractors=[],
        reference_trajectory=[
            {"calls": [{"name": "filesystem_read_the_file", "arguments": {"path": "/data/numbers.txt"}}]}
        ],
    )
    tasks = write_tasks(tmp_path / "tasks.yaml", [drifted_tool, MEMORY_TASK, SUM_TASK])
    proc = atlas(
        "audit", str(tasks), "--data-dir", str(data_dir), "--servers-enabled", "filesystem,calculator"
    )
    assert proc.returncode == 1, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[2:] if line.strip()}
    assert (
        lines["renamed-tool"].split()[1] == "unsolvable"
        and "filesystem_read_the_file" in lines["renamed-tool"]
    )
    assert lines["memory-task"].split()[1] == "skipped"
    assert lines["sum-numbers"].split()[1] == "ok"
    assert "1 ok, 1 flagged (1 unsolvable, 0 drifted, 0 unsupported_claims), 1 skipped" in proc.stdout


def test_audit_compares_mcp_atlas_recorded_outputs(tmp_path: Path) -> None:
    def trajectory(path: str, recorded: str) -> str:
        return json.dumps(
            [
                {
                    "role": "assistant",
                    "content": "Reading.",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {
                                "name": "filesystem_read_text_file",
                                "arguments": json.dumps({"path": path}),
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": recorded}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {
                                "name": "calculator_calculate",
                                "arguments": '{"expression": "1+1"}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "2"}]},
            ]
        )

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("The greeting is hello\n")
    (data / "b.txt").write_text("The greeting is goodbye\n")
    claims = json.dumps(["The greeting is 'hello'", "The sum is 2"])
    rows = [
        atlas_row(
            "same", GTFA_CLAIMS=claims, TRAJECTORY=trajectory("/data/a.txt", "The greeting   is hello")
        ),
        atlas_row(
            "changed", GTFA_CLAIMS=claims, TRAJECTORY=trajectory("/data/b.txt", "The greeting is hello")
        ),
    ]
    proc = atlas("audit", str(write_csv(tmp_path / "atlas.csv", rows)), "--data-dir", str(data), "--json")
    assert proc.returncode == 1, proc.stderr
    rows_by_task = {row["task"]: row for row in json.loads(proc.stdout)["tasks"]}
    assert rows_by_task["same"]["status"] == "ok"
    changed = rows_by_task["changed"]
    assert changed["flags"] == ["drifted", "unsupported_claims"]  # 'hello' is gone from the outputs too
    assert "goodbye" in changed["details"][0]
