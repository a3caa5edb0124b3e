"""What the operator and the pods agree on, defined once: names, labels, env, exit codes, records.

Every other module imports these names from here (the run file's ``apiVersion`` itself is
``runspec.run.API_VERSION``, which local runs check too):

- API group/version/kind (re-exported from the run spec)/plural, phases and condition types (the AtlasRun status).
- Labels and annotations on the run's objects.
- The env vars the operator sets and the pod (runner or server sidecar) reads.
- ``WorkUnit``: the pod's inputs, in the Job's env (``ATLAS_WORK_UNIT``), selected by the pod's
  completion index (``JOB_COMPLETION_INDEX``): index -> (task id, repeat) of one model. Version 1
  lists the chunk's items inline; version 2 names a ``ChunkPlan`` in object storage by reference
  (``PlanRef``: ``<prefix>/plans/<sha256>``), so a Job's size does not grow with its chunk.
- The exit codes of ``atlas run-task``; the Job's podFailurePolicy keys on them.
- The records exchanged (termination message, status) are in ``records.py``; a pod running
  several items writes ``{"status": "batch", "exit_code", "items": [summary, ...]}``.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from atlasrun.runspec.run import API_VERSION
from atlasrun.runspec.run import KIND as KIND  # re-exported: the operator's names are all here
from atlasrun.scoring.records import VersionedRecord

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "atlasruns"
SINGULAR = "atlasrun"


# -- status
class Phase(StrEnum):
    """``status.phase`` of an AtlasRun."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    BLOCKED = "Blocked"


PHASES = tuple(p.value for p in Phase)
READY, PROGRESSING, COMPLETE, FAILED, BLOCKED = "Ready", "Progressing", "Complete", "Failed", "Blocked"
CONDITION_TYPES = (READY, PROGRESSING, COMPLETE, FAILED, BLOCKED)

# -- labels and annotations
LABEL_APP = "app.kubernetes.io/name"
APP = "atlasrun"
LABEL_RUN = f"{GROUP}/run"
LABEL_MODEL = f"{GROUP}/model"
LABEL_CHUNK = f"{GROUP}/chunk"
LABEL_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
ANNOTATION_MODEL = f"{GROUP}/model"
ANNOTATION_INDEX = "batch.kubernetes.io/job-completion-index"
ANNOTATION_EGRESS = f"{GROUP}/egress"  # the run's destinations, on its network policy
ANNOTATION_EGRESS_HOSTS = f"{GROUP}/egress-hosts"
ANNOTATION_EGRESS_NOTE = f"{GROUP}/egress-note"

# -- the pod: env vars the operator sets (manifests.py) and the pod reads
RUNNER = "runner"
ENV_RUN_SPEC = "ATLAS_RUN_SPEC"  # the runner: the run file (mounted from the run's ConfigMap)
ENV_WORK_UNIT = "ATLAS_WORK_UNIT"  # the runner: the Job's WorkUnit (JSON)
ENV_INDEX = "JOB_COMPLETION_INDEX"  # set by Kubernetes in an Indexed Job
ENV_SERVER_NAME = "ATLAS_SERVER_NAME"  # a server sidecar (images/mcp-server/sidecar.py): its name
ENV_SERVER_PORT = "ATLAS_SERVER_PORT"  # ... the port its streamable HTTP bridge listens on
ENV_DATA_DIR = "ATLAS_DATA_DIR"  # ... the data mount ({data_dir})
# ... its control endpoint (127.0.0.1 only): POST /stop, /start, /respawn between a pod's items
ENV_CONTROL_PORT = "ATLAS_CONTROL_PORT"
CONTROL_PORT_OFFSET = 1000  # the control port is the server's port + this
# the runner: where the pristine data (spec.cluster.dataVolume) is mounted read-only; unset: none
ENV_DATA_SOURCE = "ATLAS_DATA_SOURCE"
# the runner: every sidecar's control port, JSON {"server": port} (its CPU is asked there)
ENV_CONTROL_PORTS = "ATLAS_CONTROL_PORTS"
# runner and sidecars: "cgroup" in a pod: each container's CPU is its cgroup's (cluster/pod/cpu.py)
ENV_CPU_SOURCE = "ATLAS_CPU_SOURCE"
CPU_FROM_CGROUP = "cgroup"


def control_port(server_port: int) -> int:
    """The port of a sidecar's control endpoint (``ENV_CONTROL_PORT``), from its server's port."""
    return server_port + CONTROL_PORT_OFFSET


TERMINATION_LIMIT = 4000  # bytes; Kubernetes keeps at most 4096 per container
# ... and 12 KiB per pod, shared equally by all its containers (init containers and sidecars
# included): a message past its share is cut by the kubelet and reads as no message at all.
POD_TERMINATION_BYTES = 12 * 1024
ENV_TERMINATION_LIMIT = "ATLAS_TERMINATION_LIMIT"  # the runner: its share, from the pod spec


