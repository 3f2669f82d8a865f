"""Flow control with a fake clock: budgets, aging, adaptive limits, concurrency and the breaker."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desktop_queue.core import FakeClock, Outcome
from desktop_queue.core.flow import (
    WAITING_CONCURRENCY,
    WAITING_UNAVAILABLE,
    BreakerState,
    Cost,
    FlowControl,
    FlowEvent,
    FlowEventType,
    ProfileLimits,
    RateLimitInfo,
    TokenBucket,
    estimate_cost,
    usage_tokens,
)

OK = Outcome.success({"text": "t"})
FAIL = Outcome.failure("retryable", "HTTP 500")
FATAL = Outcome.failure("fatal", "HTTP 401")


def job(job_id: str, tokens: int = 100, kind: str = "openai.chat", **extra: Any) -> dict[str, Any]:
    """A queued job dict whose estimated cost is exactly ``tokens`` (see ``cost_of``)."""
    return {"id": job_id, "kind": kind, "state": "queued", "input": {"cost": tokens, **extra}}


def cost_of(payload: Any) -> Cost:
    return Cost(1, int(payload.get("cost", 0)))


def make(clock: FakeClock, events: list[FlowEvent] | None = None, **limits: Any) -> FlowControl:
    return FlowControl(
        {"openai": ProfileLimits(**limits)},
        clock=clock,
        estimator=cost_of,
        listener=events.append if events is not None else None,
    )


# ---------------------------------------------------------------------- the bucket


def test_bucket_admits_up_to_the_budget_then_after_the_window() -> None:
    bucket = TokenBucket(1000, 60)
    assert bucket.try_take(600, 0.0)
    assert bucket.try_take(400, 10.0)
    assert not bucket.try_take(1, 20.0)
    assert bucket.wait_time(500, 20.0) == pytest.approx(40.0)  # the 600 leaves at t=60
    assert not bucket.try_take(500, 59.9)
    assert bucket.try_take(500, 60.0)
    assert bucket.spent(60.0) == pytest.approx(900)


def test_bucket_admits_an_oversized_cost_alone_into_an_empty_window() -> None:
    bucket = TokenBucket(100, 60)
    assert bucket.try_take(10, 0.0)
    assert not bucket.fits(500, 30.0)
    assert bucket.wait_time(500, 30.0) == pytest.approx(30.0)
    assert bucket.try_take(500, 60.0)  # empty window: it goes, alone
    assert not bucket.fits(1, 61.0)


def test_settling_charges_an_underestimate_and_refunds_an_overestimate() -> None:
    bucket = TokenBucket(1000, 60)
    bucket.take(300, 0.0, "a")
    bucket.take(300, 0.0, "b")
    assert bucket.settle("a", 700, 1.0) == pytest.approx(400)  # it used more: budget is gone
    assert not bucket.fits(100, 2.0)
    bucket.settle("b", 0, 3.0)
    assert bucket.fits(300, 3.0)
    bucket.refund("a", 4.0)
    assert bucket.spent(4.0) == pytest.approx(0)


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(1, 5000),
    steps=st.lists(
        st.tuples(st.floats(0, 30, allow_nan=False), st.integers(0, 5000), st.sampled_from([1.0, 1.0, 0.5, 0.25])),
        min_size=1,
        max_size=80,
    ),
)
def test_bucket_never_admits_above_budget_in_any_window(budget: int, steps: list[tuple[float, int, float]]) -> None:
    """Property: for every window of ``window_s``, admitted cost <= budget (costs that fit the budget)."""
    window = 60.0
    bucket = TokenBucket(budget, window)
    now = 0.0
    admitted: list[tuple[float, int]] = []
    for dt, raw_cost, scale in steps:
        now += dt
        bucket.scale = scale
        cost = min(raw_cost, budget)
        if bucket.try_take(cost, now):
            admitted.append((now, cost))
    for start, _ in admitted:
        in_window = sum(c for t, c in admitted if start <= t < start + window)
        assert in_window <= budget + 1e-6


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["accept", "finish", "fail", "wait"]), st.integers(0, 9)), max_size=120))
def test_flow_never_exceeds_concurrency_or_rpm(ops: list[tuple[str, int]]) -> None:
    """Property: however jobs come and go, in flight <= the cap and admissions per minute <= RPM."""
    clock = FakeClock()
    flow = make(clock, rpm=5, concurrency=3, breaker_threshold=3, breaker_cooldown_s=10)
    running: set[str] = set()
    admissions: list[float] = []
    for op, n in ops:
        jid = f"j{n}"
        if op == "accept" and jid not in running:
            if flow.accept(job(jid)):
                flow.on_start(job(jid))
                running.add(jid)
                admissions.append(clock.monotonic())
        elif op in ("finish", "fail") and jid in running:
            flow.on_outcome(job(jid), OK if op == "finish" else FAIL)
            running.discard(jid)
        elif op == "wait":
            clock.advance(n * 2.0)
        assert len(running) <= 3
    for t in admissions:
        assert sum(1 for u in admissions if t <= u < t + 60) <= 5


# ---------------------------------------------------------------------- admission through the facade


def test_accept_spends_the_estimate_once_and_reports_the_wait() -> None:
    clock = FakeClock()
    flow = make(clock, tpm=1000)
    assert flow.accept(job("a", 700))
    assert flow.accept(job("a", 700))  # asked again (a retried commit): not spent twice
    assert flow.snapshot("openai")["tokens_spent"] == 700
    assert not flow.accept(job("b", 400))
    assert flow.waiting_reason(job("b", 400)) == "waiting: rate limit (~60 s)"
    clock.advance(48)
    assert flow.waiting_reason(job("b", 400)) == "waiting: rate limit (~12 s)"
    clock.advance(12)
    assert flow.waiting_reason(job("b", 400)) is None
    assert flow.accept(job("b", 400))


def test_usage_settles_the_estimate() -> None:
    clock = FakeClock()
    flow = make(clock, tpm=1000)
    assert flow.accept(job("a", 900))
    flow.on_start(job("a"))
    flow.on_outcome(job("a"), Outcome.success({"usage": {"prompt_tokens": 50, "completion_tokens": 50}}))
    assert flow.snapshot("openai")["tokens_spent"] == 100
    assert flow.accept(job("b", 900))


def test_a_failed_attempt_gives_its_tokens_back_but_not_its_request() -> None:
    clock = FakeClock()
    flow = make(clock, tpm=1000, rpm=10)
    assert flow.accept(job("a", 900))
    flow.on_outcome(job("a"), FATAL)
    snap = flow.snapshot("openai")
    assert snap["tokens_spent"] == 0 and snap["requests_spent"] == 1


def test_jobs_of_other_profiles_are_never_held() -> None:
    clock = FakeClock()
    flow = make(clock, tpm=1, concurrency=1)
    assert flow.accept(job("a", 1))
    demo = {"id": "d", "kind": "demo", "state": "queued", "input": {"prompt": "x"}}
    assert flow.accept(demo) and flow.waiting_reason(demo) is None
    assert flow.waiting_reason({**job("b"), "state": "running"}) is None


def test_aging_keeps_a_large_job_from_starving_behind_small_ones() -> None:
    clock = FakeClock()
    events: list[FlowEvent] = []
    flow = make(clock, events, tpm=1000, aging_s=30)
    assert flow.accept(job("filler", 200))
    big = job("big", 900)
    big_admitted_at = None
    for second in range(300):
        if flow.accept(big):
            big_admitted_at = second
            break
        small = job(f"s{second + 1}", 100)
        if flow.accept(small):
            flow.on_start(small)
            flow.on_outcome(small, OK)  # no usage reported: the estimate stands
        clock.advance(1)
    assert big_admitted_at is not None
    assert big_admitted_at <= 30 + 60  # aging threshold + one window
    assert any(e.type is FlowEventType.RESERVED for e in events)


def test_without_reservation_small_jobs_would_keep_the_budget_below_the_large_cost() -> None:
    """The same stream with aging effectively off shows the starvation aging prevents."""
    clock = FakeClock()
    flow = make(clock, tpm=1000, aging_s=10_000)
    assert flow.accept(job("filler", 200))
    big = job("big", 900)
    for n in range(200):
        assert not flow.accept(big)
        small = job(f"s{n}", 100)
        if flow.accept(small):
            flow.on_outcome(small, OK)
        clock.advance(1)


def test_equal_jobs_taking_their_turn_in_order_reserve_quietly() -> None:
    """A paced backlog of equal jobs: each waits past aging_s, but none is overtaken, so no event."""
    clock = FakeClock()
    events: list[FlowEvent] = []
    flow = make(clock, events, rpm=2, aging_s=30)
    backlog = [job(f"j{n}") for n in range(8)]
    admitted: list[str] = []
    for _ in range(240):
        for each in backlog:  # the lease engine asks in queue order until one is accepted
            if each["id"] not in admitted and flow.accept(each):
                flow.on_start(each)
                flow.on_outcome(each, OK)
                admitted.append(each["id"])
                break
        clock.advance(1)
    assert admitted == [j["id"] for j in backlog]  # in order, at the budget's pace
    assert not [e for e in events if e.type is FlowEventType.RESERVED]


def test_a_reservation_lapses_when_its_job_is_forgotten() -> None:
    clock = FakeClock()
    flow = make(clock, tpm=1000, aging_s=5)
    assert flow.accept(job("a", 800))
    for _ in range(7):
        assert not flow.accept(job("big", 900))
        clock.advance(1)
    assert flow.snapshot("openai")["reserved"] == "big"
    assert not flow.accept(job("small", 50))  # it would fit, but the big one goes first
    flow.forget("big")
    assert flow.accept(job("small", 50))


# ---------------------------------------------------------------------- adaptive limits


def test_a_429_pauses_every_job_of_the_profile_and_lowers_the_shared_rate() -> None:
    clock = FakeClock()
    events: list[FlowEvent] = []
    flow = make(clock, events, rpm=100, concurrency=8)
    assert flow.accept(job("a"))
    flow.on_outcome(job("a"), Outcome.failure("throttled", "HTTP 429", status=429, retry_after=2.0))
    assert not flow.accept(job("b"))
    assert flow.waiting_reason(job("b")) == "waiting: rate limit (~2 s)"
    snap = flow.snapshot("openai")
    assert snap["scale"] == 0.5 and snap["requests_budget"] == 50 and snap["concurrency_cap"] == 4
    assert [e.type for e in events] == [FlowEventType.RATE_LOWERED, FlowEventType.PAUSED]
    clock.advance(2)
    assert flow.accept(job("b"))
    # a second 429 within the guard time counts once; a later one lowers again
    flow.on_outcome(job("b"), Outcome.failure("throttled", "HTTP 429", retry_after=0.5))
    assert flow.snapshot("openai")["scale"] == 0.25


def test_recovery_after_a_429_is_gradual() -> None:
    clock = FakeClock()
    events: list[FlowEvent] = []
    flow = make(clock, events, rpm=100)
    assert flow.accept(job("a"))
    flow.on_outcome(job("a"), Outcome.failure("throttled", "HTTP 429"))
    clock.advance(flow.snapshot("openai")["paused_s"] + 0.01)  # recovery counts from the pause's end
    scales = []
    for _ in range(7):
        clock.advance(10)
        scales.append(flow.snapshot("openai")["scale"])
    assert scales == [0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0]
    assert sum(1 for e in events if e.type is FlowEventType.RATE_RECOVERED) == 5


def test_exhausted_rate_limit_headers_pause_the_profile() -> None:
    clock = FakeClock()
    flow = make(clock, rpm=100)
    flow.observe_rate_limit("openai", RateLimitInfo(remaining_requests=10, remaining_tokens=5000, reset_s=3))
    assert flow.accept(job("a"))
    flow.observe_rate_limit("openai", RateLimitInfo(remaining_requests=0, remaining_tokens=5000, reset_s=3))
    assert flow.waiting_reason(job("b")) == "waiting: rate limit (~3 s)"
    clock.advance(3)
    assert flow.accept(job("b"))


# ---------------------------------------------------------------------- concurrency


def test_concurrency_cap_per_profile() -> None:
    clock = FakeClock()
    flow = make(clock, concurrency=2)
    assert flow.accept(job("a")) and flow.accept(job("b"))
    assert not flow.accept(job("c"))
    assert flow.waiting_reason(job("c")) == WAITING_CONCURRENCY
    flow.on_outcome(job("a"), None)  # cancelled: the slot comes back
    assert flow.accept(job("c"))


def test_an_admission_that_never_started_is_given_back() -> None:
    clock = FakeClock()
    flow = FlowControl({"openai": ProfileLimits(concurrency=1)}, clock=clock, estimator=cost_of, admission_ttl_s=10)
    assert flow.accept(job("a"))  # the lease commit then failed: on_start never comes
    assert not flow.accept(job("b"))
    clock.advance(11)
    assert flow.accept(job("b"))


# ---------------------------------------------------------------------- the breaker


def test_breaker_opens_after_five_retryable_failures_and_probes_once() -> None:
    clock = FakeClock()
    events: list[FlowEvent] = []
    flow = make(clock, events, breaker_threshold=5, breaker_cooldown_s=30, concurrency=4, ramp_step_s=5)
    for n in range(5):
        assert flow.accept(job(f"f{n}"))
        flow.on_start(job(f"f{n}"))
        flow.on_outcome(job(f"f{n}"), FAIL)
    assert flow.breaker_state("openai") is BreakerState.OPEN
    assert not flow.accept(job("q1"))
    assert flow.waiting_reason(job("q1")) == WAITING_UNAVAILABLE
    clock.advance(29)
    assert not flow.accept(job("q1"))
    clock.advance(1)
    assert flow.breaker_state("openai") is BreakerState.HALF_OPEN
    assert flow.accept(job("q1"))  # the probe
    assert not flow.accept(job("q2"))  # only one
    assert flow.waiting_reason(job("q2")) == WAITING_UNAVAILABLE
    flow.on_outcome(job("q1"), OK)
    assert flow.breaker_state("openai") is BreakerState.CLOSED
    # concurrency ramps back: 1, then one more per 5 s, up to the profile's 4
    caps = []
    for _ in range(4):
        caps.append(flow.snapshot("openai")["concurrency_cap"])
        clock.advance(5)
    assert caps == [1, 2, 3, 4]
    types = [e.type for e in events]
    assert types == [
        FlowEventType.BREAKER_OPENED,
        FlowEventType.BREAKER_HALF_OPEN,
        FlowEventType.BREAKER_HALF_OPEN,
        FlowEventType.BREAKER_CLOSED,
    ]


def test_a_failed_probe_reopens_with_a_longer_cooldown() -> None:
    clock = FakeClock()
    events: list[FlowEvent] = []
    flow = make(clock, events, breaker_threshold=2, breaker_cooldown_s=10)
    for n in range(2):
        assert flow.accept(job(f"f{n}"))
        flow.on_outcome(job(f"f{n}"), FAIL)
    clock.advance(10)
    assert flow.accept(job("probe"))
    flow.on_outcome(job("probe"), FAIL)
    assert flow.breaker_state("openai") is BreakerState.OPEN
    opened = [e.detail["reason"] for e in events if e.type is FlowEventType.BREAKER_OPENED]
    assert opened == ["2 retryable failures in a row", "the probe job failed"]
    clock.advance(10)
    assert not flow.accept(job("next"))
    clock.advance(10)
    assert flow.accept(job("next"))


def test_fatal_errors_and_429s_do_not_count_toward_the_breaker() -> None:
    clock = FakeClock()
    flow = make(clock, breaker_threshold=3)
    sequence = [FAIL, FAIL, FATAL, FAIL, FAIL, Outcome.failure("throttled", "429"), FAIL]
    for n, outcome in enumerate(sequence):
        clock.advance(5)  # past any 429 pause
        assert flow.accept(job(f"j{n}"))
        flow.on_outcome(job(f"j{n}"), outcome)
    assert flow.breaker_state("openai") is BreakerState.OPEN  # only the last three retryables in a row


def test_a_cancelled_probe_frees_the_probe_slot() -> None:
    clock = FakeClock()
    flow = make(clock, breaker_threshold=1, breaker_cooldown_s=1)
    assert flow.accept(job("a"))
    flow.on_outcome(job("a"), FAIL)
    clock.advance(1)
    assert flow.accept(job("probe"))
    flow.on_release(job("probe"))
    assert flow.accept(job("other"))


# ---------------------------------------------------------------------- estimates


def test_estimate_cost_counts_prompt_text_and_output_budget() -> None:
    payload = {"messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 200}
    assert estimate_cost(payload) == Cost(1, 100 + 4 + 200)
    assert estimate_cost({"prompt": "abcd" * 10}) == Cost(1, 10 + 256)
    assert estimate_cost({"input": "abcd", "max_output_tokens": 50}).tokens == 51
    assert usage_tokens({"total_tokens": 42}) == 42
    assert usage_tokens({"input_tokens": 10, "output_tokens": 20}) == 30
    assert usage_tokens(None) is None


def test_a_profile_named_in_the_input_escapes_no_limit() -> None:
    """Profiles are configuration: an input's ``profile`` never moves a job out of its limits."""
    clock = FakeClock()
    flow = FlowControl({"openai": ProfileLimits(concurrency=1)}, clock=clock, estimator=cost_of)
    assert flow.accept(job("a"))
    assert not flow.accept(job("b", profile="anything"))
    assert flow.waiting_reason(job("b", profile="anything")) == "waiting: concurrency cap"


