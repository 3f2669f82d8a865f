"""Who holds a lease, whether that holder still lives, and whether this process was suspended.

A lease expires only when its holder has died or stopped renewing (shared/DESIGN.md
section 1). Expiry alone cannot tell a dead worker from one that was stopped
(``SIGSTOP``, a laptop lid) and is about to answer, so every lease names its holder as
``host/pid/start``: the process's start time tells a live holder from a new process
that happens to reuse its pid. Another process on the same host asks the OS whether
that holder still runs; a holder on another host (a data dir on a network share) is
judged by expiry alone.

:class:`SuspendDetector` notices that this process did not run for a while: on Linux
``CLOCK_BOOTTIME`` runs on through a system suspend while ``CLOCK_MONOTONIC`` stops,
and a stopped process (``SIGSTOP``) sees a gap between two of its own checks far
longer than it asked to sleep. The runtime renews its leases and gives the attempt
back instead of spending it when it finds one.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_HOST = socket.gethostname().split(".")[0]


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` from the third on (state, ppid, ...), or None (not Linux, no such pid)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    return raw[raw.rfind(b")") + 2 :].split()


def _start_time(pid: int) -> str | None:
    """The process's start time as the OS reports it (Linux: clock ticks since boot), or None."""
    fields = _stat(pid)
    return fields[19].decode() if fields is not None and len(fields) > 19 else None


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    except OSError:
        return False
    fields = _stat(pid)
    # a zombie has ended; only its parent has not collected its exit status yet
    return not (fields and fields[0] == b"Z")


_OWN: str | None = None
_OWN_PID = -1


def this_process() -> str:
    """This process as a lease holder: ``host/pid/start`` (computed once per process)."""
    global _OWN, _OWN_PID
    pid = os.getpid()
    if _OWN is None or pid != _OWN_PID:  # a forked child is another holder
        _OWN = f"{_HOST}/{pid}/{_start_time(pid) or '-'}"
        _OWN_PID = pid
    return _OWN


def holder_alive(holder: str | None) -> bool | None:
    """Whether the process named by ``holder`` still runs.

    Returns:
        True or False for a holder on this host; None when this cannot be told (another
        host, Windows, or a malformed name), so that the caller falls back to the lease's expiry.
    """
    if not holder:
        return None
    parts = holder.split("/")
    if len(parts) != 3 or parts[0] != _HOST:
        return None
    try:
        pid = int(parts[1])
    except ValueError:
        return None
    if holder == this_process():
        return True
    if sys.platform == "win32":
        # os.kill(pid, 0) terminates the process there (TerminateProcess): judged by its
        # lease's expiry alone, as a holder on another host is
        return None
    if not _pid_runs(pid):
        return False
    started = _start_time(pid)
    if started is None or parts[2] == "-":
        return True  # no start times here: a running pid is the best we know
    return started == parts[2]


def _boot_gap() -> float:
    """How far ``CLOCK_BOOTTIME`` has run ahead of ``CLOCK_MONOTONIC`` (time spent suspended)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return time.time() - time.monotonic()  # elsewhere: a wall/monotonic jump
    return time.clock_gettime(boottime) - time.monotonic()


@dataclass(frozen=True)
class Suspension:
    """This process did not run for ``seconds`` (ending at monotonic time ``ended``)."""

    seconds: float
    ended: float
    machine: bool  # the whole machine slept (else: this process was stopped or starved)


class SuspendDetector:
    """Notices gaps in this process's own run.

    Call :meth:`check` regularly (every ``interval_s``); it returns a :class:`Suspension`
    when the machine slept or this process did not run for much longer than the
    interval. Thread-safe.

    Args:
        interval_s: how often :meth:`check` is meant to be called.
        slack_s: how much later than planned a check may come before it counts.
        gap: the suspended-time probe (tests pass their own).
        monotonic: the in-process clock (tests pass their own).
    """

    def __init__(
        self,
        interval_s: float,
        *,
        slack_s: float = 2.0,
        gap: Callable[[], float] = _boot_gap,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.slack_s = slack_s
        self._gap = gap
        self._mono = monotonic
        self._lock = threading.Lock()
        self._last = monotonic()
        self._last_gap = gap()
        self._total = 0.0

    @property
    def total_s(self) -> float:
        """Seconds this process is known to have spent suspended since it started."""
        with self._lock:
            return self._total

    def check(self) -> Suspension | None:
        with self._lock:
            now, gap = self._mono(), self._gap()
            slept = max(0.0, gap - self._last_gap)
            stalled = max(0.0, now - self._last - self.interval_s)
            self._last, self._last_gap = now, gap
            machine = slept > self.slack_s
            lost = slept + stalled
            if not machine and stalled <= self.slack_s:
                return None
            self._total += lost
            return Suspension(round(lost, 3), now, machine)


__all__ = ["Suspension", "SuspendDetector", "holder_alive", "this_process"]