def termination_limit(containers: int) -> int:
    """The bytes the runner's termination message may take in a pod of ``containers`` containers."""
    return min(TERMINATION_LIMIT, POD_TERMINATION_BYTES // max(1, containers) - 16)


# -- exit codes of `atlas run-task`
EXIT_OK = 0  # a verdict was stored (scored, excluded, or a judge failure)
EXIT_INPUT = 2  # bad input: permanent, the index fails at once (FailIndex)
EXIT_RETRY = 3  # infrastructure / provider / harness error: stored, the pod is retried
EXIT_STORE = 4  # object storage failed: nothing stored, the pod is retried
INFRA_EXITS = (EXIT_RETRY, EXIT_STORE)


class TasksRef(BaseModel):
    """The run's task document, pinned by the sha256 of its bytes (``status.tasks``)."""

    model_config = ConfigDict(extra="ignore")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    uri: str | None = None  # s3://bucket/<prefix>/tasks/<sha256> (content-addressed copy)
    path: str | None = None  # or a file mounted in the pod (a ConfigMap source, no object storage)
    name: str = "tasks.yaml"  # the source's file name: its extension tells the format


class PlanRef(BaseModel):
    """A chunk's ``ChunkPlan`` in object storage, pinned by the sha256 of its bytes."""

    model_config = ConfigDict(extra="ignore")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    uri: str  # s3://bucket/<prefix>/plans/<sha256>
    size: int = Field(ge=1)  # how many items it lists (the Job's completions, known without reading it)


class ChunkPlan(BaseModel):
    """The items of one chunk, in completion-index order; stored once, content-addressed (the
    same chunk of every model shares one object)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    items: list[tuple[str, int]] = Field(min_length=1)  # position -> (task id, repeat)

    def to_bytes(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, sha256: str) -> ChunkPlan:
        """The plan in ``data``; ValueError when its digest is not ``sha256`` or it is not a plan."""
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            raise ValueError(f"the plan's sha256 is {digest[:12]}..., the Job pinned {sha256[:12]}...")
        return cls.model_validate_json(data)


class WorkUnit(VersionedRecord):
    """One Indexed Job's inputs: completion index ``i`` runs item ``i`` of the chunk for ``model``
    (with ``per_pod`` > 1: items ``i*per_pod`` .. ``(i+1)*per_pod - 1``, in sequence, one pod).

    The items are inline, or (``plan``) named in object storage: ``items`` is then empty and
    ``resolve`` returns the unit with them filled in; both fields are optional additions, so
    older units read unchanged. Versioned like every exchanged record: version 1
    (``schema_version: 1``, the shape before records were versioned together) is read too; read
    it with ``WorkUnit.from_json``."""

    RECORD: ClassVar[str] = "work unit"
    model_config = ConfigDict(extra="ignore")
    run: str
    model: str
    chunk: int = Field(ge=0)
    items: list[tuple[str, int]] = Field(default_factory=list)  # index -> (task id, repeat)
    tasks: TasksRef
    results_uri: str
    plan: PlanRef | None = None
    per_pod: int = Field(default=1, ge=1)  # items per completion index (``cluster.itemsPerPod``)

    @property
    def size(self) -> int:
        return self.plan.size if self.plan is not None else len(self.items)

    @property
    def indexes(self) -> int:
        """The Job's completions: ``size`` items, ``per_pod`` per index."""
        return -(-self.size // self.per_pod)

    def positions(self, index: int) -> range:
        """The positions of the items completion index ``index`` runs."""
        if not 0 <= index < self.indexes:
            raise IndexError(f"completion index {index} is outside 0..{self.indexes - 1}")
        return range(index * self.per_pod, min(self.size, (index + 1) * self.per_pod))

    def resolve(self, plan: ChunkPlan) -> WorkUnit:
        """This unit with the items of its (verified) plan; ValueError if the sizes differ."""
        if self.plan is not None and len(plan.items) != self.plan.size:
            raise ValueError(f"the plan lists {len(plan.items)} items, the Job expects {self.plan.size}")
        return self.model_copy(update={"items": list(plan.items)})

    def item(self, index: int) -> tuple[str, int]:
        if self.plan is not None and not self.items:
            raise LookupError("the work unit's items are in its plan: resolve it first")
        if not 0 <= index < len(self.items):
            raise IndexError(f"completion index {index} is outside 0..{len(self.items) - 1}")
        return self.items[index]

    def to_env(self) -> str:
        return self.model_dump_json(exclude_defaults=False)
