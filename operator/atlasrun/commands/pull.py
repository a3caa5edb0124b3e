"""``atlas pull SOURCE OUT``: a cluster run's results (object storage) -> a local results directory.

SOURCE is ``s3://bucket/prefix/<run>/`` (the run's ``status.resultsURI``) or ``atlasrun/NAME``
(read from the cluster with the current kubeconfig). The pods store one per-task record per item
at ``<results URI>/tasks/<model>/<task>.r<N>.json``, the same layout as a local results directory,
so pulling is a copy: every record is appended to ``OUT`` (per-task JSON + ``results.jsonl``),
then ``run.json`` (the AtlasRun's spec, when pulled by name) and ``summary.json`` are written as
``atlas run`` writes them. ``atlas report``, ``compare``, ``rescore`` and ``diagnose`` then work
on it as on a local run. Pulling again adds what finished since (the newest record per key wins).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlasrun import __version__
from atlasrun.cluster.wire.contract import GROUP, PLURAL, VERSION
from atlasrun.cluster.wire.store import (
    DEFAULT_ATTEMPTS,
    DEFAULT_BACKOFF_S,
    S3Results,
    StoreError,
    parse_s3_uri,
)
from atlasrun.errors import EXIT_ITEM_ERRORS, AtlasError, InputError
from atlasrun.runner.local import format_table, write_summary
from atlasrun.runner.record import RUN_FILE, RunRecord
from atlasrun.runspec.run import RunSpecBody
from atlasrun.scoring.store import ResultsDir


@dataclass
class Pulled:
    results: int
    models: list[str]
    summary: dict[str, Any]
    source: str


WHERE = "atlas pull SOURCE"
PROBE_ATTEMPTS = 2  # an unreachable store (DNS, refused port) is reported in seconds, not minutes
PROBE_BACKOFF_S = 0.5
CLUSTER_TIMEOUT_S = 10.0


class Unreachable(AtlasError):
    """The object store or the cluster could not be reached: not bad input (exit 3, not 2)."""

    exit_code = EXIT_ITEM_ERRORS


def _load_cluster_config(kubeconfig: str | None) -> str | None:
    """Load the kubeconfig (or, inside a pod, the in-cluster config); its namespace, if any."""
    from kubernetes import config

    try:
        config.load_kube_config(config_file=kubeconfig)
        context = config.list_kube_config_contexts(config_file=kubeconfig)[1]["context"]
        return str(context.get("namespace") or "default")
    except (config.ConfigException, OSError) as exc:
        if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            shown = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise InputError(
                f"atlasrun/NAME is read from the cluster, but the kubeconfig {shown} cannot be used "
                f"({str(exc).strip() or type(exc).__name__}): give --kubeconfig FILE, or pull the run's "
                "results URI directly (atlas pull s3://BUCKET/PREFIX/RUN/ OUT)",
                where=WHERE,
            ) from exc
    config.load_incluster_config()
    return None


def run_from_cluster(name: str, namespace: str | None, kubeconfig: str | None = None) -> dict[str, Any]:
    """The AtlasRun ``name`` (kubeconfig's current namespace unless ``namespace``)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    current = _load_cluster_config(kubeconfig)  # always: it also points the client at the cluster
    namespace = namespace or current or "default"
    api = client.CustomObjectsApi()
    try:
        return dict(
            api.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=CLUSTER_TIMEOUT_S
            )
        )
    except ApiException as exc:
        raise InputError(
            f"cannot read AtlasRun {namespace}/{name}: {exc.status} {exc.reason}", WHERE
        ) from exc
    except HTTPError as exc:  # refused, no such host, timed out (urllib3 has retried)
        host = api.api_client.configuration.host
        raise Unreachable(f"{WHERE}: cannot reach the cluster at {host}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    """The outer message and the innermost cause's, on one line (urllib3 and botocore wrap the
    socket error: "Failed to resolve ...", "Connection refused")."""
    outer, inner = exc, exc
    for _ in range(10):
        wrapped = (
            inner.__cause__ or getattr(inner, "reason", None) or getattr(inner, "kwargs", {}).get("error")
        )
        if not isinstance(wrapped, BaseException):
            break
        inner = wrapped
    text = str(outer) if inner is outer else f"{outer} ({_root_text(inner)})"
    return " ".join(text.split())[:400] or type(outer).__name__


def _root_text(exc: BaseException) -> str:
    """urllib3 prefixes the connection object: keep what follows it."""
    text = str(exc)
    return text.split("): ", 1)[1] if text.startswith(("<", "AWSHTTP", "HTTP")) and "): " in text else text


def open_results(uri: str, endpoint_url: str | None, warn: Callable[[str], None]) -> S3Results:
    """The run's results store, reached once with few attempts: a wrong endpoint, bucket or key
    fails in seconds; then every request gets the store's full retry policy."""
    store = S3Results(
        uri, endpoint_url, warn=lambda _: None, attempts=PROBE_ATTEMPTS, backoff_s=PROBE_BACKOFF_S
    )
    try:
        store.read_bytes("summary.json")  # a missing object is fine: this checks the store answers
    except StoreError as exc:
        code = _error_code(exc)
        where = store.endpoint_url or "AWS S3"
        if code == "NoSuchBucket":
            raise InputError(f"no bucket {store.location.bucket!r} at {where}", WHERE) from exc
        if exc.denied or code in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
            raise InputError(
                f"{where} refused the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY): {code}", WHERE
            ) from exc
        raise Unreachable(
            f"{WHERE}: cannot reach object storage at {where}: "
            f"{_reason(exc)}; check --s3-endpoint-url / AWS_ENDPOINT_URL and the network"
        ) from exc
    store.warn, store.backoff_s, store.attempts = warn, DEFAULT_BACKOFF_S, DEFAULT_ATTEMPTS
    return store


