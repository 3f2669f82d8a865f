"""The Metrics pane's source: windowed figures computed off the GUI thread.

:class:`MetricsSource` owns a :class:`~desktop_queue.core.windowed.WindowedMetrics` and
asks it for a window's figures in the global thread pool: folding what changed is quick,
but the first fold (or one after a purge) reads the archive's index, which on a store of a
million jobs takes seconds; the window's thread never waits for it. One request runs at a time; a request made meanwhile runs
when it ends (the latest window wins), so a fast timer never piles work up.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QThreadPool, Signal, Slot

from desktop_queue.core.windowed import WindowedMetrics, WindowFigures


class _Relay(QObject):
    """Carries a runnable's answer to the GUI thread (owned by the source, not by the runnable)."""

    done = Signal(object, str)  # figures or None, error message or ""


class _Compute:
    """One computation, run by the pool (a callable: see :class:`~desktop_queue.runtime.driver.JobRunnable`)."""

    def __init__(self, metrics: WindowedMetrics, window: str, relay: _Relay) -> None:
        self.metrics = metrics
        self.window = window
        self.relay = relay

    def run(self) -> None:
        try:
            figures: WindowFigures | None = self.metrics.figures(self.window)
            error = ""
        except Exception as exc:  # the pane says so; the next refresh tries again
            figures, error = None, f"The metrics could not be computed: {exc}"
        self.relay.done.emit(figures, error)


class MetricsSource(QObject):
    """Computes :class:`WindowFigures` in the background and hands them to the GUI thread.

    Args:
        metrics: the windowed metrics of the window's queue.
        pool: where to compute (default: a pool of one thread of its own, so that the
            window's shutdown and the tests can wait for it alone).

    Signals:
        ready(object): the figures of the window last asked for (a :class:`WindowFigures`).
        failed(str): computing them failed (a sentence for the user).
    """

    ready = Signal(object)
    failed = Signal(str)

    def __init__(
        self, metrics: WindowedMetrics, pool: QThreadPool | None = None, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.metrics = metrics
        if pool is None:
            pool = QThreadPool(self)
            pool.setMaxThreadCount(1)
        self.pool = pool
        self._relay = _Relay(self)
        self._relay.done.connect(self._done)
        self._busy = False
        self._wanted: str | None = None

    @property
    def busy(self) -> bool:
        return self._busy

    def request(self, window: str) -> None:
        """Computes ``window``'s figures (now, or after the request in flight)."""
        if self._busy:
            self._wanted = window
            return
        self._busy = True
        self.pool.start(_Compute(self.metrics, window, self._relay).run)

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Asks for nothing more and waits for the figures in flight; False if they did not end in time."""
        self._wanted = None
        return self.pool.waitForDone(timeout_ms)

    @Slot(object, str)
    def _done(self, figures: Any, error: str) -> None:
        self._busy = False
        if figures is not None:
            self.ready.emit(figures)
        else:
            self.failed.emit(error)
        wanted, self._wanted = self._wanted, None
        if wanted is not None:
            self.request(wanted)
