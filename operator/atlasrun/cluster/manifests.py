"""Moved to ``atlasrun.cluster.operator.manifests`` (issue 21): this alias keeps the old import path
working for importers not updated yet; delete it once none is left (docs/architecture.md)."""

import sys

from atlasrun.cluster.operator import manifests as _moved

sys.modules[__name__] = _moved
