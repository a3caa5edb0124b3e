"""What the cluster tests set up before an AtlasRun exists, in one place: the control plane with
the AtlasRun CRD established, an S3 bucket (moto), and a tenant namespace as a user prepares it
(restricted pod security, the model-key and s3-credentials Secrets, the tasks ConfigMap) with the
operator's identity from the chart's RBAC.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from atlasrun.servers.catalog import load_catalog
from atlasrun.tasks.model import Task
from cluster.controlplane import ControlPlane, binaries_or_skip, wait_for
from cluster.operator_rbac import install_operator_rbac

REPO = Path(__file__).resolve().parents[2]
BUCKET = "results"
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def tasks_yaml(tasks: Sequence[Task]) -> str:
    return yaml.safe_dump({"tasks": [t.model_dump(mode="json", exclude={"source"}) for t in tasks]})


def crd_established(cp: ControlPlane) -> bool:
    """The AtlasRun CRD's Established condition is True (False while it is missing or pending)."""
    out = cp.kubectl(
        "get",
        "crd",
        "atlasruns.atlasrun.dev",
        "-o",
        "jsonpath={.status.conditions[?(@.type=='Established')].status}",
        check=False,
    ).stdout
    return out.strip() == "True"


def install_crd(cp: ControlPlane, timeout: float = 180) -> None:
    """Apply the AtlasRun CRD and wait until it is Established."""
    cp.kubectl("apply", "--server-side", "-f", str(REPO / "crds" / "atlasrun.yaml"))
    # not `kubectl wait`: on a loaded host it can fail before the CRD is even listed
    wait_for(lambda: crd_established(cp), timeout, "the AtlasRun CRD Established")


@contextmanager
def control_plane_with_crd() -> Iterator[ControlPlane]:
    with ControlPlane(binaries_or_skip()) as plane:
        install_crd(plane)
        yield plane


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client for the test's moto server, with the tenant's credentials."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=S3_CREDENTIALS["AWS_REGION"],
        aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


@contextmanager
def s3_bucket(ip: str = "127.0.0.1", bucket: str = BUCKET) -> Iterator[str]:
    """A moto S3 server on ``ip`` with ``bucket`` created; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address=ip, port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        s3_client(endpoint).create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()


def prepare_tenant(
    cp: ControlPlane,
    namespace: str,
    model_key: str,
    tasks: Sequence[Task],
    tasks_configmap: str = "starter-tasks",
) -> tuple[httpx.Client, Path]:
    """A restricted namespace holding the model-key and s3-credentials Secrets and the tasks
    ConfigMap, plus the chart's operator RBAC there. Returns an admin client and the kubeconfig
    of the operator's ServiceAccount (the chart's permissions, nothing more)."""
    cp.create_namespace(namespace, RESTRICTED)
    api = cp.client()
    base = f"/api/v1/namespaces/{namespace}"
    for body in (secret("model-key", {"key": model_key}), secret("s3-credentials", S3_CREDENTIALS)):
        api.post(f"{base}/secrets", json=body).raise_for_status()
    api.post(
        f"{base}/configmaps",
        json={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": tasks_configmap},
            "data": {"tasks.yaml": tasks_yaml(tasks)},
        },
    ).raise_for_status()
    return api, install_operator_rbac(cp, namespace)


def run_manifest(
    name: str,
    *,
    api_base: str,
    models: Sequence[str],
    server_ports: dict[str, int],
    image_of: Callable[[str], str],
    tasks_configmap: str,
    prefix: str,
    max_concurrency: int,
    model_fields: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An AtlasRun of ``models`` (openai/<name> at ``api_base``, key from the model-key Secret) on
    the catalog's ``server_ports`` servers as sidecars (``image_of("mcp-<server>")``), the runner
    ``image_of("runner")``, results to the tenant's bucket under ``prefix``, 3 items per Job."""
    catalog = load_catalog()
    inline = []
    for server, port in server_ports.items():
        spec = catalog.get(server).model_dump(by_alias=True, exclude_none=True)
        spec.update({"image": image_of(f"mcp-{server}"), "port": port})
        inline.append(spec)
    return {
        "apiVersion": "atlasrun.dev/v1alpha1",
        "kind": "AtlasRun",
        "metadata": {"name": name},
        "spec": {
            "tasks": {"configMap": tasks_configmap},
            "models": [
                {
                    "name": m,
                    "model": f"openai/{m}",
                    "apiBase": api_base,
                    "maxConcurrency": max_concurrency,
                    "apiKeySecret": {"name": "model-key", "key": "key"},
                    "apiKeyEnv": "OPENAI_API_KEY",
                    **(model_fields or {}),
                }
                for m in models
            ],
            "servers": {"inline": inline, "enabled": list(server_ports)},
            "parallelism": 4,
            "limits": {"retryBackoffSeconds": 0},
            "output": {"bucket": BUCKET, "prefix": prefix, "credentialsSecret": "s3-credentials"},
            # One item per pod (not the default 5): the tests count pods and follow items to them.
            "cluster": {
                "runnerImage": image_of("runner"),
                "itemsPerJob": 3,
                "itemsPerPod": 1,
                **(cluster or {}),
            },
        },
    }
