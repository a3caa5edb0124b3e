"""The chart's monitoring objects, checked with the real tools: helm renders them, ``promtool check
rules`` and ``promtool test rules`` run the alerts (each fires on a synthetic bad series, with its
severity and runbook, and stays quiet on a healthy one), and the dashboards are well-formed
ConfigMaps for the Grafana sidecar whose panels use the operator's metrics.

Every panel and alert expression against a real Prometheus scraping the real operator:
tests/cluster/test_metrics_operator.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

import test_chart as chart
from atlasrun.cluster.operator.metrics import RUN_FAMILIES
from test_chart import CHART, METRICS_JOB, NAMESPACE, ROOT, dashboards, of_kind, one, panels, render

# the chart module's fixtures: helm and promtool, and the chart rendered with each ci/ variant
helm, prom_tools, rendered = chart.helm, chart.prom_tools, chart.rendered

DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_URL = "https://github.com/atlasrun/atlasrun/blob/main/docs/runbooks.md"
SEVERITIES = {
    "AtlasRunOperatorDown": "critical",
    "AtlasRunOperatorNoLeader": "critical",
    "AtlasRunReconcileErrors": "critical",
    "AtlasRunReconcileQueueSlow": "warning",
    "AtlasRunBlocked": "warning",
    "AtlasRunStalled": "warning",
    "AtlasRunItemErrorRatioHigh": "warning",
    "AtlasRunProviderRateLimited": "info",
    "AtlasRunPassRateDrop": "info",
}
OPERATOR_METRICS = {
    "atlasrun_operator_reconcile_total",
    "atlasrun_operator_reconcile_duration_seconds_bucket",
    "atlasrun_operator_queue_depth",
    "atlasrun_operator_queue_wait_seconds_bucket",
    "atlasrun_operator_leader",
    "atlasrun_operator_build_info",
}


def alert_rules(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}


def runbook_anchors() -> set[str]:
    """GitHub's anchors of the runbook's ``##`` headings."""
    return {
        re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
        for line in RUNBOOKS.read_text().splitlines()
        if line.startswith("## ")
    }


