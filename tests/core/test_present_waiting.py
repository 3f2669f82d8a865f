"""Why a job waits, in words: the queue pane's "next run", the timeline's now line, provider status."""

from __future__ import annotations

from typing import Any

import pytest

from desktop_queue.core import FakeClock, Outcome
from desktop_queue.core.flow import FlowControl, FlowEvent, FlowEventType, ProfileLimits
from desktop_queue.core.present import (
    describe_state,
    first_reason,
    flow_event_text,
    interactive_ahead,
    now_line,
    priority_reason,
    provider_status,
)

NOW = 1_000.0


def job(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "j1", "kind": "openai.chat", "state": "queued", "priority": "background",
                            "run_after": NOW, "attempts": 0, "total_attempts": 0, "input": {"prompt": "hi"}}
    return {**base, **fields}


def test_a_retry_in_the_future_says_backoff_and_a_schedule_does_not() -> None:
    retrying = job(run_after=NOW + 12, attempts=1, total_attempts=1,
                   last_error={"class": "retryable", "message": "HTTP 500"})
    assert describe_state(retrying, NOW) == "retrying in 12 s (backoff)"
    assert now_line(retrying, NOW) == "now: retrying in 12 s (backoff)"
    assert describe_state(job(run_after=NOW + 30), NOW) == "scheduled in 30 s"
    throttled = job(run_after=NOW + 12, attempts=0, total_attempts=1, last_error={"class": "throttled"})
    assert now_line(throttled, NOW) == "now: waiting: rate limit (12 s)"


def test_the_now_line_is_only_for_queued_jobs() -> None:
    for state in ("running", "succeeded", "dead", "cancelled"):
        assert now_line(job(state=state), NOW) is None
    assert now_line(job(), NOW) == "now: ready"


@pytest.mark.parametrize(
    ("ahead", "free", "expected"),
    [
        (0, None, None),
        (1, None, "waiting: lower priority (1 interactive job ahead)"),
        (3, 1, "waiting: lower priority (3 interactive jobs ahead)"),
        (2, 2, "waiting: lower priority (2 interactive jobs ahead)"),
        (2, 3, None),  # enough free slots: it starts in the same round
    ],
)
def test_priority_reason(ahead: int, free: int | None, expected: str | None) -> None:
    assert priority_reason(job(), ahead, free) == expected
    assert priority_reason(job(priority="interactive"), ahead, free) is None


def test_interactive_ahead_counts_due_runnable_unheld_interactive_jobs() -> None:
    jobs = [
        job(id="a", priority="interactive"),
        job(id="b", priority="interactive", kind="demo"),
        job(id="c", priority="interactive", run_after=NOW + 60),  # backing off: not ahead now
        job(id="d", priority="interactive", state="running"),
        job(id="e", priority="background"),
        job(id="f", priority="interactive", kind="other.kind"),
    ]
    assert interactive_ahead(jobs, NOW) == 3
    assert interactive_ahead(jobs, NOW, kinds={"openai.chat", "demo"}) == 2
    assert interactive_ahead(jobs, NOW, kinds={"openai.chat", "demo"}, held=lambda j: "x" if j["id"] == "a" else None) == 1


def test_each_flow_reason_reads_the_same_in_the_now_line() -> None:
    clock = FakeClock()
    flow = FlowControl({"openai": ProfileLimits(rpm=1)}, clock=clock)
    hold = first_reason(flow.waiting_reason, lambda j: priority_reason(j, 2))
    first = job(id="first")
    assert flow.accept(first)
    flow.on_start(first)
    assert now_line(job(), NOW, hold) == "now: waiting: rate limit (~60 s)"
    clock.advance(48)
    assert now_line(job(), NOW, hold) == "now: waiting: rate limit (~12 s)"
    # a kind without flow limits waits for its lane only
    assert now_line(job(kind="demo"), NOW, hold) == "now: waiting: lower priority (2 interactive jobs ahead)"

    capped = FlowControl({"openai": ProfileLimits(concurrency=1)}, clock=clock)
    assert capped.accept(first)
    capped.on_start(first)
    assert now_line(job(), NOW, capped.waiting_reason) == "now: waiting: concurrency cap"
    capped.on_outcome(first, Outcome.success({"text": "ok"}))
    assert now_line(job(), NOW, capped.waiting_reason) == "now: ready"


