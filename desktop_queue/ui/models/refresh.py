"""The one refresh timer that feeds the job table models with what changed.

Its pace follows the window: every 300 ms while the application is in front, every
2 s while another application is, every 5 s while the window is hidden or minimised
(the tray's notices still come), and at once when it comes back.

**Live** (the window's way, :func:`desktop_queue.app.start`): a
:class:`~desktop_queue.core.pg.watch.ChangeWatcher` follows the store's change feed on a
thread of its own (on PostgreSQL ``LISTEN``: no query while nothing changes) and its
signal makes the GUI thread read what changed at once (a visible window, at most once
per focused interval; a hidden one at its next tick). The timer then only moves the
clock on ("retrying in 12 s", the status bar), asking the store nothing; it reads the
store itself only every :data:`FALLBACK_MS`, or on every tick again if the watcher's
thread has died.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

from desktop_queue.core import Queue, QueueError
from desktop_queue.core.present import RECENT_WINDOW_S, JobTally
from desktop_queue.core.watch import ChangeWatcher
from desktop_queue.ui.models.job_table import JobTableModel

log = logging.getLogger(__name__)


class Pace(StrEnum):
    """How often the views look for changes: the window in front, behind another application, out of sight."""

    FOCUSED = "focused"
    UNFOCUSED = "unfocused"
    HIDDEN = "hidden"


#: refresh interval while another application is in front
UNFOCUSED_MS = 2000
#: refresh interval while the window is hidden (in the tray) or minimised
HIDDEN_MS = 5000
#: live: how often the window reads the store although the feed told it nothing. A safety
#: net only: a change's wake-up is lost only when its process died between the commit and
#: the notification (a lost listener connection is noticed by the feed, which then reads);
#: 30 s bounds such a change's delay at one cheap read per window per 30 s.
FALLBACK_MS = 30_000

#: how often the tables let go of the rows of jobs the store archived meanwhile
RELEASE_EVERY_MS = 60_000
#: the fewest rows a table in front of the user lets go of at once (out of sight: any)
RELEASE_AT_LEAST = 1000

_WINDOW_EVENTS = frozenset({QEvent.Type.Show, QEvent.Type.Hide, QEvent.Type.WindowStateChange})


class RefreshCoordinator(QObject):
    """Polls the queue for changes on one named timer and feeds them to the models.

    Changes made by any process (this window, the CLI, a headless worker) show up
    within one interval. Besides the models it keeps :attr:`tally` (counts, recent
    completions, the interactive lane) up to date from the same changed jobs, so that
    nothing on the refresh path walks every job.

    Args:
        queue: the engine.
        models: the job table models to keep up to date.
        interval_ms: the refresh interval while the window is in front (250-500 ms).
        parent: the Qt parent.
        live: follow the store's change feed (see the module's docstring) instead of
            reading the store on every tick.
        fallback_ms: live: read the store at least this often all the same.

    Signals:
        jobs_changed(object): the set of job ids that changed (None: everything was reloaded).
        refreshed(): a refresh tick ran (the clock moved on).
        error(str): the store could not be read.
        fed(object): (internal) the watcher's thread saw changes (ids, None: anything);
            delivered on the GUI thread, where it triggers a refresh.
    """

    jobs_changed = Signal(object)
    refreshed = Signal()
    error = Signal(str)
    fed = Signal(object)

    def __init__(
        self,
        queue: Queue,
        models: list[JobTableModel],
        interval_ms: int = 300,
        parent: QObject | None = None,
        *,
        live: bool = False,
        fallback_ms: int = FALLBACK_MS,
    ) -> None:
        super().__init__(parent)
        self.live = live
        self.fallback_ms = fallback_ms
        self.watcher: ChangeWatcher | None = None
        #: refreshes that read a change the feed told of (for tests and the status of the feed)
        self.fed_refreshes = 0
        #: whether the latest refresh read a change the feed told of (else: a tick, a verb, a show)
        self.last_fed = False
        self._read_at = 0.0  # (monotonic) the last time the store was read
        self._due = False  # a feed refresh is posted and has not run yet
        self._dirty = False  # the feed told of a change no refresh has read yet
        # (emitted on the watcher's thread; queued: the slot runs on the GUI thread)
        self.fed.connect(self._on_fed, Qt.ConnectionType.QueuedConnection)
        self.queue = queue
        self.models = list(models)
        self.tally = JobTally()
        self.version = -1
        self.intervals = {Pace.FOCUSED: interval_ms, Pace.UNFOCUSED: UNFOCUSED_MS, Pace.HIDDEN: HIDDEN_MS}
        self.pace = Pace.FOCUSED
        self._window: QWidget | None = None
        self._app_active = True
        self._shown = False
        self.timer = QTimer(self)
        self.timer.setObjectName("refreshTimer")
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._tick)
        self.release_timer = QTimer(self)
        self.release_timer.setObjectName("releaseTimer")
        self.release_timer.setInterval(RELEASE_EVERY_MS)
        self.release_timer.timeout.connect(self.release)

    def start(self) -> None:
        """Loads everything once, then polls (live: follows the change feed, and ticks)."""
        self.refresh()
        self.timer.start()
        self.release_timer.start()
        if self.live and self.watcher is None:
            self.watcher = ChangeWatcher(
                self.queue,
                self._from_thread,
                fallback_s=self.fallback_ms / 1000,
                on_ready=lambda: self._from_thread(None),
            )
            self.watcher.start(timeout_s=0)  # (not waiting: its first read is on its thread, then a refresh)

    def stop(self) -> None:
        self.timer.stop()
        self.release_timer.stop()
        watcher, self.watcher = self.watcher, None
        if watcher is not None and not watcher.stop(timeout_s=2.0):
            log.debug("the change watcher is still in a read; it ends with the process")

    @property
    def following(self) -> bool:
        """Whether the change feed's watcher runs (live and alive)."""
        return self.watcher is not None and self.watcher.alive

    def _from_thread(self, ids: set[str] | None) -> None:
        """The watcher's callback, on its thread: hands the change to the GUI thread."""
        try:
            self.fed.emit(ids)
        except RuntimeError:  # (the window is gone: nothing to tell)
            pass

    @Slot(object)
    def _on_fed(self, _ids: object) -> None:
        """Something changed elsewhere: read it now, at most once per focused interval.

        A visible window reads at once (focused or not: it may be on a second screen),
        but not more often than its focused interval, however fast the changes come (a
        burst of wake-ups makes one read). A hidden window only notes it: its next tick
        (every :data:`HIDDEN_MS`) reads, and showing it reads at once.
        """
        if self.watcher is None:
            return
        self._dirty = True
        if self._due or self.pace == Pace.HIDDEN:
            return
        gap_ms = self.intervals[Pace.FOCUSED] - (time.monotonic() - self._read_at) * 1000
        self._due = True
        QTimer.singleShot(max(0, int(gap_ms)), self, self._fed_refresh)

    def _fed_refresh(self) -> None:
        self._due = False
        if self._dirty:  # (else another refresh read it meanwhile)
            self.refresh()

    @Slot()
    def _tick(self) -> None:
        """The timer: a refresh, or (live, the feed alive, nothing noted, the fallback not due) only the clock moving on."""
        if not self.following or self._dirty or (time.monotonic() - self._read_at) * 1000 >= self.fallback_ms:
            self.refresh()
            return
        for model in self.models:
            model.tick()
        self.refreshed.emit()

    def soon(self) -> None:
        """Refreshes as soon as the event loop is free (after a verb of this window)."""
        QTimer.singleShot(0, self, self.refresh)

    # ----------------------------------------------------------------- pace

    def set_pace(self, pace: Pace | str) -> None:
        """Refreshes at ``pace``'s interval from now on; at once when the pace quickens
        (the window shown again, or its application back in front)."""
        pace = Pace(pace)
        if pace == self.pace:
            return
        faster = self.intervals[pace] < self.intervals[self.pace]
        self.pace = pace
        self.timer.setInterval(self.intervals[pace])  # (a running timer restarts with the new interval)
        if faster and self.version >= 0:
            self.soon()

    def follow(self, window: QWidget) -> None:
        """Sets the pace from ``window``'s visibility and the application's state, from now on.

        A window not shown yet keeps the pace it has: it is hidden only once it was
        shown and then hidden (to the tray) or minimised.
        """
        self._window = window
        window.installEventFilter(self)
        app = QGuiApplication.instance()
        if isinstance(app, QGuiApplication):
            self._app_active = QGuiApplication.applicationState() == Qt.ApplicationState.ApplicationActive
            app.applicationStateChanged.connect(self._application_state)
        self._follow_window()

    def pace_for(self, *, visible: bool, minimized: bool, active: bool) -> Pace:
        """The pace for a window that is (not) visible, (not) minimised, in an application (not) in front."""
        if not visible or minimized:
            return Pace.HIDDEN
        return Pace.FOCUSED if active else Pace.UNFOCUSED

    @Slot(Qt.ApplicationState)
    def _application_state(self, state: Qt.ApplicationState) -> None:
        # a dialog of this application in front keeps it active: only another application slows us
        self._app_active = state == Qt.ApplicationState.ApplicationActive
        self._follow_window()

    def _follow_window(self) -> None:
        window = self._window
        if window is None:
            return
        if window.isVisible():
            self._shown = True
        elif not self._shown:
            return  # not shown yet (start-up builds the window, then shows it): not "hidden" by anyone
        self.set_pace(
            self.pace_for(visible=window.isVisible(), minimized=window.isMinimized(), active=self._app_active)
        )

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if watched is self._window and event.type() in _WINDOW_EVENTS:
            self._follow_window()
        return False

    # ----------------------------------------------------------------- the refresh

    @Slot()
    def refresh(self) -> None:
        """One coalesced update: what changed since the last version, and nothing else."""
        self._read_at = time.monotonic()
        self.last_fed = self._dirty
        self.fed_refreshes += self._dirty
        self._dirty = False  # (a wake-up that comes during this read marks it again)
        try:
            if self.version < 0:
                self.version = self.queue.refresh()
                self._reset(self.queue.raw_jobs())
            else:
                version, ids = self.queue.changed_since(self.version)
                self.version = version
                if ids is None:
                    self._reset(self.queue.raw_jobs())
                elif ids:
                    jobs = self.queue.raw_jobs(ids)
                    self.tally.apply(jobs)
                    for model in self.models:
                        model.apply(jobs)
                    self.jobs_changed.emit(set(ids))
        except QueueError as exc:
            self.error.emit(str(exc))
            return
        for model in self.models:
            model.tick()
        self.refreshed.emit()

    @Slot()
    def release(self) -> int:
        """Has the tables let go of the rows of jobs the store archived since (see
        :meth:`JobTableModel.release`); how many rows went.

        A window in front lets go of them a thousand at a time at most once a
        minute; one in sight keeps them while someone reads the table scrolled down or
        the archived rows; a window out of sight lets go of every one, archived rows
        included.
        """
        hidden = self.pace == Pace.HIDDEN
        at_least = 1 if self.pace != Pace.FOCUSED else RELEASE_AT_LEAST
        gone = 0
        try:
            for model in self.models:
                gone += model.release(self.queue.hot_among, at_least=at_least, out_of_sight=hidden)
        except QueueError as exc:  # (the next round tries again)
            log.debug("the tables kept their rows: %s", exc)
        return gone

    def _reset(self, jobs: Sequence[Mapping[str, Any]]) -> None:
        # the hot set keeps the newest finished jobs only: a busy minute finishes more
        self.tally.reset(jobs, recent=self.queue.finished_since(self.queue.clock.now() - RECENT_WINDOW_S))
        for model in self.models:
            model.reset_jobs(jobs)
        self.jobs_changed.emit(None)
