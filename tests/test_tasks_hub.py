"""Tasks by Hugging Face dataset id (``hf://OWNER/NAME[@REVISION]``), against a local hub.

The hub is a real HTTP server on 127.0.0.1 that answers the way huggingface.co does: dataset
metadata (``/api/datasets/{id}`` and ``.../revision/{rev}`` with ``sha`` and ``siblings``, LFS
``sha256``/``size`` with ``?blobs=true``, ``X-Error-Code`` on errors, 401 for an unknown or
private repository without a token) and file downloads (``/datasets/{id}/resolve/{sha}/{path}``).
The parquet it serves is built here from MCP-Atlas's own public sample rows.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atlasrun.errors import InputError
from atlasrun.runner.plan import plan_run
from atlasrun.runspec.run import RunSpec
from atlasrun.tasks.loader import load_tasks

SAMPLE_CSV = Path("/work/shared/vendor/mcp-atlas-619939a-sample_tasks.csv")
DATASET = "ScaleAI/MCP-Atlas"
TOKEN = "hf_secretTokenValue1234567890"


def sample_rows() -> list[dict[str, str]]:
    with SAMPLE_CSV.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def parquet_bytes(rows: list[dict[str, str]]) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data, usedforsecurity=False).hexdigest()


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> {path: bytes}
    refs: dict[str, str] = field(default_factory=dict)  # branch/tag -> sha
    private: bool = False
    corrupt: set[str] = field(default_factory=set)  # paths served with other bytes than listed

    def commit(self, files: dict[str, bytes], branch: str = "main") -> str:
        sha = hashlib.sha1(repr(sorted(files.items())).encode(), usedforsecurity=False).hexdigest()
        self.commits[sha] = files
        self.refs[branch] = sha
        return sha


class FakeHub:
    """A loopback hub: repositories by id, a request log, and scripted transient failures."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.log: list[tuple[str, dict[str, str]]] = []  # (path with query, headers)
        self.fail_next: list[int] = []  # statuses to answer before serving normally
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hub.log.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                if hub.fail_next:
                    self.reply(hub.fail_next.pop(0), b"busy", {"Retry-After": "0"})
                    return
                hub.answer(self)

            def reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=lambda: self.server.serve_forever(poll_interval=0.05), daemon=True
        )

    def answer(self, handler: Any) -> None:
        parts = urllib.parse.urlsplit(handler.path)
        authorized = handler.headers.get("Authorization") == f"Bearer {TOKEN}"
        meta = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)(?:/revision/([^/]+))?", parts.path)
        resolve = re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([0-9a-f]{40})/(.+)", parts.path)
        repo_id = (meta or resolve).group(1) if (meta or resolve) else ""
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and not authorized):
            handler.reply(401, b'{"error":"Repository not found"}', {"X-Error-Code": "RepoNotFound"})
            return
        if meta:
            revision = urllib.parse.unquote(meta.group(2) or "main")
            sha = repo.refs.get(revision, revision if revision in repo.commits else None)
            if sha is None:
                handler.reply(404, b'{"error":"Invalid rev id"}', {"X-Error-Code": "RevisionNotFound"})
                return
            blobs = "blobs=true" in parts.query
            siblings = [self.sibling(path, data, blobs) for path, data in sorted(repo.commits[sha].items())]
            body = json.dumps({"id": repo_id, "sha": sha, "private": repo.private, "siblings": siblings})
            handler.reply(200, body.encode(), {"Content-Type": "application/json"})
            return
        assert resolve is not None
        data = repo.commits.get(resolve.group(2), {}).get(urllib.parse.unquote(resolve.group(3)))
        if data is None:
            handler.reply(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})
            return
        if urllib.parse.unquote(resolve.group(3)) in repo.corrupt:
            data = bytes(reversed(data))
        handler.reply(200, data, {"Content-Type": "application/octet-stream"})

    @staticmethod
    def sibling(path: str, data: bytes, blobs: bool) -> dict[str, Any]:
        if not blobs:
            return {"rfilename": path}
        entry: dict[str, Any] = {"rfilename": path, "size": len(data), "blobId": git_blob_id(data)}
        if path.endswith(".parquet"):  # stored in LFS on the hub
            entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entry["size"] = len(data)
        return entry

    def downloads(self) -> list[str]:
        return [path for path, _ in self.log if "/resolve/" in path]


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    server = FakeHub()
    server.thread.start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("ATLAS_HUB_CACHE", str(tmp_path / "hub-cache"))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(timeout=5)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def atlas_repo(hub: FakeHub, rows: list[dict[str, str]], repo_id: str = DATASET) -> str:
    repo = hub.repos.setdefault(repo_id, Repo())
    return repo.commit(
        {"README.md": b"# MCP-Atlas\n", "data/train-00000-of-00001.parquet": parquet_bytes(rows)}
    )


