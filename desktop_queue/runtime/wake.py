"""When the lease driver looks at the store next: the earliest thing due, or a slow safety tick.

An idle driver must not poll the store (on PostgreSQL every look is a transaction, on
the JSON store a lock and a read of the journal): it sleeps until the change feed
says jobs changed (a submission, a retry, a cancel by anyone; see
:class:`~desktop_queue.core.watch.ChangeWatcher`) or until the first of the times it
knows something falls due. :func:`plan_wake` picks that time from what the driver's
last look found; it is a pure function so that every reason can be tested alone.

The safety tick (:data:`SAFETY_TICK_S`) bounds what the feed and the plan cannot see:
a notification lost because its process died between its commit and its ``NOTIFY``,
a schedule another process added (the schedules are a file, not a job change), the
"pause background work" switch flipped elsewhere. 30 s keeps that to one cheap look
per worker per 30 s, and a schedule's window is still on time (the scheduler runs a
window up to five minutes late, ``schedules.GRACE_S``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: the longest an idle driver sleeps without looking (see the module's docstring)
SAFETY_TICK_S = 30.0
#: how soon to look again while a due job waits for something no time is known for
#: (its provider is unavailable, background work is paused, another process runs its
#: kind): a job waits; the driver is not idle, but it need not look 4 times a second
HELD_RECHECK_S = 2.0
#: how soon to look again at a lease that expired but was not reaped (its holder lives,
#: say a stopped process on this machine): reaping decides again later, not in a loop
OVERDUE_RECHECK_S = 5.0
#: the soonest a planned wake fires (a wake due "now" is a tick on the next loop turn)
MIN_WAKE_S = 0.0


@dataclass(frozen=True)
class WakePlan:
    """When the driver looks next and why (the reason is for tests and the debug log).

    Attributes:
        delay_s: seconds from now.
        reason: what falls due then: ``safety``, ``run_after``, ``lease_expiry``,
            ``held``, ``flow``, ``overdue``, or a key of ``deadlines``.
    """

    delay_s: float
    reason: str


def plan_wake(
    *,
    now: float,
    safety_s: float,
    queue_wake: float | None = None,
    expiry: float | None = None,
    leasing: bool = True,
    flow_held: bool = False,
    flow_s: float = 0.25,
    held_s: float = HELD_RECHECK_S,
    deadlines: Mapping[str, float | None] | None = None,
) -> WakePlan:
    """The first of the times the driver knows something falls due, at most ``safety_s`` away.

    Args:
        now: the queue's wall time (``queue_wake`` and ``expiry`` are on it).
        safety_s: the safety tick.
        queue_wake: when the earliest queued job becomes runnable (None: none queued).
            A time already past while the driver had room means a due job it did not
            lease (held): looked at again after ``held_s``.
        expiry: the earliest expiry of a lease this process does not keep (reaping);
            one already past was not reaped: looked at again after :data:`OVERDUE_RECHECK_S`.
        leasing: whether the driver leases now (a free slot, not paused, not stopping):
            otherwise queued jobs do not wake it (a finish or a resume does).
        flow_held: flow control turned a due job away in the last look (a rate limit, a
            concurrency cap, an open breaker, a throttle's pause): looked at again after
            ``flow_s``, the pace the driver always had, since flow control does not say when
            its wait ends.
        flow_s: see ``flow_held``.
        held_s: see ``queue_wake``.
        deadlines: name -> seconds from now until another thing falls due (an
            attempt's timeout, the upkeep, the scheduler, a store retry); None entries
            are ignored.
    """
    best = WakePlan(max(MIN_WAKE_S, safety_s), "safety")

    def consider(delay: float, reason: str) -> None:
        nonlocal best
        delay = max(MIN_WAKE_S, delay)
        if delay < best.delay_s:
            best = WakePlan(delay, reason)

    if leasing and queue_wake is not None:
        if queue_wake > now:
            consider(queue_wake - now, "run_after")
        else:
            consider(held_s, "held")
    if leasing and flow_held:
        consider(flow_s, "flow")
    if expiry is not None:
        consider(expiry - now if expiry > now else OVERDUE_RECHECK_S, "lease_expiry" if expiry > now else "overdue")
    for reason, delay in (deadlines or {}).items():
        if delay is not None:
            consider(delay, reason)
    return best
