"""Cluster mode: an ``AtlasRun`` resource -> Indexed Jobs per (model, chunk) -> results in S3.

The contract between the pieces (one module per concern; shared names in ``contract``):

- ``crd``: the CustomResourceDefinition, generated from ``runspec.run.RunSpecBody`` (the
  single source of truth for the spec) plus ``RunStatus``; CEL rules make the fields that define
  the work immutable. ``crds/atlasrun.yaml`` is its rendering.
- ``contract``: API names, phases, conditions, labels, ``WorkUnit`` (a Job's inputs), exit codes.
- ``images``: image references must be pinned (``name@sha256:<64 hex>``) unless
  ``spec.cluster.allowUnpinnedImages``.
- ``manifests``: pure functions rendering an Indexed Job per (model, chunk) and one
  NetworkPolicy per run. Job names are deterministic (``job_name``), so an operator restart never
  duplicates work. Each pod: the chunk's MCP servers as native sidecars (initContainers with
  ``restartPolicy: Always``), each serving streamable HTTP on ``127.0.0.1:<ServerSpec.port>`` at
  ``/mcp``; one runner container executing ``atlas run-task``; restricted security everywhere;
  the model API key only in the runner's env (from ``apiKeySecret``).
- ``observe`` -> ``reconcile`` (``decide``, pure) -> ``act`` (the only writer), driven by the
  kopf handlers and work queue in ``operator``; ``leader`` elects one replica with a Lease.
- ``runtask`` (``atlas run-task``): inside the pod, runs ONE item (``ATLAS_WORK_UNIT`` +
  ``JOB_COMPLETION_INDEX``) with the local engine against the sidecars, reading the task
  document pinned by sha256, writes the full result JSON to object storage and a summary under
  4 KiB to the termination message.
- ``store``: results in S3 (``<prefix>/<run>/tasks/<model>/<task>.r<N>.json``), task documents at
  ``<prefix>/tasks/<sha256>``. ``pull`` (``atlas pull``) copies a run's results into a local
  results directory.
"""
