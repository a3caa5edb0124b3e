"""``python -m atlasrun``: the ``atlas`` command line."""

import sys

from atlasrun.cli import main

sys.exit(main())
