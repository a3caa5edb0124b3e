"""`atlas view`: the real CLI serving a live page while a real `atlas run` (the replay agent on the
starter suite) writes into the directory; one page, opened once in headless Chromium and read over
the DevTools Protocol (tests/cdp.py) as it updates itself; only its own pages served (no path
traversal); hostile task text escaped; Ctrl-C exits 130."""

from __future__ import annotations

import http.client
import json
import math
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from atlasrun.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from atlasrun.reports.view.pages import POLL_MS
from atlasrun.servers.instance import free_port
from cdp import CHROMIUM, Page, open_chromium
from conftest import SUM_TASK, write_run, write_tasks

pytestmark = pytest.mark.servers

REPO = Path(__file__).resolve().parents[1]
POLL_S = POLL_MS / 1000  # how often an open page asks for the numbers
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


# What an open page shows, read in the page itself (its marker and navigation entries prove that it
# was never reloaded: a reload clears the one and makes a new set of the other).
SHOWN_JS = r"""(() => {
  const card = document.querySelector('#runs .card'), live = document.getElementById('live');
  const text = (sel) => { const e = card.querySelector(sel); return e ? e.textContent : null; };
  return {
    marker: window.__atlasOpenedOnce || null,
    navigations: performance.getEntriesByType('navigation').length,
    time_origin: performance.timeOrigin,
    polls: Number(document.body.dataset.polls || 0),
    live: live.textContent, live_off: live.className === 'off',
    card: card && {
      state: card.dataset.state, done: Number(card.dataset.done), planned: Number(card.dataset.planned),
      badge: text('.card-head .badge'), progress: text('.progress-text'),
      bar: card.querySelector('.progress .bar').style.width,
      models: Array.from(card.querySelectorAll('table.models tbody tr'),
        (tr) => Array.from(tr.cells, (td) => td.textContent)),
      kinds: Array.from(card.querySelectorAll('.kinds .badge'), (b) => b.textContent),
    },
  };
})()"""
RATE_TEXT = re.compile(r"(\d+\.\d)%\[(\d+\.\d), (\d+\.\d)\] n=(\d+)")


def shown(page: Page) -> dict[str, Any]:
    value: dict[str, Any] = page.evaluate(SHOWN_JS)
    return value


def watch(page: Page, until: Callable[[dict[str, Any]], bool], within_s: float, what: str) -> dict[str, Any]:
    """The page's figures once ``until`` holds for them, read every 0.1 s for ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        now = shown(page)
        if until(now):
            return now
        assert time.monotonic() < deadline, f"the page did not show {what} in {within_s:.1f}s: {now}"
        time.sleep(0.1)


def assert_shows(now: dict[str, Any], run: dict[str, Any]) -> None:
    """The card drawn in the page has the figures of ``run`` (as /api/runs returns it)."""
    card = now["card"]
    assert (card["state"], card["done"], card["planned"]) == (run["state"], run["done"], run["planned"])
    assert card["badge"].startswith(run["state"]) and not now["live_off"], now
    share = run["done"] / run["planned"]
    assert card["progress"].startswith(
        f"{run['done']} / {run['planned']} items done ({math.floor(100 * share + 0.5)}%)"
    ), card["progress"]
    assert float(card["bar"].removesuffix("%")) == pytest.approx(100 * share, abs=0.051)
    assert len(card["models"]) == len(run["models"])
    for cells, model in zip(card["models"], run["models"], strict=True):
        name, items, scored, passed, rate, coverage, errors, _excluded, tokens, cost = cells
        assert (name, int(items), int(scored), int(passed)) == (
            model["model"],
            model["items"],
            model["scored"],
            model["passed"],
        )
        assert errors == (str(model["errored"]) if model["errored"] else "")
        assert int(tokens.replace(",", "")) == model["tokens"]
        if model["pass_rate"] is None:
            assert rate == "\u2013"
        else:  # the page rounds to 0.1 points
            match = RATE_TEXT.fullmatch(rate)
            assert match, rate
            estimate = model["pass_rate"]
            assert [float(x) for x in match.groups()[:3]] == pytest.approx(
                [100 * estimate["point"], 100 * estimate["low"], 100 * estimate["high"]], abs=0.051
            )
            assert int(match.group(4)) == estimate["n"]
        if model["mean_coverage"] is not None:
            assert float(coverage) == pytest.approx(model["mean_coverage"], abs=0.00051)
        if model["cost_known"]:
            assert float(cost.removeprefix("$")) == pytest.approx(model["cost_usd"], abs=0.0051)
        else:
            assert cost == "n/a"
    kinds = dict(k.rsplit(" \u00d7", 1) for k in card["kinds"])
    assert {k: int(n) for k, n in kinds.items()} == run["errors_by_kind"]


def api_until(
    base: str, until: Callable[[dict[str, Any]], bool], run: subprocess.Popen[str], seen: list[dict[str, Any]]
) -> dict[str, Any]:
    """The run's status (/api/runs) once ``until`` holds, asked every 0.1 s while the run lasts;
    every answer is appended to ``seen``."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = api_runs(base)
        seen.extend(runs[:1])
        if runs and until(runs[0]):
            return runs[0]
        assert run.poll() is None, f"the run ended first: {runs} {run.stderr.read() if run.stderr else ''}"
        time.sleep(0.1)
    raise AssertionError(f"the run never got there: {api_runs(base)}")