def test_load_by_id_unpinned_pinned_by_sha_and_by_branch(hub: FakeHub) -> None:
    rows = sample_rows()[:5]
    sha = atlas_repo(hub, rows)
    hub.repos[DATASET].refs["v1"] = sha
    unpinned = load_tasks(f"hf://{DATASET}")
    assert [t.id for t in unpinned.tasks] == [r["TASK"] for r in rows]
    assert unpinned.rejected == []
    assert unpinned.tasks[0].source == f"hf://{DATASET}@{sha[:12]} data/train-00000-of-00001.parquet row 1"
    assert [t.prompt for t in unpinned.tasks] == [r["PROMPT"].strip() for r in rows]
    for source in (f"hf://{DATASET}@{sha}", f"hf://datasets/{DATASET}@v1"):
        pinned = load_tasks(source)
        assert [t.model_dump() for t in pinned.tasks] == [t.model_dump() for t in unpinned.tasks]
    assert f"/api/datasets/{DATASET}?blobs=true" in [p for p, _ in hub.log]
    assert f"/api/datasets/{DATASET}/revision/v1?blobs=true" in [p for p, _ in hub.log]


def test_default_split_shards_concatenate_in_path_order_and_bad_rows_name_row_and_field(hub: FakeHub) -> None:
    rows = sample_rows()
    broken = dict(rows[3], GTFA_CLAIMS="['unclosed")
    repo = hub.repos.setdefault("me/atlas-shards", Repo())
    sha = repo.commit(
        {
            "data/train-00001-of-00002.parquet": parquet_bytes([broken, rows[4]]),
            "data/train-00000-of-00002.parquet": parquet_bytes(rows[:3]),
            "data/test-00000-of-00001.parquet": parquet_bytes(rows[5:7]),
            "tasks.csv": b"TASK,PROMPT\nx,y\n",  # parquet is preferred: never read
        }
    )
    loaded = load_tasks("hf://me/atlas-shards")
    assert [t.id for t in loaded.tasks] == [r["TASK"] for r in (*rows[:3], rows[4])]
    assert [str(r) for r in loaded.rejected] == [
        f"hf://me/atlas-shards@{sha[:12]} data/train-00001-of-00002.parquet row 1, task {rows[3]['TASK']}, "
        "field GTFA_CLAIMS: " + loaded.rejected[0].message
    ]
    assert "test-00000" not in " ".join(hub.downloads()) and "tasks.csv" not in " ".join(hub.downloads())


def test_second_load_reuses_the_cache_and_a_new_commit_downloads_again(hub: FakeHub, tmp_path: Path) -> None:
    rows = sample_rows()
    sha = atlas_repo(hub, rows[:2])
    load_tasks(f"hf://{DATASET}")
    assert len(hub.downloads()) == 1
    log_size = len(hub.log)
    again = load_tasks(f"hf://{DATASET}")  # asks the hub for the current sha, downloads nothing
    assert [t.id for t in again.tasks] == [r["TASK"] for r in rows[:2]]
    assert len(hub.downloads()) == 1 and len(hub.log) == log_size + 1
    load_tasks(f"hf://{DATASET}@{sha}")  # a cached commit sha: not even a metadata request
    assert len(hub.log) == log_size + 1
    new_sha = atlas_repo(hub, rows[:3])  # main moves on
    assert [t.id for t in load_tasks(f"hf://{DATASET}").tasks] == [r["TASK"] for r in rows[:3]]
    assert len(hub.downloads()) == 2 and new_sha in hub.downloads()[-1]
    cache = tmp_path / "hub-cache" / "datasets--ScaleAI--MCP-Atlas"
    assert (cache / "refs" / "HEAD").read_text().strip() == new_sha
    assert sorted(p.name for p in (cache / "snapshots").iterdir()) == sorted([sha, new_sha])
    assert not list(cache.rglob(".part-*"))


