"""The run spec: one schema for ``atlas run run.yaml`` and the ``AtlasRun`` custom resource.

A run file is a Kubernetes-style manifest (``apiVersion``, ``kind: AtlasRun``,
``metadata``, ``spec``); field names are camelCase as in the CRD.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from atlasrun.errors import InputError
from atlasrun.servers.catalog import Egress, ServerSpec
from atlasrun.tasks.documents import decode, load_yaml
from atlasrun.tasks.files import DOCUMENT_LIMIT, read_user_file
from atlasrun.tasks.model import TaskLimits

API_VERSION = "atlasrun.dev/v1alpha1"
KIND: Final = "AtlasRun"  # the run file's kind, and the custom resource's (cluster/contract.py)
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
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )


class TasksSource(_Spec):
    """Where the tasks come from: exactly one of path, uri, configMap, dataset."""

    path: str | None = None
    """A local tasks file (JSONL/CSV/Parquet), relative to the run file."""
    uri: str | None = None
    """An s3://bucket/key tasks file (cluster mode); locally also hf://OWNER/NAME[@REVISION]."""
    config_map: str | None = None
    """Cluster mode: the name of a ConfigMap holding the tasks file."""
    dataset: str | None = None
    """A Hugging Face dataset, OWNER/NAME[@REVISION] (hf:// optional), from HF_ENDPOINT, cached."""
    ids: list[str] | None = None
    """Run only the tasks with these ids."""
    limit: int | None = Field(default=None, ge=1)
    """Run at most this many tasks (the first ones, after ids)."""

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
    """One model under evaluation; every task runs against each model."""

    name: SafeName
    """Display name, unique in the run; names result folders and Jobs."""
    model: str | None = None
    """The litellm model id (e.g. openai/gpt-4o); defaults to name. "replay" is built in."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Extra completion parameters passed to the provider (temperature, max_tokens, ...)."""
    api_base: str | None = None
    """The provider endpoint URL (OpenAI-compatible or litellm-supported)."""
    api_key_env: str | None = None
    """The environment variable holding the API key (local mode; in cluster mode the env var the key is put in)."""
    api_key_secret: SecretKeyRef | None = None
    """Cluster mode: the Secret key the API key comes from."""
    max_concurrency: int = Field(default=4, ge=1)
    """At most this many tasks talk to this model at once."""
    egress: Egress = Field(default_factory=Egress)
    """Cluster mode: the hosts/CIDRs/ports of the endpoint, allowed by the run's NetworkPolicy."""
    placement: Placement | None = None  # cluster mode: overrides spec.cluster.placement for this model

    @property
    def litellm_model(self) -> str:
        return self.model or self.name


class SecretKeyRef(_Spec):
    """A key in a Secret in the run's namespace."""

    name: str = Field(min_length=1)
    """The Secret's name."""
    key: str = Field(min_length=1)
    """The key inside the Secret."""


class JudgeSpec(_Spec):
    """A judge scoring answers: "deterministic" (claim matching) or an LLM judge."""

    name: SafeName
    """Display name, unique in the run."""
    model: str | None = None
    """The litellm model id of an LLM judge; omitted for the deterministic judge."""
    temperature: float = Field(default=0.0, ge=0.0)
    """Sampling temperature of the judge (MCP-Atlas judges at 0); params.temperature wins."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Extra completion parameters for the judge model."""
    api_base: str | None = None
    """The judge's provider endpoint URL."""
    api_key_env: str | None = None
    """The environment variable holding the judge's API key."""
    api_key_secret: SecretKeyRef | None = None
    """Cluster mode: the Secret key the judge's API key comes from."""
    max_concurrency: int = Field(default=8, ge=1)
    """At most this many judge calls at once."""
    egress: Egress = Field(default_factory=Egress)
    """Cluster mode: the hosts/CIDRs/ports of the judge endpoint, allowed by the NetworkPolicy."""