def test_monitoring_objects_are_well_formed(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """ServiceMonitor and PrometheusRule, checked against the prometheus-operator API by hand."""
    docs = rendered["monitoring"]
    service = one(docs, "Service")
    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert (
        sm["metadata"]["namespace"] == NAMESPACE
        and sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    )
    assert set(sm["spec"]) == {"selector", "namespaceSelector", "endpoints"}
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert (
        endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["path"] == "/metrics"
    )
    assert endpoint["honorLabels"] is True  # the runs' own namespace label is kept
    assert DURATION.match(endpoint["interval"]) and DURATION.match(endpoint["scrapeTimeout"])
    assert "jobLabel" not in sm["spec"]  # job = the Service's name, which the operator alerts match

    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and set(rule["spec"]) == {"groups"}
    anchors = runbook_anchors()
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["name"]
        for r in group["rules"]:
            assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
            assert isinstance(r["expr"], str) and DURATION.match(r["for"])
            assert r["annotations"]["summary"] and r["annotations"]["description"]
            assert all(isinstance(v, str) for v in (r["labels"] | r["annotations"]).values())
            url, _, anchor = r["annotations"]["runbook_url"].partition("#")
            assert url == RUNBOOK_URL and anchor == r["alert"].lower() and anchor in anchors, r["alert"]
    alerts = alert_rules(docs)
    assert {a: r["labels"]["severity"] for a, r in alerts.items()} == SEVERITIES
    for name in ("AtlasRunOperatorDown", "AtlasRunOperatorNoLeader", "AtlasRunReconcileErrors"):
        assert f'job="{METRICS_JOB}", namespace="{NAMESPACE}"' in alerts[name]["expr"], name
    # every runbook section belongs to an alert
    assert anchors == {a.lower() for a in alerts}


def test_a_group_with_every_alert_disabled_is_left_out(helm: Path) -> None:
    off = [
        f"prometheusRule.alerts.{a}.enabled=false"
        for a in ("operatorDown", "noLeader", "reconcileErrors", "queueBacklog")
    ]
    docs = render(
        helm, "-f", str(CHART / "ci" / "monitoring-values.yaml"), *(x for o in off for x in ("--set", o))
    )
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    assert [g["name"] for g in groups] == ["atlasrun.runs"] and all(g["rules"] for g in groups)


def test_runbook_url_and_alerts_follow_the_values(helm: Path) -> None:
    docs = render(
        helm,
        "-f",
        str(CHART / "ci" / "monitoring-values.yaml"),
        "--set",
        "prometheusRule.runbookURL=https://wiki.example/atlasrun",
        "--set",
        "prometheusRule.alerts.passRateDrop.enabled=false",
        "--set",
        "prometheusRule.alerts.runBlocked.severity=critical",
    )
    alerts = alert_rules(docs)
    assert "AtlasRunPassRateDrop" not in alerts and len(alerts) == len(SEVERITIES) - 1
    assert alerts["AtlasRunBlocked"]["labels"]["severity"] == "critical"
    assert (
        alerts["AtlasRunBlocked"]["annotations"]["runbook_url"]
        == "https://wiki.example/atlasrun#atlasrunblocked"
    )


# ---------------------------------------------------------------- alert rules with promtool


def rules_file(rendered: dict[str, list[dict[str, Any]]], tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(one(rendered["monitoring"], "PrometheusRule")["spec"], sort_keys=False))
    return path


def test_alert_rules_pass_promtool_check(
    rendered: dict[str, list[dict[str, Any]]], prom_tools: Any, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [str(prom_tools.promtool), "check", "rules", str(rules_file(rendered, tmp_path))],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(SEVERITIES)} rules found" in proc.stdout, proc.stdout


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    return {"series": name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


def _expand(text: str, labels: dict[str, str], value: str | None) -> str:
    """An annotation as Prometheus renders it: ``$labels.x`` and the ``$value`` (given formatted)."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
    return re.sub(r"\{\{ \$value[^}]*\}\}", lambda m: value or "?", text)


def test_alerts_fire_on_bad_series_only(
    rendered: dict[str, list[dict[str, Any]]], prom_tools: Any, tmp_path: Path
) -> None:
    """``promtool test rules``: each alert fires for the broken target/run/model and not for the
    healthy one, with its severity, the rendered annotations and the runbook link."""
    rules = alert_rules(rendered["monitoring"])
    target = {"job": METRICS_JOB, "namespace": NAMESPACE, "instance": "10.1.2.3:8080"}
    scraped = {"job": METRICS_JOB, "instance": "10.1.2.3:8080"}  # per-run series keep their namespace
    gpt = {**scraped, "namespace": "team-a", "run": "sweep", "model": "gpt"}
    claude = {**gpt, "model": "claude"}
    series = [
        # the operator's target goes down at minute 10; before that, no replica leads
        _series("up", target, "1x9 0x30"),
        _series("atlasrun_operator_leader", target, "1x9 0x30"),
        # 60% of the passes fail
        _series("atlasrun_operator_reconcile_total", {**target, "result": "error"}, "0+6x60"),
        _series("atlasrun_operator_reconcile_total", {**target, "result": "success"}, "0+4x60"),
        # every due run waits between 60 and 120 s
        *(
            _series("atlasrun_operator_queue_wait_seconds_bucket", {**target, "le": le}, values)
            for le, values in (("30", "0x60"), ("60", "0x60"), ("120", "0+1x60"), ("+Inf", "0+1x60"))
        ),
        # one run blocked by quota; one Running run with no progress, another moving
        _series(
            "atlasrun_run_blocked",
            {**scraped, "namespace": "team-a", "run": "stuck", "reason": "QuotaExceeded"},
            "1x40",
        ),
        _series(
            "atlasrun_run_phase",
            {**scraped, "namespace": "team-b", "run": "idle", "phase": "Running"},
            "1x40",
        ),
        _series(
            "atlasrun_items_total",
            {**scraped, "namespace": "team-b", "run": "idle", "model": "m", "outcome": "passed"},
            "5x40",
        ),
        _series(
            "atlasrun_run_phase",
            {**scraped, "namespace": "team-a", "run": "sweep", "phase": "Running"},
            "1x40",
        ),
        # 30% of gpt's items error, 5% of claude's; gpt gets 2 HTTP 429s per item
        _series("atlasrun_items_total", {**gpt, "outcome": "passed"}, "0+7x40"),
        _series("atlasrun_items_total", {**gpt, "outcome": "errored"}, "0+3x40"),
        _series("atlasrun_items_total", {**claude, "outcome": "passed"}, "0+19x40"),
        _series("atlasrun_items_total", {**claude, "outcome": "errored"}, "0+1x40"),
        _series("atlasrun_provider_rate_limited_total", gpt, "0+20x40"),
        _series("atlasrun_provider_rate_limited_total", claude, "0x40"),
        # gpt's pass rate falls from 0.9 to 0.6 at minute 10; claude's holds
        _series("atlasrun_pass_rate", gpt, "0.9x9 0.6x30"),
        _series("atlasrun_pass_rate", claude, "0.8x40"),
    ]

    def fires(alert: str, at: str, labels: dict[str, str], value: str | None = None) -> dict[str, Any]:
        annotations = {k: _expand(v, labels, value) for k, v in rules[alert]["annotations"].items()}
        return {
            "eval_time": at,
            "alertname": alert,
            "exp_alerts": [
                {"exp_labels": {"severity": SEVERITIES[alert], **labels}, "exp_annotations": annotations}
            ],
        }

    def quiet(alert: str, at: str) -> dict[str, Any]:
        return {"eval_time": at, "alertname": alert, "exp_alerts": []}

    run_a = {"namespace": "team-a", "run": "sweep", "model": "gpt"}
    checks = [
        quiet("AtlasRunOperatorDown", "8m"),
        fires("AtlasRunOperatorDown", "17m", {}),
        quiet("AtlasRunOperatorNoLeader", "8m"),
        fires("AtlasRunOperatorNoLeader", "17m", {}),
        quiet("AtlasRunReconcileErrors", "10m"),  # pending for 15m
        fires("AtlasRunReconcileErrors", "30m", {}, "60%"),
        quiet("AtlasRunReconcileQueueSlow", "10m"),
        fires("AtlasRunReconcileQueueSlow", "30m", {}, "1m 57s"),
        quiet("AtlasRunBlocked", "10m"),
        fires("AtlasRunBlocked", "20m", {"namespace": "team-a", "run": "stuck", "reason": "QuotaExceeded"}),
        # team-b/idle is stalled; team-a/sweep counts items every minute
        fires("AtlasRunStalled", "20m", {"namespace": "team-b", "run": "idle"}),
        fires("AtlasRunItemErrorRatioHigh", "25m", run_a, "30%"),
        fires("AtlasRunProviderRateLimited", "30m", run_a, "2.0"),
        quiet("AtlasRunPassRateDrop", "8m"),
        fires("AtlasRunPassRateDrop", "30m", {**gpt}, "30%"),
    ]
    assert {c["alertname"] for c in checks} == set(SEVERITIES)
    tests = {
        "rule_files": [str(rules_file(rendered, tmp_path))],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}],
    }
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = subprocess.run(
        [str(prom_tools.promtool), "test", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- Grafana dashboards


def test_dashboards_are_configmaps_for_the_grafana_sidecar(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert not dashboards(rendered["minimal"])
    found = dashboards(rendered["monitoring"])
    files = {p.name for p in (CHART / "dashboards").glob("*.json")}
    assert set(found) == files == {"atlasrun-platform.json", "atlasrun-evaluator.json"}
    for cm in of_kind(rendered["monitoring"], "ConfigMap"):
        if cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1":
            assert cm["metadata"]["annotations"] == {"grafana_folder": "AtlasRun"}
    used: set[str] = set()
    for name, board in found.items():
        assert board["uid"] and board["title"].startswith("AtlasRun / ") and board["schemaVersion"] >= 36, (
            name
        )
        ids = [p["id"] for p in panels(board)]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        cells: set[tuple[int, int]] = set()
        for p in panels(board):
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24, p["title"]
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & mine, f"{name}: panel {p['title']!r} overlaps another"
            cells |= mine
            if p["type"] != "row":
                assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
                assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
                assert p["description"], p["title"]
        exprs = " ".join(t["expr"] for p in panels(board) for t in p.get("targets", []))
        used |= set(re.findall(r"\batlasrun_\w+", exprs))
        if name == "atlasrun-platform.json":
            assert used >= OPERATOR_METRICS, OPERATOR_METRICS - used
        else:
            for needed in (
                "atlasrun_pass_rate_ci95_lower",
                "atlasrun_cost_usd_total",
                "histogram_quantile(0.95,",
            ):
                assert needed in exprs, f"{name}: no panel uses {needed}"
    # every per-run family the operator exports is on some panel
    exported = {n + ("_total" if kind == "counter" else "") for n, (kind, _, _) in RUN_FAMILIES.items()}
    assert exported <= used, exported - used
