"""An idle lease driver sleeps: the change feed and the times it knows wake it, not a polling tick.

Every driver here has a safety tick of an hour: whatever it does within a test, the
feed or a planned wake made it do.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import Queue
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.runtime import driver as driver_module
from desktop_queue.runtime.wake import plan_wake
from tests.runtime.conftest import WAIT_MS, DriverFactory, Hanging, idle

HOUR_S = 3600.0


def dq(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One ``desktop-queue`` command in a process of its own (another process on the data dir)."""
    return subprocess.run(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class CountingReads:
    """Counts the store's reads and commits made on the thread that installs it (the driver's)."""

    def __init__(self, queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self._thread = threading.get_ident()
        store = queue.store
        for name in ("read", "commit", "transact"):
            real = getattr(store, name)
            monkeypatch.setattr(store, name, self._counting(real))

    def _counting(self, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == self._thread:
                self.count += 1
            return real(*args, **kwargs)

        return call


def test_an_idle_driver_plans_only_its_safety_tick(qtbot: Any, make_driver: DriverFactory) -> None:
    driver = make_driver(safety_tick_s=HOUR_S)
    driver.start()
    idle(qtbot, driver)
    assert driver.plan.reason == "safety" and driver.plan.delay_s == HOUR_S
    assert driver._timer.isSingleShot() and driver._timer.remainingTime() > 60_000


def test_a_job_another_process_submits_is_leased_through_the_feed(
    qtbot: Any, make_driver: DriverFactory, queue: Queue, data_dir: Path
) -> None:
    driver = make_driver(safety_tick_s=HOUR_S)
    driver.start()
    idle(qtbot, driver)
    ticks = driver.ticks
    with qtbot.waitSignal(driver.job_started, timeout=WAIT_MS) as started:
        done = dq(data_dir, "submit", "demo", "--input", '{"prompt": "from elsewhere", "duration_s": 0}', "--json")
        assert done.returncode == 0, done.stderr
    qtbot.waitUntil(lambda: queue.get(started.args[0]).state == "succeeded", timeout=WAIT_MS)
    assert driver.ticks > ticks  # a look the feed asked for (the timer waits an hour)


def test_an_idle_driver_reads_the_store_only_at_the_feeds_pace(
    qtbot: Any, make_driver: DriverFactory, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = make_driver(safety_tick_s=HOUR_S)
    driver.start()
    idle(qtbot, driver)
    reads = CountingReads(queue, monkeypatch)
    watched = driver.watcher.reads
    # the JSON store has no change feed of its own: the watcher reads every 0.5 s, on its
    # thread; four of its reads span more than a second
    qtbot.waitUntil(lambda: driver.watcher.reads >= watched + 4, timeout=WAIT_MS)
    assert reads.count == 0, "the idle driver's own thread read the store"


def test_an_idle_driver_makes_no_look_while_nothing_changes(qtbot: Any, make_driver: DriverFactory) -> None:
    driver = make_driver(safety_tick_s=HOUR_S)
    driver.start()
    idle(qtbot, driver)
    ticks, watched = driver.ticks, driver.watcher.reads
    qtbot.waitUntil(lambda: driver.watcher.reads >= watched + 3, timeout=WAIT_MS)
    assert driver.ticks == ticks


def test_a_job_due_later_is_leased_when_due_by_a_planned_wake(
    qtbot: Any, make_driver: DriverFactory, queue: Queue
) -> None:
    driver = make_driver(safety_tick_s=HOUR_S)
    driver.start()
    idle(qtbot, driver)
    job = queue.submit("demo", {"prompt": "later", "duration_s": 0}, run_after=queue.clock.now() + 1.0).job
    qtbot.waitUntil(lambda: driver.plan.reason == "run_after", timeout=WAIT_MS)  # the feed's look planned it
    with qtbot.waitSignal(driver.job_started, timeout=WAIT_MS) as started:
        pass
    assert started.args == [job.id]
    assert queue.get(job.id).events[-1].type != "lease_expired"


def test_a_job_cancelled_elsewhere_is_stopped_through_the_feed(
    qtbot: Any, make_driver: DriverFactory, queue: Queue, data_dir: Path
) -> None:
    provider = Hanging()
    driver = make_driver({"demo": provider}, safety_tick_s=HOUR_S)
    driver.start()
    idle(qtbot, driver)
    job = queue.submit("demo", {"prompt": "long"}).job
    qtbot.waitUntil(provider.entered.is_set, timeout=WAIT_MS)
    done = dq(data_dir, "cancel", job.id)
    assert done.returncode == 0, done.stderr
    qtbot.waitUntil(provider.stopped.is_set, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not driver.active_ids(), timeout=WAIT_MS)
    assert queue.get(job.id).state == "cancelled"


def test_a_hung_attempt_times_out_by_a_planned_wake(
    qtbot: Any, make_driver: DriverFactory, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver_module, "attempt_grace", lambda _timeout_s: 0.05)
    provider = Hanging()
    driver = make_driver({"demo": provider}, safety_tick_s=HOUR_S, attempt_timeout_s=0.2)
    driver.start()
    idle(qtbot, driver)
    job = queue.submit("demo", {"prompt": "hangs"}, max_attempts=1).job
    qtbot.waitUntil(provider.entered.is_set, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: driver.plan.reason == "timeout", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: queue.get(job.id).state == "dead", timeout=WAIT_MS)
    assert "attempt timeout" in (queue.get(job.id).last_error or {}).get("message", "")


def test_the_lease_of_a_dead_process_is_reaped_when_it_expires(
    qtbot: Any, make_driver: DriverFactory, queue: Queue, data_dir: Path
) -> None:
    job = queue.submit("demo", {"prompt": "orphaned", "duration_s": 0}).job
    driver = make_driver(safety_tick_s=HOUR_S)
    driver.pause()  # (so that the other process leases it first)
    driver.start()
    idle(qtbot, driver)
    # another process leases it for a second and dies without a word
    script = (
        "import sys, os; from desktop_queue.core import Queue; "
        "q = Queue.open(sys.argv[1], {'demo': None}); "
        "lease = q.lease('elsewhere', lease_s=1.0); q.sync(); "
        "print(lease.job_id if lease else ''); sys.stdout.flush(); os._exit(0)"
    )
    out = subprocess.run([sys.executable, "-c", script, str(data_dir)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == job.id, out.stderr
    driver.resume()
    qtbot.waitUntil(lambda: driver.plan is not None and driver.plan.reason == "lease_expiry", timeout=WAIT_MS)
    with qtbot.waitSignal(driver.job_started, timeout=WAIT_MS) as started:
        pass
    assert started.args == [job.id]
    assert any(e.type == "lease_expired" for e in queue.get(job.id).events)


def test_with_a_clock_moved_by_hand_the_driver_looks_at_its_tick(make_driver: DriverFactory, data_dir: Path) -> None:
    from desktop_queue.core import FakeClock

    fake = Queue.open(data_dir / "fake", {"demo": DemoProvider()}, clock=FakeClock())
    try:
        driver = make_driver(on=fake, tick_ms=40, safety_tick_s=HOUR_S)
        driver.tick()
        assert driver.plan is not None and (driver.plan.reason, driver.plan.delay_s) == ("tick", 0.04)
    finally:
        driver.shutdown()
        fake.close()


# ---------------------------------------------------------------------------- the plan alone


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, (60.0, "safety")),
        ({"queue_wake": 1010.0}, (10.0, "run_after")),
        ({"queue_wake": 1010.0, "leasing": False}, (60.0, "safety")),
        ({"queue_wake": 999.0}, (2.0, "held")),
        ({"queue_wake": 999.0, "flow_held": True}, (0.25, "flow")),
        ({"expiry": 1003.0}, (3.0, "lease_expiry")),
        ({"expiry": 990.0}, (5.0, "overdue")),
        ({"deadlines": {"timeout": 4.0, "upkeep": None, "scheduler": 7.0}}, (4.0, "timeout")),
        ({"deadlines": {"store_retry": -1.0}}, (0.0, "store_retry")),
        ({"queue_wake": 5000.0}, (60.0, "safety")),
    ],
)
def test_the_plan_is_the_first_thing_due(kwargs: dict[str, Any], expected: tuple[float, str]) -> None:
    plan = plan_wake(now=1000.0, safety_s=60.0, **kwargs)
    assert (round(plan.delay_s, 6), plan.reason) == expected


def test_without_follow_the_driver_polls_at_its_tick(make_driver: DriverFactory) -> None:
    driver = make_driver(follow=False, tick_ms=40)
    driver.start()
    assert not driver._timer.isSingleShot() and driver._timer.interval() == 40 and driver.watcher is None


class CountingUpkeep:
    """The driver's upkeep (repair scan, outbox, alerts), counted."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.ticks = 0

    def tick(self) -> None:
        self.ticks += 1


def test_the_upkeep_runs_at_its_interval_by_a_planned_wake(qtbot: Any, make_driver: DriverFactory) -> None:
    upkeep = CountingUpkeep(every_s=0.2)
    driver = make_driver(safety_tick_s=HOUR_S, upkeep=upkeep)
    driver.start()
    idle(qtbot, driver)
    assert driver.plan.reason == "upkeep"
    qtbot.waitUntil(lambda: upkeep.ticks >= 3, timeout=WAIT_MS)
    assert driver.plan.reason == "upkeep" and driver.plan.delay_s <= 0.2


def test_the_scheduler_s_next_window_is_a_planned_wake(qtbot: Any, make_driver: DriverFactory, queue: Queue) -> None:
    from desktop_queue.core.schedules import Scheduler, new_schedule

    scheduler = Scheduler(queue)
    try:
        scheduler.book.add(new_schedule("every minute", "* * * * *", "demo", {"prompt": "tick"}, now=queue.clock.now()))
        driver = make_driver(safety_tick_s=HOUR_S)
        driver.scheduler = scheduler
        driver.start()
        idle(qtbot, driver)
        assert driver.plan.reason == "scheduler" and 0 < driver.plan.delay_s <= 60.1
    finally:
        scheduler.close()


def test_without_schedules_the_scheduler_plans_nothing(qtbot: Any, make_driver: DriverFactory, queue: Queue) -> None:
    from desktop_queue.core.schedules import Scheduler

    scheduler = Scheduler(queue)
    try:
        driver = make_driver(safety_tick_s=HOUR_S)
        driver.scheduler = scheduler
        driver.start()
        idle(qtbot, driver)
        assert driver.plan.reason == "safety" and not scheduler.book.path.exists()
    finally:
        scheduler.close()


def test_a_throttle_s_pause_ends_and_the_profile_s_jobs_are_leased_again(
    qtbot: Any, make_driver: DriverFactory, queue: Queue
) -> None:
    from desktop_queue.core.flow import FlowControl, ProfileLimits

    flow = FlowControl({"demo": ProfileLimits(throttle_base_s=0.2, throttle_cap_s=0.3)})
    first = queue.submit(
        "demo", {"prompt": "429 once", "duration_s": 0, "fail_times": 1, "fail_with": "throttled", "retry_after_s": 0.3}
    ).job
    second = queue.submit("demo", {"prompt": "behind it", "duration_s": 0}).job
    driver = make_driver(concurrency=1, flow=flow, safety_tick_s=HOUR_S)
    driver.start()
    qtbot.waitUntil(lambda: queue.get(first.id).state == queue.get(second.id).state == "succeeded", timeout=WAIT_MS)
    assert any(e.type == "throttled" for e in queue.get(first.id).events)