def test_consecutive_throttles_grow_the_profile_pause() -> None:
    """Without Retry-After, each 429 in a row doubles the ceiling of the profile's pause."""
    clock = FakeClock()
    flow = make(clock, rpm=1000, throttle_base_s=1.0, throttle_cap_s=60.0)
    ceilings = []
    for n in range(8):
        assert flow.accept(job(f"j{n}"))
        flow.on_start(job(f"j{n}"))
        pause = flow.throttle_delay(job(f"j{n}"), None)
        flow.on_outcome(job(f"j{n}"), Outcome.failure("throttled", "HTTP 429", status=429))
        assert pause is not None
        ceilings.append(min(60.0, 2.0 ** (n + 1)))
        assert 0.0 <= pause <= ceilings[-1]
        assert flow.snapshot("openai")["throttles"] == n + 1
        clock.advance(pause)
    # a success ends the streak; the next throttle starts small again
    assert flow.accept(job("ok"))
    flow.on_outcome(job("ok"), Outcome.success({"text": "fine"}))
    assert flow.snapshot("openai")["throttles"] == 0


def test_retry_after_is_a_floor_of_the_pause() -> None:
    clock = FakeClock()
    flow = make(clock, rpm=1000)
    assert flow.accept(job("a"))
    assert flow.throttle_delay(job("a"), 7.5) == 7.5  # first ceiling 2 s: the header wins
    assert flow.waiting_reason(job("b")) == "waiting: rate limit (~8 s)"


