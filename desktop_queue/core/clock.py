"""Injected time: wall time for records, monotonic time for in-process deadlines."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Where the engine gets its time from."""

    def now(self) -> float:
        """Wall-clock seconds since the epoch, used for every stored timestamp."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that only moves when a test says so.

    Args:
        start: the initial wall time (seconds since the epoch).
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Moves both clocks forward by ``seconds`` (never backwards)."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._now += seconds
            self._mono += seconds
