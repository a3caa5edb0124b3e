"""Results in S3-compatible object storage (AWS S3, MinIO, Ceph RGW, ...).

Layout under ``s3://<bucket>/<prefix>/`` (the prefix ends with the run name, e.g.
``s3://bench/atlas/my-run/``), mirroring a local results directory:

- ``tasks/<model>/<task>.r<N>.json``: the full per-task record (same names, from
  ``scoring.store.task_record_name``, and same bytes as ``scoring.store.ResultsDir``);
- ``<name>``: run-level files written with ``write_json`` (``summary.json``, ...).

Content-addressed documents shared by the runs of an output prefix live next to the runs:
``<prefix>/tasks/<sha256>`` (a pinned task document) and ``<prefix>/plans/<sha256>`` (a chunk's
``ChunkPlan``: ``store_plan`` writes it, ``read_plan`` reads and verifies it).

Every request is retried with exponential backoff and jitter on throttling, 5xx and
connection errors; when the retries are used up a ``StoreError`` names the object
and the last error. A finished result is therefore either stored or reported as not
stored, never silently dropped.

Credentials come only from the standard environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, optional ``AWS_SESSION_TOKEN``; or the web-identity / container
credential variables of IRSA and EKS Pod Identity), never from files or the instance
metadata service. The endpoint from the
argument, else ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``; the region from
``AWS_REGION`` / ``AWS_DEFAULT_REGION`` (default ``us-east-1``). Credential values
never appear in messages.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from atlasrun.cluster.wire.contract import ChunkPlan, PlanRef
from atlasrun.errors import InputError
from atlasrun.redact import scrub
from atlasrun.runspec.run import RunSpecBody
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.store import task_record_name

T = TypeVar("T")

DEFAULT_ATTEMPTS = 10  # with the default backoff: about 1-2.5 minutes before giving up
DEFAULT_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_RETRYABLE_CODES = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "SlowDown",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "BandwidthLimitExceeded",
    "PriorRequestNotComplete",
}
_MISSING = {"NoSuchKey", "404", "NotFound"}


# -- the key layout: where each object lives, for the operator and the pods alike
TASK_PREFIX = "tasks"  # <prefix>/tasks/<sha256>: pinned task documents
PLAN_PREFIX = "plans"  # <prefix>/plans/<sha256>: chunk plans


def _base(body: RunSpecBody) -> str:
    prefix = body.output.prefix.strip("/")
    return f"s3://{body.output.bucket}/{prefix + '/' if prefix else ''}"


def results_uri(body: RunSpecBody, run: str) -> str:
    if not body.output.bucket:
        return ""
    return f"{_base(body)}{run}/"


def tasks_uri(body: RunSpecBody, digest: str) -> str:
    """``s3://<bucket>/<prefix>/tasks/<sha256>``: shared by every run of the prefix (content-addressed)."""
    return f"{_base(body)}{TASK_PREFIX}/{digest}"


def plans_uri(body: RunSpecBody) -> str:
    """``s3://<bucket>/<prefix>/plans/``: the chunks' content-addressed plans ("" without a bucket)."""
    if not body.output.bucket:
        return ""
    return f"{_base(body)}{PLAN_PREFIX}/"


class StoreError(RuntimeError):
    """Object storage could not be read or written (after retries where they make sense).

    Not an ``AtlasError``: a storage outage is not bad input, and must not exit 2.
    ``denied`` is true when the store refused the request (403, AccessDenied).
    """

    def __init__(self, message: str, denied: bool = False) -> None:
        super().__init__(message)
        self.denied = denied


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading or trailing slash; may be empty

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def uri(self, name: str = "") -> str:
        key = self.key(name) if name else self.prefix
        return f"s3://{self.bucket}/{key}" + ("/" if key and not name else "")


def parse_s3_uri(uri: str, where: str = "results URI") -> S3Location:
    """``s3://bucket[/prefix[/]]`` -> S3Location; InputError naming what is wrong."""
    parts = urlsplit(uri.strip())
    if parts.scheme != "s3":
        raise InputError(f"{uri!r} is not an s3:// URI (expected s3://bucket/prefix/)", where)
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise InputError(f"{uri!r}: an s3:// URI has no user, query or fragment", where)
    if not _BUCKET.match(parts.netloc) or ".." in parts.netloc:
        raise InputError(
            f"{uri!r}: {parts.netloc!r} is not a valid bucket name "
            "(3-63 lowercase letters, digits, dots, hyphens)",
            where,
        )
    prefix = parts.path.strip("/")
    segments = prefix.split("/") if prefix else []
    if any(s in ("", ".", "..") for s in segments):
        raise InputError(f"{uri!r}: the prefix has an empty, '.' or '..' segment", where)
    return S3Location(parts.netloc, prefix)


