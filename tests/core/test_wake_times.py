"""Queue.wake_times: what an idle lease driver sleeps until, on every backend.

The earliest expiry it reports is that of a lease this process does not renew (one it
may have to reap); a kept lease's holder is alive by definition and never counts.
"""

from __future__ import annotations

import pytest

from desktop_queue.core import Queue


def test_the_earliest_expiry_is_of_a_lease_this_process_does_not_keep(any_queue: Queue) -> None:
    queue = any_queue
    for i in range(3):
        queue.submit("demo", {"prompt": f"p{i}"})
    assert queue.wake_times()[1] is None  # nothing running

    short = queue.lease("elsewhere", lease_s=20)
    long = queue.lease("elsewhere", lease_s=60)
    assert short is not None and long is not None
    expiries = {lease.job_id: queue.get(lease.job_id).lease_expires_at for lease in (short, long)}

    _wake, expiry = queue.wake_times()
    assert expiry == pytest.approx(expiries[short.job_id])

    queue.keep(short)  # this process renews it now: not a lease to wake up for
    try:
        assert queue.wake_times()[1] == pytest.approx(expiries[long.job_id])
        queue.keep(long)
        assert queue.wake_times()[1] is None
    finally:
        queue.unkeep(short)
        queue.unkeep(long)
