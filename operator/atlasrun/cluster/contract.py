"""What the operator and the pods agree on, defined once: names, labels, env, exit codes, records.

- API group/version/plural, phases, condition types and reasons (the AtlasRun status).
- Labels and annotations on the run's objects.
- ``WorkUnit``: the pod's inputs, in the Job's env (``ATLAS_WORK_UNIT``), selected by the pod's
  completion index (``JOB_COMPLETION_INDEX``): index -> (task id, repeat) of one model.
- The exit codes of ``atlas run-task``; the Job's podFailurePolicy keys on them.
- ``parse_summary``: the runner's termination message (``TaskSummary`` dict, at most 4 KiB).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from atlasrun.runspec.run import API_VERSION

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "atlasruns"

# -- status
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Suspended", "Blocked")
READY, PROGRESSING, COMPLETE, FAILED, BLOCKED = "Ready", "Progressing", "Complete", "Failed", "Blocked"
CONDITION_TYPES = (READY, PROGRESSING, COMPLETE, FAILED, BLOCKED)
BLOCKED_REASONS = (
    "InvalidSpec",
    "NoRunnerImage",
    "UnpinnedImage",
    "InvalidTasks",
    "ObjectStoreUnavailable",
    "Unschedulable",
    "QuotaExceeded",
    "ImagePullBackOff",
    "VolumeTypeNotAllowed",  # the cluster's tenancy policy (cluster/policy.py)
    "ApiHostNotAllowed",
    "UnpinnedImageNotAllowed",
    "QuotaPending",  # Kueue has not admitted a Job's Workload (cluster/queueing.py)
)

# -- labels and annotations
LABEL_APP = "app.kubernetes.io/name"
APP = "atlasrun"
LABEL_RUN = "atlasrun.dev/run"
LABEL_MODEL = "atlasrun.dev/model"
LABEL_CHUNK = "atlasrun.dev/chunk"
LABEL_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
ANNOTATION_MODEL = "atlasrun.dev/model"
ANNOTATION_INDEX = "batch.kubernetes.io/job-completion-index"

# -- the pod
RUNNER = "runner"
ENV_WORK_UNIT = "ATLAS_WORK_UNIT"
ENV_INDEX = "JOB_COMPLETION_INDEX"
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


class WorkUnit(BaseModel):
    """One Indexed Job's inputs: completion index ``i`` runs ``items[i]`` for ``model``."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = 1
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


def parse_summary(message: str | None) -> dict[str, Any] | None:
    """The runner's termination message (JSON), or None if absent or not ours."""
    if not message:
        return None
    try:
        data = json.loads(message)
    except ValueError:
        return None
    return data if isinstance(data, dict) and "status" in data else None