def _credentials(env: Mapping[str, str]) -> dict[str, str]:
    """Keys from the env; or {} when the env names a web-identity role or a container credentials
    endpoint (IRSA, EKS Pod Identity), which botocore then resolves from those same variables.
    Never anything else: no shared files, no instance metadata (the node's role)."""
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        creds = {"aws_access_key_id": key, "aws_secret_access_key": secret}
        if env.get("AWS_SESSION_TOKEN"):
            creds["aws_session_token"] = env["AWS_SESSION_TOKEN"]
        return creds
    if (
        (env.get("AWS_WEB_IDENTITY_TOKEN_FILE") and env.get("AWS_ROLE_ARN"))
        or env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        or env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    ):
        return {}
    raise InputError(
        "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials)",
        where="S3 credentials",
    )


def _retryable(exc: Exception) -> bool:
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError  # type: ignore[import-untyped]

    if isinstance(exc, (ConnectionError, HTTPClientError)):
        return True
    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return status == 429 or status >= 500 or exc.response.get("Error", {}).get("Code") in _RETRYABLE_CODES
    return False


def _is_denied(exc: Exception) -> bool:
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return False
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return status == 403 or exc.response.get("Error", {}).get("Code") in ("AccessDenied", "Forbidden")


def _is_missing(exc: Exception) -> bool:
    from botocore.exceptions import ClientError

    return isinstance(exc, ClientError) and str(exc.response.get("Error", {}).get("Code")) in _MISSING


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def _client(endpoint_url: str | None, credentials: tuple[tuple[str, str], ...], region: str) -> Any:
    """One boto3 client per (endpoint, credentials, region) in the process, shared by every
    location (clients are thread-safe; each costs ~10 MB and tens of ms to build)."""
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config  # type: ignore[import-untyped]

    key = (endpoint_url, credentials, region)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            config = Config(
                retries={"total_max_attempts": 1},  # retried here, with one policy for every call
                connect_timeout=10,
                read_timeout=60,
                # S3-compatible stores: path-style addressing, checksums only where the API requires them.
                s3={"addressing_style": "path"} if endpoint_url else {},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                user_agent_extra="atlasrun",
            )
            session = boto3.session.Session(**dict(credentials), region_name=region)
            client = _clients[key] = session.client("s3", endpoint_url=endpoint_url, config=config)
        return client