class ServersSpec(_Spec):
    """The MCP servers the tasks may use."""

    catalog: str | None = None
    """A built-in catalog by name (starter, the default; mcp-atlas: MCP-Atlas's 36 servers under its names and pins) or a catalog file (relative to the run file) whose entries go over the starter catalog's."""
    enabled: list[str] | None = Field(
        default=None,
        description="Servers this run may start. Omitted: every catalog server that can run here (its "
        "keys set; a pin no registry here serves must be installed); an empty list: none (tasks that "
        "need a server are excluded, with the reason). The same in local and cluster runs.",
    )
    inline: list[ServerSpec] = Field(default_factory=list)
    """Servers defined in the run itself (they override catalog entries of the same name)."""
    backend: Literal["local", "mcp-atlas-env"] = "local"
    """Where the servers run. local (the default): AtlasRun starts the catalog's servers itself, sandboxed, with fresh state for every task. mcp-atlas-env: a running MCP-Atlas agent-environment at `url` serves them, as MCP-Atlas's harness and EvalScope use it: the run enables the servers it serves (GET /enabled-servers), lists their tools from it and calls them through it (POST /call-tool); `enabled` only narrows that set; catalog entries are not used. Its state is shared by every task: no fresh state per task. Local runs only."""
    url: str | None = None
    """The agent-environment's base URL for backend mcp-atlas-env (e.g. http://127.0.0.1:1984, its default port)."""

    @model_validator(mode="after")
    def _backend_url(self) -> ServersSpec:
        if self.backend == "mcp-atlas-env":
            url = (self.url or "").strip()
            scheme, sep, rest = url.partition("://")
            if not (sep and scheme.lower() in ("http", "https") and rest.strip("/")):
                raise ValueError(
                    f"backend mcp-atlas-env needs url, the agent-environment's http(s) URL "
                    f"(e.g. http://127.0.0.1:1984), not {self.url!r}"
                )
            if self.inline:
                raise ValueError("backend mcp-atlas-env runs no server of its own: remove inline")
        elif self.url is not None:
            raise ValueError("url is the agent-environment's, for backend mcp-atlas-env only")
        return self

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """backend and url left out at their defaults: run files and fingerprints of runs made
        before they existed stay the same (a results directory resumes)."""
        dumped: dict[str, Any] = handler(self)
        if self.backend == "local":
            dumped.pop("backend", None)
        if self.url is None:
            dumped.pop("url", None)
        return dumped

    @property
    def environment_url(self) -> str | None:
        """The agent-environment's URL with backend mcp-atlas-env, else None (local servers)."""
        return self.url.strip().rstrip("/") if self.backend == "mcp-atlas-env" and self.url else None


class Limits(_Spec):
    """Per-task limits; a task's own limits win."""

    max_turns: int = Field(default=50, ge=1)
    """Model turns per task before it stops as max_turns."""
    max_tool_calls: int = Field(default=100, ge=1)
    """Tool calls per task before it stops."""
    tool_timeout_s: float = Field(default=60.0, gt=0, alias="toolTimeoutSeconds")
    """Seconds one tool call may take."""
    task_timeout_s: float = Field(default=900.0, gt=0, alias="taskTimeoutSeconds")
    """Seconds one task may take, end to end."""
    # One provider call (each attempt); a call that hangs past it is retried, then a provider_timeout.
    provider_timeout_s: float = Field(default=600.0, gt=0, alias="providerTimeoutSeconds")
    """Seconds one provider call (each attempt) may take before it is retried."""
    tool_output_chars: int = Field(default=20_000, ge=100)
    """Tool output longer than this many characters is truncated before the model sees it."""
    server_start_timeout_s: float = Field(default=60.0, gt=0, alias="serverStartTimeoutSeconds")
    """Seconds an MCP server may take to start and list its tools."""
    provider_retries: int = Field(default=6, ge=0)
    """Retries of a failed provider call (429s, 5xx, timeouts)."""
    judge_retries: int = Field(default=3, ge=0)
    """Retries of a failed judge call."""
    retry_backoff_s: float = Field(default=1.0, ge=0, alias="retryBackoffSeconds")
    """Base of the exponential backoff between retries, in seconds."""

    def for_task(self, task: TaskLimits) -> Limits:
        update = {
            "max_turns": task.max_turns or self.max_turns,
            "max_tool_calls": task.max_tool_calls or self.max_tool_calls,
            "tool_timeout_s": task.tool_timeout_s or self.tool_timeout_s,
            "task_timeout_s": task.task_timeout_s or self.task_timeout_s,
        }
        return self.model_copy(update=update)


