"""The lease keeper: renews every lease this process holds, whatever its providers do.

A provider that blocks in one long HTTP call (a 40 s chat answer, an image) cannot
heartbeat, and a lease must not expire under a holder that is alive (shared/DESIGN.md
section 1). The keeper is a thread of its own that renews each kept lease every third
of its length, so neither a slow provider nor a busy GUI thread can let one lapse. A
call that hangs is ended by its attempt timeout (the runtime's business), never by
lease expiry.

After a suspension (the machine slept, or the process was stopped) the keeper's next
round renews every lease at once; the queue never reaps a kept lease meanwhile
(:meth:`Queue.keep <desktop_queue.core.queue.Queue.keep>`), so the holder finds its
leases as it left them. The suspensions are remembered so that the runtime can tell
an attempt that was only interrupted by one, and give it back unspent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from desktop_queue.core.errors import QueueError, StaleLease
from desktop_queue.core.lapse import Lapse
from desktop_queue.core.liveness import SuspendDetector, Suspension

log = logging.getLogger(__name__)


@dataclass
class _Kept:
    lease: Any
    lease_s: float
    renewed: float  # monotonic


class LeaseKeeper:
    """Renews the leases of one process on a thread of its own.

    Args:
        queue: the engine (its ``heartbeat``, ``keep`` and ``unkeep``).
        on_lost: called (on the keeper's thread) with a lease the store no longer
            honours (cancelled, or taken over): its attempt should stop.
        on_suspend: called (on the keeper's thread) with each :class:`Suspension` found.
        tick_s: the longest the keeper sleeps between two looks.
        monotonic: the in-process clock (tests pass their own).
        detector: finds suspensions (default: a :class:`SuspendDetector` at ``tick_s``).
    """

    def __init__(
        self,
        queue: Any,
        *,
        on_lost: Callable[[Any], None] | None = None,
        on_suspend: Callable[[Suspension], None] | None = None,
        tick_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        detector: SuspendDetector | None = None,
    ) -> None:
        self.queue = queue
        self.on_lost = on_lost
        self.on_suspend = on_suspend
        self.tick_s = tick_s
        self._mono = monotonic
        self.detector = detector or SuspendDetector(tick_s, monotonic=monotonic)
        self._kept: dict[str, _Kept] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._suspensions: deque[Suspension] = deque(maxlen=64)
        # one spell for every lease: what fails them all is the store (a full disk)
        self._unrenewed = Lapse(log, "could not renew a lease", "renewed leases again")

    # ------------------------------------------------------------------ the runtime's side

    def add(self, lease: Any, lease_s: float) -> None:
        """Keeps ``lease`` alive from now until :meth:`remove`."""
        self.queue.keep(lease)
        with self._lock:
            self._kept[lease.job_id] = _Kept(lease, lease_s, self._mono())

    def remove(self, lease: Any) -> None:
        """Stops renewing ``lease`` (its attempt ended); a newer lease of the same job stays."""
        with self._lock:
            kept = self._kept.get(lease.job_id)
            if kept is not None and kept.lease.token == lease.token:
                del self._kept[lease.job_id]
        self.queue.unkeep(lease)

    def lease_of(self, job_id: str) -> Any:
        """The kept lease of ``job_id`` (None: not kept)."""
        with self._lock:
            kept = self._kept.get(job_id)
            return kept.lease if kept is not None else None

    def kept(self) -> list[str]:
        """The ids of the jobs whose leases are kept."""
        with self._lock:
            return list(self._kept)

    def suspended_since(self, since: float) -> float:
        """Seconds of suspension found after monotonic time ``since`` (an attempt's start)."""
        with self._lock:
            return sum(s.seconds for s in self._suspensions if s.ended > since)

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    # ------------------------------------------------------------------ the thread

    def _interval(self) -> float:
        with self._lock:
            shortest = min((k.lease_s for k in self._kept.values()), default=3 * self.tick_s)
        return max(0.05, min(self.tick_s, shortest / 3.0))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._wake.wait(self._interval())
            self._wake.clear()

    def run_once(self) -> int:
        """One round: notices a suspension, renews what is due; returns how many were renewed."""
        suspension = self.detector.check()
        if suspension is not None:
            with self._lock:
                self._suspensions.append(suspension)
            what = "the machine was suspended" if suspension.machine else "this process did not run"
            log.warning("%s for %.1f s: renewing every lease before anything else", what, suspension.seconds)
        now = self._mono()
        with self._lock:
            due = [k for k in self._kept.values() if suspension is not None or now - k.renewed >= k.lease_s / 3.0]
        renewed = 0
        for kept in due:
            try:
                if suspension is not None:
                    self.queue.record_suspension(kept.lease, suspension.seconds, suspension.machine, kept.lease_s)
                else:
                    self.queue.heartbeat(kept.lease, kept.lease_s)
            except StaleLease:
                self.remove(kept.lease)
                if self.on_lost is not None:
                    self.on_lost(kept.lease)
                continue
            except QueueError as exc:  # the store is unusable for a moment: the next round tries again
                self._unrenewed.failed(f"{exc} (job {kept.lease.job_id})")
                continue
            self._unrenewed.ended()
            kept.renewed = self._mono()
            renewed += 1
        if suspension is not None and self.on_suspend is not None:
            self.on_suspend(suspension)
        return renewed


__all__ = ["LeaseKeeper"]
