"""Numbers derived from the event timelines: counts, wait and run times, retries, expiries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from desktop_queue.core.model import State
from desktop_queue.core.records import JobDict
from desktop_queue.core.store.archive import Totals, bucket_value, contribution


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


def weighted_percentile(values: list[tuple[float, int]], q: float) -> float | None:
    """:func:`percentile` over ``(value, how many times)`` pairs."""
    pairs = sorted((v, n) for v, n in values if n > 0)
    total = sum(n for _, n in pairs)
    if not total:
        return None
    if total == 1:
        return pairs[0][0]
    pos = (total - 1) * q / 100.0
    low_rank = int(pos)
    frac = pos - low_rank

    def at(rank: int) -> float:
        seen = 0
        for v, n in pairs:
            seen += n
            if rank < seen:
                return v
        return pairs[-1][0]

    low = at(low_rank)
    high = at(min(low_rank + 1, total - 1))
    return low + (high - low) * frac


def compute(jobs: Iterable[JobDict], archived: Totals | None = None) -> Stats:
    """Derives :class:`Stats` from raw job dicts with their ``events`` (see :func:`contribution`),
    plus the running totals of the archived jobs, if any.

    Queue wait is from a job becoming runnable (submitted, retried, requeued) to its next
    lease; run time is from a lease to the success that ended it. The archive keeps its
    times as a histogram of 2 % wide buckets, so with archived jobs the percentiles are
    within 2 % of the exact ones.
    """
    stats = Stats(counts={str(s): 0 for s in State})
    waits: list[float] = []
    runs: list[float] = []
    for job in jobs:
        stats.jobs += 1
        stats.counts[job["state"]] = stats.counts.get(job["state"], 0) + 1
        c = contribution(job)
        stats.attempts += c.attempts
        stats.retries += c.retries
        stats.throttled += c.throttled
        stats.lease_expiries += c.lease_expiries
        stats.reconciled += c.reconciled
        stats.stale_results += c.stale_results
        waits.extend(c.waits)
        runs.extend(c.runs)
    if archived is None or not any(archived.counts.values()):
        stats.wait_p50_s = percentile(waits, 50)
        stats.wait_p95_s = percentile(waits, 95)
        stats.run_p50_s = percentile(runs, 50)
        stats.run_p95_s = percentile(runs, 95)
    else:
        for state, n in archived.counts.items():
            stats.counts[state] = stats.counts.get(state, 0) + n
            stats.jobs += n
        stats.attempts += archived.counters.get("attempts", 0)
        stats.retries += archived.counters.get("retries", 0)
        stats.throttled += archived.counters.get("throttled", 0)
        stats.lease_expiries += archived.counters.get("lease_expiries", 0)
        stats.reconciled += archived.counters.get("reconciled", 0)
        stats.stale_results += archived.counters.get("stale_results", 0)
        w = [(v, 1) for v in waits] + [(bucket_value(b), n) for b, n in archived.waits.items()]
        r = [(v, 1) for v in runs] + [(bucket_value(b), n) for b, n in archived.runs.items()]
        stats.wait_p50_s = weighted_percentile(w, 50)
        stats.wait_p95_s = weighted_percentile(w, 95)
        stats.run_p50_s = weighted_percentile(r, 50)
        stats.run_p95_s = weighted_percentile(r, 95)
    stats.dead_letters = stats.counts.get(State.DEAD, 0)
    return stats
