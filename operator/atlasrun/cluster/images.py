"""Moved to ``atlasrun.cluster.operator.images`` and ``atlasrun.cluster.wire.sidecars`` (issue 21):
these re-exports keep the old import path working for importers not updated yet; delete this
module once none is left (docs/architecture.md)."""

from atlasrun.cluster.operator.images import CATALOG_IN_CLUSTER as CATALOG_IN_CLUSTER
from atlasrun.cluster.operator.images import CATALOG_IN_CLUSTER_RULE as CATALOG_IN_CLUSTER_RULE
from atlasrun.cluster.operator.images import cluster_catalog as cluster_catalog
from atlasrun.cluster.operator.images import cluster_spec_problems as cluster_spec_problems
from atlasrun.cluster.operator.images import unpinned_images as unpinned_images
from atlasrun.cluster.wire.sidecars import servers_used as servers_used
from atlasrun.cluster.wire.sidecars import sidecar_servers as sidecar_servers
