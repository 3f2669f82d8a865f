"""Why a job waits, in words: the queue pane's "next run", the timeline's now line, provider status."""

from __future__ import annotations

from typing import Any

import pytest

from desktop_queue.core import FakeClock, Outcome
from desktop_queue.core.flow import FlowControl, FlowEvent, FlowEventType, ProfileLimits
from desktop_queue.core.ledger import Budget, SpendLedger, Usage
from desktop_queue.core.present import (
    LEASE_LATE_S,
    describe_state,
    first_reason,
    flow_event_text,
    interactive_ahead,
    lease_overdue,
    now_line,
    priority_reason,
    provider_status,
    slot_reason,
)

NOW = 1_000.0


def job(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "j1",
        "kind": "openai.chat",
        "state": "queued",
        "priority": "background",
        "run_after": NOW,
        "attempts": 0,
        "total_attempts": 0,
        "input": {"prompt": "hi"},
    }
    return {**base, **fields}


def test_a_retry_in_the_future_says_backoff_and_a_schedule_does_not() -> None:
    retrying = job(
        run_after=NOW + 12, attempts=1, total_attempts=1, last_error={"class": "retryable", "message": "HTTP 500"}
    )
    assert describe_state(retrying, NOW) == "retrying in 12 s (backoff)"
    assert now_line(retrying, NOW) == "now: retrying in 12 s (backoff)"
    assert describe_state(job(run_after=NOW + 30), NOW).startswith("scheduled for ")
    throttled = job(run_after=NOW + 12, attempts=0, total_attempts=1, last_error={"class": "throttled"})
    assert now_line(throttled, NOW) == "now: waiting: rate limit (12 s)"


def test_the_now_line_is_only_for_queued_jobs_and_stuck_running_ones() -> None:
    for state in ("running", "succeeded", "dead", "cancelled"):
        assert now_line(job(state=state), NOW) is None
    assert now_line(job(), NOW) == "now: ready"
    renewed = job(state="running", started_at=NOW - 40, lease_expires_at=NOW + 20, worker="render-box:4123")
    assert now_line(renewed, NOW) is None


def test_a_running_job_whose_holder_stopped_renewing_says_who_and_what_it_waits_for() -> None:
    """A worker stopped (SIGSTOP, a laptop lid) past its lease keeps its job: the window said only "running 63 s"."""
    stuck = job(state="running", started_at=NOW - 63, lease_expires_at=NOW - 33, worker="render-box:4123")
    assert describe_state(stuck, NOW) == "running 63 s, lease 33 s overdue"
    assert now_line(stuck, NOW) == (
        "now: lease 33 s overdue: render-box (pid 4123) has not renewed it (stopped, or asleep?). "
        "The job waits for that process and runs again only once it has ended: its answer is not paid for twice."
    )
    # a renewal a few seconds late is a busy machine, not a silent holder
    late = job(state="running", started_at=NOW - 35, lease_expires_at=NOW - LEASE_LATE_S, worker="render-box:4123")
    assert describe_state(late, NOW) == "running 35 s" and now_line(late, NOW) is None
    assert lease_overdue(job(state="queued", lease_expires_at=NOW - 60), NOW) is None


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
    assert (
        interactive_ahead(jobs, NOW, kinds={"openai.chat", "demo"}, held=lambda j: "x" if j["id"] == "a" else None) == 1
    )


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
    assert now_line(job(priority="interactive"), NOW, hold) == "now: waiting: provider unavailable"
    assert describe_state(job(priority="interactive"), NOW, hold) == "waiting: provider unavailable"
    # a background job waits longer than the breaker: interactive work, then a slow start, goes first
    assert now_line(job(), NOW, hold) == "now: background jobs paused: openai is failing"


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
        (
            FlowEventType.BREAKER_OPENED,
            {"reason": "5 retryable failures in a row", "delay_s": 30.0},
            "openai: breaker open (5 retryable failures in a row): its jobs wait without spending attempts; "
            "one probe job goes in 30 s",
        ),
        (FlowEventType.BREAKER_HALF_OPEN, {}, "openai: breaker half-open: one probe job may go"),
        (
            FlowEventType.RATE_LOWERED,
            {"scale": 0.5, "was": 1.0},
            "openai: rate lowered to 50% (was 100%) after a rate limit",
        ),
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


