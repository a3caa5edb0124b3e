"""The pages of ``atlas view``: the list of runs, a run (live numbers, then the report's task
drill-down), and the full report rendered in memory.

The run cards are drawn in the browser from the JSON the page polls (text set with
``textContent``, never parsed as HTML); the first state is embedded in the page, so it shows at
once and without a round trip. The drill-down and the report are ``reports.drilldown`` and
``reports.html`` (every text escaped there); the page re-fetches the drill-down as new results
arrive and keeps the rows a reader opened, and the filters, as they were.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atlasrun.reports import html as report_html
from atlasrun.reports.data import ReportData
from atlasrun.reports.drilldown import attr, drilldown, esc
from atlasrun.reports.page import CSS, SCRIPT
from atlasrun.reports.view.status import RunStatus
from atlasrun.scoring.stats import INTERVAL_TEXT

POLL_MS = 1500  # how often a page asks for the numbers
TASKS_EVERY_MS = 3000  # at most this often it re-fetches the drill-down while results arrive

LIVE_CSS = """
.cards{display:grid;gap:16px;margin-top:16px}
.card{border:1px solid var(--line);border-radius:8px;padding:12px 16px 6px;background:#fff}
.card-head{display:flex;gap:12px;align-items:baseline;flex-wrap:wrap}
.card-head h2{border:0;margin:0;padding:0}
.card-head h2 a{color:var(--ink);text-decoration:none}.card-head h2 a:hover{text-decoration:underline}
.progress{height:10px;background:var(--soft);border:1px solid var(--line);border-radius:5px;overflow:hidden;margin:10px 0 4px}
.progress .bar{height:100%;background:var(--accent);transition:width .4s}
.st-running{background:#e3eefa;color:var(--accent)}.st-finished{background:#dff3e4;color:var(--good)}
.st-stopped{background:#fff1cc;color:#8a5a00}.st-unreadable{background:#fde4e1;color:var(--bad)}
.st-empty{background:#eceff3;color:#52606d}
.st-running::before{content:"";display:inline-block;width:7px;height:7px;border-radius:50%;background:currentColor;
margin-right:5px;animation:pulse 1.2s infinite}
@keyframes pulse{50%{opacity:.25}}
.kinds{margin:4px 0 8px;display:flex;gap:6px;flex-wrap:wrap;align-items:center;font-size:12px}
#live{font-weight:600;color:var(--good)}#live.off{color:var(--bad)}
"""

LIVE_SCRIPT = r"""
(function(){
var cfg=JSON.parse(document.getElementById('atlas-state').textContent);
var polls=0,lastTasks=0,loadingTasks=false;
function el(tag,cls,text){var e=document.createElement(tag);if(cls){e.className=cls;}
  if(text!==undefined&&text!==null){e.textContent=String(text);}return e;}
function pct(x){return (100*x).toFixed(1)+'%';}
function cost(m){return m.cost_known?'$'+m.cost_usd.toFixed(2):'n/a';}
function kinds(label,byKind,cls){var box=el('div','kinds');box.appendChild(el('span','muted',label));
  Object.keys(byKind).forEach(function(k){box.appendChild(el('span','badge '+cls,k+' \u00d7'+byKind[k]));});return box;}
function rate(m){var td=el('td','num strong');if(!m.pass_rate){td.textContent='\u2013';return td;}
  var r=m.pass_rate;td.appendChild(document.createTextNode(pct(r.point)));
  td.appendChild(el('span','ci','['+(100*r.low).toFixed(1)+', '+(100*r.high).toFixed(1)+'] n='+r.n));return td;}
function row(m){var tr=el('tr');tr.dataset.model=m.model;tr.appendChild(el('td','model',m.model));
  [m.items,m.scored,m.passed].forEach(function(v){tr.appendChild(el('td','num',v));});tr.appendChild(rate(m));
  tr.appendChild(el('td','num',m.mean_coverage===null?'\u2013':m.mean_coverage.toFixed(3)));
  tr.appendChild(el('td','num'+(m.errored?' err':''),m.errored||''));tr.appendChild(el('td','num',m.excluded||''));
  tr.appendChild(el('td','num',m.tokens.toLocaleString('en')));tr.appendChild(el('td','num',cost(m)));return tr;}
function card(run){var c=el('div','card');c.dataset.run=run.id;c.dataset.state=run.state;
  c.dataset.done=run.done;c.dataset.planned=run.planned;
  var head=el('div','card-head'),h=el('h2'),a=el('a',null,run.name);a.href='/run/'+encodeURIComponent(run.id);
  h.appendChild(a);head.appendChild(h);
  head.appendChild(el('span','badge st-'+run.state,run.state+(run.pid?' (pid '+run.pid+')':'')));
  head.appendChild(el('span','muted',run.dir));c.appendChild(head);
  if(run.problem){c.appendChild(el('p','err',run.problem));return c;}
  var share=run.planned?run.done/run.planned:0,bar=el('div','progress'),fill=el('div','bar');
  fill.style.width=(100*share).toFixed(1)+'%';bar.appendChild(fill);c.appendChild(bar);
  c.appendChild(el('div','muted progress-text',run.done+' / '+run.planned+' items done ('+Math.round(100*share)+
    '%)'+(run.updated?' \u00b7 last result '+run.updated.replace('T',' ').replace('+00:00',' UTC'):'')+
    ' \u00b7 pass = coverage \u2265 '+run.threshold));
  var t=el('table','data models'),hr=el('tr');
  ['model','items','scored','passed','pass rate (95% CI)','mean coverage','errors','excl.','tokens','cost']
    .forEach(function(x,i){hr.appendChild(el('th',i?'num':null,x));});
  var thead=el('thead');thead.appendChild(hr);t.appendChild(thead);var tb=el('tbody');
  run.models.forEach(function(m){tb.appendChild(row(m));});t.appendChild(tb);c.appendChild(t);
  if(Object.keys(run.errors_by_kind).length){c.appendChild(kinds('errors by kind:',run.errors_by_kind,'b-error'));}
  run.skipped.forEach(function(w){c.appendChild(el('p','warn',w));});
  return c;}
function render(state){var box=document.getElementById('runs');
  if(!state.runs.length){box.replaceChildren(el('p','muted','No results directory yet: '+cfg.empty));}
  else{box.replaceChildren.apply(box,state.runs.map(card));}
  document.getElementById('stamp').textContent=new Date().toLocaleTimeString('en-GB');
  document.body.dataset.done=String(state.runs.reduce(function(s,r){return s+r.done;},0));
  if(cfg.tasks&&state.runs.length){maybeTasks(state.runs[0]);}}
function key(r){return r.dataset.model+'\u0000'+r.cells[2].textContent+'\u0000'+r.cells[3].textContent;}
function maybeTasks(run){var box=document.getElementById('tasks'),shown=box.querySelectorAll('tr.row').length;
  var due=Date.now()-lastTasks>=cfg.tasks_every||run.state!=='running';
  if(shown===run.done||loadingTasks||!due){return;}
  loadingTasks=true;lastTasks=Date.now();
  fetch(cfg.tasks,{cache:'no-store'}).then(function(r){if(!r.ok){throw new Error(r.status);}return r.text();})
  .then(function(html){var open=Array.prototype.map.call(box.querySelectorAll('tr.row.open'),key);
    var ids=['f-model','f-status','f-text'],vals=ids.map(function(i){var e=document.getElementById(i);return e?e.value:'';});
    box.innerHTML=html;atlasBindDrill();
    ids.forEach(function(i,n){var e=document.getElementById(i);if(e&&vals[n]){e.value=vals[n];
      e.dispatchEvent(new Event(i==='f-text'?'input':'change'));}});
    box.querySelectorAll('tr.row').forEach(function(r){if(open.indexOf(key(r))>=0){r.click();}});
    document.body.dataset.taskRefreshes=String(Number(document.body.dataset.taskRefreshes||0)+1);})
  .catch(function(){}).then(function(){loadingTasks=false;});}
function poll(){fetch(cfg.api,{cache:'no-store'}).then(function(r){if(!r.ok){throw new Error(r.status);}return r.json();})
  .then(function(state){polls++;document.body.dataset.polls=String(polls);
    var live=document.getElementById('live');live.className='';live.textContent='\u25cf live';render(state);})
  .catch(function(){var live=document.getElementById('live');live.className='off';
    live.textContent='\u25cf not connected (is atlas view still running?)';});}
if(cfg.tasks){atlasBindDrill();}
render(cfg.state);setInterval(poll,cfg.poll_ms);
})();
"""


def _state_json(config: dict[str, Any]) -> str:
    """JSON inside a <script type="application/json">: every '<' escaped, so no text can close it."""
    return json.dumps(config, ensure_ascii=False).replace("<", "\\u003c")


def _page(title: str, header: str, main: str, config: dict[str, Any], nonce: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}{LIVE_CSS}</style></head><body>"
        f"<header>{header}</header><main>{main}</main>"
        f'<script type="application/json" id="atlas-state">{_state_json(config)}</script>'
        f'<script nonce="{attr(nonce)}">function atlasBindDrill(){{{SCRIPT}}}\n{LIVE_SCRIPT}</script>'
        "</body></html>"
    )


def _live_line(extra: str) -> str:
    return (
        '<p class="muted"><span id="live">● live</span> · updated <span id="stamp">–</span> · '
        f"{extra} · intervals: {esc(INTERVAL_TEXT)} (docs/statistics.md)</p>"
    )


def _config(api: str, runs: Sequence[RunStatus], empty: str, tasks: str | None = None) -> dict[str, Any]:
    return {
        "api": api,
        "tasks": tasks,
        "poll_ms": POLL_MS,
        "tasks_every": TASKS_EVERY_MS,
        "empty": empty,
        "state": runs_json(runs),
    }


def runs_json(runs: Sequence[RunStatus]) -> dict[str, Any]:
    """The body of the JSON endpoints (and of the state a page starts from)."""
    return {"runs": [run.model_dump(mode="json") for run in runs]}


def index_page(runs: Sequence[RunStatus], roots: Sequence[Path], nonce: str) -> str:
    watched = ", ".join(str(root) for root in roots)
    header = "<h1>AtlasRun live view</h1>" + _live_line(f"watching {esc(watched)}")
    main = '<div id="runs" class="cards"></div>'
    empty = f"none in {watched} (a run writes run.json and results.jsonl there)"
    return _page("AtlasRun live view", header, main, _config("/api/runs", runs, empty), nonce)


def run_page(run: RunStatus, tasks_html: str, nonce: str) -> str:
    base = f"/run/{run.id}"
    header = (
        f'<h1>AtlasRun live: {esc(run.name)}</h1><p class="muted"><a href="/">all runs</a> · '
        f'<a href="{attr(base)}/report">full report</a> (charts, breakdowns, task matrix)</p>'
        + _live_line(esc(run.dir))
    )
    main = (
        '<div id="runs" class="cards"></div><section id="tasks-section"><h2>Tasks</h2>'
        '<p class="muted">Click a row for its prompt, claim verdicts, final answer and tool calls; '
        f'the list grows as results arrive.</p><div id="tasks">{tasks_html}</div></section>'
    )
    config = _config(f"/api{base}", [run], "this run's directory is gone", tasks=f"{base}/tasks")
    return _page(f"AtlasRun live: {run.name}", header, main, config, nonce)


def tasks_fragment(data: ReportData) -> str:
    """The report's drill-down (every result of the directory, in the report's order)."""
    return drilldown(data.rows, [m.model for m in data.models])


def report_page(data: ReportData, nonce: str) -> str:
    """``report.html`` as ``atlas report`` writes it, rendered in memory; its one script gets the nonce."""
    page = report_html.render(data)
    before, tag, after = page.rpartition("<script>")
    return f'{before}<script nonce="{attr(nonce)}">{after}' if tag else page


def problem_fragment(message: str) -> str:
    return f'<p class="err">{esc(message)}</p>'
