"""``python -m desktop_queue``: the same as the ``desktop-queue`` command."""

import sys

from desktop_queue.cli import main

sys.exit(main())
