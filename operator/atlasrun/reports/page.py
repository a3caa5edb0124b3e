"""The static parts of ``report.html``: its stylesheet and its small vanilla script (tabs, filters, expanders)."""

from __future__ import annotations

CSS = """
:root{--ink:#1f2933;--muted:#616e7c;--line:#d9dee4;--soft:#f5f7fa;--accent:#2f5d8a;--bad:#b42318;--good:#1b7a3d}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue","Liberation Sans",Arial,sans-serif;
color:var(--ink);background:#fff}
header{padding:22px 32px 14px;background:var(--soft);border-bottom:1px solid var(--line)}
h1{font-size:22px;margin:0 0 12px;font-weight:650}
h2{font-size:18px;margin:0 0 10px;padding-bottom:6px;border-bottom:1px solid var(--line);font-weight:650}
h3{font-size:15px;margin:14px 0 6px}
h4{font-size:13px;margin:14px 0 6px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.head-grid{display:flex;gap:36px;flex-wrap:wrap;align-items:flex-start}
dl{display:grid;grid-template-columns:max-content auto;gap:3px 14px;margin:0;font-size:13px}
dt{color:var(--muted)}dd{margin:0;word-break:break-all}
nav{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid var(--line);padding:8px 32px;display:flex;
gap:18px;font-size:13px}
nav a{color:var(--accent);text-decoration:none}nav a:hover{text-decoration:underline}
main{padding:8px 32px 40px;max-width:1500px}
section{margin:26px 0;scroll-margin-top:44px}
.muted{color:var(--muted)}.foot{font-size:12px;margin:6px 0}
.note{background:#fff8e6;border:1px solid #f0d48a;border-radius:6px;padding:8px 12px}
code{font:12px/1.4 "DejaVu Sans Mono",Menlo,Consolas,monospace;background:var(--soft);padding:1px 4px;border-radius:3px}
table.data{border-collapse:collapse;font-size:13px;margin:8px 0 12px}
table.data th,table.data td{padding:5px 9px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
table.data thead th{background:var(--soft);font-weight:600;font-size:12px;color:#3e4c59;border-bottom:2px solid var(--line)}
table.data tbody tr:hover{background:#f9fbfd}
.num{text-align:right!important;font-variant-numeric:tabular-nums;white-space:nowrap}
td.model{font-weight:600;white-space:nowrap}
td.strong{font-weight:650}
.ci{display:block;font-size:11px;color:var(--muted);font-weight:normal}
table.models th[colspan],table.modes th[colspan]{text-align:center;border-left:1px solid var(--line)}
table.modes td.fam{font-weight:600;border-left:1px solid var(--line)}
.fam-tool_call-h{color:#08519c}.fam-cognitive-h{color:#a50f15}
.scroll{overflow-x:auto;max-width:100%}
table.modes{font-size:12px}table.modes th,table.modes td{padding:4px 6px}
table.modes thead th{white-space:normal;max-width:78px;vertical-align:bottom}
.warn{color:#a15c00;font-size:11px}
.err{color:var(--bad)}
details.reasons summary{cursor:pointer;font-weight:600;font-size:13px}
details.reasons ul{margin:6px 0;padding-left:20px;font-size:13px}
svg.chart{max-width:100%;height:auto;display:block;margin:8px 0;font-family:system-ui,"Liberation Sans",Arial,sans-serif}
.hists{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:8px 18px}
.tabs{display:flex;gap:4px;margin:8px 0 0}
.tab{border:1px solid var(--line);background:var(--soft);padding:5px 12px;border-radius:6px 6px 0 0;cursor:pointer;
font:inherit;font-size:13px}
.tab.active{background:#fff;border-bottom-color:#fff;font-weight:600}
.js .panel{display:none}.js .panel.active{display:block}.js .panel h3{display:none}
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:11px;font-weight:600;line-height:18px;
white-space:nowrap}
.b-pass{background:#dff3e4;color:var(--good)}.b-fail{background:#fde4e1;color:var(--bad)}
.b-excluded{background:#eceff3;color:#52606d}.b-error,.b-err{background:#fde4e1;color:var(--bad)}
.b-none{background:#eceff3;color:#7b8794}
.l-fulfilled{background:#dff3e4;color:var(--good)}.l-partially_fulfilled{background:#fff1cc;color:#8a5a00}
.l-not_fulfilled{background:#fde4e1;color:var(--bad)}
.mode{display:inline-block;padding:0 7px;border-radius:4px;font-size:11px;font-weight:600;line-height:18px}
.fam-tool_call{background:#deebf7;color:#08519c}.fam-cognitive{background:#fee6ce;color:#a63603}
.fam-none{background:#eceff3;color:#52606d}
.filters{display:flex;gap:16px;align-items:center;flex-wrap:wrap;font-size:13px;margin:6px 0}
.filters select,.filters input,.filters button{font:inherit;font-size:13px;padding:3px 6px;border:1px solid var(--line);
border-radius:4px;background:#fff}
table.drill{width:100%}
table.drill td.task{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
button.tog{border:0;background:none;cursor:pointer;font-size:12px;color:var(--accent);padding:0 4px}
tr.row{cursor:pointer}tr.row.open{background:#eef4fa}
tr.detail>td{background:#fbfcfd;padding:4px 18px 16px 34px}
.meta{font-size:12px;color:var(--muted);margin-top:6px}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font:12px/1.45 "DejaVu Sans Mono",Menlo,Consolas,monospace}
pre.text{background:#fff;border:1px solid var(--line);border-radius:4px;padding:8px 10px;max-height:320px;overflow:auto}
table.claims{border-collapse:collapse;font-size:13px;width:100%}
table.claims th,table.claims td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
table.claims td.reason{color:#3e4c59;font-size:12px}
.call{border:1px solid var(--line);border-left:3px solid #9fb3c8;border-radius:4px;margin:5px 0;background:#fff}
.call-err{border-left-color:var(--bad);background:#fff8f7}
.call-head{padding:4px 8px;font-size:12px;display:flex;gap:8px;align-items:center}
.call-head .right{margin-left:auto}
code.tool{font-weight:600;background:none;padding:0}
pre.args{padding:2px 8px;color:#334e68}
pre.out{padding:4px 8px 6px;border-top:1px dashed var(--line);max-height:220px;overflow:auto}
.call-err pre.out{color:var(--bad)}
.omitted{font-size:12px;color:var(--muted);padding:4px 8px}
ul{margin:4px 0}
@media print{nav{display:none}tr.detail{display:none}}
"""

