"""Moved to ``atlasrun.cluster.pod.runtask`` (issue 21): this alias keeps the old import path
working for importers not updated yet; delete it once none is left (docs/architecture.md)."""

import sys

from atlasrun.cluster.pod import runtask as _moved
from atlasrun.cluster.pod.runtask import main as main

sys.modules[__name__] = _moved