def test_slot_reason_names_the_busy_slots() -> None:
    assert slot_reason(3, 4) is None
    assert slot_reason(4, 4) == "waiting: a free slot (4 of 4 running)"
    assert slot_reason(5, 4) == "waiting: a free slot (5 of 4 running)"  # concurrency lowered while running


def test_offline_and_throttle_streaks_show_in_the_provider_status() -> None:
    clock = FakeClock()
    flow = FlowControl({"openai": ProfileLimits()}, clock=clock)
    probe = job(id="probe")
    assert flow.accept(probe)
    flow.on_start(probe)
    flow.on_outcome(probe, Outcome.failure("retryable", "cannot connect (ConnectError)", unreachable=True))
    assert provider_status(flow.snapshot("openai")) == ("down", "openai: offline (cannot connect (ConnectError))")
    assert describe_state(job(priority="interactive"), NOW, flow.waiting_reason) == (
        "waiting: profile openai is offline (cannot connect (ConnectError))"
    )
    texts = [flow_event_text(e) for e in flow.drain_events()]
    assert texts == [
        "openai: offline (cannot connect (ConnectError)): its jobs wait without spending attempts; "
        "one job tries again in 2.0 s"
    ]

    snapshot = {"profile": "openai", "breaker": "closed", "paused_s": 8.0, "throttles": 3}
    assert provider_status(snapshot) == ("slow", "openai: rate limited (3 in a row), resuming in 8.0 s")
    assert provider_status({**snapshot, "throttles": 1}) == ("slow", "openai: rate limited, resuming in 8.0 s")


@pytest.mark.parametrize(
    ("spent", "expected"),
    [
        ({"spent_today_usd": 1.2, "spent_month_usd": 1.2}, ("ok", "openai: ok, $1.20 of $5.00 today")),
        (
            {"spent_today_usd": 4.6, "spent_month_usd": 4.6},
            ("slow", "openai: budget nearly reached, $4.60 of $5.00 today"),
        ),
        ({"spent_today_usd": 5.0, "spent_month_usd": 5.0}, ("down", "openai: budget reached, $5.00 of $5.00 today")),
        # the fuller budget is named: 19 of 20 dollars this month before 2 of 5 today
        (
            {"spent_today_usd": 2.0, "spent_month_usd": 19.0},
            ("slow", "openai: budget nearly reached, $19.00 of $20.00 this month"),
        ),
        ({}, ("ok", "openai: ok")),  # no ledger: no spend to show
    ],
)
def test_budgets_show_in_the_provider_status(spent: dict[str, float], expected: tuple[str, str]) -> None:
    budget = Budget(usd_per_day=5.0, usd_per_month=20.0)
    snapshot = {"profile": "openai", "breaker": "closed", "in_flight": 0, **spent}
    assert provider_status(snapshot, budget) == expected


def test_a_token_budget_reads_in_tokens() -> None:
    snapshot = {"profile": "local", "breaker": "closed", "spent_today_tokens": 50_000, "spent_month_tokens": 50_000}
    assert provider_status(snapshot, Budget(tokens_per_day=50_000)) == (
        "down",
        "local: budget reached, 50,000 of 50,000 tokens today",
    )