def test_events_can_be_drained_and_described() -> None:
    clock = FakeClock()
    flow = make(clock, breaker_threshold=1)
    assert flow.accept(job("a"))
    flow.on_outcome(job("a"), FAIL)
    drained = flow.drain_events()
    assert [e.type for e in drained] == [FlowEventType.BREAKER_OPENED]
    assert drained[0].describe().startswith("openai: breaker_opened")
    assert flow.drain_events() == []


# ---------------------------------------------------------------------- one state per data dir


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.integers(0, 2), st.sampled_from(["accept", "finish", "fail", "throttle", "wait"]), st.integers(0, 7)
        ),
        max_size=80,
    )
)
def test_processes_sharing_a_data_dir_never_exceed_one_budget(ops: list[tuple[int, str, int]]) -> None:
    """Property: three FlowControls on one shared directory (three processes on one data dir)
    together never run more than the cap at once nor admit more than the RPM in any minute."""
    import tempfile

    with tempfile.TemporaryDirectory() as shared:
        clock = FakeClock()
        flows = [
            FlowControl(
                {"openai": ProfileLimits(rpm=4, concurrency=2)}, clock=clock, estimator=cost_of, shared_dir=shared
            )
            for _ in range(3)
        ]
        running: dict[str, int] = {}
        admissions: list[float] = []
        for who, op, n in ops:
            flow, jid = flows[who], f"j{n}"
            if op == "accept" and jid not in running:
                if flow.accept(job(jid)):
                    flow.on_start(job(jid))
                    running[jid] = who
                    admissions.append(clock.now())
            elif op in ("finish", "fail", "throttle") and running.get(jid) == who:
                if op == "throttle":
                    flow.throttle_delay(job(jid), None)
                outcome = {"finish": OK, "fail": FAIL, "throttle": Outcome.failure("throttled", "HTTP 429")}[op]
                flows[who].on_outcome(job(jid), outcome)
                del running[jid]
            elif op == "wait":
                clock.advance(n * 3.0)
            assert len(running) <= 2
            # every process sees the same slots taken
            assert {f.snapshot("openai")["in_flight"] for f in flows} == {len(running)}
        for t in admissions:
            assert sum(1 for u in admissions if t <= u < t + 60) <= 4
        for flow in flows:
            flow.close()


