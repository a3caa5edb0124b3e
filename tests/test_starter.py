"""The starter suite: well-formed, solvable by its own reference on the real servers, and discriminating.

One replay run of the whole suite (real MCP servers, deterministic judge) on a fresh sample
workspace is shared by the tests below.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from atlasrun import naming
from atlasrun.errors import InputError
from atlasrun.judge.deterministic import DeterministicJudge, key_facts
from atlasrun.runner.local import RunOutcome, run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.scoring.claims import score_claims
from atlasrun.scoring.store import ResultsDir
from atlasrun.starter.workspace import MARKER, create_workspace
from atlasrun.tasks.loader import load_tasks
from atlasrun.tasks.model import Task

pytestmark = pytest.mark.servers

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TASKS = EXAMPLES / "starter" / "tasks.yaml"
DEMO = EXAMPLES / "demo.yaml"
DOMAINS = {"Analytics", "Productivity", "Coding", "Basic"}
SERVER_WORDS = re.compile(r"\b(filesystem|memory|git|calculator|cli-mcp-server|code-runner|mcp)\b", re.I)
# Pinned: the sample repository's history is part of the suite (claims quote these hashes).
MAIN_HEAD = "17306a2c4421c11d622e43b49d148ad613de7da6"
BRANCH_HEAD = "727efaa11942d6369528f4b60560d94a1078cb35"
judge = DeterministicJudge()


def _tasks() -> list[Task]:
    loaded = load_tasks(TASKS)
    assert loaded.rejected == [], [str(r) for r in loaded.rejected]
    return loaded.tasks


def _coverage(task: Task, response: str) -> float:
    score = score_claims([judge.judge_sync(claim, response) for claim in task.claims])
    assert score.coverage is not None
    return score.coverage


def _corrupt(text: str) -> str:
    """Every digit changed and every name-like token (capitalised, or with _ . / @) scrambled."""
    text = re.sub(r"\d", lambda m: str((int(m.group()) + 5) % 10), text)
    return re.sub(
        r"[\w@./+#-]+",
        lambda m: (
            m.group()[::-1].lower()
            if m.group()[0].isupper() or any(c in m.group() for c in "_./@")
            else m.group()
        ),
        text,
    )


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> RunOutcome:
    root = tmp_path_factory.mktemp("starter")
    workspace = create_workspace(root / "workspace")
    spec = load_run_spec(DEMO)
    spec.spec.models = [m for m in spec.spec.models if m.name == "replay"]  # the demo's reference agent
    return run_local(spec, root / "out", workspace, progress=False)


# (a) the suite is well formed


def test_suite_loads_and_meets_the_authoring_rules() -> None:
    tasks = _tasks()
    assert len(tasks) >= 16
    for task in tasks:
        calls = task.reference_calls()
        used = {c.name for c in calls}
        assert len(calls) >= 2, task.id
        assert 2 <= len(task.claims) <= 6, task.id
        assert task.domain in DOMAINS, task.id
        assert task.reference_answer and task.reference_answer.strip(), task.id
        assert 5 <= len(task.enabled_tools) <= 12, task.id
        assert len(set(task.enabled_tools)) == len(task.enabled_tools), task.id
        assert task.distractors and set(task.distractors) <= set(task.enabled_tools), task.id
        assert not used & set(task.distractors), f"{task.id}: a distractor is used by the reference"
        assert set(task.enabled_tools) == used | set(task.distractors), f"{task.id}: unlabelled extra tools"
        # prompts never name tools or servers
        assert not SERVER_WORDS.search(task.prompt), task.id
        for tool in task.enabled_tools:
            assert naming.split(tool)[1] not in task.prompt and tool not in task.prompt, (task.id, tool)
        # no current-time lookups: answers must not depend on the clock
        assert "time_get_current_time" not in used, task.id
    multi = [t for t in tasks if len(t.required_servers) > 1]
    assert len(multi) >= 12
    categories = {t.category for t in tasks}
    assert {
        "multi_server/sequential",
        "multi_server/parallel",
        "single_server/sequential",
        "single_server/parallel",
    } <= categories, categories
    with_parallel_turn = [t for t in tasks if any(len(turn.calls) > 1 for turn in t.reference_trajectory)]
    assert len(with_parallel_turn) >= 5
    used_servers = {s for t in tasks for s in t.required_servers}
    assert {"filesystem", "memory", "git", "calculator", "cli-mcp-server", "time"} <= used_servers
    assert {t.domain for t in tasks} == DOMAINS


# (b) the reference solves every task on the real servers


def test_replay_passes_every_task_with_full_coverage(replayed: RunOutcome) -> None:
    tasks = _tasks()
    assert replayed.plan.rejected == [] and replayed.plan.excluded == []
    by_id = {r.task_id: r for r in replayed.results}
    assert sorted(by_id) == sorted(t.id for t in tasks)
    for task in tasks:
        result = by_id[task.id]
        assert result.status == "scored", (task.id, result.reason)
        assert result.tool_errors == 0 and result.tool_calls == len(task.reference_calls()), task.id
        assert result.passed and result.coverage == 1.0, (task.id, [c.reason for c in result.claims])
    summary = replayed.summary["models"]["replay"]
    assert summary["passed"] == len(tasks) and summary["errored"] == 0


# (c) the claims discriminate


@pytest.mark.parametrize("task", _tasks(), ids=lambda t: t.id)
def test_wrong_answers_fail(task: Task) -> None:
    assert task.reference_answer
    assert _coverage(task, task.reference_answer) == 1.0
    corrupted = _corrupt(task.reference_answer)
    assert corrupted != task.reference_answer
    assert _coverage(task, corrupted) < 0.75, corrupted
    assert _coverage(task, "I could not find that information in the workspace.") == 0.0


# (d) the claims are grounded in what the tools returned


def _missing_facts(claim: str, text: str) -> list[str]:
    """The claim's key facts (names, identifiers, dates, numbers - as the judge extracts them) not in text."""
    found, missing = key_facts(claim, text)
    assert found or missing, f"claim has no checkable fact: {claim!r}"
    # Stricter than `atlas audit` (judge.deterministic.ungrounded): names and ids must be there too.
    # A count spelled out in words ("the three files") frames the claim and is not required.
    return [m for m in missing if not m[:1].isdigit() or m.split()[0] in claim]


