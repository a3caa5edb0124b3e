"""MCP-Atlas's own agent-environment, stood up from the vendored source (tests/mcp_atlas_env.py).

One environment with the 8 servers that run offline serves most tests (start-up is the cost);
each call is the body MCP-Atlas's harness sends, each assertion is on the exact output.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_atlas_env import (
    OFFLINE_SERVERS,
    AgentEnv,
    MCPAtlasEnvError,
    build_seconds,
    fresh_data,
    mcp_atlas_home,
    running,
)

pytestmark = [pytest.mark.servers, pytest.mark.timeout(2400)]  # a cold build runs in the first test

__all__ = ["mcp_atlas_home"]  # the session fixture, imported for pytest

# Tools per server at MCP-Atlas's pins (69 in all).
TOOL_COUNTS = {
    "calculator": 1, "cli-mcp-server": 2, "desktop-commander": 21, "filesystem": 14, "git": 12,
    "mcp-code-executor": 9, "mcp-server-code-runner": 1, "memory": 9,
}  # fmt: skip
GIT_DATE = "2024-01-02T03:04:05+00:00"


def text_block(text: str) -> dict[str, Any]:
    """A text content block as /call-tool returns it (mcp.types.TextContent, nulls included)."""
    return {"type": "text", "text": text, "annotations": None, "_meta": None}


def _git(repo: Path, *args: str) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(repo),
        "GIT_AUTHOR_DATE": GIT_DATE,
        "GIT_COMMITTER_DATE": GIT_DATE,
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.fixture(scope="module")
def data(mcp_atlas_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh /data plus a one-commit git repository at /data/repos/demo."""
    root = fresh_data(tmp_path_factory.mktemp("mcp-atlas"))
    repo = root / "repos" / "demo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("hello\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=Ada", "-c", "user.email=ada@example.org", "commit", "-qm", "first")
    return root


@pytest.fixture(scope="module")
def env(data: Path) -> Iterator[AgentEnv]:
    started = time.monotonic()
    with running(OFFLINE_SERVERS, data) as agent:
        print(f"\nwarm start, 8 servers: {time.monotonic() - started:.1f}s; cold build: {build_seconds()}s")
        yield agent


def test_every_offline_server_is_up_with_its_tools(env: AgentEnv) -> None:
    status = env.enabled_servers()
    assert status == {
        "servers": [[name, "OK"] for name in sorted(OFFLINE_SERVERS)],
        "total": 8,
        "online": 8,
        "offline": 0,
    }
    tools = env.list_tools()
    assert Counter(tool["name"].split("_", 1)[0] for tool in tools) == TOOL_COUNTS
    assert len(tools) == 69
    assert {"calculator_calculate", "filesystem_read_text_file", "git_git_log", "memory_search_nodes",
            "cli-mcp-server_run_command", "desktop-commander_read_file", "mcp-server-code-runner_run-code",
            "mcp-code-executor_execute_code"} <= {tool["name"] for tool in tools}  # fmt: skip
    assert env.client.get("/health").json() == {"status": "health_and_client_connection_ok"}


def test_calculator_filesystem_and_cli(env: AgentEnv, data: Path) -> None:
    assert env.call_tool("calculator_calculate", {"expression": "2+3"}) == (200, [text_block("5")])
    csv = data / "Top Movies.csv"
    status, body = env.call_tool("filesystem_read_text_file", {"path": "/data/Top Movies.csv"})
    assert (status, body) == (200, [text_block(csv.read_bytes().decode())])
    repos = "".join(f"{name}\n" for name in sorted(os.listdir(data / "repos")))
    # cli-mcp-server: the command's output, then its return code, as two blocks.
    assert env.call_tool("cli-mcp-server_run_command", {"command": "ls /data/repos"}) == (
        200,
        [text_block(repos), text_block("\nCommand completed with return code: 0")],
    )


def test_memory_reads_the_data_memory_file(env: AgentEnv, data: Path) -> None:
    lines = (data / "repos" / "memory_mcp_server" / "memories-for-mcp.json").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    entities = [r for r in records if r["type"] == "entity" and "alice" in json.dumps(r).lower()]
    names = {e["name"] for e in entities}
    relations = [r for r in records if r["type"] == "relation" and r["from"] in names and r["to"] in names]
    expected = json.dumps({"entities": entities, "relations": relations}, indent=2, ensure_ascii=False)
    assert entities
    assert env.call_tool("memory_search_nodes", {"query": "Alice"}) == (200, [text_block(expected)])


def test_git_log_of_a_repository_under_data(env: AgentEnv, data: Path) -> None:
    sha = _git(data / "repos" / "demo", "rev-parse", "HEAD").strip()
    expected = (
        f"Commit history:\nCommit: '{sha}'\nAuthor: <git.Actor \"Ada <ada@example.org>\">\n"
        "Date: 2024-01-02 03:04:05+00:00\nMessage: 'first\\n'\n"
    )
    assert env.call_tool("git_git_log", {"repo_path": "/data/repos/demo"}) == (200, [text_block(expected)])