def test_a_slot_held_by_a_process_that_ended_is_freed(tmp_path: Any) -> None:
    """An attempt admitted by a process that then died: the others get its slot back."""
    import subprocess
    import sys

    shared = tmp_path / "flow"
    script = (
        "from desktop_queue.core.flow import FlowControl, ProfileLimits\n"
        f"flow = FlowControl({{'openai': ProfileLimits(concurrency=1)}}, shared_dir={str(shared)!r})\n"
        "job = {'id': 'held', 'kind': 'openai.chat', 'state': 'queued', 'input': {}}\n"
        "assert flow.accept(job)\n"
        "flow.on_start(job)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    clock = FakeClock(start=__import__("time").time())
    flow = FlowControl({"openai": ProfileLimits(concurrency=1)}, clock=clock, estimator=cost_of, shared_dir=shared)
    assert flow.snapshot("openai")["in_flight"] in (0, 1)
    clock.advance(6)  # the next prune looks at who holds the slots
    assert flow.accept(job("mine"))
    assert flow.snapshot("openai")["in_flight"] == 1


def test_a_full_disk_under_the_shared_state_is_logged_once_and_limits_still_hold(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every lease saves the shared state: on a full disk that fails each time, and is logged once."""
    import errno
    import logging
    import os

    from desktop_queue.core import flow as flow_module
    from desktop_queue.core.store import fileio

    full = {"on": True}
    real_write_all = fileio.write_all

    def write_all(fd: int, data: bytes, **kwargs: Any) -> None:
        if full["on"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write_all(fd, data, **kwargs)

    monkeypatch.setattr(fileio, "write_all", write_all)
    caplog.set_level(logging.INFO, logger=flow_module.log.name)
    flow = FlowControl(
        {"openai": ProfileLimits(concurrency=1)}, clock=FakeClock(), estimator=cost_of, shared_dir=tmp_path / "flow"
    )
    for n in range(20):
        with flow.session():
            assert flow.accept(job(f"j{n}"))
            flow.on_start(job(f"j{n}"))
            assert not flow.accept(job(f"other{n}"))  # the limit holds in memory
            flow.on_outcome(job(f"j{n}"), OK)
    full["on"] = False
    with flow.session():
        assert flow.accept(job("after"))
    flow.close()

    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == flow_module.log.name]
    assert said == [
        (
            logging.WARNING,
            "could not save the flow state: could not write state.json: No space left on device; nothing was changed",
        ),
        (logging.INFO, "saved the flow state again (it had failed 20 times in a row)"),
    ]


def test_a_flow_state_file_gone_between_its_stat_and_its_read_starts_afresh(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removed by hand (or a file system check) at the wrong moment: the driver's tick
    died of a FileNotFoundError, and no job started for the rest of the run."""
    import errno
    import os
    from pathlib import Path

    from desktop_queue.core.errors import StoreError

    shared = tmp_path / "flow"
    writer = FlowControl(
        {"openai": ProfileLimits(concurrency=1)}, clock=FakeClock(), estimator=cost_of, shared_dir=shared
    )
    with writer.session():
        assert writer.accept(job("elsewhere"))
        writer.on_start(job("elsewhere"))
    writer.close()

    flow = FlowControl(
        {"openai": ProfileLimits(concurrency=1)}, clock=FakeClock(), estimator=cost_of, shared_dir=shared
    )
    real = Path.read_bytes
    failure: dict[str, OSError | None] = {"next": FileNotFoundError(errno.ENOENT, "gone")}

    def read_bytes(self: Path) -> bytes:
        exc, failure["next"] = failure["next"], None
        if exc is not None and self.name == "state.json":
            raise exc
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with flow.session():  # no error: the state starts afresh, as for a missing file
        assert flow.accept(job("mine"))
    failure["next"] = OSError(errno.EIO, os.strerror(errno.EIO))
    shared.joinpath("state.json").touch()  # (changed: it is read again)
    with pytest.raises(StoreError, match=r"could not read the flow state .*state.json: Input/output error"):
        with flow.session():
            pass
    flow.close()
