"""What a failure, an expired lease or an interrupted job becomes: decisions as pure functions.

Each function takes the facts as plain values (counts, times, what a provider or the
result store said) and returns a decision; nothing here reads a clock, a file or the
store, so every rule of ``shared/DESIGN.md`` section 2 can be tested, and reused by
another backend, on its own. The queue turns a decision into journal records.
(procrastinate's ``RetryStrategy`` has the same shape: facts in, a decision out.)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import StrEnum

from desktop_queue.core.model import ErrorClass, EventType
from desktop_queue.core.retry import RetryPolicy

#: how long a live holder may go without renewing an expired lease before it is taken
#: from it (a laptop asleep for hours still holds it until then)
SILENT_HOLDER_S = 3600.0


@dataclass(frozen=True)
class FailureDecision:
    """What a failed attempt leads to.

    Attributes:
        dead: dead-letter the job (``reason`` says why); otherwise queue it again.
        reason: why it is dead-lettered (None when it is queued again).
        event: the timeline event of a requeue (``throttled`` or ``retry_scheduled``).
        delay: seconds until it may run again (0 when dead).
        give_back: the attempt does not count (a rate limit is not the job's fault).
        poison_count: the job's new count of invalid outputs, when this failure was one.
        poisoned: the count reached the policy's limit: the input itself is the problem.
        retry_after: the provider's ``Retry-After`` that was honoured (None: none, or garbled).
    """

    dead: bool
    reason: str | None = None
    event: EventType | None = None
    delay: float = 0.0
    give_back: bool = False
    poison_count: int | None = None
    poisoned: bool = False
    retry_after: float | None = None


def decide_failure(
    error_class: ErrorClass | str | None,
    retry_after: float | None,
    *,
    attempts: int,
    max_attempts: int,
    poison_count: int,
    deadline_at: float | None,
    now: float,
    policy: RetryPolicy,
    rng: random.Random,
) -> FailureDecision:
    """Classifies a failed attempt (``attempts`` counts it): retry, wait out a limit, or dead-letter.

    - fatal: dead at once;
    - throttled: queued again after ``Retry-After`` (else full-jitter backoff), the
      attempt given back;
    - poison: counted; dead once the policy's ``poison_after`` is reached, else retried;
    - retryable: retried after ``Retry-After`` or backoff until the attempts are spent;
    - any requeue that would run after the job's retry deadline is dead instead.

    A ``retry_after`` that is negative, infinite or NaN (a garbled header) is ignored.
    """
    kind = ErrorClass(error_class or ErrorClass.RETRYABLE)
    if retry_after is not None and not (math.isfinite(retry_after) and retry_after >= 0):
        retry_after = None

    counted: int | None = None
    give_back = False
    if kind is ErrorClass.FATAL:
        return FailureDecision(dead=True, reason="fatal error", retry_after=retry_after)
    if kind is ErrorClass.THROTTLED:
        event = EventType.THROTTLED
        delay = max(0.0, retry_after if retry_after is not None else policy.backoff(max(1, attempts), rng))
        give_back = True
    else:
        if kind is ErrorClass.POISON:
            counted = poison_count + 1
            if counted >= policy.poison_after:
                return FailureDecision(
                    dead=True,
                    reason="poison: the same input kept producing invalid output",
                    poison_count=counted,
                    poisoned=True,
                    retry_after=retry_after,
                )
        if attempts >= max_attempts:
            return FailureDecision(
                dead=True,
                reason=f"attempts exhausted ({attempts}/{max_attempts})",
                poison_count=counted,
                retry_after=retry_after,
            )
        event = EventType.RETRY_SCHEDULED
        delay = retry_after if retry_after is not None else policy.backoff(attempts, rng)
    if deadline_at is not None and now + delay > deadline_at:
        return FailureDecision(
            dead=True,
            reason="retry deadline passed",
            give_back=give_back,
            poison_count=counted,
            retry_after=retry_after,
        )
    return FailureDecision(
        dead=False, event=event, delay=delay, give_back=give_back, poison_count=counted, retry_after=retry_after
    )


def lost_lease_reason(
    *, renewed_here: bool, owner: str | None, me: str, alive: bool | None, overdue_s: float
) -> str | None:
    """Why an expired lease counts as lost, or None while its holder may still renew it.

    ``renewed_here``: this process renews it (late only because this process was
    suspended). ``alive``: whether the owner process still runs (None when unknown:
    no owner recorded, or it is this process). ``overdue_s``: seconds since it expired.
    """
    if renewed_here:
        return None
    if owner is None or owner == me or alive is None:
        return "no heartbeat before the lease expired"
    if not alive:
        return "the process holding the lease has ended"
    if overdue_s > SILENT_HOLDER_S:
        return f"the process holding the lease runs but has not renewed it for {overdue_s:.0f} s"
    return None  # stopped or suspended for a while; it renews the lease when it runs again


class Then(StrEnum):
    """Where a job goes after its lease was lost or its process died."""

    SUCCEED = "succeed"  # its answer was stored before: never produce it again
    DEAD = "dead"  # that was its last attempt
    REQUEUE = "requeue"  # run it again, a new attempt
    RESUME = "resume"  # the provider still works on the attempt: poll it, spend no new attempt
    FAIL = "fail"  # the provider reported a failure: decide_failure says what next


def decide_reap(*, has_result: bool, attempts: int, max_attempts: int) -> Then:
    """What becomes of a job whose lease was lost (:func:`lost_lease_reason` said why)."""
    if has_result:
        return Then.SUCCEED
    if attempts >= max_attempts:
        return Then.DEAD
    return Then.REQUEUE


class Lookup(StrEnum):
    """What a provider said, at start-up, about an attempt whose process died."""

    FINISHED = "finished"
    RUNNING = "running"
    FAILED = "failed"
    UNKNOWN = "unknown"


def decide_reconcile(*, has_result: bool, lookup: Lookup | str | None, attempts: int, max_attempts: int) -> Then:
    """What becomes of a job found running with no live holder when the store opens.

    The local result store is asked first (the dead holder's own answer), then the
    provider (``lookup``, None when it was not asked): a finished answer is fetched and
    stored, never produced again; a running one is resumed; a reported failure goes
    through :func:`decide_failure`; an unknown outcome is run again while attempts are
    left. ``lookup`` is consulted only when there is no local result.
    """
    if has_result:
        return Then.SUCCEED
    status = Lookup(lookup) if lookup is not None else Lookup.UNKNOWN
    if status is Lookup.FINISHED:
        return Then.SUCCEED
    if status is Lookup.RUNNING:
        return Then.RESUME
    if status is Lookup.FAILED:
        return Then.FAIL
    return Then.DEAD if attempts >= max_attempts else Then.REQUEUE
