"""``python -m gtvmodel ...``: the same as the ``gtvmodel`` command (:mod:`gtvmodel.cli`)."""

import sys

from .cli import main

sys.exit(main())