class OutputSpec(_Spec):
    """Where results go."""

    dir: Annotated[str | None, AfterValidator(_inside)] = None
    """Local results directory (default runs/NAME); relative paths may not climb out with '..'."""
    bucket: str | None = None
    """Cluster mode: the S3 bucket results are written to."""
    prefix: str = ""
    """Key prefix inside the bucket."""
    credentials_secret: str | None = None
    """Cluster mode: the Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for the bucket."""


class ClusterSpec(_Spec):
    """Cluster-mode settings (ignored by ``atlas run``)."""

    runner_image: str | None = None
    """The runner image (image@sha256:...) running one task per pod."""
    allow_unpinned_images: bool = False
    """Accept image tags without @sha256 digests (if the cluster's policy allows it)."""
    network_policy: Literal["vanilla", "cilium", "none"] = "vanilla"
    """NetworkPolicy flavour: vanilla (Kubernetes NetworkPolicy), cilium (FQDN rules) or none."""
    queue_name: str | None = None
    """Kueue LocalQueue: Jobs are created suspended with the kueue.x-k8s.io/queue-name label."""
    suspend: bool = False
    """Stop creating Jobs; running ones are cancelled."""
    ttl_seconds_after_finished: int = Field(default=3600, ge=0)
    """Seconds a finished Job is kept before Kubernetes deletes it."""
    backoff_limit: int = Field(default=2, ge=0, le=10)
    """Pod retries per Job."""
    active_deadline_seconds: int | None = Field(default=None, ge=1)
    """Job activeDeadlineSeconds (default: derived from the limits)."""
    # The data root the servers see (a Kubernetes VolumeSource, e.g. {persistentVolumeClaim:
    # {claimName: x, readOnly: true}} or {configMap: {name: y}}): copied into each pod's own
    # data volume before its servers start. None: an empty data volume.
    data_volume: dict[str, Any] | None = None
    """The data root the servers see, a Kubernetes VolumeSource (e.g. persistentVolumeClaim or configMap), copied into each pod's own data volume; omitted: an empty one."""
    items_per_job: int = Field(default=100, ge=1, le=10_000)
    """Work items per Indexed Job (one Job per model and chunk; the completion index picks the item)."""
    # 5: measured on a real node (make bench-node, docs/benchmarks.md): node CPU per item 4.2x
    # less than one item per pod, items/s 3.6x more, while a Job of 100 items still has 20 pods
    # to spread; 20-50 cut more but run a small chunk's items one after the other.
    items_per_pod: int = Field(default=5, ge=1, le=50)
    """Work items one pod runs in sequence (a completion index picks that many), each on fresh state: between two items the runner restarts every sidecar server that keeps state in its process or runs code, and resets the data volume to `dataVolume` (only what the item changed is copied back). It divides the pods the Job controller creates (about 10 per second at its default API rate) and the per-item cost of starting a pod and its servers; 1 gives every item its own pod."""
    placement: Placement = Field(default_factory=Placement)
    """Scheduling overrides for every pod of the run."""


JudgeFailurePolicy = Literal["exclude", "zero"]


class ScoringSpec(_Spec):
    """How claim verdicts become a task's coverage and pass/fail."""

    judge_failure: JudgeFailurePolicy = "exclude"
    """A claim the judge failed on after its retries: exclude (default) leaves the task unscored, an error of kind judge that is counted and rejudged on resume; zero scores the claim not_fulfilled (0) as MCP-Atlas's scorer does, keeps the judge's error on the verdict, marks the task's result zeroed_error_kind: judge and counts it in the summary's judge_failures_zeroed."""
    coverage_decimals: int | None = Field(default=None, ge=0, le=15)
    """Round coverage to this many decimals (Python round) before it is stored and compared to the pass threshold; MCP-Atlas rounds to 3. Omitted: no rounding."""


