"""`atlas report`: the self-contained HTML report, from results directories built without servers.

Three scripted "models" of different skill (strong, mid, weak) answer 20 tasks over varied
domains, interaction categories and servers, with excluded and errored tasks, a second judge,
tool errors, a malicious tool output, and diagnoses for some failures. The page is checked as
text (numbers match scoring.stats, everything escaped) and rendered in headless Chromium.
"""

from __future__ import annotations

import re
import subprocess
import sys
from html import escape
from pathlib import Path
from typing import Any

import pytest

from atlasrun.agent.transcript import CallRecord, ModelCallRecord, Transcript
from atlasrun.cli import main
from atlasrun.diagnostics.model import Diagnosis, Failure
from atlasrun.diagnostics.store import DiagnosesLog
from atlasrun.judge.base import ClaimVerdict, JudgeInfo
from atlasrun.reports.data import CALL_RESULT_MAX, build_data
from atlasrun.reports.html import write_report
from atlasrun.scoring.claims import Judgement, score_claims
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.scoring.stats import by_model, common_tasks, coverage_ci, pass_rate_ci, repeat_stats
from atlasrun.scoring.store import ResultsDir
from atlasrun.tasks.model import Task

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is not installed (Debian package `chromium`; the Makefile's test setup installs it)",
)


def report_of(out: Path) -> Path:
    """``OUT/report.html`` as ``atlas report OUT`` writes it (commands/report.py)."""
    return write_report(build_data(out), out)


PRIMARY = JudgeInfo(
    name="primary-judge",
    kind="llm",
    model="judge-model-a",
    prompt_sha256="ab12cd34ef56" * 5 + "abcd",
    version="claims/1",
)
SECOND = JudgeInfo(
    name="second-judge", kind="llm", model="judge-model-b", prompt_sha256="99887766" * 8, version="claims/1"
)
MODELS = {"strong-model": 0.9, "mid-model": 0.5, "weak-model": 0.2}
DOMAINS = ["Analytics", "Coding", "Productivity", "R&D <ops>"]
CATEGORIES = [
    "single_server/single_call",
    "single_server/sequential",
    "multi_server/parallel",
    "multi_server/sequential",
]
SERVERS = [["filesystem"], ["calculator"], ["filesystem", "calculator"], ["git", "memory"]]
MALICIOUS = '<script>alert("pwned")</script><img src=x onerror="alert(1)">'
READ = "filesystem_read_text_file"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": READ,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
N_TASKS = 20


def task(j: int) -> Task:
    return Task(
        id=f"task-{j:02d}",
        prompt=f"Question {j}: what does /data/file{j}.txt say? Answer & explain <briefly>.",
        enabled_tools=[READ],
        claims=[f"claim {j}.{k} holds" for k in range(4)],
        domain=DOMAINS[j % 4],
    )


def verdicts(j: int, passed: bool, flip: bool = False) -> list[ClaimVerdict]:
    labels = (
        ["fulfilled", "fulfilled", "fulfilled", "partially_fulfilled"]
        if passed
        else ["fulfilled", "partially_fulfilled", "not_fulfilled", "not_fulfilled"]
    )
    if flip:  # the second judge is stricter on some tasks
        labels = ["fulfilled", "partially_fulfilled", "partially_fulfilled", "not_fulfilled"]
    return [
        ClaimVerdict.labelled(f"claim {j}.{k} holds", label, f"reason for claim {j}.{k}: saw {label}")  # type: ignore[arg-type]
        for k, label in enumerate(labels)
    ]


