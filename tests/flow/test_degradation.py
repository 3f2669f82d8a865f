"""Degradation: a profile in trouble pauses its background jobs; interactive ones keep their share.

A fake clock drives every test; two :class:`FlowControl` instances on one shared
directory stand for two processes on one data dir.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desktop_queue.core import FakeClock, Outcome
from desktop_queue.core.errors import StoreError
from desktop_queue.core.flow import (
    WAITING_UNAVAILABLE,
    BreakerState,
    Cost,
    Degradation,
    FlowControl,
    FlowEvent,
    FlowEventType,
    ProfileLimits,
    RateLimitInfo,
)
from desktop_queue.core.ledger import Budget, SpendLedger, Usage
from desktop_queue.core.present import flow_event_text

OK = Outcome.success({"text": "t"})
FAIL = Outcome.failure("retryable", "HTTP 503")
THROTTLED = Outcome.failure("throttled", "HTTP 429", status=429, retry_after=2.0)

FAILING = "background jobs paused: openai is failing"
RATE_LIMITED = "background jobs paused: openai is rate-limited"
BUDGET_LOW = "background jobs paused: openai budget nearly spent"


def bg(job_id: str) -> dict[str, Any]:
    return {"id": job_id, "kind": "openai.chat", "state": "queued", "priority": "background", "input": {"cost": 10}}


def fg(job_id: str) -> dict[str, Any]:
    return {**bg(job_id), "priority": "interactive"}


def cost_of(payload: Any) -> Cost:
    return Cost(1, int(payload.get("cost", 0)))


def make(
    clock: FakeClock,
    events: list[FlowEvent] | None = None,
    shared: Path | None = None,
    ledger: SpendLedger | None = None,
    **limits: Any,
) -> FlowControl:
    return FlowControl(
        {"openai": ProfileLimits(**limits)},
        clock=clock,
        estimator=cost_of,
        listener=events.append if events is not None else None,
        shared_dir=shared,
        ledger=ledger,
    )


def run(flow: FlowControl, job: dict[str, Any], outcome: Outcome | None) -> None:
    """One attempt of ``job`` that was admitted, started and ended with ``outcome``."""
    assert flow.accept(job), flow.waiting_reason(job)
    flow.on_start(job)
    flow.on_outcome(job, outcome)


def open_breaker(flow: FlowControl, threshold: int = 2) -> None:
    for n in range(threshold):
        run(flow, fg(f"fail{n}"), FAIL)
    assert flow.breaker_state("openai") is BreakerState.OPEN


# ---------------------------------------------------------------------- the breaker


def test_an_open_breaker_pauses_background_jobs_and_the_probe_goes_to_an_interactive_job() -> None:
    clock = FakeClock()
    events: list[FlowEvent] = []
    flow = make(clock, events, breaker_threshold=2, breaker_cooldown_s=10, concurrency=4, ramp_step_s=5)
    open_breaker(flow)
    assert not flow.accept(bg("b1"))
    assert flow.waiting_reason(bg("b1")) == FAILING
    assert flow.waiting_reason(fg("i1")) == WAITING_UNAVAILABLE  # the breaker's own word
    assert flow.degradations() == {"openai": FAILING}
    clock.advance(10)  # half-open: one probe, and the interactive lane is asked first
    assert flow.accept(fg("i1"))
    flow.on_start(fg("i1"))
    assert not flow.accept(bg("b1"))
    assert flow.waiting_reason(bg("b1")) == FAILING
    assert flow.snapshot("openai")["background"] == "failing"
    flow.on_outcome(fg("i1"), OK)
    assert flow.breaker_state("openai") is BreakerState.CLOSED
    paused = [e for e in events if e.type is FlowEventType.BACKGROUND_PAUSED]
    resumed = [e for e in events if e.type is FlowEventType.BACKGROUND_RESUMED]
    assert len(paused) == 1 and len(resumed) == 1  # told once each, however often asked
    assert flow_event_text(paused[0]) == f"{FAILING}; interactive jobs keep its share"
    assert flow_event_text(resumed[0]) == "openai: background jobs resume slowly (1 at a time, one more every 5 s)"


def test_a_failing_profile_with_only_background_work_still_finds_out_that_it_is_back() -> None:
    clock = FakeClock()
    flow = make(clock, breaker_threshold=2, breaker_cooldown_s=10)
    open_breaker(flow)
    assert not flow.accept(bg("b1"))
    clock.advance(10)
    assert flow.accept(bg("b1"))  # the probe: nobody interactive waits
    flow.on_start(bg("b1"))
    assert flow.waiting_reason(bg("b2")) == FAILING
    flow.on_outcome(bg("b1"), OK)
    assert flow.degradations() == {"openai": "background jobs resuming: openai recovered, 1 at a time for now"}


def test_an_offline_profile_pauses_background_jobs() -> None:
    clock = FakeClock()
    flow = make(clock)
    run(flow, fg("i0"), Outcome.failure("retryable", "cannot connect", unreachable=True))
    assert flow.waiting_reason(bg("b1")) == FAILING
    assert flow.waiting_reason(fg("i1")) is not None  # until its probe is due
    clock.advance(30)
    run(flow, fg("i1"), OK)
    assert flow.accept(bg("b1"))


# ---------------------------------------------------------------------- a rate cut, then slow start


def test_a_429_pauses_background_jobs_for_its_pause_then_they_ramp_up_at_the_cut_rate() -> None:
    """Background work waits out the provider's pause, then comes back a few at a time under
    the lowered rate both lanes share; it does not sit out the minute the rate takes to climb."""
    clock = FakeClock()
    flow = make(clock, concurrency=4)
    run(flow, fg("i0"), THROTTLED)  # the shared rate halves; the profile pauses 2 s
    assert flow.waiting_reason(bg("b1")) == RATE_LIMITED
    assert flow.waiting_reason(fg("i1")) == "waiting: rate limit (~2 s)"
    clock.advance(2)
    assert flow.snapshot("openai")["scale"] < 1.0  # still cut
    run(flow, fg("i1"), OK)  # interactive work goes on at the lowered rate
    # slow start: 1 background attempt at once, one more every 5 s; interactive ones are not ramped
    assert flow.accept(bg("b1"))
    flow.on_start(bg("b1"))
    assert not flow.accept(bg("b2"))
    assert (
        flow.waiting_reason(bg("b2"))
        == "background jobs resuming: openai's rate-limit pause is over, 1 at a time for now"
    )
    flow.on_outcome(bg("b1"), OK)
    run(flow, bg("b2"), OK)  # one at a time: the next once the first is done
    clock.advance(5)
    assert flow.snapshot("openai")["background_cap"] == 2
    clock.advance(15)  # 4 at a time is the profile's own limit: the ramp is over
    assert flow.snapshot("openai")["background_cap"] is None
    assert flow.degradations() == {}


def test_exhausted_rate_limit_headers_pause_background_jobs_too() -> None:
    clock = FakeClock()
    flow = make(clock)
    flow.observe_rate_limit("openai", RateLimitInfo(remaining_requests=0, reset_s=3))
    assert flow.waiting_reason(bg("b1")) == RATE_LIMITED
    clock.advance(3)
    assert flow.accept(bg("b1"))  # the scale was never cut: back once the reset came


def test_a_profile_can_keep_its_background_jobs_running_through_a_rate_cut() -> None:
    clock = FakeClock()
    flow = make(clock, degradation=Degradation(on_rate_cut=False))
    run(flow, fg("i0"), THROTTLED)
    assert flow.waiting_reason(bg("b1")) == "waiting: rate limit (~2 s)"
    clock.advance(2)
    assert flow.accept(bg("b1"))


# ---------------------------------------------------------------------- budget


def spend(ledger: SpendLedger, tokens: int, job_id: str) -> None:
    ledger.record(
        profile="openai", model="m", kind="openai.chat", usage=Usage(tokens_in=tokens), job_id=job_id, attempt=1
    )


def test_a_budget_nearly_spent_pauses_background_jobs_and_a_new_day_brings_them_back(tmp_path: Path) -> None:
    clock = FakeClock()
    ledger = SpendLedger(tmp_path, clock)
    flow = make(clock, ledger=ledger, budget=Budget(tokens_per_day=10_000), model="m")
    job_bg, job_fg = bg("b1"), fg("i1")
    for job in (job_bg, job_fg):
        job["input"] = {"prompt": "hi", "max_tokens": 10, "cost": 10}
    spend(ledger, 8_000, "x1")  # 20% left
    assert flow.waiting_reason(job_bg) is None
    spend(ledger, 1_500, "x2")  # 5% left: below the 10% reserve
    assert flow.waiting_reason(job_bg) == BUDGET_LOW
    assert not flow.accept(job_bg)
    assert flow.accept(job_fg)  # what is left is kept for the jobs someone waits for
    flow.on_outcome(job_fg, None)
    clock.advance(86_400)  # a new local day: the daily budget is whole again
    assert flow.accept(job_bg)


def test_a_budget_reached_says_so_rather_than_nearly_spent(tmp_path: Path) -> None:
    clock = FakeClock()
    ledger = SpendLedger(tmp_path, clock)
    flow = make(clock, ledger=ledger, budget=Budget(tokens_per_day=10_000), model="m")
    spend(ledger, 10_000, "x1")
    job = bg("b1") | {"input": {"prompt": "hi", "max_tokens": 10, "cost": 10}}
    assert flow.waiting_reason(job) == "waiting: budget of profile openai reached, 10,000 of 10,000 tokens today"


def test_the_budget_reserve_is_configurable(tmp_path: Path) -> None:
    clock = FakeClock()
    ledger = SpendLedger(tmp_path, clock)
    budget = Budget(tokens_per_day=10_000)
    strict = make(clock, ledger=ledger, budget=budget, degradation=Degradation(budget_reserve=0.5))
    never = FlowControl(
        {"openai": ProfileLimits(budget=budget, degradation=Degradation(budget_reserve=0))},
        clock=clock,
        estimator=cost_of,
        ledger=ledger,
    )
    spend(ledger, 6_000, "x1")  # 40% left
    assert strict.waiting_reason(bg("b1")) == BUDGET_LOW
    assert never.waiting_reason(bg("b1")) is None


# ---------------------------------------------------------------------- events and jobs without a lane


def test_nothing_is_told_when_no_background_job_waited() -> None:
    clock = FakeClock()
    events: list[FlowEvent] = []
    flow = make(clock, events, breaker_threshold=2, breaker_cooldown_s=10)
    open_breaker(flow)
    clock.advance(10)
    run(flow, fg("probe"), OK)
    assert FlowEventType.BACKGROUND_PAUSED not in [e.type for e in events]
    assert FlowEventType.BACKGROUND_RESUMED not in [e.type for e in events]


def test_a_job_that_names_no_lane_is_not_held_as_background_work() -> None:
    clock = FakeClock()
    flow = make(clock, concurrency=8)
    run(flow, fg("i0"), THROTTLED)
    clock.advance(2)
    unlaned = {"id": "u1", "kind": "openai.chat", "state": "queued", "input": {"cost": 10}}
    assert flow.accept(unlaned)


# ---------------------------------------------------------------------- property


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["bg", "fg", "ok", "fail", "throttle", "wait"]), st.integers(0, 7)), max_size=150
    )
)
def test_a_degraded_profile_never_starts_background_work_but_its_probe(ops: list[tuple[str, int]]) -> None:
    """Property: a background job starts only on a healthy profile (within the slow start), or as the probe."""
    clock = FakeClock()
    flow = make(clock, concurrency=4, breaker_threshold=2, breaker_cooldown_s=10, ramp_step_s=5)
    running: dict[str, dict[str, Any]] = {}
    for op, n in ops:
        if op in ("bg", "fg"):
            job = (bg if op == "bg" else fg)(f"{op}{n}")
            if job["id"] in running:
                continue
            before = flow.snapshot("openai")
            if flow.accept(job):
                flow.on_start(job)
                running[job["id"]] = job
                if op == "bg":
                    if before["background"] is not None:
                        assert before["background"] == "failing" and before["breaker"] == "half_open", before
                    elif before["background_cap"] is not None:
                        assert before["background_in_flight"] < before["background_cap"], before
        elif op in ("ok", "fail", "throttle") and running:
            job_id = sorted(running)[n % len(running)]
            outcome = {"ok": OK, "fail": FAIL, "throttle": THROTTLED}[op]
            flow.on_outcome(running.pop(job_id), outcome)
        elif op == "wait":
            clock.advance(n * 3.0)
        assert flow.snapshot("openai")["in_flight"] == len(running) <= 4


# ---------------------------------------------------------------------- two processes


def test_two_flow_controls_on_one_shared_dir_agree(tmp_path: Path) -> None:
    clock = FakeClock()
    shared = tmp_path / "flow"
    window = make(clock, shared=shared, breaker_threshold=2, breaker_cooldown_s=10, concurrency=2, ramp_step_s=5)
    worker = make(clock, shared=shared, breaker_threshold=2, breaker_cooldown_s=10, concurrency=2, ramp_step_s=5)
    open_breaker(window)  # the window's attempts failed
    assert worker.waiting_reason(bg("b1")) == FAILING  # the worker holds its background jobs too
    assert not worker.accept(bg("b1"))
    assert worker.degradations() == {"openai": FAILING}
    clock.advance(10)
    assert worker.accept(fg("i1"))  # the one probe, taken by the worker
    worker.on_start(fg("i1"))
    assert not window.accept(fg("i2"))  # (the window sees it taken)
    assert window.waiting_reason(bg("b2")) == FAILING
    worker.on_outcome(fg("i1"), OK)
    clock.advance(5)  # both ramps (the breaker's, the background's) reach the profile's 2 at once
    assert window.accept(bg("b2"))
    window.on_start(bg("b2"))
    assert worker.snapshot("openai")["background_in_flight"] == 1  # the window's attempt, seen by the worker
    window.on_outcome(bg("b2"), OK)
    assert worker.degradations() == {}


def test_two_flow_controls_share_the_background_ramp(tmp_path: Path) -> None:
    clock = FakeClock()
    shared = tmp_path / "flow"
    a = make(clock, shared=shared, concurrency=4)
    b = make(clock, shared=shared, concurrency=4)
    run(a, fg("i0"), THROTTLED)
    assert b.waiting_reason(bg("b1")) == RATE_LIMITED  # a 429 seen by one pauses the other's background work
    clock.advance(52)  # the pause, then five recovery steps
    assert a.accept(bg("b1"))
    a.on_start(bg("b1"))
    assert not b.accept(bg("b2"))  # 1 at a time, counted across both
    # (a pause that ran out is no recovery: the next request may draw a 429 as well)
    assert (
        b.waiting_reason(bg("b2")) == "background jobs resuming: openai's rate-limit pause is over, 1 at a time for now"
    )
    assert a.degradations() == {
        "openai": "background jobs resuming: openai's rate-limit pause is over, 1 at a time for now"
    }
    assert b.accept(fg("i1"))


def test_a_changed_profile_keeps_its_degradation(tmp_path: Path) -> None:
    clock = FakeClock()
    flow = make(clock, breaker_threshold=2)
    open_breaker(flow)
    flow.configure("openai", ProfileLimits(breaker_threshold=2, rpm=100))
    assert flow.waiting_reason(bg("b1")) == FAILING


@pytest.mark.parametrize(
    ("cause", "text"),
    [("failing", FAILING), ("rate_limited", RATE_LIMITED), ("budget_low", BUDGET_LOW)],
)
def test_every_cause_reads_as_people_say_it(cause: str, text: str) -> None:
    event = FlowEvent(0.0, "openai", FlowEventType.BACKGROUND_PAUSED, {"cause": cause})
    assert flow_event_text(event) == f"{text}; interactive jobs keep its share"


def test_an_attempt_that_ends_while_the_ledger_cannot_be_read_still_settles_its_spend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database restarting as a paid answer comes back: the budget check cannot read the
    ledger then, yet the attempt's slot is freed and what it spent is recorded, so the
    budget still counts it (a check that raised would leave the spend unrecorded)."""
    clock = FakeClock()
    ledger = SpendLedger(tmp_path, clock)
    flow = make(clock, ledger=ledger, budget=Budget(tokens_per_day=10_000), model="m", concurrency=1)
    job = fg("i1") | {"input": {"prompt": "hi", "max_tokens": 10, "cost": 10}}
    assert flow.accept(job)
    flow.on_start(job)
    real_spent = ledger.spent

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("the PostgreSQL spend ledger refused: the connection is lost")

    monkeypatch.setattr(ledger, "spent", unreadable)
    answer = Outcome.success({"text": "t", "usage": {"prompt_tokens": 5, "completion_tokens": 7}})
    flow.on_outcome(job, answer)
    monkeypatch.setattr(ledger, "spent", real_spent)
    assert ledger.spent("openai", "day", clock.now()).tokens == 12
    assert flow.accept(fg("i2") | {"input": {"prompt": "hi", "max_tokens": 10, "cost": 10}})  # (its slot was freed)
