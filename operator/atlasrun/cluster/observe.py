"""Moved to ``atlasrun.cluster.operator.observe`` (issue 21): this alias keeps the old import path
working for importers not updated yet; delete it once none is left (docs/architecture.md)."""

import sys

from atlasrun.cluster.operator import observe as _moved

sys.modules[__name__] = _moved
