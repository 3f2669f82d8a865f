"""A provider stops answering: background work pauses, the interactive job probes, the queue drains after;
one alert fires for the outage and clears when it ends (issue 12's "done when", the provider half).

The real lease driver, the real ``openai`` SDK and a real HTTP server on 127.0.0.1
(answering 503 to everything during the outage). Flow control reads a fake clock, so
the breaker's cool-down ends exactly when the test says; the queue's own retries use a
tiny backoff on the system clock.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keyring
import pytest

from desktop_queue.core import FakeClock, Queue, RetryPolicy, State
from desktop_queue.core.alerts import BREAKER_OPEN, CLEARED, DEFAULTS, FIRED, AlertBook
from desktop_queue.core.flow import BreakerState
from desktop_queue.core.repair import RepairScan, Upkeep
from desktop_queue.providers.setup import ProfileConfig, build
from desktop_queue.runtime import LeaseDriver

from .conftest import WAIT_MS

sys.path.insert(0, str(Path(__file__).parents[1] / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402
from provider_helpers import MemoryKeyring  # noqa: E402

FAILING = "background jobs paused: openai is failing"
BACKGROUND_JOBS = 4


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    previous = keyring.get_keyring()
    keyring.set_keyring(MemoryKeyring())  # never the user's keyring
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
        keyring.set_keyring(previous)


def test_an_outage_pauses_background_work_and_the_interactive_job_goes_first_when_it_is_back(
    qtbot: Any, data_dir: Path, server: FakeOpenAI
) -> None:
    clock = FakeClock()
    config = ProfileConfig(base_url=server.url, model="llama3", concurrency=1, require_key=False)
    providers, flow = build([config], clock, plugins=False)
    queue = Queue.open(data_dir, providers, policy=RetryPolicy(base_s=0.01, cap_s=0.01), rng=random.Random(5))
    driver = LeaseDriver(queue, providers, concurrency=2, tick_ms=20, worker_id="drill", flow=flow)
    try:
        server.outage = (float("inf"), 503)  # the provider is down: every request answers 503
        summaries = [
            queue.submit("openai.chat", {"prompt": f"summary {n}", "max_tokens": 8}, max_attempts=10).job.id
            for n in range(BACKGROUND_JOBS)
        ]
        driver.start()
        qtbot.waitUntil(lambda: flow.breaker_state("openai") is BreakerState.OPEN, timeout=WAIT_MS)
        sent_while_up = server.count("chat")
        assert sent_while_up == 5  # the breaker's threshold; then nothing more is sent

        question = queue.submit(
            "openai.chat", {"prompt": "a question", "max_tokens": 8}, priority="interactive", max_attempts=10
        ).job
        for _ in range(5):
            driver.tick()
        assert server.count("chat") == sent_while_up
        for job in queue.raw_jobs(set(summaries)):
            assert flow.waiting_reason(job | {"input": {"prompt": "p"}}) == FAILING, job["id"]

        server.outage = None  # it is back; the cool-down ends: one probe, and it is the interactive job
        clock.advance(30)
        qtbot.waitUntil(lambda: queue.get(question.id).state == State.SUCCEEDED, timeout=WAIT_MS)
        probe = server.of("chat")[sent_while_up]
        assert probe.headers["idempotency-key"] == question.idempotency_key
        qtbot.waitUntil(
            lambda: all(queue.get(j).state == State.SUCCEEDED for j in summaries), timeout=WAIT_MS
        )  # then the background work drains by itself
        assert sum(queue.get(j).total_attempts for j in summaries) == 5 + BACKGROUND_JOBS  # none spent while down
        assert server.max_in_flight == 1
    finally:
        driver.shutdown(timeout_ms=WAIT_MS)
        for provider in providers.values():
            if hasattr(provider, "close"):
                provider.close()
        queue.close()


ALERT_JOBS = 6


def test_a_stopped_provider_raises_one_alert_pauses_background_work_and_clears_when_back(
    qtbot: Any, data_dir: Path, server: FakeOpenAI
) -> None:
    """The driver with its upkeep (repair scan and alerts): the breaker rule fires and clears
    at once here (its shipped defaults wait 5 minutes and 1 minute)."""
    clock = FakeClock()
    config = ProfileConfig(base_url=server.url, model="llama3", concurrency=2, require_key=False)
    providers, flow = build([config], clock, plugins=False)
    queue = Queue.open(data_dir, providers, policy=RetryPolicy(base_s=0.01, cap_s=0.01), rng=random.Random(7))
    book = AlertBook(data_dir)
    rules = [dataclasses.replace(DEFAULTS[BREAKER_OPEN], for_s=0.0, clear_s=0.0)]
    upkeep = Upkeep(
        RepairScan(queue, providers=providers, flow=flow), book=book, rules=lambda: rules, flow=flow, every_s=0.0
    )
    driver = LeaseDriver(queue, providers, concurrency=2, tick_ms=20, worker_id="done-when", flow=flow, upkeep=upkeep)

    def breaker_alerts() -> list[str]:
        return [t.kind for t in book.history().transitions if t.rule == BREAKER_OPEN]

    try:
        server.outage = (float("inf"), 503)  # the provider is stopped
        jobs = [
            queue.submit("openai.chat", {"prompt": f"nightly summary {n}", "max_tokens": 8}, max_attempts=10).job.id
            for n in range(ALERT_JOBS)
        ]
        driver.start()
        qtbot.waitUntil(lambda: flow.breaker_state("openai") is BreakerState.OPEN, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: breaker_alerts() == [FIRED], timeout=WAIT_MS)
        sent = server.count("chat")
        for _ in range(10):  # ticks while it is down: no request, no second alert
            driver.tick()
        assert server.count("chat") == sent
        assert breaker_alerts() == [FIRED], "one alert for the outage, not one per job"

        def reasons() -> set[str | None]:
            return {flow.waiting_reason(job | {"input": {"prompt": "p"}}) for job in queue.raw_jobs(set(jobs))}

        # (an attempt in flight as the breaker opened is settled by the driver first)
        qtbot.waitUntil(lambda: reasons() == {"background jobs paused: openai is failing"}, timeout=WAIT_MS)

        server.outage = None  # the provider is back; the cool-down ends: a probe, then the rest
        clock.advance(30)
        qtbot.waitUntil(lambda: all(queue.get(j).state == State.SUCCEEDED for j in jobs), timeout=WAIT_MS)
        qtbot.waitUntil(lambda: breaker_alerts() == [FIRED, CLEARED], timeout=WAIT_MS)
        assert sum(queue.get(j).total_attempts for j in jobs) == sent + ALERT_JOBS  # none spent while down
    finally:
        driver.shutdown(timeout_ms=WAIT_MS)
        for provider in providers.values():
            if hasattr(provider, "close"):
                provider.close()
        queue.close()
