"""The lease driver's upkeep hook: called at a low rate from its tick, never stopping it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from desktop_queue.core import FakeClock, Queue
from desktop_queue.providers.demo import DemoProvider

from .conftest import DriverFactory


class Counter:
    """An upkeep that counts its ticks (and can fail)."""

    every_s = 30.0

    def __init__(self, fail: bool = False) -> None:
        self.ticks = 0
        self.fail = fail

    def tick(self) -> None:
        self.ticks += 1
        if self.fail:
            raise RuntimeError("upkeep broke")


def test_upkeep_runs_at_most_every_interval(make_driver: DriverFactory, data_dir: Path) -> None:
    clock = FakeClock()
    with Queue.open(data_dir / "clocked", {"demo": DemoProvider()}, clock=clock) as queue:
        upkeep = Counter()
        driver = make_driver(on=queue, upkeep=upkeep)
        driver.tick()
        assert upkeep.ticks == 0  # not at start-up
        clock.advance(29)
        driver.tick()
        assert upkeep.ticks == 0
        clock.advance(1)
        driver.tick()
        driver.tick()
        assert upkeep.ticks == 1
        driver.pause()  # paused leasing still keeps alerts and notices going
        clock.advance(30)
        driver.tick()
        assert upkeep.ticks == 2
        driver.shutdown()


def test_a_failing_upkeep_does_not_stop_the_driver(
    make_driver: DriverFactory, data_dir: Path, qtbot: Any, caplog: Any
) -> None:
    clock = FakeClock()
    with Queue.open(data_dir / "clocked", {"demo": DemoProvider(tick_s=0.01)}, clock=clock) as queue:
        upkeep = Counter(fail=True)
        driver = make_driver({"demo": DemoProvider(tick_s=0.01)}, on=queue, upkeep=upkeep)
        driver.tick()
        clock.advance(31)
        job_id = queue.submit("demo", {"prompt": "x", "duration_s": 0.01}).job.id
        with caplog.at_level("ERROR"):
            driver.start()
            qtbot.waitUntil(lambda: queue.get(job_id).state == "succeeded", timeout=5000)
        assert upkeep.ticks == 1
        assert "upkeep failed: RuntimeError" in caplog.text
        driver.shutdown()
