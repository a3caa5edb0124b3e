"""The operator's metrics as a platform team sees them: a real Prometheus scraping the real operator.

Real: kube-apiserver + kube-controller-manager (Job controller, garbage collector), the chart's
RBAC, the operator as its own process (``kopf run``), moto's S3 server, Prometheus (the Debian
package) scraping the operator's ``/metrics`` the way the chart's ServiceMonitor does (job = the
metrics Service's name, the release's namespace as target label, ``honor_labels``). Stand-in: the
node, in instant mode: each pod finishes at once with the termination summary a runner would
write (tokens, cost, 429s, tool errors, error kinds), so the numbers are known.

- docs/metrics.md's metrics table is what the operator exports; every panel of both dashboards returns
  data; every alert expression evaluates and the ones that should hold do (a blocked run, a model
  with many errors and 429s).
- The finished-items counters survive an operator restart without a reset (``resets() == 0``).
- Deleting a run removes its series from the endpoint and from Prometheus.
- With leader election only the leader exports per-run series; the standby takes over.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from atlasrun.servers.instance import free_port
from cluster import test_operator_e2e as e2e
from cluster.controlplane import ControlPlane, wait_for
from cluster.node_standin import NodeStandIn
from cluster.pod_unit import pod_item
from cluster.tenant import prepare_tenant
from cluster.test_operator_e2e import (
    GROUP_PATH,
    TASK_IDS,
    Operator,
    run_manifest,
    starter_tasks,
    wait_phase,
)

cp, s3 = e2e.cp, e2e.s3
pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "atlas-metrics"  # where the runs live
OPERATOR_NAMESPACE = "atlasrun-system"  # the release's namespace: the scrape target's label
METRICS_JOB = "atlasrun-metrics"  # the metrics Service's name: the ServiceMonitor's job label
RATE_WINDOW = "5m"  # Grafana's $__rate_interval / $__range over the test's few minutes


def runner_summary(pod: dict[str, Any], s3: str) -> tuple[int, str]:
    """What ``atlas run-task`` would report for the pod's item: ``sharp`` passes everything;
    ``sloppy`` errors on tasks 0 and 3 (provider after nine 429s; an MCP sidecar crash), fails 1
    and 4 (with tool errors), passes 2 and 5."""
    unit, task, repeat = pod_item(pod, s3)
    i = TASK_IDS.index(task)
    summary: dict[str, Any] = {
        "task": task,
        "model": unit.model,
        "repeat": repeat,
        "status": "scored",
        "error_kind": None,
        "passed": True,
        "coverage": 1.0,
        "tool_calls": 3,
        "wall_s": 2.0 + i,
        "tokens": {"prompt": 1000, "completion": 200},
        "cost_usd": 0.01,
        "tool_errors": {},
        "provider_retries": 0,
        "rate_limited": 0,
        "exit_code": 0,
        "cpu_s": 0.5 + 0.25 * i,  # the pod's CPU-seconds: sharp's 6 pods 6.75 in all
    }
    if unit.model == "sloppy" and i % 3 == 0:
        kind = "provider" if i == 0 else "server_transport"
        summary.update(status="error", error_kind=kind, passed=None, coverage=None, reason=f"{kind} failed")
        if i == 0:
            summary.update(provider_retries=9, rate_limited=9, tool_calls=0)
        else:
            summary["tool_errors"] = {"git/transport": 1}
    elif unit.model == "sloppy" and i % 3 == 1:
        summary.update(passed=False, coverage=0.5, tool_errors={"filesystem/tool_error": 2})
    return 0, json.dumps(summary)


class Prometheus:
    """Prometheus on 127.0.0.1 scraping one target every second, labelled like the ServiceMonitor's."""

    def __init__(self, target: str, workdir: Path) -> None:
        from charts.tools import ensure_prometheus

        self.binary = ensure_prometheus().prometheus
        self.workdir = workdir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": METRICS_JOB,
                    "honor_labels": True,  # the ServiceMonitor's honorLabels: the runs' namespace stays
                    "static_configs": [{"targets": [target], "labels": {"namespace": OPERATOR_NAMESPACE}}],
                }
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        with open(self.workdir / "prometheus.log", "wb") as log:
            self.proc = subprocess.Popen(
                [
                    str(self.binary),
                    f"--config.file={self.workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{(self.workdir / 'prometheus.log').read_text()}")
            try:
                return httpx.get(f"{self.base}/-/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, 60, "prometheus ready", interval=0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def query(self, expr: str) -> list[dict[str, Any]]:
        """``/api/v1/query``: the result vector; fails the test on a PromQL error."""
        r = httpx.get(f"{self.base}/api/v1/query", params={"query": expr}, timeout=10)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", f"{expr}\n{body}"
        assert body["data"]["resultType"] in ("vector", "scalar"), body
        return list(body["data"]["result"])

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None


def scrape(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


@pytest.fixture(scope="module")
def stack(cp: ControlPlane, s3: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    api, kubeconfig = prepare_tenant(cp, NAMESPACE, "sk-metrics-secret", starter_tasks())
    port = free_port()
    operator = Operator(kubeconfig, NAMESPACE, s3, metrics_port=port)
    workdir = tmp_path_factory.mktemp("prometheus")
    with (
        NodeStandIn(api, NAMESPACE, None, instant=lambda pod: runner_summary(pod, s3)) as node,
        Prometheus(f"127.0.0.1:{port}", workdir) as prom,
    ):
        operator.start()
        try:
            wait_for(
                lambda: prom.value(f'up{{job="{METRICS_JOB}"}}') == 1, 90, "first scrape of the operator"
            )
            api_base = "http://127.0.0.1:9/v1"  # never called: the node stand-in answers for the runner
            api.post(
                f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns", json=run_manifest("sweep", api_base)
            ).raise_for_status()
            unpinned = run_manifest("unpinned", api_base)
            unpinned["spec"]["cluster"]["runnerImage"] = "registry.example/atlasrun/runner:latest"
            api.post(f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns", json=unpinned).raise_for_status()
            run = wait_phase(api, NAMESPACE, "sweep", {"Succeeded", "Failed"}, timeout=300)
            wait_phase(api, NAMESPACE, "unpinned", {"Blocked"}, timeout=60)
            wait_for(
                lambda: prom.value('sum(atlasrun_items_total{run="sweep"})') == 12,
                60,
                "Prometheus has the run's 12 counted items",
            )
            yield {"api": api, "prom": prom, "operator": operator, "port": port, "run": run, "node": node}
        finally:
            operator.stop()


def grafana_to_promql(expr: str) -> str:
    """A panel expression as Grafana sends it with "All" selected."""
    for variable in ("namespace", "run", "model"):
        expr = expr.replace(f"${variable}", ".*")
    return expr.replace("$__rate_interval", RATE_WINDOW).replace("$__range", RATE_WINDOW)


def dashboards() -> dict[str, dict[str, Any]]:
    return {
        p.name: json.loads(p.read_text())
        for p in sorted((REPO / "charts/atlasrun/dashboards").glob("*.json"))
    }


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def test_the_run_is_counted_as_the_summaries_say(stack: dict[str, Any]) -> None:
    status = stack["run"]["status"]
    assert stack["run"]["status"]["phase"] == "Succeeded" and not stack["node"].errors
    sloppy = status["models"]["sloppy"]
    assert (sloppy["passed"], sloppy["failed"], sloppy["errored"]) == (2, 2, 2)
    assert sloppy["usage"]["rateLimited"] == 9 and sloppy["usage"]["errors"] == {
        "provider": 1,
        "server_transport": 1,
    }
    prom = stack["prom"]
    by = 'namespace="atlas-metrics", run="sweep"'
    assert prom.value(f'atlasrun_items_total{{{by}, model="sloppy", outcome="errored"}}') == 2
    assert prom.value(f'atlasrun_provider_rate_limited_total{{{by}, model="sloppy"}}') == 9
    assert prom.value(f'sum(atlasrun_tokens_total{{{by}, type="prompt"}})') == 12000
    assert prom.value(f"sum(atlasrun_cost_usd_total{{{by}}})") == pytest.approx(0.12)
    assert (
        prom.value(
            f'atlasrun_tool_errors_total{{{by}, model="sloppy", server="filesystem", kind="tool_error"}}'
        )
        == 4
    )
    assert prom.value(f'atlasrun_item_errors_total{{{by}, model="sloppy", kind="server_transport"}}') == 1
    assert prom.value(f'atlasrun_pass_rate{{{by}, model="sharp"}}') == 1.0
    # the pods' cost: one pod per item (no retries), each reporting its CPU-seconds
    sharp = status["models"]["sharp"]["usage"]
    assert (sharp["pods"], sharp["cpuSeconds"], sharp["podsWithoutCpu"]) == (6, 6.75, 0), sharp
    assert sharp["podSeconds"] >= 0
    assert prom.value(f'atlasrun_pods_finished_total{{{by}, model="sharp"}}') == 6
    assert prom.value(f'atlasrun_cpu_seconds_total{{{by}, model="sharp"}}') == pytest.approx(6.75)
    assert prom.value(f"sum(atlasrun_pods_without_cpu_total{{{by}}})") == 0
    # the run's own namespace on per-run series, the release's on the operator's own
    assert prom.value('count(atlasrun_items_total{namespace="atlas-metrics"})') == 8
    assert not prom.query(f'atlasrun_items_total{{namespace="{OPERATOR_NAMESPACE}"}}')
    assert not prom.query('{exported_namespace!=""}')
    assert prom.value(f'atlasrun_operator_leader{{namespace="{OPERATOR_NAMESPACE}"}}') == 1


def test_every_dashboard_panel_returns_data(stack: dict[str, Any]) -> None:
    prom: Prometheus = stack["prom"]
    checked = 0
    for name, board in dashboards().items():
        for p in panels(board):
            for target in p.get("targets", []):
                expr = grafana_to_promql(target["expr"])
                result = prom.query(expr)
                assert result, f"{name}: panel {p['title']!r} returned no data: {expr}"
                values = [float(s["value"][1]) for s in result]
                assert any(math.isfinite(v) for v in values), (
                    f"{name}: {p['title']!r} has no finite value: {expr}"
                )
                for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")):
                    assert all(label in s["metric"] for s in result), f"{p['title']!r}: no label {label!r}"
                checked += 1
        for variable in board["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
            assert match, variable["definition"]
            selector, label = match.groups()
            result = prom.query(grafana_to_promql(selector))
            assert result and all(label in s["metric"] for s in result), variable["name"]
    assert checked >= 40


def test_alert_expressions_evaluate(stack: dict[str, Any], helm_rules: dict[str, str]) -> None:
    prom: Prometheus = stack["prom"]
    results = {alert: prom.query(expr) for alert, expr in helm_rules.items()}
    firing = {a: {tuple(sorted(s["metric"].items())) for s in r} for a, r in results.items()}
    assert results["AtlasRunOperatorDown"] == [] and results["AtlasRunOperatorNoLeader"] == []
    assert results["AtlasRunReconcileErrors"] == [] and results["AtlasRunStalled"] == []
    assert firing["AtlasRunBlocked"] == {
        (("namespace", NAMESPACE), ("reason", "UnpinnedImage"), ("run", "unpinned"))
    }
    sloppy = {(("model", "sloppy"), ("namespace", NAMESPACE), ("run", "sweep"))}
    assert firing["AtlasRunItemErrorRatioHigh"] == sloppy  # 2 of 6 errored; sharp none
    assert firing["AtlasRunProviderRateLimited"] == sloppy  # 9 429s for 6 items
    # the operator alerts select the target as the ServiceMonitor labels it
    assert prom.query(helm_rules["AtlasRunOperatorDown"].replace(METRICS_JOB, "elsewhere"))  # absent() fires


@pytest.fixture(scope="module")
def helm_rules() -> dict[str, str]:
    """alert -> expr of the chart's PrometheusRule, rendered by helm for this release."""
    from charts.tools import ensure_helm

    proc = subprocess.run(
        [
            str(ensure_helm()),
            "template",
            "atlasrun",
            str(REPO / "charts" / "atlasrun"),
            "--namespace",
            OPERATOR_NAMESPACE,
            "-f",
            str(REPO / "charts" / "atlasrun" / "ci" / "monitoring-values.yaml"),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    rule = next(d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "PrometheusRule")
    return {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}


def test_the_readme_table_is_what_the_running_operator_exports(stack: dict[str, Any]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from test_metrics import readme_table

    exported = {}
    for family in text_string_to_metric_families(scrape(stack["port"])):
        name = family.name + ("_total" if family.type == "counter" else "")
        if name.startswith("atlasrun_") and family.samples and not name.endswith("_created"):
            labels = {k for s in family.samples for k in s.labels if k != "le"}
            exported[name] = (family.type, tuple(sorted(labels)))
    assert exported == readme_table()


def test_finished_items_survive_an_operator_restart(stack: dict[str, Any]) -> None:
    prom: Prometheus = stack["prom"]
    operator: Operator = stack["operator"]
    finished = 'sum(atlasrun_items_total{namespace=~".*"})'
    before = prom.value(finished)
    started = prom.value("max(process_start_time_seconds)")
    operator.stop()
    wait_for(
        lambda: prom.value(f'up{{job="{METRICS_JOB}"}}') == 0,
        30,
        "the scrape fails while the operator is down",
    )
    operator.start()
    wait_for(
        lambda: (
            (prom.value("max(process_start_time_seconds)") or 0) > (started or 0)
            and prom.value(f'up{{job="{METRICS_JOB}"}}') == 1
            and prom.value(finished) is not None
        ),
        120,
        "the restarted operator scraped",
    )
    wait_for(lambda: prom.value(finished) == before, 60, "the finished items exported again")
    assert before == 12
    # no counter reset across the restart: rate() and increase() see no jump
    assert prom.value(f"sum(resets(atlasrun_items_total[{RATE_WINDOW}]))") == 0
    assert prom.value(f"sum(resets(atlasrun_cost_usd_total[{RATE_WINDOW}]))") == 0


def test_deleting_a_run_removes_its_series(stack: dict[str, Any]) -> None:
    api, prom, port = stack["api"], stack["prom"], stack["port"]
    assert 'run="sweep"' in scrape(port)
    api.delete(f"{GROUP_PATH}/namespaces/{NAMESPACE}/atlasruns/sweep").raise_for_status()
    wait_for(lambda: 'run="sweep"' not in scrape(port), 60, "the run's series gone from /metrics")
    wait_for(lambda: not prom.query('{run="sweep"}'), 30, "the run's series stale in Prometheus")
    assert 'run="unpinned"' in scrape(port)  # the other run's stay
    assert prom.query('atlasrun_run_blocked{run="unpinned"}')


def test_only_the_leader_exports_run_series(stack: dict[str, Any]) -> None:
    """Two replicas with Lease election: the leader exports the runs' series, the standby only its
    own health (else every per-run sum would double); when the leader dies the other takes over."""
    stack["operator"].stop()
    replicas = []
    for i in range(2):
        replica = Operator(
            stack["operator"].env["KUBECONFIG"],
            NAMESPACE,
            stack["operator"].env["ATLASRUN_S3_ENDPOINT"],
            free_port(),
        )
        replica.env.update(
            {
                "ATLASRUN_LEADER_ELECTION": "1",
                "ATLASRUN_LEADER_NAMESPACE": NAMESPACE,
                "ATLASRUN_LEASE_SECONDS": "6",
                "ATLASRUN_LEASE_RENEW_SECONDS": "2",
            }
        )
        replica.log = replica.log.with_name(f"atlas-operator-{NAMESPACE}-replica{i}.log")
        replica.start()
        replicas.append(replica)

    def roles() -> dict[int, tuple[float, bool]]:
        """replica index -> (atlasrun_operator_leader, exports the blocked run's series)."""
        found = {}
        for i, replica in enumerate(replicas):
            if replica.proc is None or replica.proc.poll() is not None:
                continue
            try:
                text = scrape(int(replica.env["ATLASRUN_METRICS_PORT"]))
            except httpx.HTTPError:
                continue
            leader = re.search(r"^atlasrun_operator_leader (\S+)$", text, re.M)
            if leader:
                found[i] = (float(leader.group(1)), 'run="unpinned"' in text)
        return found

    try:
        wait_for(
            lambda: sorted(roles().values()) == [(0.0, False), (1.0, True)],
            90,
            "one leader exporting, one standby",
        )
        leader = next(i for i, (lead, _) in roles().items() if lead == 1.0)
        replicas[leader].stop(signal.SIGKILL)
        wait_for(
            lambda: list(roles().values()) == [(1.0, True)], 90, "the standby took over and exports the runs"
        )
    finally:
        for replica in replicas:
            replica.stop()
