"""The run spec: one schema for ``atlas run run.yaml`` and the ``AtlasRun`` custom resource.

A run file is a Kubernetes-style manifest (``apiVersion``, ``kind: AtlasRun``,
``metadata``, ``spec``); field names are camelCase as in the CRD.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from atlasrun.errors import InputError
from atlasrun.servers.catalog import Egress, ServerSpec
from atlasrun.tasks.documents import decode, load_yaml
from atlasrun.tasks.model import TaskLimits

API_VERSION = "atlasrun.dev/v1alpha1"
MAX_NAME_LEN = 200


def _path_safe(name: str) -> str:
    """A name that becomes part of a path (results folders, object keys): never '.', '..', a
    separator-only or hidden name, nor control characters."""
    if not name.strip() or name != name.strip():
        raise ValueError("must not be blank or start/end with whitespace")
    if len(name) > MAX_NAME_LEN:
        raise ValueError(f"longer than {MAX_NAME_LEN} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ValueError("must not contain control characters")
    if not name.strip("./\\") or name.startswith("."):
        raise ValueError(f"{name!r} is not a usable name (it would be a path like '.' or '..')")
    return name


def _folder_name(name: str) -> str:
    """A run name: one path segment (it names the default results folder runs/NAME)."""
    _path_safe(name)
    if "/" in name or "\\" in name:
        raise ValueError("must not contain '/' or '\\' (it names a folder)")
    return name


def _inside(path: str | None) -> str | None:
    """A relative output path must stay inside its base folder (no '..' escapes)."""
    if path is not None and ".." in Path(path).parts:
        raise ValueError(f"{path!r} climbs out of its folder with '..'; give an absolute path instead")
    return path


def check_output_path(path: str, where: str) -> str:
    """``--out`` obeys the rule of ``spec.output.dir``."""
    try:
        return _inside(path) or path
    except ValueError as exc:
        raise InputError(str(exc), where=where) from exc


SafeName = Annotated[str, AfterValidator(_path_safe)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class TasksSource(_Spec):
    path: str | None = None  # local file (relative to the run file)
    uri: str | None = None  # s3://bucket/key (cluster mode)
    config_map: str | None = None  # ConfigMap name (cluster mode)
    dataset: str | None = None  # Hugging Face dataset id (when a hub is reachable)
    ids: list[str] | None = None  # only these task ids
    limit: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> TasksSource:
        given = [k for k in ("path", "uri", "config_map", "dataset") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of path, uri, configMap, dataset")
        return self


class Placement(_Spec):
    """Where and how a run's pods are scheduled (cluster mode). Set per run in
    ``spec.cluster.placement`` and per model in ``spec.models[].placement`` (the model's fields
    win); unset fields keep the chart's defaults."""

    runner_resources: dict[str, Any] | None = Field(
        default=None, description="ResourceRequirements (requests/limits) of the runner container."
    )
    sidecar_resources: dict[str, Any] | None = Field(
        default=None, description="ResourceRequirements of every MCP server sidecar."
    )
    node_selector: dict[str, str] | None = Field(default=None, description="Pod nodeSelector.")
    tolerations: list[dict[str, Any]] | None = Field(default=None, description="Pod tolerations.")
    affinity: dict[str, Any] | None = Field(default=None, description="Pod affinity.")
    priority_class_name: str | None = Field(default=None, description="Pod priorityClassName.")
    image_pull_secrets: list[str] | None = Field(
        default=None, description="Names of Secrets used to pull the runner and server images."
    )
    service_account_name: str | None = Field(default=None, description="ServiceAccount the pods run as.")
    data_volume_size: str | None = Field(
        default=None, description="sizeLimit of each pod's data volume, a quantity like 2Gi."
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, description="Job activeDeadlineSeconds (default: derived from the limits)."
    )


class ModelSpec(_Spec):
    name: SafeName  # display name, unique in the run
    model: str | None = None  # litellm model id; defaults to name ("replay" is built in)
    params: dict[str, Any] = Field(default_factory=dict)  # temperature, max_tokens, ...
    api_base: str | None = None
    api_key_env: str | None = None  # env var holding the key (a Secret key in cluster mode)
    api_key_secret: SecretKeyRef | None = None  # cluster mode: where the key comes from
    max_concurrency: int = Field(default=4, ge=1)
    egress: Egress = Field(default_factory=Egress)  # cluster mode: the endpoint's hosts/CIDRs/ports
    placement: Placement | None = None  # cluster mode: overrides spec.cluster.placement for this model

    @property
    def litellm_model(self) -> str:
        return self.model or self.name


class SecretKeyRef(_Spec):
    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


class JudgeSpec(_Spec):
    name: SafeName
    model: str | None = None  # litellm model id for LLM judges; None for "deterministic"
    temperature: float = Field(default=0.0, ge=0.0)  # MCP-Atlas judges at 0; params.temperature wins
    params: dict[str, Any] = Field(default_factory=dict)
    api_base: str | None = None
    api_key_env: str | None = None
    api_key_secret: SecretKeyRef | None = None
    max_concurrency: int = Field(default=8, ge=1)
    egress: Egress = Field(default_factory=Egress)


class ServersSpec(_Spec):
    catalog: str | None = None  # extra catalog file (relative to the run file)
    enabled: list[str] | None = Field(
        default=None,
        description="Servers this run may start. Omitted: every catalog server; an empty list: none "
        "(tasks that need a server are excluded). The same in local and cluster runs.",
    )
    inline: list[ServerSpec] = Field(default_factory=list)


