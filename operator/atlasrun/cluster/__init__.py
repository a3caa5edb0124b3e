"""Cluster mode: an ``AtlasRun`` resource -> Indexed Jobs per (model, chunk) -> results in S3.

Three programs with a wall between them (import-linter contracts in pyproject.toml):

- ``wire``: what crosses between them: names, ``WorkUnit``, the termination message
  (``TaskSummary``), the status (``RunStatus``), usage totals, which servers are sidecars, and the
  S3 key layout with its client (``wire.store``).
- ``operator``: the kopf operator (``operator.main``): observe -> decide (pure) -> act, the CRD,
  the manifests, metrics. Imports ``wire`` only, never ``pod`` nor the local runner.
- ``pod``: ``atlas run-task`` inside a Job's pod (``pod.runtask``). Imports ``wire`` only.

``atlas pull`` (``commands/pull.py``) copies a run's results into a local results directory,
through ``wire.store``.
"""
