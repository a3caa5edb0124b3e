"""Moved to ``atlasrun.cluster.wire.contract`` (issue 21): this alias keeps the old import path
working for importers not updated yet; delete it once none is left (docs/architecture.md)."""

import sys

from atlasrun.cluster.wire import contract as _moved
from atlasrun.cluster.wire.contract import GROUP as GROUP
from atlasrun.cluster.wire.contract import PLURAL as PLURAL
from atlasrun.cluster.wire.contract import VERSION as VERSION

sys.modules[__name__] = _moved