def transcript(model: str, j: int, passed: bool, answer: str) -> Transcript:
    ok = CallRecord(
        id=f"c{j}a",
        name=READ,
        arguments={"path": f"/data/file{j}.txt"},
        result=f"contents of file {j}",
        elapsed_s=0.05,
    )
    calls = [ok]
    if not passed and j % 3 == 0:
        calls += [
            CallRecord(
                id=f"c{j}{n}",
                name=READ,
                arguments={"path": "/data/missing.txt"},
                result="Error: ENOENT: no such file",
                is_error=True,
                error_kind="tool_error",
            )
            for n in "bc"
        ]
    if not passed and j % 3 == 1:
        calls.append(
            CallRecord(
                id=f"c{j}x",
                name="filesystem_write_file",
                arguments={"path": "/data/x"},
                result="Error: tool filesystem_write_file is not available",
                is_error=True,
                error_kind="not_available",
            )
        )
    if j == 5:
        calls.append(
            CallRecord(id=f"c{j}m", name=READ, arguments={"path": "/data/evil.html"}, result=MALICIOUS)
        )
    if j == 6:
        calls.append(
            CallRecord(id=f"c{j}big", name=READ, arguments={"path": "/data/big.txt"}, result="B" * 50_000)
        )
    if not passed and j % 3 == 2 and model == "weak-model":
        calls = []  # answered without any tool call
    return Transcript(
        agent="scripted",
        model=model,
        calls=calls,
        final_answer=answer,
        turns=len(calls) + 1,
        wall_s=1.0 + j * 0.1,
        tools=TOOLS,
        model_calls=[ModelCallRecord(prompt_tokens=1000, completion_tokens=200, cost_usd=0.01)],
    )


def record(model: str, skill: float, j: int, repeat: int = 0) -> TaskResult:
    t = task(j)
    common: dict[str, Any] = {
        "task_id": t.id,
        "model": model,
        "repeat": repeat,
        "domain": t.domain,
        "category": CATEGORIES[j % 4],
        "servers": SERVERS[j % 4],
        "task": t,
    }
    if j == N_TASKS - 1:
        return TaskResult(
            status="excluded",
            error_kind=ErrorKind.SERVER_NOT_ENABLED,
            reason="needs server(s) not enabled: git",
            **common,
        )
    if j == N_TASKS - 2 and model == "weak-model":
        return TaskResult(
            status="error",
            error_kind=ErrorKind.PROVIDER,
            reason="provider_error: rate limited after 3 retries",
            **common,
        )
    passed = (j + repeat) % 10 < round(10 * skill)
    answer = f"Answer {j}: {'all good' if passed else 'partly wrong'} {MALICIOUS if j == 5 else ''}"
    trace = transcript(model, j, passed, answer)
    claims = verdicts(j, passed)
    score = score_claims(claims)
    second_claims = verdicts(j, passed, flip=j % 4 == 0)
    second = score_claims(second_claims)
    return TaskResult(
        status="scored",
        coverage=score.coverage,
        passed=score.passed,
        passed_at=score.passed_at,
        claims=claims,
        judge=PRIMARY,
        secondary=[
            Judgement(
                judge=SECOND,
                claims=second_claims,
                coverage=second.coverage,
                passed=second.passed,
                passed_at=second.passed_at,
            )
        ],
        tool_calls=len(trace.calls),
        tool_errors=sum(c.is_error for c in trace.calls),
        turns=trace.turns,
        stop_reason=trace.stop_reason,
        wall_s=trace.wall_s,
        prompt_tokens=trace.prompt_tokens,
        completion_tokens=trace.completion_tokens,
        cost_usd=trace.cost_usd,
        transcript=trace,
        **common,
    )


