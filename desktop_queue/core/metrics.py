"""Numbers derived from the event timelines: counts, wait and run times, retries, expiries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from desktop_queue.core.model import EventType, State, events_of
from desktop_queue.core.records import JobDict


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by linear interpolation; None for no values."""
    if not values:
        return None
    data = sorted(values)
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


@dataclass
class Stats:
    """What ``desktop-queue stats`` prints."""

    counts: dict[str, int] = field(default_factory=dict)
    jobs: int = 0
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None
    run_p50_s: float | None = None
    run_p95_s: float | None = None
    attempts: int = 0
    retries: int = 0
    throttled: int = 0
    lease_expiries: int = 0
    reconciled: int = 0
    dead_letters: int = 0
    stale_results: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compute(jobs: Iterable[JobDict]) -> Stats:
    """Derives :class:`Stats` from raw job dicts with their ``events``.

    Queue wait is from a job becoming runnable (submitted, retried, requeued) to its next
    lease; run time is from a lease to the success that ended it.
    """
    stats = Stats(counts={str(s): 0 for s in State})
    waits: list[float] = []
    runs: list[float] = []
    for job in jobs:
        stats.jobs += 1
        stats.counts[job["state"]] = stats.counts.get(job["state"], 0) + 1
        ready_at: float | None = None
        leased_at: float | None = None
        for ev in events_of(job):
            kind = ev["type"]
            at = ev["at"]
            if kind in (EventType.SUBMITTED, EventType.RETRIED):
                ready_at = at
            elif kind in (EventType.RETRY_SCHEDULED, EventType.THROTTLED):
                ready_at = (ev.get("detail") or {}).get("run_after", at)
                stats.retries += kind == EventType.RETRY_SCHEDULED
                stats.throttled += kind == EventType.THROTTLED
            elif kind == EventType.LEASED:
                stats.attempts += 1
                if ready_at is not None:
                    waits.append(max(0.0, at - ready_at))
                ready_at = None
                leased_at = at
            elif kind == EventType.SUCCEEDED and leased_at is not None:
                runs.append(max(0.0, at - leased_at))
                leased_at = None
            elif kind == EventType.LEASE_EXPIRED:
                stats.lease_expiries += 1
                ready_at = at
            elif kind == EventType.RECONCILED:
                stats.reconciled += 1
                ready_at = at
            elif kind == EventType.STALE_RESULT:
                stats.stale_results += 1
    stats.dead_letters = stats.counts.get(State.DEAD, 0)
    stats.wait_p50_s = percentile(waits, 50)
    stats.wait_p95_s = percentile(waits, 95)
    stats.run_p50_s = percentile(runs, 50)
    stats.run_p95_s = percentile(runs, 95)
    return stats
