"""The per-task drill-down of ``report.html``: one table row per (model, task, repeat) and a hidden detail
row with the prompt, claim verdicts, final answer, tool calls and diagnosis. All text is escaped here."""

from __future__ import annotations

from html import escape

from atlasrun.diagnostics.signals import strongest_mode
from atlasrun.diagnostics.taxonomy import BY_ID, UNCLASSIFIED
from atlasrun.reports.charts import MODE_LABELS
from atlasrun.reports.data import ClaimView, DrillRow

LABEL_TEXT = {"fulfilled": "fulfilled", "partially_fulfilled": "partial", "not_fulfilled": "not fulfilled"}


def esc(value: object) -> str:
    """Text content: &, < and > escaped (quotes are harmless outside attributes and cost 6 bytes each)."""
    return escape("" if value is None else str(value), quote=False)


def attr(value: object) -> str:
    """An attribute value (always written in double quotes): quotes escaped too."""
    return escape("" if value is None else str(value), quote=True)


def _mode(mode: str | None) -> str:
    if not mode:
        return ""
    family = BY_ID[mode].family if mode in BY_ID else "none"
    return f'<span class="mode fam-{family}">{esc(MODE_LABELS.get(mode, mode))}</span>'


def _label(label: str | None, error: str | None = None) -> str:
    if label is None:
        return (
            f'<span class="badge b-err" title="{attr(error)}">judge failed</span>'
            if error
            else '<span class="badge b-none">not judged</span>'
        )
    return f'<span class="badge l-{attr(label)}">{esc(LABEL_TEXT.get(label, label))}</span>'


def _status(row: DrillRow) -> str:
    r = row.result
    if r.status == "scored":
        return f'<span class="badge {"b-pass" if r.passed else "b-fail"}">{"pass" if r.passed else "fail"}</span>'
    return f'<span class="badge b-{attr(r.status)}" title="{attr(r.reason)}">{esc(r.status)}</span>'