class RunSpecBody(_Spec):
    tasks: TasksSource
    """Where the tasks come from."""
    models: list[ModelSpec] = Field(min_length=1)
    """The models under evaluation."""
    judges: list[JudgeSpec] = Field(default_factory=lambda: [JudgeSpec(name="deterministic")])
    """The judges scoring the answers (default: deterministic)."""
    servers: ServersSpec = Field(default_factory=ServersSpec)
    """The MCP servers the tasks may use."""
    limits: Limits = Field(default_factory=Limits)
    """Per-task limits."""
    repeats: int = Field(default=1, ge=1, le=100)
    """Times each (model, task) is run."""
    parallelism: int = Field(default=8, ge=1, le=1024)
    """Tasks running at once (local processes or cluster Jobs)."""
    pass_threshold: float = Field(default=0.75, gt=0, le=1)
    """Fraction of claims a task's answer must cover to pass."""
    scoring: ScoringSpec = Field(default_factory=ScoringSpec)
    """How judge failures and coverage rounding are handled."""
    max_error_rate: float | None = Field(default=None, ge=0, le=1)
    """Cluster mode: the run ends Failed when more than this share of its finished items errored (omitted: only when every item errored)."""
    data_dir: str | None = None
    """Local mode: the data root offline servers see."""
    empty_data_dir: bool = False
    """Local mode: without dataDir (or --data-dir) the servers see an empty data root on purpose. Otherwise a run whose tasks name files under dataMount and that has no data root is refused, naming those tasks."""
    data_mount: str = "/data"
    """The path the model sees for the data root."""
    output: OutputSpec = Field(default_factory=OutputSpec)
    """Where results go."""
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    """Cluster-mode settings (ignored by atlas run)."""

    @model_validator(mode="after")
    def _unique_names(self) -> RunSpecBody:
        for kind, items in (("models", self.models), ("judges", self.judges)):
            names = [m.name for m in items]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{kind}: duplicate name(s) {', '.join(dupes)}")
        return self

    @model_validator(mode="after")
    def _one_data_root(self) -> RunSpecBody:
        if self.empty_data_dir and self.data_dir:
            raise ValueError("give dataDir or emptyDataDir: true, not both")
        return self

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """emptyDataDir left out when false: fingerprints of runs made before it existed stay the
        same (a results directory resumes)."""
        dumped: dict[str, Any] = handler(self)
        if not self.empty_data_dir:
            dumped.pop("emptyDataDir", None)
            dumped.pop("empty_data_dir", None)
        return dumped


class Metadata(_Spec):
    name: Annotated[str, AfterValidator(_folder_name)] = "run"
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class RunSpec(_Spec):
    api_version: str = API_VERSION
    kind: Literal["AtlasRun"] = KIND
    metadata: Metadata = Field(default_factory=Metadata)
    spec: RunSpecBody
    # Where the file was read from; relative paths resolve against its folder.
    base_dir: Path = Field(default=Path("."), exclude=True)
    source_file: Path | None = Field(default=None, exclude=True)  # the run file it was read from

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


TASK_ONLY_SUFFIXES = (".csv", ".jsonl", ".parquet")
TASK_FILE_GIVEN = (
    "this is a task file, not a run file: give a run file (kind: AtlasRun) and this file as "
    "--tasks (atlas run RUN.yaml --tasks FILE), or check it with atlas validate FILE"
)


def _looks_like_tasks(doc: Any) -> bool:
    """A native task file: a list of task mappings, or a mapping whose ``tasks`` is such a list."""
    items = doc.get("tasks") if isinstance(doc, dict) and "spec" not in doc else doc
    return (
        isinstance(items, list)
        and bool(items)
        and all(isinstance(i, dict) and ("prompt" in i or "PROMPT" in i) for i in items)
    )


def load_run_spec(path: str | Path) -> RunSpec:
    source = Path(path)
    data = read_user_file(source, "run file", DOCUMENT_LIMIT)
    if source.suffix.lower() in TASK_ONLY_SUFFIXES:
        raise InputError(TASK_FILE_GIVEN, where=str(source))
    raw = load_yaml(decode(data, str(source)), str(source), RUN_TEXT_PATHS)
    if _looks_like_tasks(raw):
        raise InputError(TASK_FILE_GIVEN, where=str(source))
    # Without 'spec' this is some other file: its keys and values are not echoed as errors.
    if not isinstance(raw, dict) or "spec" not in raw:
        raise InputError(
            "not a run file: a run file is a mapping with apiVersion, kind, metadata, spec", where=str(source)
        )
    try:
        spec = RunSpec.model_validate(raw)
    except ValidationError as exc:
        raise InputError.from_validation(exc, where=str(source), model=RunSpec) from exc
    spec.base_dir = source.resolve().parent
    spec.source_file = source
    return spec