def make_run(root: Path, repeats: int = 1, diagnose: bool = True) -> list[TaskResult]:
    store = ResultsDir(root)
    root.mkdir(parents=True, exist_ok=True)
    results = [
        record(m, skill, j, r) for m, skill in MODELS.items() for j in range(N_TASKS) for r in range(repeats)
    ]
    for result in results:
        store.append(result)
    store.write_json(
        "run.json",
        {
            "started": "2026-01-02T03:04:05+00:00",
            "atlasrun_version": "0.1.0",
            "spec": {"metadata": {"name": "skill-ladder"}, "spec": {"models": [{"name": m} for m in MODELS]}},
        },
    )
    store.write_json("summary.json", {"run": "skill-ladder", "pass_threshold": 0.75})
    if diagnose:
        log = DiagnosesLog(root)
        modes = ["early_termination", "faulty_synthesis", "err_recovery", "wrong_tool", "hallucinated_fact"]
        failing = [r for r in results if r.status == "scored" and not r.passed and r.model != "weak-model"]
        for i, r in enumerate(failing):
            mode = modes[i % len(modes)]
            log.append(
                Diagnosis(
                    model=r.model,
                    task_id=r.task_id,
                    repeat=r.repeat,
                    coverage=r.coverage,
                    status="diagnosed",
                    primary_mode=mode,
                    confidence=0.8,
                    summary=f"diagnosed {mode} on {r.task_id} <b>bold?</b>",
                    failures=[Failure(mode=mode, root_cause=True, evidence="call #2 failed")],
                    judge=JudgeInfo(name="diag-judge", kind="llm", model="diag-model", version="diag/1"),
                )
            )
    return results


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report") / "out"
    make_run(root)
    report_of(root)
    return root


@pytest.fixture(scope="module")
def page(run_dir: Path) -> str:
    return (run_dir / "report.html").read_text(encoding="utf-8")


def _model_row(page: str, model: str) -> str:
    match = re.search(rf'<tr data-model="{model}">(.*?)</tr>', page)
    assert match, f"no table row for {model}"
    return match.group(1)


def test_one_row_per_model_with_the_stats_module_numbers(run_dir: Path, page: str) -> None:
    results = list(ResultsDir(run_dir).load().values())
    grouped = by_model(results)
    assert set(grouped) == set(MODELS)
    # Models are compared on the tasks scored for every model (paired); each model alone on all it
    # scored is the secondary figure.
    common = common_tasks(results)
    assert f"on the {len(common)} task(s) scored for every model (paired)" in page
    for model, rows in grouped.items():
        row = _model_row(page, model)
        assert page.count(f'<tr data-model="{model}">') == 1
        paired = [r for r in rows if r.task_id in common]
        p, c, alone = pass_rate_ci(paired), coverage_ci(paired), pass_rate_ci(rows)
        assert p is not None and c is not None and alone is not None
        assert f"{100 * p.point:.1f}%" in row and f"[{100 * p.low:.1f}, {100 * p.high:.1f}]" in row
        assert f"{c.point:.3f}" in row and f"[{c.low:.3f}, {c.high:.3f}]" in row
        assert f"all {alone.n} scored: {100 * alone.point:.1f}%" in row
    strong = _model_row(page, "strong-model")
    assert ">1<" in strong  # one excluded task
    assert "100.0%" in strong  # valid tool-name rate: the strong model never calls a missing tool
    # Excluded and errored reasons are listed.
    assert "needs server(s) not enabled: git" in page
    assert "provider_error: rate limited after 3 retries" in page
    # The ranking: strong above mid above weak.
    assert (
        page.index('data-model="strong-model"')
        < page.index('data-model="mid-model"')
        < page.index('data-model="weak-model"')
    )


def test_header_names_the_run_judges_and_threshold(page: str) -> None:
    assert "AtlasRun report: skill-ladder" in page
    for judge in (PRIMARY, SECOND):
        assert judge.name in page and str(judge.model) in page and str(judge.prompt_sha256)[:12] in page
    assert "coverage ≥ 0.75" in page and "2026-01-02" in page


