"""Two report sections for picking a model: the side-by-side task matrix (rows tasks, columns
models, cells mean coverage; sortable by any column) and, with two or more models, the paired
comparison of each pair (A - B deltas with paired-bootstrap CIs, McNemar on tasks)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.stats import PairedComparison, paired_comparison


def esc(value: object) -> str:
    return escape(str(value), quote=True)


attr = esc
MAX_PAIRS = 10  # pairs of models compared in the report (the first models in report order)


@dataclass
class MatrixRow:
    task: str
    cells: dict[str, float | None]  # model -> mean coverage over repeats; None: not scored
    status: dict[str, str]  # model -> "pass", "fail", "error", "excluded"


@dataclass
class Comparison:
    a: str
    b: str
    result: PairedComparison


def task_matrix(results: Sequence[TaskResult], order: Sequence[str], threshold: float) -> list[MatrixRow]:
    by_task: dict[str, dict[str, list[TaskResult]]] = {}
    for r in results:
        by_task.setdefault(r.task_id, {}).setdefault(r.model, []).append(r)
    rows = []
    for task in sorted(by_task):
        cells: dict[str, float | None] = {}
        status: dict[str, str] = {}
        for model in order:
            mine = by_task[task].get(model, [])
            scored = [r.coverage for r in mine if r.status == "scored" and r.coverage is not None]
            mean = sum(scored) / len(scored) if scored else None
            cells[model] = mean
            if mean is not None:
                status[model] = "pass" if mean >= threshold - 1e-9 else "fail"
            elif any(r.status == "error" for r in mine):
                status[model] = "error"
            else:
                status[model] = "excluded" if mine else "missing"
        rows.append(MatrixRow(task, cells, status))
    return rows


def comparisons(grouped: dict[str, list[TaskResult]], order: Sequence[str]) -> list[Comparison]:
    found = []
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            cmp = paired_comparison(grouped.get(a, []), grouped.get(b, []))
            if cmp is not None:
                found.append(Comparison(a, b, cmp))
            if len(found) >= MAX_PAIRS:
                return found
    return found


def _cell(value: float | None, status: str) -> str:
    sort = "-1" if value is None else f"{value:.4f}"
    text = f"{value:.2f}" if value is not None else {"error": "error", "excluded": "excl."}.get(status, "-")
    return f'<td class="num cell-{status}" data-sort="{sort}">{text}</td>'


def render_matrix(rows: Sequence[MatrixRow], order: Sequence[str]) -> str:
    if not rows:
        return '<p class="muted">no tasks</p>'
    head = "".join(f'<th class="num sortable" data-col="{i + 1}">{esc(m)}</th>' for i, m in enumerate(order))
    body = "".join(
        f'<tr><td class="task" data-sort="{attr(r.task)}">{esc(r.task)}</td>'
        + "".join(_cell(r.cells[m], r.status[m]) for m in order)
        + "</tr>"
        for r in rows
    )
    return (
        '<p class="muted">Mean coverage per task and model (over repeats); green passes, red fails. '
        "Click a column heading to sort by it (again to reverse).</p>"
        f'<table class="data matrix sortable-table"><thead><tr><th class="sortable" data-col="0">task</th>{head}'
        f"</tr></thead><tbody>{body}</tbody></table>"
    )


def _pp(x: float) -> str:
    return f"{100 * x:+.1f}"


def render_comparisons(found: Sequence[Comparison]) -> str:
    if not found:
        return '<p class="muted">no task was scored by two models</p>'
    rows = []
    for c in found:
        p, v, m = c.result.pass_rate_diff, c.result.coverage_diff, c.result.mcnemar
        significant = m.p_value < 0.05 or p.low > 0 or p.high < 0
        rows.append(
            f"<tr><td>{esc(c.a)}</td><td>{esc(c.b)}</td><td class=num>{c.result.tasks}</td>"
            f'<td class="num{" strong" if significant else ""}">{_pp(p.point)} pp '
            f'<span class="ci">[{_pp(p.low)}, {_pp(p.high)}]</span></td>'
            f'<td class="num">{v.point:+.3f} <span class="ci">[{v.low:+.3f}, {v.high:+.3f}]</span></td>'
            f"<td class=num>{m.b}</td><td class=num>{m.c}</td><td class=num>{m.p_value:.3g}</td></tr>"
        )
    return (
        '<p class="muted">Each pair on the tasks both models scored: A - B with paired-bootstrap 95% CIs '
        "(tasks resampled), McNemar's test on tasks, exact binomial (repeats aggregated per task; b: A "
        "passed and B not, c: the reverse). Bold: significant at 5%.</p>"
        '<table class="data paired"><thead><tr><th>A</th><th>B</th><th class="num">tasks</th>'
        '<th class="num">pass rate A - B</th><th class="num">coverage A - B</th><th class="num">b</th>'
        f'<th class="num">c</th><th class="num">McNemar p</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


# Sorts any table.sortable-table by the clicked heading's column (numbers by data-sort).
SORT_SCRIPT = r"""
document.querySelectorAll('table.sortable-table').forEach(function(t){
  t.querySelectorAll('th.sortable').forEach(function(th){th.style.cursor='pointer';
    th.addEventListener('click',function(){
      var col=+th.dataset.col,body=t.tBodies[0],rows=[].slice.call(body.rows),dir=th.dataset.dir==='asc'?-1:1;
      th.dataset.dir=dir===1?'asc':'desc';
      rows.sort(function(a,b){var x=a.cells[col].dataset.sort,y=b.cells[col].dataset.sort;
        var nx=parseFloat(x),ny=parseFloat(y);
        return (isNaN(nx)||isNaN(ny)?x.localeCompare(y):nx-ny)*dir;});
      rows.forEach(function(r){body.appendChild(r);});});});});
"""

CSS = """
table.matrix td.cell-pass{background:#e3f4e5}table.matrix td.cell-fail{background:#fbe3e1}
table.matrix td.cell-error{color:#a15c00}table.matrix th.sortable:hover{text-decoration:underline}
"""
