"""Moved to ``atlasrun.cluster.wire.store`` (issue 21): this alias keeps the old import path
working for importers not updated yet; delete it once none is left (docs/architecture.md)."""

import sys

from atlasrun.cluster.wire import store as _moved
from atlasrun.cluster.wire.store import DEFAULT_ATTEMPTS as DEFAULT_ATTEMPTS
from atlasrun.cluster.wire.store import DEFAULT_BACKOFF_S as DEFAULT_BACKOFF_S
from atlasrun.cluster.wire.store import S3Results as S3Results
from atlasrun.cluster.wire.store import StoreError as StoreError
from atlasrun.cluster.wire.store import parse_s3_uri as parse_s3_uri

sys.modules[__name__] = _moved
