"""``atlas pull``: a cluster run's results (object storage) -> a local results directory.

The pods store one per-task record per item at ``<results URI>/tasks/<model>/<task>.r<N>.json``,
the same layout as a local results directory, so pulling is a copy: every record is appended to
``OUT`` (per-task JSON + ``results.jsonl``), then ``run.json`` (the AtlasRun's spec, when pulled
by name) and ``summary.json`` are written as ``atlas run`` writes them. ``atlas report``,
``compare``, ``rescore`` and ``diagnose`` then work on it as on a local run. Pulling again adds
what finished since (the newest record per key wins).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlasrun import __version__
from atlasrun.cluster.contract import GROUP, PLURAL, VERSION
from atlasrun.cluster.store import S3Results, parse_s3_uri
from atlasrun.errors import InputError
from atlasrun.runner.local import write_summary
from atlasrun.runner.record import RUN_FILE, RunRecord
from atlasrun.runspec.run import RunSpecBody
from atlasrun.scoring.store import ResultsDir


@dataclass
class Pulled:
    results: int
    models: list[str]
    summary: dict[str, Any]
    source: str


def run_from_cluster(name: str, namespace: str | None, kubeconfig: str | None = None) -> dict[str, Any]:
    """The AtlasRun ``name`` (kubeconfig's current namespace unless ``namespace``)."""
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    try:
        config.load_kube_config(config_file=kubeconfig)
        namespace = namespace or config.list_kube_config_contexts(config_file=kubeconfig)[1]["context"].get(
            "namespace", "default"
        )
    except config.ConfigException:
        config.load_incluster_config()
        namespace = namespace or "default"
    try:
        return dict(
            client.CustomObjectsApi().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        )
    except ApiException as exc:
        raise InputError(
            f"cannot read AtlasRun {namespace}/{name}: {exc.status} {exc.reason}", where="atlas pull"
        ) from exc


def pull(
    source: str,
    out: Path,
    *,
    endpoint_url: str | None = None,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    warn: Callable[[str], None] = print,
    read_run: Callable[[str, str | None, str | None], dict[str, Any]] = run_from_cluster,
) -> Pulled:
    """Pull ``source`` (``s3://bucket/prefix/`` or ``atlasrun/NAME``) into ``out``."""
    run: dict[str, Any] | None = None
    if source.startswith("s3://"):
        uri = source if source.endswith("/") else source + "/"
        parse_s3_uri(uri, "atlas pull SOURCE")
    elif source.startswith(("atlasrun/", "atlasruns/", "ar/")):
        name = source.split("/", 1)[1]
        if not name:
            raise InputError("give the run's name: atlasrun/NAME", where="atlas pull SOURCE")
        run = read_run(name, namespace, kubeconfig)
        uri = str((run.get("status") or {}).get("resultsURI") or "")
        if not uri:
            raise InputError(
                f"AtlasRun {name} has no status.resultsURI yet (no spec.output.bucket, or not reconciled)",
                where="atlas pull SOURCE",
            )
    else:
        raise InputError(f"{source!r}: give s3://bucket/prefix/ or atlasrun/NAME", where="atlas pull SOURCE")
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a directory", where=str(out))
    results = S3Results(uri, endpoint_url, warn=warn).list_results()
    if not results:
        raise InputError(f"no task results under {uri}tasks/", where="atlas pull SOURCE")
    out.mkdir(parents=True, exist_ok=True)
    store = ResultsDir(out)
    for result in sorted(results, key=lambda r: r.key):
        store.append(result)
    body = RunSpecBody.model_validate(run["spec"]) if run else None
    judge = next((r.judge for r in results if r.judge), None)
    models = [m.name for m in body.models] if body else sorted({r.model for r in results})
    record = RunRecord(
        atlasrun_version=__version__,
        started=(run or {}).get("status", {}).get("startTime") or dt.datetime.now(dt.UTC).isoformat(),
        spec={k: v for k, v in run.items() if k in ("apiVersion", "kind", "metadata", "spec")}
        if run
        else None,
        judge=judge,
        tasks=len({r.task_id for r in results}),
    )
    if record.spec:
        record.spec["metadata"] = {"name": run["metadata"]["name"]} if run else {}
    store.write_record(RUN_FILE, record)
    threshold = body.pass_threshold if body else 0.75
    summary = write_summary(store, out.name, [judge] if judge else [], threshold, models=models)
    (out / "pulled.json").write_text(
        json.dumps({"source": source, "results_uri": uri, "results": len(results)}, indent=2) + "\n"
    )
    return Pulled(len(results), models, summary, uri)
