"""Runs a view's slow reads (a big result, an image to decode, the spend ledger) off the GUI thread.

The reads go to a small pool of their own, not the global one: that pool runs the
jobs, and a result must not wait behind a ten-minute chat call. Each request gets a
serial number; an answer to an older request than the latest is dropped, so a
quick succession of selections shows the last one only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QThreadPool, Signal

log = logging.getLogger(__name__)

#: threads for view reads (one slow read must not hold up the next selection)
VIEW_THREADS = 2

_POOL: QThreadPool | None = None


def view_pool() -> QThreadPool:
    """The pool of the views' reads (created on first use, owned by the application)."""
    global _POOL
    if _POOL is None:
        _POOL = QThreadPool(QCoreApplication.instance())
        _POOL.setMaxThreadCount(VIEW_THREADS)
        _POOL.setObjectName("viewReads")
    return _POOL


def wait_for_reads(timeout_ms: int = 5000) -> bool:
    """Waits until no view read runs (for shutdown and tests); True if none is left."""
    return _POOL is None or _POOL.waitForDone(timeout_ms)


class _Read:
    """One read, run by the pool (a callable: see :class:`~desktop_queue.runtime.driver.JobRunnable`)."""

    def __init__(self, loader: Loader, serial: int, fn: Callable[[], Any]) -> None:
        self._loader = loader
        self._serial = serial
        self._fn = fn

    def run(self) -> None:
        try:
            value: Any = self._fn()
            ok = True
        except Exception as exc:  # told to the view, which says what went wrong
            log.warning("a view read failed: %s", type(exc).__name__)
            value, ok = exc, False
        try:
            (self._loader.loaded if ok else self._loader.failed).emit(self._serial, value)
        except RuntimeError:  # the view was closed meanwhile: nobody is waiting
            pass


class Loader(QObject):
    """Runs one read at a time for a view, reporting on the GUI thread.

    Signals:
        loaded(int, object): a read finished: its serial and value.
        failed(int, object): a read raised: its serial and the exception.
    """

    loaded = Signal(int, object)
    failed = Signal(int, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.serial = 0

    def start(self, fn: Callable[[], Any]) -> int:
        """Runs ``fn`` on the views' pool; returns the serial its answer carries."""
        self.serial += 1
        view_pool().start(_Read(self, self.serial, fn).run)
        return self.serial

    def cancel(self) -> None:
        """Forgets the running read: its answer will be dropped."""
        self.serial += 1

    def is_current(self, serial: int) -> bool:
        return serial == self.serial
