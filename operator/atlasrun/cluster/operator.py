"""The kopf operator: AtlasRun -> run ConfigMap + NetworkPolicy + a bounded window of Jobs -> status.

Every reconcile (on create/resume/update and on a timer) observes the run's Jobs
and their pods' termination messages, records finished work in
``status.results``, and lets ``reconcile.decide`` choose what to create next.
No exec, no log reading: the runner reports through its termination message and
object storage. Deletion needs no finalizer: everything created carries an owner
reference, so Kubernetes' garbage collector removes Jobs, pods, ConfigMap and policy.

Run with: ``kopf run -m atlasrun.cluster.operator --all-namespaces`` (see charts/).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import kopf
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from atlasrun.cluster import metrics
from atlasrun.cluster.images import unpinned_images
from atlasrun.cluster.manifests import (
    RUNNER,
    owner_reference,
    render_job,
    render_network_policy,
    run_labels,
)
from atlasrun.cluster.reconcile import JobState, decide, parse_summary
from atlasrun.cluster.store import StoreError, download
from atlasrun.errors import AtlasError, format_validation
from atlasrun.redact import scrub
from atlasrun.runspec.run import API_VERSION, RunSpecBody
from atlasrun.servers.catalog import Catalog, ServerSpec, load_catalog
from atlasrun.servers.selection import enabled_servers, task_servers
from atlasrun.tasks.loader import load_tasks
from atlasrun.tasks.model import Task

GROUP, VERSION, PLURAL = "atlasrun.dev", "v1alpha1", "atlasruns"
INTERVAL_S = float(os.environ.get("ATLAS_RECONCILE_INTERVAL", "2"))


def _settings() -> dict[str, str | None]:
    return {
        "runner_image": os.environ.get("ATLAS_RUNNER_IMAGE"),
        "s3_endpoint": os.environ.get("ATLAS_S3_ENDPOINT"),
    }


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    settings.posting.level = 20  # INFO events
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="atlasrun.dev")
    port = int(os.environ.get("ATLAS_METRICS_PORT", "8080"))
    if port:
        metrics.serve(port)


def _catalog(body: RunSpecBody) -> Catalog:
    catalog = load_catalog()
    return catalog.merged(body.servers.inline) if body.servers.inline else catalog


_TASKS_CACHE: dict[tuple[str, str, str, str], Any] = {}
_CREATED: set[tuple[str, str, str]] = set()  # (kind, namespace/name, run uid) this process created or saw


def _load_tasks(body: RunSpecBody, namespace: str) -> list[Task]:
    source = body.tasks
    if source.config_map:
        cm = client.CoreV1Api().read_namespaced_config_map(source.config_map, namespace)
        data = cm.data or {}
        key = (
            source.path
            if source.path in data
            else next(
                (k for k in sorted(data) if k.endswith((".yaml", ".yml", ".json", ".jsonl", ".csv"))), None
            )
        )
        if key is None:
            raise AtlasError(f"ConfigMap {source.config_map!r} has no task file key")
        cache_key = (namespace, source.config_map, cm.metadata.resource_version, key)
        if cache_key not in _TASKS_CACHE:  # parsing thousands of tasks every reconcile would dominate it
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / key
                path.write_text(data[key], encoding="utf-8")
                _TASKS_CACHE.clear()
                _TASKS_CACHE[cache_key] = load_tasks(path)
        loaded = _TASKS_CACHE[cache_key]
    elif source.uri:
        with tempfile.TemporaryDirectory() as tmp:
            loaded = load_tasks(download(source.uri, Path(tmp), endpoint_url=_settings()["s3_endpoint"]))
    elif source.path:
        loaded = load_tasks(source.path)
    else:
        raise AtlasError("tasks.dataset needs a reachable Hugging Face hub; use configMap or uri")
    tasks = loaded.tasks
    if source.ids is not None:
        tasks = [t for t in tasks if t.id in set(source.ids)]
    return tasks[: source.limit] if source.limit else tasks


def _ensure(create: Any, namespace: str, manifest: dict[str, Any]) -> bool:
    """Create unless it exists (409). True if created."""
    try:
        create(namespace, manifest)
        return True
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise


def _list(call: Any, namespace: str, selector: str) -> list[dict[str, Any]]:
    """A list call's items as plain dicts: the client's model deserialisation of a thousand pods
    costs seconds per reconcile; the JSON is all we read."""
    response = call(namespace, label_selector=selector, _preload_content=False)
    return list(json.loads(response.data).get("items") or [])


def _observe(namespace: str, run: str, recorded: dict[str, Any]) -> list[JobState]:
    """The run's Jobs, with their runner's termination message (pods of recorded Jobs are skipped)."""
    selector = ",".join(f"{k}={v}" for k, v in run_labels(run).items())
    messages: dict[str, str] = {}
    for pod in _list(client.CoreV1Api().list_namespaced_pod, namespace, selector):
        job = (pod["metadata"].get("labels") or {}).get("job-name")
        if not job or job in recorded:
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            if status.get("name") == RUNNER and terminated.get("message"):
                messages[job] = terminated["message"]
    states = []
    for job in _list(client.BatchV1Api().list_namespaced_job, namespace, selector):
        name, st = job["metadata"]["name"], job.get("status") or {}
        conditions = {c["type"]: c for c in st.get("conditions") or []}
        failed = conditions.get("Failed", {}).get("status") == "True"
        succeeded = conditions.get("Complete", {}).get("status") == "True"
        states.append(
            JobState(
                name=name,
                active=bool(st.get("active")),
                succeeded=succeeded,
                failed=failed,
                summary=parse_summary(messages.get(name)),
                failure_reason=conditions["Failed"].get("message") if failed else None,
            )
        )
    return states


def _condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": scrub(message)[:1000],
        "lastTransitionTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _blocked(patch: kopf.Patch, body: Any, reason: str, message: str) -> None:
    patch.status["phase"] = "Blocked"
    patch.status["conditions"] = [_condition("Ready", False, reason, message)]
    if (body.get("status") or {}).get("phase") != "Blocked":
        kopf.warn(body, reason=reason, message=scrub(message))
    metrics.run_phase(body["metadata"]["name"], "Blocked")


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@kopf.timer(GROUP, VERSION, PLURAL, interval=INTERVAL_S, initial_delay=INTERVAL_S)
def reconcile(
    name: str,
    namespace: str,
    uid: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    body: Any,
    patch: kopf.Patch,
    meta: dict[str, Any],
    **_: Any,
) -> None:
    if (status or {}).get("phase") == "Succeeded" and status.get("observedGeneration") == meta.get(
        "generation"
    ):
        return
    try:
        run_body = RunSpecBody.model_validate(dict(spec))
    except ValidationError as exc:
        _blocked(patch, body, "InvalidSpec", format_validation(exc))
        return
    settings = _settings()
    catalog = _catalog(run_body)
    runner_image = run_body.cluster.runner_image or settings["runner_image"]
    if not runner_image:
        _blocked(patch, body, "NoRunnerImage", "set spec.cluster.runnerImage (or the operator's default)")
        return
    unpinned = unpinned_images(run_body, catalog, runner_image=runner_image)
    if unpinned and not run_body.cluster.allow_unpinned_images:
        _blocked(
            patch,
            body,
            "UnpinnedImage",
            f"images must be pinned by digest (name@sha256:...): {', '.join(unpinned)}; "
            "set spec.cluster.allowUnpinnedImages to accept tags",
        )
        return
    try:
        tasks = _load_tasks(run_body, namespace)
    except (AtlasError, StoreError, ApiException, OSError) as exc:
        _blocked(patch, body, "TasksUnavailable", str(exc))
        return
    enabled = set(enabled_servers(run_body.servers.enabled, catalog.by_name()))
    runnable, excluded = [], {}
    for task in tasks:
        missing = [
            s
            for s in task_servers(task, enabled).required
            if s not in enabled or not catalog.by_name().get(s) or not catalog.get(s).image
        ]
        if missing:
            excluded[task.id] = f"needs server(s) not enabled or without an image: {', '.join(missing)}"
        else:
            runnable.append(task)

    results_uri = _results_uri(run_body, name)
    configmap = f"atlasrun-{name}"
    core, batch, networking = client.CoreV1Api(), client.BatchV1Api(), client.NetworkingV1Api()
    owner = owner_reference(name, uid)
    if ("ConfigMap", f"{namespace}/{configmap}", uid) not in _CREATED:
        run_file = {
            "apiVersion": API_VERSION,
            "kind": "AtlasRun",
            "metadata": {"name": name},
            "spec": dict(spec),
        }
        tasks_doc = {"tasks": [t.model_dump(mode="json", exclude={"source"}) for t in runnable]}
        _ensure(
            core.create_namespaced_config_map,
            namespace,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": configmap, "labels": run_labels(name), "ownerReferences": [owner]},
                "data": {"run.yaml": yaml.safe_dump(run_file), "tasks.yaml": yaml.safe_dump(tasks_doc)},
            },
        )
        _CREATED.add(("ConfigMap", f"{namespace}/{configmap}", uid))
    servers_used = _servers_for(runnable, catalog, enabled)
    policy = render_network_policy(
        name, namespace, uid, run_body, servers_used, s3_endpoint=settings["s3_endpoint"]
    )
    if policy and ("NetworkPolicy", f"{namespace}/{name}", uid) not in _CREATED:
        if policy["kind"] == "NetworkPolicy":
            _ensure(networking.create_namespaced_network_policy, namespace, policy)
        else:
            _ensure(
                lambda ns, m: client.CustomObjectsApi().create_namespaced_custom_object(
                    "cilium.io", "v2", ns, "ciliumnetworkpolicies", m
                ),
                namespace,
                policy,
            )
        _CREATED.add(("NetworkPolicy", f"{namespace}/{name}", uid))

    recorded = dict((status or {}).get("results") or {})
    decision = decide(name, run_body, runnable, excluded, _observe(namespace, name, recorded), recorded)
    for item in decision.create:
        servers = [
            catalog.get(s)
            for s in task_servers(item.task, enabled).connect
            if catalog.by_name().get(s) and catalog.get(s).image
        ]
        model = next(m for m in run_body.models if m.name == item.model)
        job = render_job(
            name,
            uid,
            namespace,
            run_body,
            model,
            item.task.id,
            item.repeat,
            servers,
            runner_image=runner_image,
            spec_configmap=configmap,
            results_uri=results_uri,
            s3_secret=run_body.output.credentials_secret,
            s3_endpoint=settings["s3_endpoint"],
            task_limits=item.task.limits,
        )
        _ensure(batch.create_namespaced_job, namespace, job)
    for job_to_cancel in decision.delete:
        try:
            batch.delete_namespaced_job(job_to_cancel, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise
    for record in decision.newly_recorded.values():
        metrics.task_finished(name, record)
    if decision.newly_recorded:  # a merge patch: adds these keys to status.results
        patch.status["results"] = decision.newly_recorded
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch.status.update(
        {
            **decision.status,
            "phase": decision.phase,
            "resultsURI": results_uri,
            "observedGeneration": meta.get("generation"),
        }
    )
    if not (status or {}).get("startTime"):
        patch.status["startTime"] = now
    if decision.phase == "Succeeded" and not (status or {}).get("completionTime"):
        patch.status["completionTime"] = now
    patch.status["conditions"] = [
        _condition(
            "Ready",
            decision.phase != "Blocked",
            decision.phase,
            f"{decision.status['progress']} work items finished",
        )
    ]
    metrics.run_status(name, decision.phase, decision.status["models"])
    if decision.create and not recorded and not decision.newly_recorded:
        kopf.info(body, reason="Started", message=f"created {len(decision.create)} Job(s)")
    if decision.phase == "Succeeded" and (status or {}).get("phase") != "Succeeded":
        kopf.info(
            body,
            reason="Completed",
            message=f"all {decision.status['progress']} work items finished; "
            f"pass rates {decision.status['passRates']}",
        )
    for key, record in decision.newly_recorded.items():
        if record["s"] == "error":
            kopf.warn(body, reason="TaskError", message=scrub(f"{key}: {record.get('r')}"))


def _servers_for(tasks: list[Task], catalog: Catalog, enabled: set[str]) -> list[ServerSpec]:
    names = dict.fromkeys(n for task in tasks for n in task_servers(task, enabled).connect)
    return [catalog.get(n) for n in names if catalog.by_name().get(n) and catalog.get(n).image]


def _results_uri(body: RunSpecBody, run: str) -> str:
    if not body.output.bucket:
        return ""
    prefix = body.output.prefix.strip("/")
    return f"s3://{body.output.bucket}/{prefix + '/' if prefix else ''}{run}/"
