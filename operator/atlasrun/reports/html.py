"""``OUT/report.html``: one self-contained page (inline CSS, inline SVG, a little vanilla JS, no network).

Sections: run header, per-model table, charts (pass rate with CI, failure modes, latency vs
pass rate frontier, coverage histograms), breakdowns by domain / category / server, cross-judge
rates and kappa, pass@k, and the per-task drill-down. Numbers come from :mod:`reports.data`.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from atlasrun.diagnostics.aggregate import ModelModes
from atlasrun.diagnostics.taxonomy import FAMILIES, UNCLASSIFIED, modes_of
from atlasrun.reports import charts, matrix
from atlasrun.reports.data import FailureModes, ModelRow, ReportData
from atlasrun.reports.drilldown import attr, drilldown, esc
from atlasrun.reports.page import CSS, SCRIPT
from atlasrun.scoring.stats import INTERVAL_TEXT, Estimate
from atlasrun.scoring.store import atomic_write

FILENAME = "report.html"
BREAKDOWN_TITLES = {"domain": "Domain", "category": "Interaction category", "server": "Server"}


def pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def _ci(est: Estimate | None, scale: float = 100, digits: int = 1, unit: str = "%") -> str:
    if est is None:
        return "–"
    return (
        f'{scale * est.point:.{digits}f}{unit}<span class="ci">[{scale * est.low:.{digits}f}, '
        f"{scale * est.high:.{digits}f}]</span>"
    )


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _secs(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _when(iso: str | None) -> str:
    """An ISO timestamp as 'YYYY-MM-DD HH:MM:SS UTC' (as given if it does not parse)."""
    if not iso:
        return "unknown"
    try:
        moment = dt.datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if moment.tzinfo is not None:
        return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _compact(n: float) -> str:
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}{suffix}"
    return f"{n:.0f}"


def _heat(rate: float | None) -> str:
    return (
        ""
        if rate is None
        else f' style="background:hsl({120 * rate:.0f},55%,{93 - 6 * abs(rate - 0.5):.0f}%)"'
    )


def _header(data: ReportData) -> str:
    h = data.header
    judges = (
        "".join(
            f"<tr><td>{esc(role)}</td><td><b>{esc(j.name)}</b></td><td>{esc(j.kind)}</td><td>{esc(j.model or '–')}</td>"
            f'<td><code title="{attr(j.prompt_sha256)}">{esc((j.prompt_sha256 or "–")[:12])}</code></td>'
            f"<td>{esc(j.version)}</td></tr>"
            for role, j in h.judges
        )
        or '<tr><td colspan="6">no judge recorded</td></tr>'
    )
    facts = [
        ("results", h.out_dir),
        ("started", _when(h.started)),
        ("report generated", _when(h.generated)),
        ("pass threshold", f"coverage ≥ {h.threshold:g}"),
        ("repeats", str(h.repeats)),
        ("atlasrun", h.version or "unknown"),
    ]
    if h.servers:
        facts.append(("servers", ", ".join(h.servers)))
    if h.skipped_lines:
        facts.append(
            (
                "skipped",
                f"{h.skipped_lines} line(s) of results.jsonl (damaged, tampered with or outside the run): not counted",
            )
        )
    facts += [(f"model {name}", what) for name, what in h.models.items() if what != name]
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
    return (
        f'<header><h1>AtlasRun report: {esc(h.name)}</h1><div class="head-grid"><dl>{dl}</dl>'
        f'<table class="data judges"><thead><tr><th>judge</th><th>name</th><th>kind</th><th>model</th>'
        f"<th>prompt sha256</th><th>version</th></tr></thead><tbody>{judges}</tbody></table></div></header>"
    )


def _unpaired(m: ModelRow) -> str:
    """The secondary figure under a paired pass rate: the model alone, on every task it scored."""
    if m.pass_rate_all is None:
        return ""
    return (
        f'<br><span class="ci" title="unpaired: every task this model scored; task sets differ by model">'
        f"all {m.pass_rate_all.n} scored: {pct(m.pass_rate_all.point)}</span>"
    )


def _paired_note(models: list[ModelRow]) -> str:
    n = next((m.paired_tasks for m in models if m.paired_tasks is not None), None)
    if n is None:
        return ""
    return (
        f'<p class="note">Pass rate and coverage compare the models on the {n} task(s) scored for every '
        "model (paired); the figure below each pass rate is that model alone on every task it scored.</p>"
    )


def _tasks(totals: dict[str, Any]) -> str:
    """Distinct tasks, and the task x repeat items under them when there were repeats."""
    items = totals.get("items", totals["tasks"])
    extra = f'<span class="ci">{items} items</span>' if items != totals["tasks"] else ""
    return f"{totals['tasks']}{extra}"


def _cost(totals: dict[str, Any]) -> str:
    """``$1.23``, or ``n/a`` when some call of the model had no known price."""
    known = totals.get("cost_known", True)
    return f"${totals['cost_usd']:.2f}" if known else '<span title="no known price for this model">n/a</span>'


def _model_table(models: list[ModelRow]) -> str:
    rows = []
    for m in models:
        t, tm = m.totals, m.tools
        at = t["pass_rate_at"]
        missing = (
            f' <span class="warn" title="per-task records missing">({tm.missing_transcripts} no transcript)</span>'
            if tm.missing_transcripts
            else ""
        )
        rows.append(
            f'<tr data-model="{attr(m.model)}"><td class="model">{esc(m.model)}</td><td class="num">{_tasks(t)}</td>'
            f'<td class="num">{t["scored"]}</td><td class="num">{t["excluded"] or ""}</td>'
            f'<td class="num">{t["errored"] or ""}</td>'
            f'<td class="num strong">{_ci(m.pass_rate)}{_unpaired(m)}</td>'
            f'<td class="num">{_ci(m.coverage, 1, 3, "")}</td>'
            + "".join(f'<td class="num">{pct(at.get(k))}</td>' for k in ("0.5", "0.75", "0.9"))
            + f'<td class="num">{pct(tm.valid_name_rate)}</td><td class="num">{pct(tm.schema_compliance)}</td>'
            f'<td class="num">{pct(tm.execution_success)}{missing}</td>'
            f'<td class="num">{_num(tm.mean_calls)}</td>'
            f'<td class="num">{_secs(t["mean_wall_s"])}</td>'
            f'<td class="num">{_compact(t["tokens"])}</td><td class="num">{_cost(t)}</td></tr>'
        )
    return (
        '<table class="data models"><thead><tr><th rowspan="2">model</th><th colspan="4">tasks</th>'
        '<th rowspan="2" class="num">pass rate<br><span class="ci">95% CI</span></th>'
        '<th rowspan="2" class="num">mean coverage<br><span class="ci">95% CI</span></th>'
        '<th colspan="3">pass rate at coverage ≥</th><th colspan="3">tool calls (pooled)</th>'
        '<th colspan="4">efficiency</th></tr><tr>'
        '<th class="num">total</th><th class="num">scored</th><th class="num">excl.</th><th class="num">err.</th>'
        '<th class="num">0.5</th><th class="num">0.75</th><th class="num">0.9</th>'
        '<th class="num">valid name</th><th class="num">schema ok</th><th class="num">exec. ok</th>'
        '<th class="num">calls/task</th><th class="num">wall s/task</th><th class="num">tokens</th>'
        f'<th class="num">cost</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _reasons(models: list[ModelRow]) -> str:
    items = []
    for m in models:
        for status, by_kind, reasons in (
            ("excluded", "excluded_by_kind", "excluded_reasons"),
            ("errored", "errors_by_kind", "error_reasons"),
        ):
            for error_kind, count in sorted(m.totals[by_kind].items(), key=lambda kv: -kv[1]):
                items.append(
                    f'<li><b>{esc(m.model)}</b> <span class="badge b-{"excluded" if status == "excluded" else "error"}">'
                    f"{status}</span> <b>{esc(error_kind)}</b> ×{count}</li>"
                )
            for reason, count in sorted(m.totals[reasons].items(), key=lambda kv: -kv[1]):
                items.append(
                    f'<li class="muted">{esc(m.model)} ×{count}: {esc(reason or "(no reason)")}</li>'
                )
    if not items:
        return '<p class="muted">No task was excluded or errored.</p>'
    return (
        f'<details class="reasons" open><summary>Excluded and errored tasks (not in the rates)</summary>'
        f"<ul>{''.join(items)}</ul></details>"
    )


def _share(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _mode_table(rows: list[ModelModes], signals: bool) -> str:
    head1 = "".join(
        f'<th colspan="{len(modes_of(f)) + 1}" class="fam-{f}-h">{charts.FAMILY_NAMES[f]}</th>'
        for f in FAMILIES
    )
    head2 = "".join(
        f'<th class="num">{"Tool%" if f == "tool_call" else "Cog%"}</th>'
        + "".join(f'<th class="num">{esc(m.label)}</th>' for m in modes_of(f))
        for f in FAMILIES
    )
    body = []
    for r in rows:
        cells = "".join(
            f'<td class="num fam">{_share(r.family_shares.get(f))}</td>'
            + "".join(f'<td class="num">{_share(r.shares.get(m.id))}</td>' for m in modes_of(f))
            for f in FAMILIES
        )
        body.append(
            f'<tr><td class="model">{esc(r.model)}</td><td class="num">{r.failing}</td>'
            f'<td class="num">{r.diagnosed}</td><td class="num">{r.failed + r.undiagnosed or ""}</td>{cells}'
            f'<td class="num">{_share(r.shares.get(UNCLASSIFIED))}</td></tr>'
        )
    return (
        '<table class="data modes"><thead><tr><th rowspan="2">model</th><th rowspan="2" class="num">failing</th>'
        '<th rowspan="2" class="num">' + ("by signals" if signals else "diagnosed") + "</th>"
        '<th rowspan="2" class="num">not diag.</th>'
        f'{head1}<th rowspan="2" class="num">Unclass.</th></tr><tr>{head2}</tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table><p class="muted foot">Shares in % of each model\'s diagnosed '
        "failures (MCP-Atlas Tables 3 and 4); not diag.: failing tasks without a usable diagnosis.</p>"
    )


def _failures(f: FailureModes, out_dir: str, order: list[str]) -> str:
    hint = f"<code>atlas diagnose {esc(out_dir)}</code>"
    if f.failing == 0:
        return (
            f'<p class="muted">No scored task fell below coverage {f.threshold:g}: nothing to diagnose.</p>'
        )
    if f.source == "none":
        return f'<p class="note">Not diagnosed yet — run {hint}.</p>'
    note = ""
    if f.source == "signals":
        note = (
            f'<p class="note">Not diagnosed yet — run {hint}. The bars below use only deterministic trace '
            "signals (no tool call, repeated failing call, argument errors, unavailable tool); failures with "
            "no such signal are <i>unclassified</i>.</p>"
        )
    else:
        note = (
            f'<p class="muted">Primary failure mode of each diagnosed failure (coverage &lt; {f.threshold:g}), '
            f"as a share of the model's diagnosed failures. Diagnosed by: {esc(', '.join(f.report.judges))}.</p>"
        )
    rows = sorted(f.report.models, key=lambda r: order.index(r.model) if r.model in order else len(order))
    if len(rows) > 1:
        rows.append(f.report.overall)
    return (
        note
        + charts.failure_chart(rows)
        + f'<div class="scroll">{_mode_table(rows, f.source == "signals")}</div>'
    )


def _breakdowns(data: ReportData, order: list[str]) -> str:
    tabs, panels = [], []
    for i, (by, per_model) in enumerate(data.breakdowns.items()):
        groups = sorted({g for rows in per_model.values() for g in rows})
        head = "".join(f'<th class="num">{esc(m)}</th>' for m in order)
        body = []
        for g in groups:
            cells = []
            for m in order:
                row: dict[str, Any] | None = per_model[m].get(g)
                if row is None:
                    cells.append('<td class="num muted">–</td>')
                    continue
                cells.append(
                    f'<td class="num"{_heat(row["pass_rate"])}>{pct(row["pass_rate"])}'
                    f'<span class="ci">{row["passed"]}/{row["scored"]}</span></td>'
                )
            body.append(f"<tr><td>{esc(g)}</td>{''.join(cells)}</tr>")
        tabs.append(
            f'<button type="button" class="tab{" active" if i == 0 else ""}" data-tab="bd-{by}">'
            f"{BREAKDOWN_TITLES[by]} ({len(groups)})</button>"
        )
        panels.append(
            f'<div class="panel" id="bd-{by}"><h3>{BREAKDOWN_TITLES[by]}</h3>'
            f'<table class="data breakdown"><thead><tr><th>{BREAKDOWN_TITLES[by].lower()}</th>{head}</tr>'
            f"</thead><tbody>{''.join(body)}</tbody></table></div>"
        )
    return (
        f'<p class="muted">Pass rate per group (passed/scored). A task counts for each server it needs.</p>'
        f'<div class="tabs">{"".join(tabs)}</div>{"".join(panels)}'
    )


def _cross_judge(data: ReportData, order: list[str]) -> str:
    judges = [j.name for _, j in data.header.judges]
    ranks: dict[str, dict[str, int]] = {}
    for j in judges:
        ordered = sorted(
            (m for m, r in data.judge_rates.items() if j in r.pass_rate),
            key=lambda m: -data.judge_rates[m].pass_rate[j],
        )
        ranks[j] = {m: i + 1 for i, m in enumerate(ordered)}
    head = "".join(
        f'<th class="num">{esc(j)}{" (primary)" if role == "primary" else ""}</th>'
        for role, j in ((r, i.name) for r, i in data.header.judges)
    )
    body = []
    for model, r in sorted(
        data.judge_rates.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 0
    ):
        cells = "".join(
            f'<td class="num">{pct(r.pass_rate.get(j))}'
            f'<span class="ci">rank {ranks[j].get(model, "–")}</span></td>'
            for j in judges
        )
        body.append(
            f'<tr><td class="model">{esc(model)}</td>{cells}<td class="num strong">'
            f'{"–" if r.range is None else f"{100 * r.range:.1f} pp"}</td><td class="num">{r.tasks}</td>'
            f'<td class="num">{r.dropped or ""}</td></tr>'
        )
    kappa = "".join(
        f'<tr><td>{esc(a.judge_a)}</td><td>{esc(a.judge_b)}</td><td class="num">{a.claims}</td>'
        f'<td class="num">{a.skipped or ""}</td><td class="num">{pct(a.agreement)}</td>'
        f'<td class="num strong">{"–" if a.kappa is None else f"{a.kappa:.3f}"}</td></tr>'
        for a in data.agreement
    )
    return (
        f'<p class="muted">Pass rate of each model under each judge, on the tasks every judge scored '
        f"(MCP-Atlas Appendix F), and Cohen's kappa on the 3-way claim labels.</p>"
        f'<table class="data"><thead><tr><th>model</th>{head}<th class="num">range</th><th class="num">tasks</th>'
        f'<th class="num">dropped</th></tr></thead><tbody>{"".join(body)}</tbody></table>'
        f'<table class="data"><thead><tr><th>judge A</th><th>judge B</th><th class="num">claims</th>'
        f'<th class="num">skipped</th><th class="num">agreement</th><th class="num">Cohen\'s κ</th></tr></thead>'
        f"<tbody>{kappa}</tbody></table>"
    )


def _repeats(models: list[ModelRow]) -> str:
    ks = max((len(m.repeats.by_k) for m in models if m.repeats), default=0)
    head = "".join(f'<th class="num">pass@{k}</th><th class="num">pass^{k}</th>' for k in range(1, ks + 1))
    body = []
    for m in models:
        if m.repeats is None:
            continue
        by_k = {p.k: p for p in m.repeats.by_k}
        cells = "".join(
            f'<td class="num">{pct(by_k[k].pass_at_k)}</td><td class="num">{pct(by_k[k].pass_hat_k)}</td>'
            if k in by_k
            else '<td class="num">–</td><td class="num">–</td>'
            for k in range(1, ks + 1)
        )
        body.append(
            f'<tr><td class="model">{esc(m.model)}</td><td class="num">{m.repeats.tasks}</td>'
            f'<td class="num">{m.repeats.repeats_min}–{m.repeats.repeats_max}</td>{cells}</tr>'
        )
    return (
        '<p class="muted">pass@k: chance at least one of k repeats passes; pass^k: chance all k pass '
        "(unbiased estimators, mean over tasks).</p>"
        f'<table class="data"><thead><tr><th>model</th><th class="num">tasks</th><th class="num">repeats</th>{head}'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{esc(title)}</h2>{body}</section>'


def render(data: ReportData) -> str:
    order = [m.model for m in data.models]
    ranked = sorted(
        data.models, key=lambda m: (m.pass_rate is None, -m.pass_rate.point if m.pass_rate else 0.0)
    )
    colors = {m: charts.model_color(i) for i, m in enumerate(order)}
    points = [
        (m.model, float(m.totals["mean_wall_s"]), m.pass_rate.point)
        for m in data.models
        if m.pass_rate is not None and m.totals["mean_wall_s"] is not None
    ]
    hists = "".join(
        f"<div>{charts.coverage_histogram(m.model, m.coverages, data.header.threshold, colors[m.model])}"
        f"</div>"
        for m in ranked
    )
    sections = [
        (
            "models",
            "Models",
            _paired_note(ranked)
            + _model_table(ranked)
            + '<p class="muted foot">Rates count scored tasks only (primary '
            f"judge); intervals: {INTERVAL_TEXT}, the same as summary.json and the operator's metrics "
            "(docs/statistics.md); model differences use paired-bootstrap CIs. Tool-call rates are pooled over "
            "all calls of scored tasks; tokens and cost cover every attempt.</p>" + _reasons(ranked),
        ),
        ("pass-rate", "Pass rate", charts.pass_rate_chart([(m.model, m.pass_rate) for m in ranked], colors)),
        (
            "failures",
            "Failure modes",
            _failures(data.failures, data.header.out_dir, [m.model for m in ranked]),
        ),
        (
            "efficiency",
            "Latency vs pass rate",
            '<p class="muted">Mean wall-clock seconds per scored task against '
            "pass rate; the dashed line joins the models no other model beats on both.</p>"
            + (charts.latency_chart(points, colors) if points else '<p class="muted">nothing scored</p>'),
        ),
        ("coverage", "Coverage distribution", f'<div class="hists">{hists}</div>'),
        ("matrix", "Task matrix", matrix.render_matrix(data.matrix, order)),
        ("breakdowns", "Breakdowns", _breakdowns(data, order)),
    ]
    if data.comparisons:
        sections.insert(1, ("paired", "Paired comparison", matrix.render_comparisons(data.comparisons)))
    if data.judge_rates:
        sections.append(("judges", "Cross-judge agreement", _cross_judge(data, [m.model for m in ranked])))
    if any(m.repeats for m in data.models):
        sections.append(("repeats", "Repeats: pass@k and pass^k", _repeats(data.models)))
    sections.append(("tasks", f"Tasks ({len(data.rows)})", drilldown(data.rows, order)))
    nav = "".join(f'<a href="#{a}">{esc(t.split(" (")[0])}</a>' for a, t, _ in sections)
    main = "".join(_section(*s) for s in sections)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>AtlasRun report: {esc(data.header.name)}</title><style>{CSS}{matrix.CSS}</style></head><body>"
        f"{_header(data)}<nav>{nav}</nav><main>{main}</main><script>{SCRIPT}{matrix.SORT_SCRIPT}</script></body></html>"
    )


def write_report(data: ReportData, out_dir: Path) -> Path:
    """Render ``data`` to ``out_dir/report.html`` (atomically) and return its path."""
    path = out_dir / FILENAME
    atomic_write(path, render(data))
    return path
