"""Leak probes for several items per pod: tasks that look for what earlier items left, then leave
some of their own, through the servers' own tools (the probes of tests/test_isolation_reuse.py,
as tasks a scripted model runs).

Task ``probe-k`` (over the sample workspace):
1. reads: the data root's listing (filesystem), the memory graph, the git branches of the sample
   repository, and (code-runner) every process whose command line carries the marker plus the
   files left in the code runner's own working directory;
2. writes: a file in the data root, a memory entity, a git branch, and (code-runner) a detached
   background process that writes a file after 2 s and then sleeps for 10 minutes;
3. reads again: its own writes must show (the probes can see a leak).

``leaks(results)`` lists every marker of another task that a task's first reads saw: none
when each item had fresh state.
"""

from __future__ import annotations

import re
from typing import Any

from atlasrun.scoring.result import TaskResult

REPO = "/data/projects/atlas-web"
SERVERS = ("filesystem", "memory", "git", "code-runner")
# The marker is assembled at run time so that a probe's own code never carries it.
_PROCS = """
const fs = require('fs');
const mark = 'leak' + 'marker';
const procs = [];
for (const pid of fs.readdirSync('/proc').filter((p) => /^[0-9]+$/.test(p))) {
  let line;
  try { line = fs.readFileSync(`/proc/${pid}/cmdline`).toString().split('\\0').join(' '); } catch (e) { continue; }
  if (line.includes(mark)) procs.push(line.trim());
}
const late = fs.readdirSync('.').filter((f) => f.startsWith('late-')).sort();
console.log('procs:', JSON.stringify(procs), 'files:', JSON.stringify(late));
"""
_SPAWN = """
const {{ spawn }} = require('child_process');
const tail = 'setTimeout(() => {{ require("fs").writeFileSync("late-{k}.txt", "x"); setTimeout(() => {{}}, 600000); }}, 2000)';
spawn(process.execPath, ['-e', tail, 'leak' + 'marker-{k}'], {{ detached: true, stdio: 'ignore' }}).unref();
console.log('spawned');
"""
_MARK = re.compile(r"(?:leak|late|Leak)[-_](\d+)|leakmarker-(\d+)")


def _reads() -> list[dict[str, Any]]:
    return [
        {"name": "filesystem_list_directory", "arguments": {"path": "/data"}},
        {"name": "memory_read_graph", "arguments": {}},
        {"name": "git_git_branch", "arguments": {"repo_path": REPO, "branch_type": "all"}},
        {"name": "code-runner_run-code", "arguments": {"languageId": "javascript", "code": _PROCS}},
    ]


def _writes(k: int) -> list[dict[str, Any]]:
    entity = {"name": f"Leak_{k}", "entityType": "probe", "observations": [f"written by probe {k}"]}
    return [
        {"name": "filesystem_write_file", "arguments": {"path": f"/data/leak-{k}.txt", "content": "x"}},
        {"name": "memory_create_entities", "arguments": {"entities": [entity]}},
        {"name": "git_git_create_branch", "arguments": {"repo_path": REPO, "branch_name": f"leak-{k}"}},
        {
            "name": "code-runner_run-code",
            "arguments": {"languageId": "javascript", "code": _SPAWN.format(k=k)},
        },
    ]


def probe_tasks(n: int) -> list[dict[str, Any]]:
    """``n`` probe tasks as task-file entries (``probe-0`` .. ``probe-<n-1>``)."""
    tools = sorted({c["name"] for c in _reads() + _writes(0)})
    return [
        {
            "id": f"probe-{k}",
            "domain": "Basic",
            "prompt": f"Leak probe {k}: look for what earlier tasks left, then leave your own marks.",
            "enabled_tools": tools,
            "claims": ["The probe finished"],
            "reference_answer": "The probe finished.",
            "reference_trajectory": [{"calls": _reads()}, {"calls": _writes(k)}, {"calls": _reads()}],
        }
        for k in range(n)
    ]


def _own(task_id: str) -> int:
    return int(task_id.rsplit("-", 1)[1])


def leaks(results: list[TaskResult]) -> dict[str, list[str]]:
    """For each probe whose first reads saw another probe's marks: those marks (with the tool)."""
    found: dict[str, list[str]] = {}
    for result in results:
        assert result.transcript is not None, result.task_id
        own = _own(result.task_id)
        for call in result.transcript.calls[: len(_reads())]:
            for match in _MARK.finditer(call.result):
                if int(match.group(1) or match.group(2)) != own:
                    found.setdefault(result.task_id, []).append(f"{call.name}: {match.group(0)}")
    return found


def probes_live(results: list[TaskResult]) -> list[str]:
    """Problems that would make ``leaks`` blind: a failed call, or a task's own writes not seen by
    its second reads (the late file is not awaited: its process is what the process probe sees)."""
    problems = []
    for result in results:
        assert result.transcript is not None, result.task_id
        own, calls = _own(result.task_id), result.transcript.calls
        n = len(_reads())
        if len(calls) != 3 * n or any(c.is_error for c in calls):
            problems.append(f"{result.task_id}: {[(c.name, c.is_error, c.result[:200]) for c in calls]}")
            continue
        again = " ".join(c.result for c in calls[2 * n :])
        for mark in (f"leak-{own}.txt", f"Leak_{own}", f"leak-{own}", f"leakmarker-{own}"):
            if mark not in again:
                problems.append(f"{result.task_id}: its own {mark} is not seen by its second reads")
    return problems
