"""A failure that recurs at every tick until something outside changes: told once, and when it ends.

A full disk makes the same write fail at each round of a loop that cannot stop for it
(the flow state saved around every lease, a lease renewed every few seconds, an
outcome offered to the store again). Logging each failure floods the log (a dozen
lines a second), and a journald or log file on the same full disk can take none of
them. A :class:`Lapse` logs the first failure of a spell as a warning, the repeats at
debug level, and one line when the operation succeeds again, with how often it failed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable


class Lapse:
    """The spells of one recurring failure, each logged when it starts and when it ends.

    Args:
        logger: where the lines go.
        what: the failure ("could not save the flow state"); ``{key}`` stands for the key.
        again: the line that closes a spell ("saved the flow state again"), formatted alike.

    Keyed calls keep one spell per key (a job), so one job's failure does not hide
    another's. Thread-safe.
    """

    def __init__(self, logger: logging.Logger, what: str, again: str) -> None:
        self._log = logger
        self._what = what
        self._again = again
        self._lock = threading.Lock()
        self._failures: dict[Hashable, int] = {}

    def failed(self, detail: object = None, key: Hashable = None) -> bool:
        """Logs a failure (a warning only if it starts a spell); returns whether it started one."""
        with self._lock:
            count = self._failures.get(key, 0) + 1
            self._failures[key] = count
        what = self._what.format(key=key)
        said = what if detail is None else f"{what}: {detail}"
        if count == 1:
            self._log.warning("%s", said)
        else:
            self._log.debug("%s (failure %d in a row)", said, count)
        return count == 1

    def ended(self, key: Hashable = None) -> None:
        """The operation succeeded: closes a spell with one line (nothing if none was open)."""
        with self._lock:
            count = self._failures.pop(key, 0)
        if count:
            tries = "once" if count == 1 else f"{count} times in a row"
            self._log.info("%s (it had failed %s)", self._again.format(key=key), tries)

    def forget(self, key: Hashable = None) -> None:
        """Drops a spell without a closing line (what it was about left this process)."""
        with self._lock:
            self._failures.pop(key, None)

    def failing(self, key: Hashable = None) -> bool:
        """Whether a spell is open."""
        with self._lock:
            return key in self._failures


def os_reason(exc: BaseException) -> str:
    """One line for an error: an ``OSError`` as "path: reason" (the path when it names one), else its text."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    return str(exc)


__all__ = ["Lapse", "os_reason"]