SCRIPT = r"""
(function(){
document.documentElement.classList.add('js');
document.querySelectorAll('.tabs').forEach(function(tabs){
  var panels=[];tabs.querySelectorAll('.tab').forEach(function(t){panels.push(document.getElementById(t.dataset.tab));});
  function show(id){tabs.querySelectorAll('.tab').forEach(function(t){t.classList.toggle('active',t.dataset.tab===id);});
    panels.forEach(function(p){p.classList.toggle('active',p.id===id);});}
  tabs.addEventListener('click',function(e){var t=e.target.closest('.tab');if(t){show(t.dataset.tab);}});
  if(panels.length){show(panels[0].id);}
});
var body=document.getElementById('drill');if(!body){return;}
function toggle(row,open){var d=row.nextElementSibling;if(open===undefined){open=d.hidden;}d.hidden=!open;
  row.classList.toggle('open',open);var b=row.querySelector('.tog');b.textContent=open?'\u25be':'\u25b8';
  b.setAttribute('aria-expanded',String(open));}
body.addEventListener('click',function(e){var row=e.target.closest('tr.row');if(row){toggle(row);}});
var fm=document.getElementById('f-model'),fs=document.getElementById('f-status'),ft=document.getElementById('f-text'),
    count=document.getElementById('f-count'),rows=body.querySelectorAll('tr.row');
function filter(){var m=fm.value,s=fs.value,t=ft.value.trim().toLowerCase(),n=0;
  rows.forEach(function(r){var ok=(!m||r.dataset.model===m)&&(!s||r.dataset.status===s)&&(!t||r.dataset.text.indexOf(t)>=0);
    r.hidden=!ok;if(!ok){toggle(r,false);}else{n++;}});
  count.textContent=n+' of '+rows.length+' rows';}
[fm,fs].forEach(function(el){el.addEventListener('change',filter);});ft.addEventListener('input',filter);
document.getElementById('f-expand').addEventListener('click',function(){
  var shown=[];rows.forEach(function(r){if(!r.hidden){shown.push(r);}});
  var open=shown.some(function(r){return r.nextElementSibling.hidden;});shown.forEach(function(r){toggle(r,open);});
  this.textContent=open?'collapse shown':'expand shown';});
})();
"""
