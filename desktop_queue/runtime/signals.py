"""POSIX signals delivered to a Qt event loop as soon as they arrive.

Python runs a signal handler only between two bytecodes, and a Qt event loop waiting in
C++ runs none until some timer calls into Python: a SIGTERM (a logout, a shutdown,
``kill``) could wait for the next refresh tick, or forever in an idle window. The
wake-up file descriptor of :func:`signal.set_wakeup_fd` makes the loop wake at once:
CPython writes the signal's number to it, a :class:`QSocketNotifier` reads it, and the
handler runs then. Nothing polls, so an idle process stays idle.
"""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Callable, Iterable

from PySide6.QtCore import QObject, QSocketNotifier


class SignalBridge(QObject):
    """Calls ``handler(signum)`` on the Qt event loop's thread when one of ``signals`` arrives.

    Install it from the main thread (Python only lets that thread set handlers);
    :meth:`close` puts back the handlers and the wake-up descriptor it replaced.

    Args:
        signals: e.g. ``(signal.SIGINT, signal.SIGTERM)``.
        handler: called with the signal's number.
        parent: the Qt parent.
    """

    def __init__(self, signals: Iterable[int], handler: Callable[[int], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        self._notifier = QSocketNotifier(self._reader.fileno(), QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._drain)
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        self._previous = {sig: signal.signal(sig, lambda signum, _frame: handler(signum)) for sig in signals}

    def _drain(self) -> None:
        # (reading is all it takes: the handler itself runs as this slot returns to Python)
        with contextlib.suppress(BlockingIOError, InterruptedError):
            self._reader.recv(512)

    def close(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        signal.set_wakeup_fd(self._previous_fd)
        self._notifier.setEnabled(False)
        self._reader.close()
        self._writer.close()