def _claims(claims: list[ClaimView]) -> str:
    if not claims:
        return '<p class="muted">no claims</p>'
    others = sorted({name for c in claims for name in c.others})
    head = "".join(f"<th>{esc(name)}</th>" for name in others)
    rows = []
    for i, c in enumerate(claims, 1):
        cells = "".join(f"<td>{_label(c.others.get(name))}</td>" for name in others)
        reason = esc(c.reason) or (f'<span class="err">{esc(c.error)}</span>' if c.error else "")
        rows.append(
            f'<tr><td class="num">{i}</td><td>{esc(c.claim)}</td><td>{_label(c.label, c.error)}</td>'
            f'<td class="reason">{reason}</td>{cells}</tr>'
        )
    return (
        f'<table class="claims"><thead><tr><th>#</th><th>claim</th><th>verdict</th><th>reason</th>{head}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _calls(row: DrillRow) -> str:
    if not row.record_found:
        return '<p class="muted">per-task record missing: no transcript</p>'
    if not row.calls:
        return '<p class="muted">no tool calls</p>'
    parts = []
    for call in row.calls:
        if row.omitted_calls and call.number == row.calls[row.omitted_after].number:
            parts.append(
                f'<div class="omitted">… {row.omitted_calls} call(s) omitted to keep the report small …</div>'
            )
        kind = f' <span class="badge b-err">{esc(call.error_kind or "error")}</span>' if call.is_error else ""
        parts.append(
            f'<div class="call{" call-err" if call.is_error else ""}"><div class="call-head">'
            f'<span class="muted">#{call.number}</span> <code class="tool">{esc(call.name)}</code>{kind}'
            f'<span class="muted right">{call.elapsed_s:.2f}s</span></div>'
            f'<pre class="args">{esc(call.arguments)}</pre><pre class="out">{esc(call.result)}</pre></div>'
        )
    return "".join(parts)


def _diagnosis(row: DrillRow) -> str:
    d = row.diagnosis
    if d is not None:
        if d.status == "failed":
            return (
                f'<p><span class="badge b-err">diagnosis failed</span> {esc(d.error)} <span class="muted">'
                f"({esc(d.judge.name)})</span></p>"
            )
        conf = f", confidence {d.confidence:.2f}" if d.confidence is not None else ""
        items = "".join(
            f"<li>{_mode(f.mode)}{' <b>root cause</b>' if f.root_cause else ''} {esc(f.evidence)}</li>"
            for f in d.failures
        )
        forced = f'<p class="muted">{esc(d.forced)}</p>' if d.forced else ""
        return (
            f"<p>{_mode(d.primary_mode)} "
            f'<span class="muted">by {esc(d.judge.name)}{esc(conf)}</span></p><p>{esc(d.summary)}</p>{forced}'
            + (f"<ul>{items}</ul>" if items else "")
        )
    if row.signals:
        items = "".join(
            f"<li>{_mode(s.mode)} <code>{esc(s.name)}</code> {esc(s.evidence)}</li>" for s in row.signals
        )
        return f'<p class="muted">not diagnosed yet; trace signals:</p><ul>{items}</ul>'
    return ""


def _detail(row: DrillRow) -> str:
    r = row.result
    meta = [
        f"stop: {esc(row.stop_reason or '-')}",
        f"turns: {r.turns}",
        f"tokens: {r.prompt_tokens + r.completion_tokens:,}",
        f"cost: ${r.cost_usd:.4f}" if r.cost_known else "cost: n/a (no known price)",
        f"servers: {esc(', '.join(r.servers) or '-')}",
    ]
    if r.reason:
        meta.insert(0, f'<span class="err">{esc(r.status)}: {esc(r.reason)}</span>')
    if r.infra_errors:
        meta.append(f'<span class="err">infra: {esc("; ".join(r.infra_errors))}</span>')
    diagnosis = _diagnosis(row)
    return (
        f'<div class="meta">{" · ".join(meta)}</div>'
        f'<h4>Prompt</h4><pre class="text">{esc(row.prompt) or "(no task record)"}</pre>'
        f"<h4>Claims</h4>{_claims(row.claims)}"
        f'<h4>Final answer</h4><pre class="text">{esc(row.answer) or "(empty)"}</pre>'
        f"<h4>Transcript ({r.tool_calls} call(s), {r.tool_errors} error(s))</h4>{_calls(row)}"
        + (f"<h4>Diagnosis</h4>{diagnosis}" if diagnosis else "")
    )


def _primary_mode(row: DrillRow) -> str:
    if row.diagnosis is not None:
        return _mode(row.diagnosis.primary_mode) if row.diagnosis.status == "diagnosed" else "diag. failed"
    if row.signals:
        return f'{_mode(strongest_mode(row.signals) or UNCLASSIFIED)} <span class="muted">signal</span>'
    return ""


def drilldown(rows: list[DrillRow], models: list[str]) -> str:
    options = "".join(f'<option value="{attr(m)}">{esc(m)}</option>' for m in models)
    body = []
    for i, row in enumerate(rows):
        r = row.result
        outcome = "pass" if r.passed else "fail" if r.status == "scored" else r.status
        cov = f"{r.coverage:.2f}" if r.coverage is not None else "–"
        body.append(
            f'<tr class="row" data-model="{attr(r.model)}" data-status="{attr(outcome)}" '
            f'data-text="{attr((r.task_id + " " + (r.domain or "") + " " + (r.category or "")).lower())}">'
            f'<td><button class="tog" aria-expanded="false" aria-controls="d{i}">▸</button></td>'
            f'<td>{esc(r.model)}</td><td class="task">{esc(r.task_id)}</td><td class="num">{r.repeat}</td>'
            f"<td>{esc(r.domain or '–')}</td><td>{esc(r.category or '–')}</td><td>{_status(row)}</td>"
            f'<td class="num">{cov}</td><td class="num">{r.tool_calls}</td>'
            f'<td class="num">{r.tool_errors or ""}</td><td class="num">{r.wall_s:.{2 if r.wall_s < 10 else 1}f}</td>'
            f"<td>{_primary_mode(row)}</td></tr>"
            f'<tr class="detail" id="d{i}" hidden><td colspan="12">{_detail(row)}</td></tr>'
        )
    return f"""<div class="filters">
<label>model <select id="f-model"><option value="">all</option>{options}</select></label>
<label>outcome <select id="f-status"><option value="">all</option><option>pass</option><option>fail</option>
<option>excluded</option><option>error</option></select></label>
<label>search <input id="f-text" type="search" placeholder="task id, domain, category"></label>
<span id="f-count" class="muted">{len(rows)} of {len(rows)} rows</span>
<button id="f-expand" type="button">expand shown</button></div>
<table class="data drill"><thead><tr><th></th><th>model</th><th>task</th><th>rep</th><th>domain</th><th>category</th>
<th>outcome</th><th class="num">coverage</th><th class="num">calls</th><th class="num">errors</th>
<th class="num">wall s</th><th>diagnosis</th></tr></thead><tbody id="drill">{"".join(body)}</tbody></table>"""
