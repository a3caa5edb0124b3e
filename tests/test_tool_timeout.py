"""A tool call past its timeout is a tool error the model sees; the server is restarted before its next use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from atlasrun.runner.local import run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.store import task_record_name
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider, tool_call
from conftest import child_pids, write_run, write_tasks

pytestmark = pytest.mark.servers

SLOW_CALLS = [
    ("everything_trigger-long-running-operation", {"duration": 60, "steps": 1}),  # pooled server
    ("everything_echo", {"message": "still there"}),
    ("code-runner_run-code", {"code": "sleep 60", "languageId": "shellscript"}),  # fresh per task
    ("code-runner_run-code", {"code": "echo still there", "languageId": "shellscript"}),
]
TASK = {
    "id": "slow-tools",
    "prompt": "Try the slow tools.",
    "enabled_tools": sorted({name for name, _ in SLOW_CALLS}),
    "claims": ["The tools answered"],
    "limits": {"tool_timeout_s": 2},
    "reference_trajectory": [{"calls": [{"name": "everything_echo", "arguments": {"message": "x"}}]}],
}


def test_tool_timeout_is_fed_back_and_the_server_restarted(tmp_path: Path, data_dir: Path) -> None:
    server_pids: list[set[int]] = []

    def script(body: dict[str, Any]) -> Reply:
        done = [m for m in body["messages"] if m["role"] == "tool"]
        if len(done) < len(SLOW_CALLS):
            server_pids.append(set(child_pids("mcp-server-everything")))
            name, arguments = SLOW_CALLS[len(done)]
            return Reply(tool_calls=[tool_call(name, arguments, f"c{len(done)}")])
        return Reply(content="The tools answered.")

    tasks = [TASK, dict(TASK, id="after", prompt="Again.")]  # the pooled server serves the next task too
    with ScriptedProvider(script) as provider:
        run_file = write_run(
            tmp_path / "run.yaml",
            write_tasks(tmp_path / "tasks.yaml", tasks),
            [{"name": "m", "model": "openai/m", "apiBase": provider.api_base}],
            parallelism=1,
        )
        outcome = run_local(load_run_spec(run_file), tmp_path / "out", data_dir, progress=False)
    assert [r.status for r in outcome.results] == ["scored", "scored"], outcome.results
    for result in outcome.results:
        assert result.infra_errors == [] and result.stop_reason != "infra_error"
        record = TaskResult.model_validate_json(
            (tmp_path / "out" / task_record_name("m", result.task_id, 0)).read_text()
        )
        assert record.transcript is not None
        calls = record.transcript.calls
        assert [c.error_kind for c in calls] == ["tool_timeout", None, "tool_timeout", None]
        assert "timed out after 2s" in calls[0].result and calls[1].result == "Echo: still there"
        assert calls[3].result.strip() == "still there"
    # The model saw the timeout as the tool's result.
    seen = [m["content"] for m in provider.requests[-1]["messages"] if m["role"] == "tool"]
    assert "timed out" in seen[0] and "timed out" in seen[2]
    # The pooled server was replaced after its timed-out call: lazily, by the echo that used it next.
    before, after_timeout, after_echo = server_pids[:3]
    assert before and before == after_timeout and after_echo and before.isdisjoint(after_echo)
