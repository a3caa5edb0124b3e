"""What crosses between the operator, the pods and object storage: the one schema both sides use.

- ``contract``: API names, phases, conditions, labels and annotations, env names, exit codes,
  ``WorkUnit`` (a Job's inputs), ``ChunkPlan`` / ``PlanRef`` / ``TasksRef``.
- ``records``: ``TaskSummary`` (the termination message) and ``RunStatus`` (the AtlasRun status).
- ``usage``: what an item spent and what failed in it, from summary to status totals.
- ``sidecars``: which servers a run's pods have as sidecars.
- ``store``: the S3 key layout (results, pinned task documents, chunk plans) and its client.

Imports nothing from ``operator`` or ``pod`` (import-linter contract in pyproject.toml).
"""