class S3Results:
    """One run's results in object storage. Thread-safe (boto3 clients are)."""

    def __init__(
        self,
        uri: str,
        endpoint_url: str | None = None,
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff_s: float = DEFAULT_BACKOFF_S,
        redact: Callable[[str], str] = lambda text: text,
        warn: Callable[[str], None] = _stderr,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.location = parse_s3_uri(uri)
        self.attempts = max(1, attempts)
        self.backoff_s = max(0.0, backoff_s)
        self.redact = redact  # applied to every record written (the runner's secret masking)
        self.warn = warn
        self.endpoint_url = (
            endpoint_url or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        )
        if self.endpoint_url and urlsplit(self.endpoint_url).scheme not in ("http", "https"):
            raise InputError(f"{self.endpoint_url!r} is not an http(s) URL", where="S3 endpoint")
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        self._client = _client(self.endpoint_url, tuple(sorted(_credentials(env).items())), region)

    @property
    def uri(self) -> str:
        return self.location.uri()

    # -- keys ---------------------------------------------------------------------------------

    @staticmethod
    def task_name(model: str, task_id: str, repeat: int) -> str:
        return task_record_name(model, task_id, repeat)

    def result_uri(self, result: TaskResult) -> str:
        return self.location.uri(self.task_name(result.model, result.task_id, result.repeat))

    # -- results ------------------------------------------------------------------------------

    def put_result(self, result: TaskResult) -> str:
        """Store the full per-task record; returns its s3:// URI. Raises StoreError."""
        name = self.task_name(result.model, result.task_id, result.repeat)
        self._put(name, self.redact(result.model_dump_json(indent=1)))
        return self.location.uri(name)

    def get_result(self, model: str, task_id: str, repeat: int) -> TaskResult | None:
        """The stored record, or None if there is none. Raises StoreError."""
        name = self.task_name(model, task_id, repeat)
        data = self._get(name)
        if data is None:
            return None
        try:
            return TaskResult.from_json(data, self.location.uri(name))
        except ValueError as exc:
            raise StoreError(f"{self.location.uri(name)} is not a task result: {exc}") from exc

    def list_results(self, max_workers: int = 16) -> list[TaskResult]:
        """Every stored per-task record (unreadable objects are skipped with a warning)."""
        keys = [k for k in self._list(self.location.key("tasks/")) if k.endswith(".json")]

        def load(key: str) -> TaskResult | None:
            data = self._get_key(key)
            try:
                return (
                    TaskResult.from_json(data, f"s3://{self.location.bucket}/{key}")
                    if data is not None
                    else None
                )
            except ValueError:
                self.warn(f"s3: skipping s3://{self.location.bucket}/{key}: not a task result")
                return None

        with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
            return [r for r in pool.map(load, keys) if r is not None]

    # -- run-level files ----------------------------------------------------------------------

    def write_json(self, name: str, data: Any) -> str:
        """Write a run-level JSON file (e.g. ``summary.json``); returns its s3:// URI."""
        self._check_name(name)
        self._put(name, self.redact(json.dumps(data, indent=2, sort_keys=False)))
        return self.location.uri(name)

    def put_bytes(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Store ``data`` unchanged (no masking: e.g. a content-addressed task document)."""
        self._check_name(name)
        key = self.location.key(name)
        self._retry(
            f"write {self.location.uri(name)}",
            lambda: self._client.put_object(
                Bucket=self.location.bucket, Key=key, Body=data, ContentType=content_type
            ),
        )
        return self.location.uri(name)

    def read_bytes(self, name: str) -> bytes | None:
        """The object ``<prefix>/<name>``, or None if there is none. Raises StoreError."""
        self._check_name(name)
        return self._get(name)

    @staticmethod
    def _check_name(name: str) -> None:
        if not name or name.startswith("/") or any(s in ("", ".", "..") for s in name.split("/")):
            raise InputError(f"{name!r} is not a relative object name", where="results store")

    # -- requests -----------------------------------------------------------------------------

    def _put(self, name: str, text: str) -> None:
        key = self.location.key(name)
        self._retry(
            f"write {self.location.uri(name)}",
            lambda: self._client.put_object(
                Bucket=self.location.bucket,
                Key=key,
                Body=scrub(text).encode("utf-8"),
                ContentType="application/json",
            ),
        )

    def _get(self, name: str) -> bytes | None:
        return self._get_key(self.location.key(name))

    def _get_key(self, key: str) -> bytes | None:
        def fetch() -> bytes | None:
            try:
                response = self._client.get_object(Bucket=self.location.bucket, Key=key)
            except Exception as exc:
                if _is_missing(exc):
                    return None
                raise
            return bytes(response["Body"].read())

        return self._retry(f"read s3://{self.location.bucket}/{key}", fetch)

    def _list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        token: str | None = None

        def page_after(token: str | None) -> Callable[[], dict[str, Any]]:
            extra = {"ContinuationToken": token} if token else {}
            return lambda: dict(
                self._client.list_objects_v2(Bucket=self.location.bucket, Prefix=prefix, **extra)
            )

        while True:
            page = self._retry(f"list s3://{self.location.bucket}/{prefix}", page_after(token))
            keys += [str(o["Key"]) for o in page.get("Contents", [])]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return keys

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        started = time.monotonic()
        for attempt in range(1, self.attempts + 1):
            try:
                return call()
            except Exception as exc:  # classified below: boto errors only
                if not _is_boto_error(exc):
                    raise
                if not _retryable(exc):
                    raise StoreError(f"could not {what}: {exc}", denied=_is_denied(exc)) from exc
                if attempt == self.attempts:
                    raise StoreError(
                        f"could not {what} after {attempt} attempts over "
                        f"{time.monotonic() - started:.1f}s: {exc}"
                    ) from exc
                delay = min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
                self.warn(
                    f"s3: {what} failed (attempt {attempt}/{self.attempts}): {exc}; retrying in {delay:.1f}s"
                )
                time.sleep(delay)
        raise AssertionError("unreachable")


def _is_boto_error(exc: Exception) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    return isinstance(exc, (BotoCoreError, ClientError))


def split_object_uri(uri: str, where: str) -> tuple[str, str]:
    """``s3://bucket/a/b/name`` -> (``s3://bucket/a/b``, ``name``)."""
    location = parse_s3_uri(uri, where)
    parent, _, name = location.prefix.rpartition("/")
    if not name:
        raise InputError(f"{uri!r} names no object", where)
    return f"s3://{location.bucket}/{parent}", name


def store_plan(plans_uri: str, plan: ChunkPlan, open_store: Callable[[str], S3Results]) -> PlanRef:
    """Write ``plan`` to ``<plans_uri>/<sha256>`` (idempotent: the name is the content) and return
    its reference. Raises StoreError."""
    data = plan.to_bytes()
    digest = hashlib.sha256(data).hexdigest()
    uri = plans_uri.rstrip("/") + "/" + digest
    parent, name = split_object_uri(uri, "plan URI")
    open_store(parent).put_bytes(name, data, content_type="application/json")
    return PlanRef(sha256=digest, uri=uri, size=len(plan.items))


def read_plan(
    ref: PlanRef, open_store: Callable[[str], S3Results], where: str = "work unit plan"
) -> ChunkPlan:
    """The chunk plan ``ref`` names, verified against its sha256. StoreError when object storage
    fails; InputError (naming the URI) when the plan is gone, altered or not a plan."""
    parent, name = split_object_uri(ref.uri, where)
    data = open_store(parent).read_bytes(name)
    if data is None:
        raise InputError(f"{ref.uri}: the Job's plan is gone from object storage", where=where)
    try:
        return ChunkPlan.from_bytes(data, ref.sha256)
    except ValueError as exc:
        raise InputError(f"{ref.uri}: {exc}", where=where) from exc
