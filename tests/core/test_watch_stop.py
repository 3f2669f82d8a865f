"""ChangeWatcher over a store without a change feed waits on its own stop flag.

The JSON store's ``wait_changes`` can only sleep out its timeout; a watcher blocked in
it made ``stop()`` (a window closing, ``work --until-idle`` ending) wait for the rest
of a step. The watcher now waits on its stop flag there, and asks the store to wait
only when commits wake the wait (PostgreSQL's LISTEN/NOTIFY).
"""

from __future__ import annotations

import threading
from typing import Any

from desktop_queue.core import Queue
from desktop_queue.core.watch import ChangeWatcher


def test_a_watcher_of_the_json_store_never_sleeps_in_the_store(open_queue: Any) -> None:
    queue: Queue = open_queue()
    assert not queue.has_change_feed
    waits: list[float] = []

    def wait_changes(version: int, timeout_s: float) -> bool:
        waits.append(timeout_s)
        return True

    queue.store.wait_changes = wait_changes  # type: ignore[method-assign]
    seen = threading.Event()
    watcher = ChangeWatcher(queue, lambda ids: seen.set(), fallback_s=0.05)
    assert watcher.start(timeout_s=30)
    try:
        queue.submit("demo", {"prompt": "another's change"})
        assert seen.wait(30)  # the change is still seen, at the watcher's pace
    finally:
        assert watcher.stop(timeout_s=30)
    assert waits == []


def test_a_watcher_of_a_fed_store_waits_in_the_store() -> None:
    class Fed:
        has_change_feed = True

        def __init__(self) -> None:
            self.waited = threading.Event()

        def refresh(self) -> int:
            return 1

        def changed_since(self, version: int) -> tuple[int, set[str]]:
            return version, set()

        def wait_changes(self, version: int, timeout_s: float, stop: threading.Event | None = None) -> bool:
            self.waited.set()
            return False

    fed = Fed()
    watcher = ChangeWatcher(fed, lambda ids: None, fallback_s=0.05)  # type: ignore[arg-type]
    assert watcher.start(timeout_s=30)
    try:
        assert fed.waited.wait(30)
    finally:
        assert watcher.stop(timeout_s=30)