def test_claims_are_supported_by_the_replayed_tool_outputs(replayed: RunOutcome) -> None:
    """Every fact a claim checks must come from what the tools returned, not from the task author."""
    store = ResultsDir(replayed.out)
    tasks = {t.id: t for t in _tasks()}
    assert sorted(r.task_id for r in replayed.results) == sorted(tasks)
    for result in replayed.results:
        transcript = store.load_transcript(result)
        assert transcript is not None, result.task_id
        outputs = "\n\n".join(c.result for c in transcript.calls if not c.is_error)
        task = tasks[result.task_id]
        for claim in task.claims:
            assert _missing_facts(claim, outputs) == [], (task.id, claim)
        # (Judging the raw outputs as if they were an answer is no longer meaningful: they are lists
        # of values, which the judge rejects as number dumps by design. Grounding is checked per fact.)


# (e) the workspace is reproducible


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _rev(repo: Path, rev: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", rev], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_workspace_is_deterministic(tmp_path: Path) -> None:
    first, second = create_workspace(tmp_path / "a"), create_workspace(tmp_path / "b")
    tree = _tree(first)
    assert tree == _tree(second)
    assert {
        "sales/sales_2024.csv",
        "hr/employees.csv",
        "memory.jsonl",
        "projects/atlas-web/.git/HEAD",
    } <= set(tree)
    for root in (first, second):
        repo = root / "projects" / "atlas-web"
        assert _rev(repo, "HEAD") == MAIN_HEAD
        assert _rev(repo, "feature/csv-export") == BRANCH_HEAD
        status = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
            env={"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"},
        )
        assert status.stdout == ""
    # recreating a previous workspace replaces it completely
    (first / "stray.txt").write_text("x")
    assert _tree(create_workspace(first)) == tree


def test_workspace_refuses_a_foreign_non_empty_directory(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    with pytest.raises(InputError, match="not a starter workspace"):
        create_workspace(target)
    assert (target / "precious.txt").read_text() == "keep me" and not (target / MARKER).exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (create_workspace(empty) / MARKER).is_file()
