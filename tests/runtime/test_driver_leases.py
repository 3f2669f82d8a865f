"""The driver keeps its leases, ends hung attempts by their timeout, and gives back attempts
that only a suspension broke."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from desktop_queue.core import Outcome, Queue, RunContext, State
from desktop_queue.core.liveness import SuspendDetector
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.runtime import driver as driver_module

from .conftest import WAIT_MS, BlockingDemo, DriverFactory


class Hangs(BlockingDemo):
    """Answers only when released, and records the timeout it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def run(self, job: Any, context: RunContext) -> Outcome:
        self.timeouts.append(context.timeout_s)
        return super().run(job, context)


def test_the_attempt_timeout_comes_from_the_job_then_the_driver_then_the_kind(
    queue: Queue, make_driver: DriverFactory
) -> None:
    provider = DemoProvider()
    provider.default_timeout_s = 120.0  # type: ignore[attr-defined]
    plain = make_driver({"demo": provider})
    set_ = make_driver({"demo": provider}, attempt_timeout_s=45.0)
    job = queue.submit("demo", {"prompt": "a"}).job
    own = queue.submit("demo", {"prompt": "b", "timeout_s": 7}).job
    assert plain.timeout_for(job) == 120.0
    assert set_.timeout_for(job) == 45.0
    assert set_.timeout_for(own) == plain.timeout_for(own) == 7.0


def test_a_hung_attempt_fails_at_its_timeout_and_its_late_answer_is_refused(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver_module, "attempt_grace", lambda timeout_s: 0.2)
    job_id = queue.submit("demo", {"prompt": "hangs"}).job.id
    provider = Hangs()
    driver = make_driver({"demo": provider}, attempt_timeout_s=0.3)
    with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS) as finished:
        driver.start()
    assert finished.args == [job_id, "queued"]
    assert provider.timeouts == [0.3]  # the provider was told, so its own calls end there
    timed_out = queue.get(job_id)
    assert timed_out.last_error is not None
    assert timed_out.last_error["message"] == "demo: no answer within 0.3 s (attempt timeout)"
    assert timed_out.last_error["class"] == "retryable"
    driver.pause()
    with qtbot.waitSignal(driver.stale_result, timeout=WAIT_MS):
        provider.gate.set()  # the hung call answers after all: too late, not the job's result
    job = queue.get(job_id)
    assert job.state == State.QUEUED and job.result_ref is None
    assert queue.results.get(job.idempotency_key) is None
    assert [e.detail.get("reason") for e in job.events if e.type == "stale_result"] == [
        "answer after the attempt timed out ignored"
    ]


def test_an_attempt_broken_by_a_suspension_is_given_back(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    """The machine slept mid-call and the connection broke: a new run, the attempt not spent."""
    job_id = queue.submit("demo", {"prompt": "slept", "duration_s": 0.01}).job.id
    gate = threading.Event()
    entered = threading.Event()
    calls = []

    class BreaksAfterSleep(DemoProvider):
        def run(self, job: Any, context: RunContext) -> Outcome:
            calls.append(context.attempt)
            if len(calls) == 1:
                entered.set()
                gate.wait(10)
                return Outcome.failure("retryable", "demo: connection error (RemoteProtocolError)")
            return Outcome.success({"text": "after the sleep"})

    driver = make_driver({"demo": BreaksAfterSleep(tick_s=0.01)})
    gap = {"s": 0.0}
    driver.keeper.detector = SuspendDetector(1.0, gap=lambda: gap["s"])
    driver.start()
    qtbot.waitUntil(entered.is_set, timeout=WAIT_MS)
    gap["s"] += 90.0  # CLOCK_BOOTTIME ran 90 s ahead of CLOCK_MONOTONIC: the machine slept
    driver.keeper.run_once()
    gate.set()
    qtbot.waitUntil(lambda: queue.get(job_id).state == State.SUCCEEDED, timeout=WAIT_MS)
    job = queue.get(job_id)
    assert job.attempts == 1 and job.total_attempts == 2
    [released] = [e for e in job.events if e.type == "released"]
    assert released.detail["reason"] == "interrupted by a suspension of 90 s; the attempt is not counted"


def test_the_driver_keeps_its_leases_while_the_provider_blocks(
    qtbot: Any, queue: Queue, make_driver: DriverFactory
) -> None:
    """No heartbeat from the provider at all, a 0.3 s lease: the keeper renews it."""
    job_id = queue.submit("demo", {"prompt": "long"}).job.id
    provider = BlockingDemo()
    driver = make_driver({"demo": provider}, lease_s=0.3, keeper_tick_s=0.05)
    driver.start()
    qtbot.waitUntil(provider.entered.is_set, timeout=WAIT_MS)
    first = queue.get(job_id).lease_expires_at
    assert first is not None
    qtbot.waitUntil(lambda: (queue.get(job_id).lease_expires_at or 0) > first + 0.5, timeout=WAIT_MS)
    assert queue.reap() == []
    with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS) as finished:
        provider.gate.set()
    assert finished.args == [job_id, "succeeded"]
    job = queue.get(job_id)
    assert job.total_attempts == 1 and "lease_expired" not in [e.type for e in job.events]


def test_a_profile_without_a_key_holds_its_jobs_until_one_is_set(
    qtbot: Any, data_dir: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key: nothing is sent and no attempt spent; the job says why, and runs once a key exists."""
    import sys
    from pathlib import Path

    import keyring
    from keyring.backends import null

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))
    from fakeserver import FakeOpenAI

    from desktop_queue.providers.setup import ProfileConfig, build
    from desktop_queue.runtime import LeaseDriver

    previous = keyring.get_keyring()
    keyring.set_keyring(null.Keyring())
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = FakeOpenAI()
    server.start()
    # the environment's endpoint: OPENAI_API_KEY is its key source (never for another profile's server)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    providers, flow = build([ProfileConfig(model="m")], plugins=False, data_dir=data_dir)
    for provider in providers.values():
        if hasattr(provider, "KEY_RECHECK_S"):
            provider.KEY_RECHECK_S = 0.2  # type: ignore[attr-defined]
    queue = Queue.open(data_dir, providers)
    driver = LeaseDriver(queue, providers, flow=flow, tick_ms=50, worker_id="keyless")
    try:
        job_id = queue.submit("openai.chat", {"prompt": "hello"}).job.id
        driver.start()

        def reason() -> str | None:
            return flow.waiting_reason(queue.raw_jobs({job_id})[0])

        qtbot.waitUntil(lambda: (reason() or "").startswith("waiting: no API key for profile openai"), timeout=WAIT_MS)
        assert server.count("chat") == 0 and queue.get(job_id).total_attempts == 0
        monkeypatch.setenv("OPENAI_API_KEY", "sk-entered-later-0123456789")
        qtbot.waitUntil(lambda: queue.get(job_id).state == State.SUCCEEDED, timeout=WAIT_MS)
        assert server.count("chat") == 1 and queue.get(job_id).total_attempts == 1
    finally:
        driver.shutdown(timeout_ms=WAIT_MS)
        queue.close()
        server.stop()
        keyring.set_keyring(previous)