def test_offline_with_a_cached_copy_uses_it_and_says_so(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sha = atlas_repo(hub, sample_rows()[:2])
    load_tasks(f"hf://{DATASET}")
    capsys.readouterr()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    offline = load_tasks(f"hf://{DATASET}")
    assert len(offline.tasks) == 2
    note = capsys.readouterr().err.strip().splitlines()
    assert (
        len(note) == 1
        and "hub unreachable" in note[0]
        and f"using the cached copy of {sha[:12]} (fetched 20" in note[0]
    )
    with pytest.raises(InputError, match="cannot reach the hub"):  # a branch never loaded while online
        load_tasks(f"hf://{DATASET}@dev")


def test_the_token_is_sent_as_a_bearer_header_and_never_shown_or_stored(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.repos["corp/private-atlas"] = Repo(private=True)
    atlas_repo(hub, sample_rows()[:2], "corp/private-atlas")
    with pytest.raises(InputError) as no_token:
        load_tasks("hf://corp/private-atlas")
    assert "set HF_TOKEN" in str(no_token.value)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", TOKEN)  # the legacy name works too
    assert len(load_tasks("hf://corp/private-atlas").tasks) == 2
    assert hub.log[-1][1]["authorization"] == f"Bearer {TOKEN}"
    assert all(headers.get("authorization") == f"Bearer {TOKEN}" for _, headers in hub.log[1:])
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    errors = []
    for source in ("hf://corp/missing", "hf://corp/private-atlas@nope"):
        with pytest.raises(InputError) as exc:
            load_tasks(source)
        errors.append(str(exc.value))
    assert "was refused or has no access" in errors[0]
    assert (
        errors[1]
        == "hf://corp/private-atlas@nope: revision 'nope' not found (use a branch, tag or full commit sha of the dataset)"
    )
    hub.repos["corp/private-atlas"].corrupt.add("data/train-00000-of-00001.parquet")
    atlas_repo(hub, sample_rows()[:3], "corp/private-atlas")
    with pytest.raises(InputError) as corrupt:
        load_tasks("hf://corp/private-atlas")
    errors.append(str(corrupt.value))
    assert "arrived corrupted" in errors[-1]
    printed = capsys.readouterr()
    assert all(TOKEN not in text for text in [*errors, printed.out, printed.err])
    cached = [p for p in (tmp_path / "hub-cache").rglob("*") if p.is_file()]
    assert cached and all(TOKEN.encode() not in p.read_bytes() for p in cached)


def test_missing_dataset_wrong_revision_and_no_data_files_are_one_line_errors(hub: FakeHub) -> None:
    atlas_repo(hub, sample_rows()[:1])
    hub.repos.setdefault("me/docs-only", Repo()).commit({"README.md": b"# nothing", "notes.txt": b"x"})
    cases = {
        "hf://nobody/nothing": "hf://nobody/nothing: dataset not found on " + hub.endpoint,
        f"hf://{DATASET}@no-such-branch": f"hf://{DATASET}@no-such-branch: revision 'no-such-branch' not found",
        "hf://me/docs-only": "hf://me/docs-only: no task data files (.parquet, .jsonl, .csv) in this revision; "
        "it has: README.md, notes.txt",
        "hf://not a/dataset": "hf://not a/dataset: expected hf://OWNER/NAME",
    }
    for source, start in cases.items():
        with pytest.raises(InputError) as exc:
            load_tasks(source)
        assert str(exc.value).startswith(start), str(exc.value)
        assert "\n" not in str(exc.value)
    with pytest.raises(InputError, match="set HF_TOKEN to a token with access"):
        load_tasks("hf://nobody/nothing")


def test_an_unwritable_cache_is_a_clear_error(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    atlas_repo(hub, sample_rows()[:1])
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("ATLAS_HUB_CACHE", str(blocker))
    with pytest.raises(InputError, match=rf"^hf://{DATASET}: cannot write the dataset cache {blocker}/"):
        load_tasks(f"hf://{DATASET}")


def test_transient_5xx_is_retried_and_an_unreachable_hub_fails_fast(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    atlas_repo(hub, sample_rows()[:1])
    hub.fail_next = [503, 429]
    assert len(load_tasks(f"hf://{DATASET}").tasks) == 1
    assert [p for p, _ in hub.log].count(f"/api/datasets/{DATASET}?blobs=true") == 3
    hub.fail_next = [500, 502, 503]
    with pytest.raises(InputError, match=r"HTTP 503 after 3 attempt\(s\)"):
        load_tasks(f"hf://{DATASET}@{'0' * 40}")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    started = time.monotonic()
    with pytest.raises(InputError) as exc:
        load_tasks("hf://someone/never-cached")
    assert time.monotonic() - started < 5
    message = str(exc.value)
    assert message.startswith("hf://someone/never-cached: cannot reach the hub at http://127.0.0.1:")
    assert "HF_ENDPOINT" in message and "cached under" in message


def test_run_file_dataset_and_hf_uri_reach_the_loader(hub: FakeHub) -> None:
    rows = sample_rows()
    atlas_repo(hub, rows)
    calculator_only = [r["TASK"] for r in rows if r["TASK"] == "4b5c6d7e8f"]
    for tasks in ({"dataset": DATASET}, {"dataset": f"hf://{DATASET}@main"}, {"uri": f"hf://{DATASET}"}):
        spec = RunSpec.model_validate(
            {
                "metadata": {"name": "hub"},
                "spec": {
                    "tasks": tasks,
                    "models": [{"name": "replay"}],
                    "servers": {"enabled": ["calculator"]},
                },
            }
        )
        plan = plan_run(spec)
        assert [t.id for t in plan.tasks] == calculator_only
        assert len(plan.excluded) == len(rows) - 1 and plan.rejected == []
    assert len(hub.downloads()) == 1


def atlas_cli(*args: str, hub: FakeHub, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    environment |= {"HF_ENDPOINT": hub.endpoint, "ATLAS_HUB_CACHE": str(cache), **env}
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )


def test_cli_validate_and_audit_take_a_dataset_id(hub: FakeHub, tmp_path: Path) -> None:
    rows = sample_rows()
    broken = dict(rows[1], PROMPT="  ")
    sha = atlas_repo(hub, [rows[0], broken, *rows[2:]])
    cache = tmp_path / "cli-cache"
    proc = atlas_cli("validate", f"hf://{DATASET}", hub=hub, cache=cache, HF_TOKEN=TOKEN)
    assert proc.returncode == 1, proc.stderr
    assert (
        f"error: hf://{DATASET}@{sha[:12]} data/train-00000-of-00001.parquet row 2, task {rows[1]['TASK']}, "
        "field PROMPT: empty" in proc.stdout
    )
    assert f"hf://{DATASET}: dataset: {len(rows) - 1} task(s) loadable, 1 rejected" in proc.stdout
    assert "downloading 1 file(s)" in proc.stderr and TOKEN not in proc.stdout + proc.stderr
    assert hub.log[0][1]["authorization"] == f"Bearer {TOKEN}"
    # audit: no task runs on 'memory' alone, so every task is skipped and no server starts
    audit = atlas_cli(
        "audit", f"hf://{DATASET}@{sha}", "--servers-enabled", "memory", "--json", hub=hub, cache=cache
    )
    report = json.loads(audit.stdout)
    assert {r["status"] for r in report["tasks"]} == {"skipped"} and len(report["tasks"]) == len(rows) - 1
    assert report["rejected_rows"][0].endswith("field PROMPT: empty")
    assert len(hub.downloads()) == 1  # the audit used the cached commit
    missing = atlas_cli("validate", "hf://nobody/nothing", hub=hub, cache=cache)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        f"error: hf://nobody/nothing: dataset not found on {hub.endpoint} "
        "(or private/gated: set HF_TOKEN to a token with access)"
    )
