"""The decisions of shared/DESIGN.md section 2 as pure functions: facts in, a decision out."""

from __future__ import annotations

import random

from hypothesis import example, given
from hypothesis import strategies as st

from desktop_queue.core.decisions import (
    SILENT_HOLDER_S,
    Then,
    decide_failure,
    decide_reap,
    decide_reconcile,
    lost_lease_reason,
)
from desktop_queue.core.model import ErrorClass, EventType
from desktop_queue.core.retry import RetryPolicy

POLICY = RetryPolicy(base_s=1.0, cap_s=60.0, poison_after=3)
classes = st.sampled_from(list(ErrorClass))
retry_afters = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))


@given(
    error_class=classes,
    retry_after=retry_afters,
    attempts=st.integers(1, 10),
    max_attempts=st.integers(1, 10),
    poison_count=st.integers(0, 5),
    deadline_in=st.one_of(st.none(), st.floats(0, 200)),
    seed=st.integers(0, 2**32),
)
# (a Retry-After below the float step of now, at the deadline: found by a CI run)
@example(
    error_class=ErrorClass.RETRYABLE,
    retry_after=7.555417039969865e-54,
    attempts=1,
    max_attempts=2,
    poison_count=0,
    deadline_in=0.0,
    seed=0,
)
def test_every_failure_is_decided_by_the_rules(
    error_class: ErrorClass,
    retry_after: float | None,
    attempts: int,
    max_attempts: int,
    poison_count: int,
    deadline_in: float | None,
    seed: int,
) -> None:
    now = 1000.0
    decision = decide_failure(
        error_class,
        retry_after,
        attempts=attempts,
        max_attempts=max_attempts,
        poison_count=poison_count,
        deadline_at=None if deadline_in is None else now + deadline_in,
        now=now,
        policy=POLICY,
        rng=random.Random(seed),
    )
    honoured = retry_after is not None and retry_after >= 0 and retry_after != float("inf")
    assert decision.retry_after == (retry_after if honoured else None)
    # a throttle never spends the attempt, and nothing else gives one back
    assert decision.give_back == (error_class is ErrorClass.THROTTLED)
    assert (decision.poison_count is not None) == (error_class is ErrorClass.POISON)
    if error_class is ErrorClass.POISON:
        assert decision.poison_count == poison_count + 1
    assert decision.poisoned == (error_class is ErrorClass.POISON and poison_count + 1 >= POLICY.poison_after)
    if error_class is ErrorClass.FATAL:
        assert decision.dead and decision.reason == "fatal error"
        return
    if decision.dead:
        assert decision.reason and decision.event is None
        exhausted = error_class is not ErrorClass.THROTTLED and attempts >= max_attempts
        assert decision.poisoned or exhausted or decision.reason == "retry deadline passed"
        return
    # queued again: after Retry-After when given, else within the full-jitter ceiling
    assert decision.event is (EventType.THROTTLED if error_class is ErrorClass.THROTTLED else EventType.RETRY_SCHEDULED)
    if honoured:
        assert decision.delay == retry_after
    else:
        ceiling = POLICY.ceiling(max(1, attempts))
        assert 0.0 <= decision.delay <= ceiling
    if deadline_in is not None:
        # (as the times are stored: the job runs again at now + delay, which must not pass
        # the deadline; a delay below the float step of now, 1e-54 s say, is no later)
        assert now + decision.delay <= now + deadline_in
    if error_class is not ErrorClass.THROTTLED:
        assert attempts < max_attempts


def test_a_retry_past_the_deadline_dead_letters_and_still_gives_a_throttles_attempt_back() -> None:
    decision = decide_failure(
        ErrorClass.THROTTLED,
        120.0,
        attempts=1,
        max_attempts=5,
        poison_count=0,
        deadline_at=1060.0,
        now=1000.0,
        policy=POLICY,
        rng=random.Random(1),
    )
    assert decision.dead and decision.reason == "retry deadline passed" and decision.give_back


def test_the_same_seed_draws_the_same_backoff() -> None:
    def draw(seed: int) -> float:
        return decide_failure(
            "retryable",
            None,
            attempts=3,
            max_attempts=5,
            poison_count=0,
            deadline_at=None,
            now=0.0,
            policy=POLICY,
            rng=random.Random(seed),
        ).delay

    assert draw(7) == draw(7)
    assert len({draw(s) for s in range(20)}) > 10  # jittered, not fixed


def test_a_lost_lease_is_told_apart_from_a_sleeping_holder() -> None:
    assert lost_lease_reason(renewed_here=True, owner=None, me="me", alive=None, overdue_s=1e9) is None
    assert lost_lease_reason(renewed_here=False, owner=None, me="me", alive=None, overdue_s=1) == (
        "no heartbeat before the lease expired"
    )
    assert "ended" in (lost_lease_reason(renewed_here=False, owner="p", me="me", alive=False, overdue_s=1) or "")
    assert lost_lease_reason(renewed_here=False, owner="p", me="me", alive=True, overdue_s=SILENT_HOLDER_S) is None
    late = lost_lease_reason(renewed_here=False, owner="p", me="me", alive=True, overdue_s=SILENT_HOLDER_S + 1)
    assert late is not None and "has not renewed it" in late


@given(has_result=st.booleans(), attempts=st.integers(0, 6), max_attempts=st.integers(1, 6))
def test_a_reaped_job_with_an_answer_is_never_run_again(has_result: bool, attempts: int, max_attempts: int) -> None:
    then = decide_reap(has_result=has_result, attempts=attempts, max_attempts=max_attempts)
    if has_result:
        assert then is Then.SUCCEED
    else:
        assert then is (Then.DEAD if attempts >= max_attempts else Then.REQUEUE)


@given(
    has_result=st.booleans(),
    lookup=st.sampled_from([None, "finished", "running", "failed", "unknown"]),
    attempts=st.integers(0, 6),
    max_attempts=st.integers(1, 6),
)
def test_reconciliation_asks_the_result_store_before_the_provider(
    has_result: bool, lookup: str | None, attempts: int, max_attempts: int
) -> None:
    then = decide_reconcile(has_result=has_result, lookup=lookup, attempts=attempts, max_attempts=max_attempts)
    expected = {
        "finished": Then.SUCCEED,
        "running": Then.RESUME,
        "failed": Then.FAIL,
    }.get(lookup or "unknown", Then.DEAD if attempts >= max_attempts else Then.REQUEUE)
    assert then is (Then.SUCCEED if has_result else expected)
