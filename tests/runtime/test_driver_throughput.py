"""The worker's hot path: successes committed on the pool, freed slots filled without a tick."""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import QThreadPool

from desktop_queue.core import Outcome, Queue, RunContext
from desktop_queue.core.model import State
from desktop_queue.providers.demo import DemoProvider

from .conftest import WAIT_MS, DriverFactory

#: long enough that the driver's timer never fires during a test: only its first tick runs
NEVER_MS = 600_000


class CountingDemo(DemoProvider):
    """A demo provider that counts how often the driver asks whether it can run (once a tick).

    Attributes:
        asked: calls of ``unavailable_reason``.
        threads: the threads its attempts ran on.
    """

    def __init__(self) -> None:
        super().__init__(tick_s=0.01)
        self.asked = 0
        self.threads: list[threading.Thread] = []

    def unavailable_reason(self) -> str | None:
        self.asked += 1
        return None

    def run(self, job: Any, context: RunContext) -> Outcome:
        self.threads.append(threading.current_thread())
        return super().run(job, context)


def instant(prompt: str) -> dict[str, Any]:
    return {"prompt": prompt, "duration_s": 0}


def test_a_freed_slot_starts_the_next_job_without_waiting_for_a_tick(
    qtbot: Any, queue: Queue, make_driver: DriverFactory
) -> None:
    ids = [queue.submit("demo", instant(f"job {i}")).job.id for i in range(8)]
    provider = CountingDemo()
    driver = make_driver({"demo": provider}, concurrency=1, tick_ms=NEVER_MS)
    finished: list[str] = []
    driver.job_finished.connect(lambda job_id, state: finished.append(state))

    driver.start()
    qtbot.waitUntil(lambda: len(finished) == len(ids), timeout=WAIT_MS)

    assert finished == ["succeeded"] * len(ids)
    assert [queue.get(i).state for i in ids] == [State.SUCCEEDED] * len(ids)
    # one tick (the one start() runs): every later job was leased into the slot its
    # predecessor freed, with no tick (and no round of questions to every provider)
    assert provider.asked == 1


def test_a_success_is_committed_by_its_runnable_before_the_driver_hears_of_it(
    qtbot: Any, queue: Queue, make_driver: DriverFactory
) -> None:
    job_id = queue.submit("demo", instant("one")).job.id
    provider = CountingDemo()
    driver = make_driver({"demo": provider}, tick_ms=NEVER_MS)

    driver.tick()  # leases and hands the attempt to the pool; no event loop runs meanwhile
    assert driver.running == 1
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)

    # durable and visible while the driver's thread has not handled the report yet
    job = queue.get(job_id)
    assert job.state == State.SUCCEEDED and job.result_ref is not None
    assert provider.threads and provider.threads[0] is not threading.main_thread()
    assert [e.type for e in job.events] == ["submitted", "leased", "succeeded"]
    assert driver.running == 1
    with qtbot.assertNotEmitted(driver.stale_result), qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS) as done:
        pass
    assert done.args == [job_id, "succeeded"]
    assert driver.running == 0
    assert driver.keeper.kept() == []


def test_reports_that_arrive_together_are_settled_in_one_batch(
    qtbot: Any, queue: Queue, make_driver: DriverFactory
) -> None:
    ids = [queue.submit("demo", instant(f"job {i}")).job.id for i in range(6)]
    provider = CountingDemo()
    driver = make_driver({"demo": provider}, concurrency=3, tick_ms=NEVER_MS)
    started: list[str] = []
    finished: list[str] = []
    driver.job_started.connect(started.append)
    driver.job_finished.connect(lambda job_id, state: finished.append(job_id))
    ready: list[int] = []
    driver._relay.ready.connect(lambda: ready.append(len(finished)))

    driver.tick()
    assert len(started) == 3
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)  # all three report while the loop is blocked
    qtbot.waitUntil(lambda: len(finished) == len(ids), timeout=WAIT_MS)

    # one queued signal told of the first three reports: all three were settled when it
    # was delivered (the counter is connected after the driver), and the slots they
    # freed were filled at once
    assert ready[0] == 3
    assert len(ready) < len(ids)
    assert sorted(finished[:3]) == sorted(ids[:3])
    assert sorted(started[3:]) == sorted(ids[3:])
    assert [queue.get(i).state for i in ids] == [State.SUCCEEDED] * len(ids)
    assert provider.asked == 1