def _error_code(exc: StoreError) -> str:
    response = getattr(exc.__cause__, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code") or "")


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
    results = open_results(uri, endpoint_url, warn).list_results()
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
    store.write_record(RUN_FILE, record, covers=[r.key for r in results])
    threshold = body.pass_threshold if body else 0.75
    summary = write_summary(store, out.name, [judge] if judge else [], threshold, models=models)
    (out / "pulled.json").write_text(
        json.dumps({"source": source, "results_uri": uri, "results": len(results)}, indent=2) + "\n"
    )
    return Pulled(len(results), models, summary, uri)


def cmd_pull(args: argparse.Namespace) -> int:
    pulled = pull(
        args.source,
        Path(args.out),
        endpoint_url=args.s3_endpoint_url,
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        warn=lambda m: print(m, file=sys.stderr),
    )
    print(format_table(pulled.summary))
    print(f"\npulled {pulled.results} task result(s) from {pulled.source} into {args.out}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "pull",
        help="bring a cluster run's results (S3) into a local results directory",
        description="Copy a cluster run's per-task results from object storage into OUT, then write "
        "run.json and summary.json, so atlas report/compare/rescore/diagnose work on it.",
        epilog="example: atlas pull atlasrun/sweep -n evals runs/sweep && atlas report runs/sweep",
    )
    parser.add_argument("source", metavar="SOURCE", help="s3://bucket/prefix/<run>/ or atlasrun/NAME")
    parser.add_argument("out", metavar="OUT", help="local results directory (created or updated)")
    parser.add_argument("-n", "--namespace", help="namespace of atlasrun/NAME (default: the kubeconfig's)")
    parser.add_argument("--kubeconfig", help="kubeconfig for atlasrun/NAME (default: KUBECONFIG)")
    parser.add_argument("--s3-endpoint-url", help="S3 endpoint (default: AWS_ENDPOINT_URL)")
    parser.set_defaults(func=cmd_pull)
