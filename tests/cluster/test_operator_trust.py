"""Trust on the real control plane. The sentinel test: a run's API key, from a Secret the run
references, never reaches the AtlasRun's status, any Event, any object stored, the pods'
termination messages or the operator's log, even when the provider's 401 echoes the key back.
And a spec a cluster run cannot honour (``servers.catalog``) is refused by the API server up
front, naming the field, instead of every pod exiting 2.

Real: kube-apiserver + kube-controller-manager (the Job controller), the chart's RBAC for the
operator, moto's S3 server, litellm's HTTP path to a scripted provider, the MCP servers. Stand-in:
the node (node_standin.py runs each pod's runner as ``atlas run-task`` with the pod's env, the
Secret references resolved through the API, as a kubelet would).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest

from atlasrun.cluster.operator.images import CATALOG_IN_CLUSTER
from atlasrun.servers.instance import free_port
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider
from cluster import test_operator_e2e as e2e
from cluster.tenant import s3_client, secret
from cluster.test_operator_e2e import GROUP_PATH, Operator, get_run, run_manifest, wait_phase

cp, s3, workspace, env = e2e.cp, e2e.s3, e2e.workspace, e2e.env  # the e2e module's fixtures
pytestmark = pytest.mark.cluster

# The core has no character any encoding changes: finding it anywhere is a leak in some form.
CORE = "SNTLclusterKey5e0c2b91"
SENTINEL = f'sk-{CORE}"quote\\back&<b>%2F'


def echo_401(body: dict[str, Any]) -> Reply:
    """A provider that refuses the key and echoes it, as real ones do."""
    error = {"message": f"Incorrect API key provided: {SENTINEL}", "type": "invalid_request_error"}
    return Reply(status=401, raw_body=json.dumps({"error": error}))


def test_secret_sentinel_never_reaches_status_events_objects_or_logs(env: dict[str, Any]) -> None:
    api, namespace = env["api"], env["namespace"]
    api.post(f"/api/v1/namespaces/{namespace}/secrets", json=secret("sentinel-key", {"key": SENTINEL}))
    with ScriptedProvider(echo_401) as provider:
        manifest = run_manifest("sentinel", provider.api_base)
        spec = manifest["spec"]
        spec["models"] = [
            dict(spec["models"][0], name="solo", apiKeySecret={"name": "sentinel-key", "key": "key"})
        ]
        spec["tasks"]["ids"] = ["q3-revenue-leader"]
        spec["limits"] = {"retryBackoffSeconds": 0, "providerRetries": 0}
        spec["cluster"]["backoffLimit"] = 0
        operator = Operator(env["kubeconfig"], namespace, env["s3"], metrics_port=free_port())
        operator.start()
        try:
            api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest).raise_for_status()
            run = wait_phase(api, namespace, "sentinel", {"Succeeded", "Failed"}, timeout=300)
        finally:
            operator.stop()
    # The key did reach the provider (so the run really used it) and came back in the 401 body.
    assert provider.requests, "the provider was never called"
    assert run["status"]["phase"] == "Failed" and run["status"]["models"]["solo"]["errored"] == 1, run[
        "status"
    ]

    texts: dict[str, str] = {"status": json.dumps(get_run(api, namespace, "sentinel")["status"])}
    for event in api.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]:
        texts[f"event {event['metadata']['name']}"] = json.dumps(event)
    for pod in api.get(f"/api/v1/namespaces/{namespace}/pods").json()["items"]:
        texts[f"pod {pod['metadata']['name']} status"] = json.dumps(pod.get("status") or {})
    client = s3_client(env["s3"])
    for item in client.list_objects_v2(Bucket="results").get("Contents", []):
        body = client.get_object(Bucket="results", Key=item["Key"])["Body"].read()
        texts[f"s3://results/{item['Key']}"] = body.decode("utf-8", "replace")
    texts["operator log"] = operator.log.read_text("utf-8", "replace")

    stored = [k for k in texts if k.startswith("s3://") and "/sentinel/" in k]
    assert stored, sorted(texts)  # the error result of the item was stored (and is scanned)
    assert any("Incorrect API key provided" in texts[k] for k in stored)  # the echo, masked
    forms = {CORE, quote(SENTINEL), json.dumps(SENTINEL)[1:-1]}
    leaks = sorted(where for where, text in texts.items() if any(form in text for form in forms))
    assert leaks == [], f"the sentinel leaked into: {leaks}"


def test_a_catalog_file_is_refused_by_the_api_server_a_builtin_name_is_not(env: dict[str, Any]) -> None:
    api, namespace = env["api"], env["namespace"]
    manifest = run_manifest("with-catalog", env["provider"].api_base, suspend=True)
    manifest["spec"]["servers"]["catalog"] = "my-servers.yaml"
    response = api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest)
    assert response.status_code == 422, response.text
    assert CATALOG_IN_CLUSTER in response.json()["message"], response.json()["message"]
    assert "spec.servers" in response.json()["message"]
    # A built-in catalog by name is the operator's and the pods' own: accepted.
    manifest["metadata"]["name"] = "with-builtin-catalog"
    manifest["spec"]["servers"]["catalog"] = "mcp-atlas"
    response = api.post(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns", json=manifest)
    assert response.status_code == 201, response.text
    api.delete(f"{GROUP_PATH}/namespaces/{namespace}/atlasruns/with-builtin-catalog")