def test_every_chart_is_inline_svg_and_nothing_is_fetched(page: str) -> None:
    svgs = re.findall(r"<svg[^>]*aria-label=\"([^\"]+)\"", page)
    assert "Pass rate with its 95% Wilson interval (n = tasks)" in svgs
    assert "Failure modes of diagnosed failures (share of primary mode)" in svgs
    assert "Latency vs pass rate" in svgs
    assert sum(label.startswith("Coverage histogram") for label in svgs) == len(MODELS)
    assert "<polyline" in page  # the Pareto frontier (weak: fastest; strong: best)
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_breakdowns_cross_judge_and_failure_modes(page: str) -> None:
    for domain in DOMAINS:
        assert f"<td>{escape(domain)}</td>" in page
    for category in CATEGORIES:
        assert f"<td>{category}</td>" in page
    for server in ("filesystem", "calculator", "git", "memory"):
        assert f"<td>{server}</td>" in page
    assert "Cross-judge agreement" in page and "Cohen" in page and "range" in page
    assert "Early Term." in page and "Faulty Synth." in page and "diag-judge" in page
    assert "not diagnosed yet" not in page.lower().split('id="tasks"')[0]  # diagnoses exist


def test_drill_down_has_every_result_with_claim_reasons_and_transcripts(run_dir: Path, page: str) -> None:
    results = ResultsDir(run_dir).load()
    drill = page[page.index('id="drill"') :]
    assert drill.count('<tr class="row"') == len(results) == len(MODELS) * N_TASKS
    for model, task_id, _repeat in results:
        assert re.search(rf'data-model="{model}"[^>]*>.*?<td class="task">{task_id}</td>', drill)
    assert "reason for claim 3.2: saw not_fulfilled" in drill
    assert "Error: ENOENT: no such file" in drill and "tool_error" in drill and "not_available" in drill
    assert "diagnosed early_termination" in drill or "diagnosed faulty_synthesis" in drill
    assert "&lt;b&gt;bold?&lt;/b&gt;" in drill
    assert "no tool calls" in drill  # the weak model answered without tools once
    # The 50 KB tool output is cut to about 2 KB.
    assert "B" * CALL_RESULT_MAX in drill and "B" * (CALL_RESULT_MAX + 1) not in drill
    assert "more chars]" in drill


def test_malicious_tool_output_is_escaped_everywhere(page: str) -> None:
    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert escape(MALICIOUS, quote=False) in page
    assert page.count("<script>") == 1  # only the report's own script
    assert "&lt;briefly&gt;" in page and "R&amp;D &lt;ops&gt;" in page


def test_without_diagnoses_failure_modes_fall_back_to_trace_signals(tmp_path: Path) -> None:
    make_run(tmp_path / "out", diagnose=False)
    data = build_data(tmp_path / "out")
    assert data.failures.source == "signals" and data.failures.failing > 0
    weak = next(m for m in data.failures.report.models if m.model == "weak-model")
    assert weak.counts["no_tool_use"] > 0 and weak.counts["err_recovery"] > 0
    text = report_of(tmp_path / "out").read_text(encoding="utf-8")
    assert f"Not diagnosed yet — run <code>atlas diagnose {tmp_path / 'out'}" in text
    assert "trace signals" in text


def test_repeats_get_pass_at_k(tmp_path: Path) -> None:
    results = make_run(tmp_path / "out", repeats=3, diagnose=False)
    text = report_of(tmp_path / "out").read_text(encoding="utf-8")
    assert "pass@3" in text and "pass^3" in text
    stats = repeat_stats([r for r in results if r.model == "mid-model"])
    assert stats is not None
    row = re.search(
        r'<td class="model">mid-model</td><td class="num">(\d+)</td><td class="num">3–3</td>(.*?)</tr>', text
    )
    assert row and row.group(1) == "19"
    assert f"{100 * stats.by_k[2].pass_at_k:.1f}%" in row.group(
        2
    ) and f"{100 * stats.by_k[2].pass_hat_k:.1f}%" in row.group(2)


def test_report_command(tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(run_dir), "--open-path-only"]) == 0
    assert capsys.readouterr().out.strip() == str((run_dir / "report.html").resolve())
    assert main(["report", str(run_dir)]) == 0
    assert "report: " in capsys.readouterr().out
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "results directory not found" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no results" in capsys.readouterr().err
    assert not (tmp_path / "empty" / "report.html").exists()


