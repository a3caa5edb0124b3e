"""What the operator and the pods agree on, defined once: names, labels, env, exit codes, records.

Every other module imports these names from here (the run file's ``apiVersion`` itself is
``runspec.run.API_VERSION``, which local runs check too):

- API group/version/kind (re-exported from the run spec)/plural, phases and condition types (the AtlasRun status).
- Labels and annotations on the run's objects.
- The env vars the operator sets and the pod (runner or server sidecar) reads.
- ``WorkUnit``: the pod's inputs, in the Job's env (``ATLAS_WORK_UNIT``), selected by the pod's
  completion index (``JOB_COMPLETION_INDEX``): index -> (task id, repeat) of one model.
- The exit codes of ``atlas run-task``; the Job's podFailurePolicy keys on them.
- The records exchanged (termination message, status) are in ``records.py``.
"""

from __future__ import annotations

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
TERMINATION_LIMIT = 4000  # bytes; Kubernetes keeps at most 4096 per container

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


class WorkUnit(VersionedRecord):
    """One Indexed Job's inputs: completion index ``i`` runs ``items[i]`` for ``model``.

    Versioned like every exchanged record: version 1 (``schema_version: 1``, the shape before
    records were versioned together) is read too; read it with ``WorkUnit.from_json``."""

    RECORD: ClassVar[str] = "work unit"
    model_config = ConfigDict(extra="ignore")
    run: str
    model: str
    chunk: int = Field(ge=0)
    items: list[tuple[str, int]]  # index -> (task id, repeat)
    tasks: TasksRef
    results_uri: str

    def item(self, index: int) -> tuple[str, int]:
        if not 0 <= index < len(self.items):
            raise IndexError(f"completion index {index} is outside 0..{len(self.items) - 1}")
        return self.items[index]

    def to_env(self) -> str:
        return self.model_dump_json(exclude_defaults=False)
