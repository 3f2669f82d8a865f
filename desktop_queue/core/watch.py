"""A thread that follows the queue's changes and calls back with the changed ids: what a view or a driver plugs in.

:class:`ChangeWatcher` waits on :meth:`Queue.wait_changes` (on PostgreSQL: the listener's
notifications, no query while nothing happens; on a backend without a change feed, the
JSON store's, it reads at its step, 0.5 s, on its own thread), then reads :meth:`Queue.changed_since`
once and hands the ids to its callback, on its own thread: a Qt adapter forwards them
with a queued signal (workers never touch widgets). ``fallback_s`` bounds how long a
change can go unseen when its notification was lost (its process died between the
commit and the notification, say): then it reads anyway.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from desktop_queue.core.errors import QueueError

if TYPE_CHECKING:
    from desktop_queue.core.queue import Queue

log = logging.getLogger(__name__)


class ChangeWatcher:
    """Calls ``on_change(ids)`` (None: reload everything) after each change another commit made.

    Args:
        queue: the queue to follow.
        on_change: called on the watcher's thread with the changed ids.
        fallback_s: read at least this often, notification or not.
        on_ready: called once on the watcher's thread when the starting version is known
            (a view that read before the watcher started reads once more then: a change
            between its read and the watcher's first one is not lost).
    """

    def __init__(
        self,
        queue: Queue,
        on_change: Callable[[set[str] | None], None],
        *,
        fallback_s: float = 5.0,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.queue = queue
        self.on_change = on_change
        self.on_ready = on_ready
        self.fallback_s = fallback_s
        self.reads = 0  # how many times it asked the store what changed
        # (whether commits wake Queue.wait_changes; an object without the word is asked to wait)
        self._fed = bool(getattr(queue, "has_change_feed", True))
        self._stop = threading.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dq-change-watcher", daemon=True)

    def start(self, timeout_s: float = 30.0) -> bool:
        """Starts following; returns once the starting version is known (False: not within ``timeout_s``)."""
        self._thread.start()
        return self._started.wait(timeout_s)

    @property
    def ready(self) -> bool:
        """Whether the starting version is known: a change committed from now on is seen."""
        return self._started.is_set()

    @property
    def alive(self) -> bool:
        """Whether the thread still follows the queue."""
        return self._thread.is_alive() and not self._stop.is_set()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stops following; waits up to ``timeout_s`` (default: a fallback period and 10 s) for the thread.

        Returns whether the thread has ended (a read in progress on a store that does not
        answer may outlast a short wait; the thread is a daemon and ends with it).
        """
        self._stop.set()
        interrupt = getattr(self.queue, "interrupt_waits", None)
        if interrupt is not None:
            interrupt()  # (a wait on the change feed ends now, not at its next step)
        if self._thread.is_alive():
            self._thread.join(self.fallback_s + 10 if timeout_s is None else timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        version = -1
        quiet_s = 0.0
        # a wait on the feed ends at a notification or when stop() interrupts it, so it
        # waits out the whole fallback; the JSON store's wait (on the stop flag) steps
        # at the pace it reads at
        step_s = self.fallback_s if self._fed else min(0.5, self.fallback_s)
        while not self._stop.is_set():
            try:
                if version < 0:
                    version = self.queue.refresh()
                    version, _ = self.queue.changed_since(version)  # (a version the feed knows)
                    self._started.set()
                    if self.on_ready is not None:
                        self.on_ready()
                    continue
                if self._fed:
                    changed = self.queue.wait_changes(version, step_s, stop=self._stop)
                    if self._stop.is_set():
                        break
                else:
                    # nothing but time would end the store's wait: wait on the stop flag
                    # instead, so that stop() returns at once, not after a step
                    if self._stop.wait(step_s):
                        break
                    changed = True
                if not changed:
                    quiet_s += step_s
                    if quiet_s < self.fallback_s:
                        continue
                quiet_s = 0.0
                self.reads += 1
                version, ids = self.queue.changed_since(version)
                if ids is None or ids:
                    self.on_change(ids)
            except QueueError as exc:  # (the store is away: try again after a pause)
                log.debug("the change watcher could not read: %s", exc)
                self._stop.wait(1.0)