def test_the_breaker_reason_wins_over_the_lane() -> None:
    clock = FakeClock()
    flow = FlowControl({"openai": ProfileLimits(breaker_threshold=2)}, clock=clock)
    for n in range(2):
        failing = job(id=f"f{n}")
        assert flow.accept(failing)
        flow.on_start(failing)
        flow.on_outcome(failing, Outcome.failure("retryable", "HTTP 500"))
    hold = first_reason(flow.waiting_reason, lambda j: priority_reason(j, 1))
    assert now_line(job(), NOW, hold) == "now: waiting: provider unavailable"
    assert describe_state(job(), NOW, hold) == "waiting: provider unavailable"


def test_provider_status_texts() -> None:
    clock = FakeClock()
    flow = FlowControl({"openai": ProfileLimits(breaker_threshold=1, breaker_cooldown_s=25)}, clock=clock)
    assert provider_status(flow.snapshot("openai")) == ("ok", "openai: ok")
    busy = job(id="busy")
    flow.accept(busy)
    flow.on_start(busy)
    assert provider_status(flow.snapshot("openai")) == ("ok", "openai: ok, 1 in flight")
    flow.on_outcome(busy, Outcome.failure("throttled", "HTTP 429", retry_after=4))
    assert provider_status(flow.snapshot("openai")) == ("slow", "openai: rate limited, resuming in 4.0 s")
    clock.advance(4)
    assert provider_status(flow.snapshot("openai")) == ("slow", "openai: rate lowered to 50%")
    failing = job(id="failing")
    flow.accept(failing)
    flow.on_start(failing)
    flow.on_outcome(failing, Outcome.failure("retryable", "HTTP 503"))
    assert provider_status(flow.snapshot("openai")) == ("down", "openai: breaker open, retry in 25 s")
    clock.advance(10)
    assert provider_status(flow.snapshot("openai")) == ("down", "openai: breaker open, retry in 15 s")
    clock.advance(15)
    assert provider_status(flow.snapshot("openai")) == ("probing", "openai: breaker half-open, probing")


@pytest.mark.parametrize(
    ("kind", "detail", "expected"),
    [
        (FlowEventType.BREAKER_OPENED, {"reason": "5 retryable failures in a row", "delay_s": 30.0},
         "openai: breaker open (5 retryable failures in a row): its jobs wait without spending attempts; "
         "one probe job goes in 30 s"),
        (FlowEventType.BREAKER_HALF_OPEN, {}, "openai: breaker half-open: one probe job may go"),
        (FlowEventType.RATE_LOWERED, {"scale": 0.5, "was": 1.0}, "openai: rate lowered to 50% (was 100%) after a rate limit"),
        (FlowEventType.RATE_RECOVERED, {"scale": 0.7}, "openai: rate recovering: 70%"),
        (FlowEventType.PAUSED, {"retry_after_s": 2.0}, "openai: paused for 2.0 s by the provider's rate limit"),
    ],
)
def test_flow_event_texts(kind: FlowEventType, detail: dict[str, Any], expected: str) -> None:
    assert flow_event_text(FlowEvent(1.0, "openai", kind, detail)) == expected


def test_next_run_does_not_repeat_the_other_columns() -> None:
    """A running job said "attempt 1/3" (the Attempts column) and a dead one "dead (fatal)" (State)."""
    running = job(state="running", attempts=1, max_attempts=3, started_at=NOW - 12)
    assert describe_state(running, NOW) == "running 12 s"
    assert describe_state(job(state="running"), NOW) == "running"  # no start time recorded
    for state in ("succeeded", "dead", "cancelled"):
        finished = job(state=state, last_error={"class": "fatal", "message": "boom"})
        assert describe_state(finished, NOW) == "—"
