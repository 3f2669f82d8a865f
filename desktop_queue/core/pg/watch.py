"""Where :class:`~desktop_queue.core.watch.ChangeWatcher` was first defined (kept for its importers).

The watcher works on every backend (``Queue.wait_changes``), so it lives in
:mod:`desktop_queue.core.watch`, which imports no psycopg: the window follows the JSON
store with it too, without the ``postgres`` extra installed.
"""

from __future__ import annotations

from desktop_queue.core.watch import ChangeWatcher

__all__ = ["ChangeWatcher"]
