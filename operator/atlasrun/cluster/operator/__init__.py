"""The operator: a kopf process whose every pass over a run is observe -> decide -> act.

- ``main``: the kopf entry module (``kopf run -m atlasrun.cluster.operator.main``): handlers and
  the work queue of run keys.
- ``observe`` (one read-only snapshot: the run, its Jobs and finished pods from the ``informer``,
  ``health`` of waiting pods, Kueue Workloads through ``queueing``) -> ``reconcile`` (``decide``,
  pure) -> ``act`` (every write but the ``leader`` Lease).
- ``manifests`` renders Jobs and the network policy (``egress``, ``placement``); ``policy`` is the
  tenancy check; ``images`` the digest pinning; ``crd`` the CustomResourceDefinition;
  ``metrics`` the Prometheus exposition; ``kube`` the typed views of the Kubernetes objects it
  reads (one cast where each enters).

Imports ``wire``, never ``pod``, never the local runner (import-linter contracts).
"""
