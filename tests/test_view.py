"""`atlas view`: the real CLI serving a live page while a real `atlas run` (the replay agent on the
starter suite) writes into the directory; the page in headless Chromium; only its own pages
served (no path traversal); hostile task text escaped; Ctrl-C exits 130."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from atlasrun.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from atlasrun.servers.instance import free_port
from conftest import SUM_TASK, write_run, write_tasks

pytestmark = pytest.mark.servers

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is not installed (Debian package `chromium`; the Makefile's test setup installs it)",
)
HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"


def atlas(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlasrun.cli", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


@contextmanager
def viewing(*dirs: str, cwd: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`atlas view DIR... --port P --no-open` running; stopped (SIGINT, then waited on) at exit."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "atlasrun.cli", "view", *dirs, "--port", str(port), "--no-open"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == f"atlas view: http://127.0.0.1:{port}/\n", line + (
            proc.stderr.read() if proc.stderr else ""
        )
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def get(base: str, path: str, host: str | None = None) -> tuple[int, str]:
    """GET ``path`` sent as written (no normalisation of ``..`` or percent-escapes)."""
    port = int(base.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host or f"127.0.0.1:{port}")
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8")
    finally:
        conn.close()


def api_runs(base: str) -> list[dict[str, Any]]:
    code, body = get(base, "/api/runs")
    assert code == 200, body
    runs: list[dict[str, Any]] = json.loads(body)["runs"]
    return runs


def chromium_dom(url: str, tmp: Path, budget_ms: int = 4000) -> str:
    """The DOM after the page's scripts ran for ``budget_ms`` of virtual time (its polls included)."""
    proc = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp / 'profile'}",
            f"--virtual-time-budget={budget_ms}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def card_of(dom: str) -> dict[str, str]:
    match = re.search(
        r'<div class="card" data-run="[^"]+" data-state="(\w+)" data-done="(\d+)" data-planned="(\d+)"', dom
    )
    assert match, dom[:3000]
    return {"state": match.group(1), "done": match.group(2), "planned": match.group(3)}


@needs_chromium
def test_the_page_follows_a_run_in_progress(tmp_path: Path) -> None:
    assert atlas("init-workspace", "ws", cwd=tmp_path).returncode == 0
    (tmp_path / "runs").mkdir()
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "atlasrun.cli",
            "run",
            str(REPO / "examples" / "demo.yaml"),
            "--model",
            "replay",
            "--data-dir",
            "ws",
            "--out",
            "runs/demo",
            "--parallelism",
            "1",
            "--quiet",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with viewing("runs", cwd=tmp_path) as (view, base):
            seen: list[dict[str, Any]] = []
            mid_dom = ""
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                runs = api_runs(base)
                if runs:
                    seen.append(runs[0])
                    if (
                        not mid_dom
                        and runs[0]["state"] == "running"
                        and 0 < runs[0]["done"] < runs[0]["planned"]
                    ):
                        mid_dom = chromium_dom(f"{base}/", tmp_path)  # the browser while the run writes
                if run.poll() is not None and seen and seen[-1]["state"] != "running":
                    break
                time.sleep(0.25)
            _, run_err = run.communicate(timeout=60)
            assert run.returncode in (0, 3), run_err  # 3: some items errored (counted by kind below)

            dones = [s["done"] for s in seen]
            assert dones == sorted(dones), dones  # progress only grows
            assert any(0 < d < 20 for d in dones) and dones[-1] == 20, dones
            assert all(s["planned"] == 20 for s in seen if s["state"] == "running"), seen
            final = seen[-1]
            assert final["state"] == "finished" and final["name"] == "demo"
            summary = json.loads((tmp_path / "runs" / "demo" / "summary.json").read_text())["models"][
                "replay"
            ]
            (model,) = final["models"]
            # the interval is scoring.stats's, as in summary.json (docs/statistics.md)
            assert model["pass_rate"]["low"] == pytest.approx(summary["pass_rate_ci"]["low"])
            assert model["pass_rate"]["high"] == pytest.approx(summary["pass_rate_ci"]["high"])
            assert (model["scored"], model["passed"], model["errored"]) == (
                summary["scored"],
                summary["passed"],
                summary["errored"],
            )
            assert model["errors_by_kind"] == final["errors_by_kind"] == summary["errors_by_kind"]

            # in Chromium mid-run: the card was drawn by the page's script, and its polls came back
            assert mid_dom, "never saw the run in progress"
            mid = card_of(mid_dom)
            assert mid["state"] == "running" and 0 < int(mid["done"]) < 20 and mid["planned"] == "20", mid
            assert int(re.search(r'data-polls="(\d+)"', mid_dom).group(1)) >= 1  # type: ignore[union-attr]
            # after the run: the index and the run page show it finished, with its tasks
            end = chromium_dom(f"{base}/", tmp_path)
            assert card_of(end) == {"state": "finished", "done": "20", "planned": "20"}
            assert "pass rate (95% CI)" in end and "[" in end and "n=" in end
            page = chromium_dom(f"{base}/run/{final['id']}", tmp_path)
            assert page.count('<tr class="row"') == 20 and "q3-revenue-leader" in page
            assert "Transcript (" in page and "<h4>Claims</h4>" in page  # each task's detail is in the page
            code, report = get(base, f"/run/{final['id']}/report")
            assert code == 200 and '<section id="tasks">' in report
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.wait(timeout=120)
    assert view.returncode == EXIT_INTERRUPTED and "atlas view: stopped" in (
        view.stderr.read() if view.stderr else ""
    )