def test_desktop_commander_is_confined_to_data(env: AgentEnv, data: Path) -> None:
    status, body = env.call_tool("desktop-commander_get_config", {})
    assert status == 200 and body[0]["text"].startswith("Current configuration:\n")
    config = json.loads(body[0]["text"].removeprefix("Current configuration:\n"))
    # Set by the agent-environment at start-up (its lifespan), before any request.
    assert config["allowedDirectories"] == ["/data"]
    assert (config["version"], config["currentClient"]) == ("0.2.7", {"name": "mcp", "version": "0.1.0"})
    lines = (data / "Top Movies.csv").read_text().split("\n")
    header = f"[Reading 3 lines from start (total: {len(lines)} lines, {len(lines) - 3} remaining)]\n\n"
    assert env.call_tool("desktop-commander_read_file", {"path": "/data/Top Movies.csv", "length": 3}) == (
        200,
        [text_block(header + "\n".join(lines[:3]))],
    )
    # search_code runs ripgrep (Debian's rg in place of the one @vscode/ripgrep would download).
    assert env.call_tool("desktop-commander_search_code", {"path": "/data", "pattern": "Shawshank"}) == (
        200,
        [text_block("/data/Top Movies.csv:\n  2: Shawshank")],
    )


def test_code_runners(env: AgentEnv, data: Path) -> None:
    assert env.call_tool(
        "mcp-server-code-runner_run-code", {"code": "print(2+3)", "languageId": "python"}
    ) == (
        200,
        [text_block("5\n")],
    )
    code = "import numpy, pandas, scipy; print(pandas.__version__, numpy.__version__, scipy.__version__)"
    status, body = env.call_tool("mcp-code-executor_execute_code", {"code": code})
    assert status == 200 and len(body) == 1
    # Its block carries an extra "isError": false; the text is JSON naming the file it wrote.
    assert body[0] | {"text": ""} == text_block("") | {"isError": False}
    result = json.loads(body[0]["text"])
    assert (result["status"], result["output"]) == ("success", "2.3.1 2.3.1 1.16.0\n")
    written = Path(result["file_path"])
    assert written.parent == Path("/data/repos/mcp_code_executor_workspace") and written.name.startswith(
        "code_"
    )
    assert (data / written.relative_to("/data")).read_text() == code  # /data is the caller's data dir


def test_a_tool_error_is_http_500_with_detail(env: AgentEnv) -> None:
    assert env.call_tool("filesystem_read_text_file", {"path": "/data/missing.csv"}) == (
        500,
        {"detail": "Failed to call tool 'filesystem_read_text_file': ENOENT: no such file or directory, "
                   "open '/data/missing.csv'"},
    )  # fmt: skip


def test_cacheable_servers_answer_from_cache(env: AgentEnv) -> None:
    """memory is cached by (tool, arguments) for ~48 h: a repeated search misses what was added in
    between; filesystem is not cached."""
    query = {"query": "Zanzibar"}
    empty = json.dumps({"entities": [], "relations": []}, indent=2)
    assert env.call_tool("memory_search_nodes", query) == (200, [text_block(empty)])
    entity = {"name": "Zanzibar", "entityType": "Place", "observations": ["island"]}
    status, _ = env.call_tool("memory_create_entities", {"entities": [entity]})
    assert status == 200
    assert env.call_tool("memory_search_nodes", query) == (200, [text_block(empty)])
    status, body = env.call_tool("memory_open_nodes", {"names": ["Zanzibar"]})
    assert status == 200 and json.loads(body[0]["text"])["entities"] == [{"type": "entity", **entity}]


def test_stops_every_process_and_frees_its_port(mcp_atlas_home: Path, tmp_path: Path) -> None:
    data_dir = fresh_data(tmp_path)
    started = time.monotonic()
    with running(["calculator", "filesystem"], data_dir) as agent:
        print(f"\nwarm start, 2 servers: {time.monotonic() - started:.1f}s")
        assert agent.call_tool("calculator_calculate", {"expression": "6*7"}) == (200, [text_block("42")])
        inside = agent.sandbox_pids()
        assert len(inside) >= 5  # uvicorn, uvx and the calculator, npm exec and the filesystem server
    assert agent.process.returncode is not None
    assert agent.sandbox_pids() == []
    assert not any(Path(f"/proc/{pid}").exists() for pid in inside)
    port = int(agent.url.rsplit(":", 1)[1])
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_unknown_server_names_are_refused(mcp_atlas_home: Path, tmp_path: Path) -> None:
    with (
        pytest.raises(MCPAtlasEnvError, match=r"unknown \['no-such-server'\]"),
        running(["no-such-server"], tmp_path),
    ):
        pass


def test_a_server_that_cannot_start_fails_with_its_error(mcp_atlas_home: Path, tmp_path: Path) -> None:
    """fetch is not installed here: runs are offline, so uvx fails instead of downloading it; the
    app runs on without it, and running() fails naming it, with uvx's own error."""
    with pytest.raises(MCPAtlasEnvError) as failure, running(["calculator", "fetch"], fresh_data(tmp_path)):
        pass
    message = str(failure.value)
    assert "'fetch': 'ERROR_NOT_ONLINE'" in message and "'calculator': 'OK'" in message
    assert "you require mcp-server-fetch==2025.4.7" in message and "the network was disabled" in message