def test_the_budget_and_no_key_reasons_read_the_same_in_the_now_line(tmp_path: Any) -> None:
    clock = FakeClock()
    budget = Budget(usd_per_day=5.0)
    ledger = SpendLedger(tmp_path, clock)
    flow = FlowControl({"openai": ProfileLimits(budget=budget, model="gpt-4o-mini")}, clock=clock, ledger=ledger)
    ledger.record(
        profile="openai",
        model="gpt-4o-mini",
        kind="openai.chat",
        usage=Usage(tokens_in=10),
        job_id="x",
        attempt=1,
        usd=5.0,
    )
    waiting = job(input={"prompt": "hi", "model": "gpt-4o-mini"})
    assert now_line(waiting, NOW, flow.waiting_reason) == (
        "now: waiting: budget of profile openai reached, $5.00 of $5.00 today"
    )
    assert provider_status(flow.snapshot("openai"), budget) == ("down", "openai: budget reached, $5.00 of $5.00 today")
    reason = "no API key for profile openai: enter it in Preferences → Providers or set OPENAI_API_KEY"
    flow.hold_kind("openai.chat", reason)
    assert now_line(waiting, NOW, flow.waiting_reason) == f"now: waiting: {reason}"


def test_a_provider_without_a_key_says_so_in_its_status() -> None:
    snapshot = {"profile": "openai", "breaker": "closed"}
    reason = "no API key for profile openai: enter it in Preferences → Providers or set OPENAI_API_KEY"
    assert provider_status(snapshot, unavailable=reason) == ("slow", "openai: no API key")
    assert provider_status(snapshot, unavailable=None) == ("ok", "openai: ok")


def test_a_table_time_is_as_short_as_it_can_be_told_apart() -> None:
    """Today a time of day, the last six days a weekday and a time, before that a date: the
    time columns stay narrow after midnight (the tooltip gives the whole time)."""
    import datetime as dt

    from desktop_queue.core.present import table_time

    now = dt.datetime(2026, 12, 7, 2, 30).timestamp()  # a Monday, half past two in the morning
    assert table_time(dt.datetime(2026, 12, 7, 0, 5, 9).timestamp(), now) == "00:05:09"
    assert table_time(dt.datetime(2026, 12, 6, 23, 52, 40).timestamp(), now) == "Sun 23:52"
    assert table_time(dt.datetime(2026, 12, 1, 9, 0).timestamp(), now) == "Tue 09:00"
    # seven days back would read "Mon" like today: a date from there on
    assert table_time(dt.datetime(2026, 11, 30, 9, 0).timestamp(), now) == "2026-11-30"
    assert table_time(dt.datetime(2025, 12, 6, 9, 0).timestamp(), now) == "2025-12-06"
    # a clock ahead (another machine's) gets its date, not a weekday
    assert table_time(dt.datetime(2026, 12, 8, 9, 0).timestamp(), now) == "2026-12-08"
    assert table_time(None, now) == "-"


def test_an_error_says_its_status_once() -> None:
    """A dead letter's Last error read "fatal HTTP 400: openai.chat: HTTP 400: /c…", the
    provider's own words cut off behind the status said twice."""
    from desktop_queue.core.present import error_text

    said = {"class": "fatal", "status": 400, "message": "openai.chat: HTTP 400: Invalid model name"}
    assert error_text({"last_error": said}) == "fatal: openai.chat: HTTP 400: Invalid model name"
    unsaid = {"class": "fatal", "status": 401, "message": "demo: unauthorized"}
    assert error_text({"last_error": unsaid}) == "fatal HTTP 401: demo: unauthorized"
    assert error_text({"last_error": {"class": "retryable", "message": "timed out"}}) == "retryable: timed out"


def test_a_result_path_is_cut_in_the_middle_of_its_key() -> None:
    """A timeline's "result ref: results/09/097e…35c.json" wrapped into four lines of hex."""
    from desktop_queue.core.present import short_ref

    key = "097e9893791b486b8d08e1058d06c9241fef68dfa3c50d8b13296f102597b35c"
    assert short_ref(f"results/09/{key}.json") == "results/09/097e9893…97b35c.json"
    assert short_ref(f"results/09/{key}") == "results/09/097e9893…97b35c"
    assert short_ref("results/x/custom-key.json") == "results/x/custom-key.json"  # a key a caller chose