@needs_chromium
def test_only_its_own_pages_are_served_and_task_text_is_escaped(tmp_path: Path, data_dir: Path) -> None:
    hostile = {**SUM_TASK, "prompt": f"{SUM_TASK['prompt']} {HOSTILE}", "reference_answer": f"42 {HOSTILE}"}
    run_file = write_run(
        tmp_path / "hostile.yaml", write_tasks(tmp_path / "tasks.yaml", [hostile]), [{"name": "replay"}]
    )
    done = atlas("run", str(run_file), "--data-dir", str(data_dir), "--out", "out", "--quiet", cwd=tmp_path)
    assert done.returncode in (0, 3), done.stderr
    with viewing("out", cwd=tmp_path) as (view, base):  # a results directory itself
        (run,) = api_runs(base)
        assert run["done"] == 1 and run["state"] == "finished"
        for path in (
            "/../../etc/passwd",
            "/%2e%2e/%2e%2e/etc/passwd",
            "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
            "/..%2f..%2fetc%2fpasswd",
            "/run/..%2f..%2f..%2fetc%2fpasswd",
            "/run/../../etc/passwd",
            f"/run/{run['id']}/../../../etc/passwd",
            "//etc/passwd",
            "/etc/passwd",
            "/run/..",
            "/results.jsonl",
            "/out/results.jsonl",
            f"/run/{run['id']}/results.jsonl",
            "http://127.0.0.1/../etc/passwd",
        ):
            code, body = get(base, path)
            assert code == 404 and "root:" not in body and "sum-numbers" not in body, (path, code, body[:200])
        code, body = get(base, "/", host="attacker.example:80")  # a rebound name: refused
        assert code == 403 and "sum-numbers" not in body

        for path in ("/", f"/run/{run['id']}", f"/run/{run['id']}/tasks", f"/run/{run['id']}/report"):
            code, body = get(base, path)
            assert code == 200 and "<script>document.title" not in body and "<img src=x" not in body, path
        code, tasks = get(base, f"/run/{run['id']}/tasks")
        assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;&lt;img src=x" in tasks

        dom = chromium_dom(f"{base}/run/{run['id']}", tmp_path, budget_ms=2500)
        assert "<title>AtlasRun live: hostile</title>" in dom and "pwned</title>" not in dom
        assert "&lt;script&gt;document.title" in dom  # shown as text, in the task's detail
    assert view.returncode == EXIT_INTERRUPTED


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    missing = atlas("view", "nowhere", "--no-open", cwd=tmp_path)
    assert (
        missing.returncode == EXIT_BAD_INPUT
        and missing.stderr.strip() == "error: nowhere: directory not found"
    )
    (tmp_path / "file").write_text("x")
    assert "not a directory" in atlas("view", "file", "--no-open", cwd=tmp_path).stderr
    no_default = atlas("view", "--no-open", cwd=tmp_path)
    assert no_default.returncode == EXIT_BAD_INPUT and "./runs" in no_default.stderr
    port = atlas("view", ".", "--port", "70000", "--no-open", cwd=tmp_path)
    assert port.returncode == EXIT_BAD_INPUT and "--port" in port.stderr and "Traceback" not in port.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = atlas("view", ".", "--port", str(taken.getsockname()[1]), "--no-open", cwd=tmp_path)
    assert busy.returncode == EXIT_BAD_INPUT and "cannot listen on 127.0.0.1" in busy.stderr, busy.stderr
