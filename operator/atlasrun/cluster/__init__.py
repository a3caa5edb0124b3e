"""Cluster mode: an ``AtlasRun`` resource -> per-(model, task, repeat) Jobs -> results in S3.

The contract between the pieces (one module per concern):

- ``crd``: the CustomResourceDefinition, generated from ``spec.run.RunSpecBody`` (the
  single source of truth for the spec); ``crds/atlasrun.yaml`` is its rendering.
- ``images``: image references must be pinned (``name@sha256:<64 hex>``) unless
  ``spec.cluster.allowUnpinnedImages``.
- ``manifests``: pure functions rendering a Job per work item and one NetworkPolicy
  per run. Job names are deterministic (``job_name``), so an operator restart never
  duplicates work. Each pod: the task's MCP servers as native sidecars (initContainers
  with ``restartPolicy: Always``), each serving streamable HTTP on
  ``127.0.0.1:<ServerSpec.port>`` at ``/mcp``; one runner container executing
  ``atlas run-task``; restricted security everywhere; the model API key only in the
  runner's env (from ``apiKeySecret``).
- ``runtask`` (``atlas run-task``): inside the pod, runs ONE work item with the local
  engine against the sidecars, writes the full result JSON to object storage and a
  summary under 4 KiB to the termination message. Its inputs come from env:
  ``ATLAS_RUN_SPEC`` (path of the run file, mounted from the run's ConfigMap),
  ``ATLAS_TASKS`` (path of the tasks file), ``ATLAS_TASK_ID``, ``ATLAS_MODEL``,
  ``ATLAS_REPEAT``, ``ATLAS_RESULTS_URI`` (``s3://bucket/prefix/<run>/``), and the
  standard ``AWS_*`` variables plus ``AWS_ENDPOINT_URL`` for S3.
- ``store``: results in S3 (``<prefix>/<run>/tasks/<model>/<task>.r<N>.json``).
- ``operator``: the kopf handlers (reconcile, status, events, metrics).
"""