@pytest.mark.heavy
def test_a_thousand_task_run_stays_small(tmp_path: Path) -> None:
    store = ResultsDir(tmp_path)
    big = "x" * 6_000
    for j in range(1000):
        calls = [
            CallRecord(
                id=f"c{n}",
                name=READ,
                arguments={"path": f"/data/{n}", "pad": "y" * 3000},
                result=big,
                is_error=n % 7 == 0,
                error_kind="tool_error" if n % 7 == 0 else None,
            )
            for n in range(12)
        ]
        trace = Transcript(agent="s", model="m", calls=calls, final_answer="z" * 20_000, tools=TOOLS)
        claims = verdicts(j, j % 2 == 0)
        score = score_claims(claims)
        t = task(j).model_copy(update={"prompt": "p" * 20_000})
        store.append(
            TaskResult(
                task_id=t.id,
                model="m",
                status="scored",
                coverage=score.coverage,
                passed=score.passed,
                claims=claims,
                judge=PRIMARY,
                task=t,
                transcript=trace,
                tool_calls=12,
                wall_s=2.0,
            )
        )
    size = report_of(tmp_path).stat().st_size
    assert 2_000_000 < size < 20_000_000, size


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp / 'profile'}",
            *args,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_chromium
def test_renders_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    url = (run_dir / "report.html").resolve().as_uri()
    shot = tmp_path / "report.png"
    proc = _chromium(f"--screenshot={shot}", "--window-size=1400,2000", url, tmp=tmp_path)
    assert shot.exists(), proc.stderr[-2000:]
    assert shot.stat().st_size > 20_000
    dom = _chromium("--dump-dom", url, tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for model in MODELS:
        assert f'<tr data-model="{model}">' in dom.stdout
    assert 'class="js"' in dom.stdout  # the inline script ran (tabs set up) without throwing first
    assert '<button type="button" class="tab active" data-tab="bd-domain">' in dom.stdout
    assert "<script>alert" not in dom.stdout


PROBE = """<script>
var fm = document.getElementById('f-model'); fm.value = 'weak-model'; fm.dispatchEvent(new Event('change'));
var shown = Array.prototype.filter.call(document.querySelectorAll('#drill tr.row'), function (r) { return !r.hidden; });
shown[0].click();
document.body.setAttribute('data-probe', shown.length + '|' + !shown[0].nextElementSibling.hidden + '|' +
  document.getElementById('f-count').textContent);
</script></body>"""


def _probe_dom(run_dir: Path, tmp_path: Path, script: str) -> str:
    """The report's DOM after ``script`` ran in headless Chromium."""
    probe = tmp_path / "probe.html"
    probe.write_text(
        (run_dir / "report.html").read_text(encoding="utf-8").replace("</body>", script), encoding="utf-8"
    )
    return _chromium("--dump-dom", probe.as_uri(), tmp=tmp_path).stdout


@needs_chromium
def test_filters_and_expanders_work_in_chromium(run_dir: Path, tmp_path: Path) -> None:
    dom = _probe_dom(run_dir, tmp_path, PROBE)
    assert f'data-probe="{N_TASKS}|true|{N_TASKS} of {len(MODELS) * N_TASKS} rows"' in dom, dom[-500:]


# --- picking a model: task matrix, paired comparison, cost n/a, numbers as written ---------------


def test_task_matrix_has_every_task_and_model_cell(run_dir: Path, page: str) -> None:
    section = page.split('<section id="matrix">', 1)[1].split("</section>", 1)[0]
    rows = re.findall(r'<tr><td class="task" data-sort="([^"]+)">.*?</tr>', section)
    assert len(rows) == N_TASKS
    latest = ResultsDir(run_dir).load()
    # each cell: that model's coverage on the task (one repeat), as in results.jsonl; -1 unscored
    first = re.search(r'<tr><td class="task" data-sort="task-00">(.*?)</tr>', section)
    assert first is not None
    cells = re.findall(r'data-sort="([-0-9.]+)"', first.group(1))
    expected = [latest[(m, "task-00", 0)].coverage for m in MODELS]
    assert [float(c) for c in cells] == pytest.approx([c if c is not None else -1 for c in expected])


def test_paired_comparison_of_every_pair_matches_the_stats_module(run_dir: Path, page: str) -> None:
    from atlasrun.scoring.stats import paired_comparison

    section = page.split('<section id="paired">', 1)[1].split("</section>", 1)[0]
    grouped = by_model(ResultsDir(run_dir).load().values())
    names = list(MODELS)
    pairs = re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td><td class=num>(\d+)</td>(.*?)</tr>", section)
    assert [(a, b) for a, b, _, _ in pairs] == [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    for a, b, tasks, rest in pairs:
        cmp = paired_comparison(grouped[a], grouped[b])
        assert cmp is not None and int(tasks) == cmp.tasks
        assert f"{100 * cmp.pass_rate_diff.point:+.1f} pp" in rest
        assert f"<td class=num>{cmp.mcnemar.b}</td><td class=num>{cmp.mcnemar.c}</td>" in rest


def test_cost_is_na_when_the_price_is_unknown(tmp_path: Path) -> None:
    out = tmp_path / "out"
    store = ResultsDir(out)
    out.mkdir()
    for model, known in (("priced", True), ("unpriced", False)):
        store.append(
            TaskResult(
                task_id="t0",
                model=model,
                status="scored",
                coverage=1.0,
                passed=True,
                cost_usd=0.5 if known else 0.0,
                cost_known=known,
                task=task(0),
            )
        )
    page = report_of(out).read_text(encoding="utf-8")
    assert "$0.50" in _model_row(page, "priced")
    assert "n/a" in _model_row(page, "unpriced") and "$0.00" not in _model_row(page, "unpriced")
    assert "cost: n/a" in page


def test_numbers_in_claim_reasons_are_printed_as_written(tmp_path: Path) -> None:
    from atlasrun.judge.deterministic import DeterministicJudge

    judge = DeterministicJudge("deterministic")
    passed = judge.judge_sync("The population is 3,271,575 people", "It has 3,271,575 people.")
    assert passed.label == "fulfilled" and "3,271,575" in passed.reason and "e+06" not in passed.reason
    failed = judge.judge_sync("The population is 3,271,575 people", "It has 3,100,000 people.")
    assert "3,271,575 (answer: 3,100,000)" in failed.reason and "e+06" not in failed.reason


SORT_PROBE = """<script>
var th = document.querySelector('#matrix th[data-col="1"]'); th.click();
var first = document.querySelector('#matrix tbody tr').cells[1].dataset.sort; th.click();
var last = document.querySelector('#matrix tbody tr').cells[1].dataset.sort;
document.body.setAttribute('data-probe', first + '|' + last);
</script></body>"""


@needs_chromium
def test_task_matrix_sorts_by_a_model_column_in_chromium(run_dir: Path, tmp_path: Path) -> None:
    dom = _probe_dom(run_dir, tmp_path, SORT_PROBE)
    found = re.search(r'data-probe="([-0-9.]+)\|([-0-9.]+)"', dom)
    assert found, dom[-500:]
    coverages = [
        r.coverage if r.coverage is not None else -1.0
        for r in ResultsDir(run_dir).load().values()
        if r.model == next(iter(MODELS))
    ]
    assert (float(found.group(1)), float(found.group(2))) == pytest.approx((min(coverages), max(coverages)))


if __name__ == "__main__":  # build a sample report to look at: python tests/test_report.py OUT
    out = Path(sys.argv[1])
    make_run(out)
    print(report_of(out))
