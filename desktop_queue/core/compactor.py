"""``python -m desktop_queue.core.compactor ROOT UPTO [KEEP_FINISHED KEEP_FINISHED_S NOW]``: one compaction, in its own process.

The store starts this child so that parsing and writing a large snapshot never holds
the caller's GIL (see :meth:`desktop_queue.core.storage.Store._compact_soon`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from pathlib import Path

from desktop_queue.core.errors import StoreError
from desktop_queue.core.fileio import FileLock
from desktop_queue.core.storage import KEEP_FINISHED, KEEP_FINISHED_S, compact


def main(argv: list[str]) -> int:
    """Folds the journal segments up to ``UPTO`` into a snapshot; 0 when done or not needed."""
    root, upto = Path(argv[0]), int(argv[1])
    keep_finished, keep_finished_s, now = KEEP_FINISHED, KEEP_FINISHED_S, None
    if len(argv) >= 5:
        keep_finished, keep_finished_s, now = int(argv[2]), float(argv[3]), float(argv[4])
    gc.disable()  # a short-lived process: the collector would only slow the big parse
    if hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(10)  # background work: the processes serving people come first for the CPU
    lock = FileLock(root / "compact.lock")
    try:
        if not lock.acquire(blocking=False):
            return 0  # another process is compacting
        notices: list[str] = []
        compact(root, upto, notices, keep_finished=keep_finished, keep_finished_s=keep_finished_s, now=now)
        for notice in notices:  # the parent reports these lines (Store._reap_compactor)
            sys.stderr.write(notice.replace("\n", " ") + "\n")
        return 0
    except (StoreError, OSError) as exc:
        sys.stderr.write(f"compaction skipped: {exc}\n")
        return 1
    finally:
        lock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
