"""The README's quickstart with a local OpenAI-compatible endpoint, run exactly as written (in a
scratch directory whose `.venv` and `examples` are this checkout's), against a scripted server
listening where the README says (127.0.0.1:8000)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from atlasrun.testing.scripted_provider import Reply, ScriptedProvider

pytestmark = pytest.mark.servers

REPO = Path(__file__).resolve().parents[1]


def readme_blocks(section: str) -> list[list[str]]:
    """The bash blocks of a README section, one command per (continued) line, comments dropped."""
    text = (REPO / "README.md").read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        blocks.append([re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines() if line.strip()])
    return blocks


def test_readme_local_endpoint_quickstart_runs_as_written(tmp_path: Path) -> None:
    first, local = readme_blocks("Quickstart with a real model")
    init = first[0]
    (run,) = local
    assert init == ".venv/bin/atlas init-workspace runs/ws" and "--api-base http://127.0.0.1:8000/v1" in run
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "examples").symlink_to(REPO / "examples")

    def model(body: dict[str, Any]) -> Reply:  # answers at once, without tools: every task fails
        return Reply(content="I do not know.")

    try:
        provider = ScriptedProvider(model, port=8000)
    except OSError as exc:
        pytest.skip(f"127.0.0.1:8000, the README's endpoint, is taken here: {exc}")
    with provider:
        for command in (init, run):
            done = subprocess.run(
                command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == 0, done.stderr
    assert {r["model"] for r in provider.requests} == {"Qwen2.5-7B-Instruct"}
    assert provider.requests[0].get("max_tokens") == 1  # the pre-flight call came first
    summary = json.loads((tmp_path / "runs" / "qwen" / "summary.json").read_text())
    row = summary["models"]["openai/Qwen2.5-7B-Instruct"]
    assert (row["tasks"], row["scored"], row["passed"], row["errored"]) == (20, 20, 0, 0)
    assert "openai/Qwen2.5-7B-Instruct" in done.stdout and "n/a" in done.stdout  # no known price