def stop_run(run: subprocess.Popen[str]) -> None:
    if run.poll() is None:
        run.send_signal(signal.SIGCONT)  # a stopped process acts on SIGINT only once continued
        run.send_signal(signal.SIGINT)
        run.wait(timeout=120)


def page_html(page: Page, url: str) -> str:
    """``url``'s DOM once its script drew it and one of its polls came back."""
    page.navigate(url)
    watch(page, lambda now: now["polls"] >= 1, 4 * POLL_S, "a poll answered")
    html: str = page.evaluate("document.documentElement.outerHTML")
    return html


@needs_chromium
def test_an_open_page_follows_a_run_as_it_writes(tmp_path: Path) -> None:
    """One page, opened once while `atlas run` writes: it shows k of n (frozen there with SIGSTOP, so
    the count is exact), then the new count within a few polls, then the finished run."""
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
        # the browser starts while the run starts its servers: it is up before the first result
        with open_chromium(tmp_path / "chromium") as page:
            with viewing("runs", cwd=tmp_path) as (view, base):
                samples: list[dict[str, Any]] = []

                def frozen_at(until: Callable[[dict[str, Any]], bool]) -> tuple[dict[str, Any], float]:
                    """Stop the run (SIGSTOP) once ``until`` holds: its status then, and when it held."""
                    api_until(base, until, run, samples)
                    written = time.monotonic()
                    run.send_signal(signal.SIGSTOP)
                    time.sleep(0.3)  # a result being written when it stopped is on disk by now
                    (status,) = api_runs(base)
                    samples.append(status)
                    return status, written

                # 1. the run has written k of n: the page, opened now, shows k/n and its figures
                first, _ = frozen_at(lambda r: r["state"] == "running" and 0 < r["done"] < r["planned"] - 2)
                page.navigate(f"{base}/")
                opened = page.evaluate(
                    "window.__atlasOpenedOnce = 'x' + performance.timeOrigin; window.__atlasOpenedOnce"
                )
                once = {"marker": opened, "navigations": 1}
                at_k = watch(page, lambda now: now["polls"] >= 1, 3 * POLL_S, "a poll answered")
                assert first["planned"] == 20 and first["pid"] == run.pid
                assert_shows(at_k, first)
                assert at_k["live"] == "\u25cf live"

                # 2. the run writes more: the same page shows the new count within a few polls
                run.send_signal(signal.SIGCONT)
                second, written = frozen_at(lambda r: first["done"] < r["done"] < r["planned"])
                at_more = watch(
                    page, lambda now: now["card"]["done"] == second["done"], 3 * POLL_S, "the new count"
                )
                caught_up_s = time.monotonic() - written
                assert_shows(at_more, second)
                assert at_more["polls"] > at_k["polls"]
                assert api_runs(base)[0]["done"] == second["done"]  # it was frozen there all along
                run.send_signal(signal.SIGCONT)

                # 3. the run finishes: the same page says so, with the run's final figures
                _, run_err = run.communicate(timeout=120)
                assert run.returncode in (0, 3), run_err  # 3: some items errored (counted by kind)
                final = api_until(base, lambda r: r["state"] != "running", run, samples)
                at_end = watch(page, lambda now: now["card"]["state"] == "finished", 3 * POLL_S, "finished")
                assert_shows(at_end, final)
                for now in (at_k, at_more, at_end):  # never reloaded
                    assert {k: now[k] for k in once} == once and now["time_origin"] == at_k["time_origin"]
                print(
                    f"the open page showed {second['done']} results {caught_up_s:.2f}s after they were written"
                )

                dones = [s["done"] for s in samples]
                assert dones == sorted(dones) and dones[-1] == 20, dones  # progress only grows
                assert all(s["planned"] == 20 for s in samples if s["state"] == "running"), samples
                assert final["state"] == "finished" and final["name"] == "demo" and final["pid"] is None
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
                assert "pass rate (95% CI)" in page.evaluate("document.body.innerText")

                # the run's page: its card and each task's detail
                run_page = page_html(page, f"{base}/run/{final['id']}")
                assert run_page.count('<tr class="row"') == 20 and "q3-revenue-leader" in run_page
                assert "Transcript (" in run_page and "<h4>Claims</h4>" in run_page
                assert_shows(shown(page), final)
                code, report = get(base, f"/run/{final['id']}/report")
                assert code == 200 and '<section id="tasks">' in report
            # `atlas view` stopped: the open page says it lost the server
            gone = watch(page, lambda now: now["live_off"], 3 * POLL_S, "not connected")
            assert "not connected" in gone["live"] and gone["card"]["state"] == "finished"
    finally:
        stop_run(run)
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

        with open_chromium(tmp_path / "chromium") as page:
            dom = page_html(page, f"{base}/run/{run['id']}")
            assert page.evaluate("document.title") == "AtlasRun live: hostile"
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