class Limits(_Spec):
    max_turns: int = Field(default=50, ge=1)
    max_tool_calls: int = Field(default=100, ge=1)
    tool_timeout_s: float = Field(default=60.0, gt=0, alias="toolTimeoutSeconds")
    task_timeout_s: float = Field(default=900.0, gt=0, alias="taskTimeoutSeconds")
    # One provider call (each attempt); a call that hangs past it is retried, then a provider_timeout.
    provider_timeout_s: float = Field(default=600.0, gt=0, alias="providerTimeoutSeconds")
    tool_output_chars: int = Field(default=20_000, ge=100)
    server_start_timeout_s: float = Field(default=60.0, gt=0, alias="serverStartTimeoutSeconds")
    provider_retries: int = Field(default=6, ge=0)
    judge_retries: int = Field(default=3, ge=0)
    retry_backoff_s: float = Field(default=1.0, ge=0, alias="retryBackoffSeconds")

    def for_task(self, task: TaskLimits) -> Limits:
        update = {
            "max_turns": task.max_turns or self.max_turns,
            "max_tool_calls": task.max_tool_calls or self.max_tool_calls,
            "tool_timeout_s": task.tool_timeout_s or self.tool_timeout_s,
            "task_timeout_s": task.task_timeout_s or self.task_timeout_s,
        }
        return self.model_copy(update=update)


class OutputSpec(_Spec):
    dir: Annotated[str | None, AfterValidator(_inside)] = None  # local results directory
    bucket: str | None = None  # cluster mode: S3 bucket
    prefix: str = ""
    credentials_secret: str | None = None


class ClusterSpec(_Spec):
    """Cluster-mode settings (ignored by ``atlas run``)."""

    runner_image: str | None = None  # image@sha256:... running one task per pod
    allow_unpinned_images: bool = False  # accept image tags without @sha256 digests
    network_policy: Literal["vanilla", "cilium", "none"] = "vanilla"
    queue_name: str | None = None  # Kueue LocalQueue (kueue.x-k8s.io/queue-name label)
    suspend: bool = False  # stop creating Jobs; running ones are cancelled
    ttl_seconds_after_finished: int = Field(default=3600, ge=0)
    backoff_limit: int = Field(default=2, ge=0, le=10)
    active_deadline_seconds: int | None = Field(default=None, ge=1)
    # The data root the servers see (a Kubernetes VolumeSource, e.g. {persistentVolumeClaim:
    # {claimName: x, readOnly: true}} or {configMap: {name: y}}): copied into each pod's own
    # data volume before its servers start. None: an empty data volume.
    data_volume: dict[str, Any] | None = None
    placement: Placement = Field(default_factory=Placement)


class RunSpecBody(_Spec):
    tasks: TasksSource
    models: list[ModelSpec] = Field(min_length=1)
    judges: list[JudgeSpec] = Field(default_factory=lambda: [JudgeSpec(name="deterministic")])
    servers: ServersSpec = Field(default_factory=ServersSpec)
    limits: Limits = Field(default_factory=Limits)
    repeats: int = Field(default=1, ge=1, le=100)
    parallelism: int = Field(default=8, ge=1, le=1024)
    pass_threshold: float = Field(default=0.75, gt=0, le=1)
    data_dir: str | None = None  # the data root offline servers see (local mode)
    data_mount: str = "/data"  # the path the model sees for the data root
    output: OutputSpec = Field(default_factory=OutputSpec)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)

    @model_validator(mode="after")
    def _unique_names(self) -> RunSpecBody:
        for kind, items in (("models", self.models), ("judges", self.judges)):
            names = [m.name for m in items]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{kind}: duplicate name(s) {', '.join(dupes)}")
        return self


class Metadata(_Spec):
    name: Annotated[str, AfterValidator(_folder_name)] = "run"
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class RunSpec(_Spec):
    api_version: str = API_VERSION
    kind: Literal["AtlasRun"] = "AtlasRun"
    metadata: Metadata = Field(default_factory=Metadata)
    spec: RunSpecBody
    # Where the file was read from; relative paths resolve against its folder.
    base_dir: Path = Field(default=Path("."), exclude=True)

    def resolve(self, relative: str) -> Path:
        path = Path(relative).expanduser()
        return path if path.is_absolute() else (self.base_dir / path)


# Plain scalars that stay text in a run file (``name: 010`` is "010", not 8).
RUN_TEXT_PATHS = [
    ("metadata", "name"),
    *(("spec", kind, "*", key) for kind in ("models", "judges") for key in ("name", "model")),
    ("spec", "tasks", "ids", "*"),
    ("spec", "tasks", "path"),
    ("spec", "output", "dir"),
    ("spec", "dataDir"),
]


def load_run_spec(path: str | Path) -> RunSpec:
    source = Path(path)
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read run file: {exc.strerror or exc}", where=str(source)) from exc
    raw = load_yaml(decode(data, str(source)), str(source), RUN_TEXT_PATHS)
    if not isinstance(raw, dict):
        raise InputError("a run file is a mapping with apiVersion, kind, metadata, spec", where=str(source))
    try:
        spec = RunSpec.model_validate(raw)
    except ValidationError as exc:
        raise InputError.from_validation(exc, where=str(source)) from exc
    spec.base_dir = source.resolve().parent
    return spec
