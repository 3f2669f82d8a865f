"""The lease driver on PostgreSQL follows LISTEN/NOTIFY: an idle worker asks the server nothing.

Every driver here has a safety tick of an hour: a job another connection submits or
cancels reaches it through the change feed, not a polling tick.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from desktop_queue.core import Queue
from desktop_queue.core.pg import PgBackend
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.runtime import LeaseDriver
from tests.runtime.conftest import Hanging, idle

WAIT_MS = 10_000
HOUR_S = 3600.0


@pytest.fixture
def on_pg(pg_dsn: str, open_pg: Callable[..., Queue]) -> Callable[..., Queue]:
    """A queue on the test's schema through a backend of its own (its own connections, the server's clock)."""

    def _open(**backend_options: Any) -> Queue:
        backend = PgBackend(pg_dsn, **backend_options)
        return open_pg(backend=backend, clock=backend.clock, providers={"demo": DemoProvider(tick_s=0.01)})

    return _open


@pytest.fixture
def drivers(qtbot: Any) -> Any:
    made: list[LeaseDriver] = []
    yield made
    for driver in made:
        for provider in driver.providers.values():
            if isinstance(provider, Hanging):
                provider.entered.set()
        driver.shutdown(timeout_ms=WAIT_MS)


def _driver(drivers: list[LeaseDriver], queue: Queue, providers: Any = None) -> LeaseDriver:
    driver = LeaseDriver(
        queue, providers or {"demo": DemoProvider(tick_s=0.01)}, tick_ms=50, safety_tick_s=HOUR_S, worker_id="here"
    )
    drivers.append(driver)
    return driver


def test_a_job_another_connection_submits_is_leased_through_listen_notify(
    qtbot: Any, on_pg: Callable[..., Queue], drivers: list[LeaseDriver]
) -> None:
    here, there = on_pg(), on_pg()
    driver = _driver(drivers, here)
    driver.start()
    idle(qtbot, driver, WAIT_MS)
    assert driver.plan is not None and driver.plan.reason == "safety"
    with qtbot.waitSignal(driver.job_started, timeout=WAIT_MS) as started:
        job = there.submit("demo", {"prompt": "from another machine", "duration_s": 0}).job
    assert started.args == [job.id]
    qtbot.waitUntil(lambda: there.get(job.id).state == "succeeded", timeout=WAIT_MS)


def test_an_idle_driver_asks_the_server_nothing(
    qtbot: Any, on_pg: Callable[..., Queue], drivers: list[LeaseDriver], monkeypatch: pytest.MonkeyPatch
) -> None:
    # its heartbeat (a thread of the backend's, not the driver's) beats 4 times a second here:
    # the test's clock, counted without timing anything
    here = on_pg(heartbeat_s=0.25)
    driver = _driver(drivers, here)
    driver.start()
    idle(qtbot, driver, WAIT_MS)
    counts = {"driver": 0, "other": 0}
    main = threading.get_ident()
    for name in ("read", "commit", "transact"):
        real = getattr(here.store, name)

        def counting(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            counts["driver" if threading.get_ident() == main else "other"] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(here.store, name, counting)
    heartbeat = here.store.heartbeat
    assert heartbeat is not None
    beats = heartbeat.beats
    qtbot.waitUntil(lambda: heartbeat.beats >= beats + 5, timeout=WAIT_MS)  # more than a second
    assert counts == {"driver": 0, "other": 0}, counts  # neither the driver nor its watcher asked


def test_a_job_cancelled_from_another_connection_stops_through_the_feed(
    qtbot: Any, on_pg: Callable[..., Queue], drivers: list[LeaseDriver]
) -> None:
    here, there = on_pg(), on_pg()
    provider = Hanging()
    driver = _driver(drivers, here, {"demo": provider})
    driver.start()
    idle(qtbot, driver, WAIT_MS)
    job = there.submit("demo", {"prompt": "long"}).job
    qtbot.waitUntil(provider.entered.is_set, timeout=WAIT_MS)
    there.cancel(job.id)
    qtbot.waitUntil(provider.stopped.is_set, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not driver.active_ids(), timeout=WAIT_MS)
    assert there.get(job.id).state == "cancelled"


def test_a_job_due_in_a_second_is_leased_by_a_planned_wake(
    qtbot: Any, on_pg: Callable[..., Queue], drivers: list[LeaseDriver]
) -> None:
    here, there = on_pg(), on_pg()
    driver = _driver(drivers, here)
    driver.start()
    idle(qtbot, driver, WAIT_MS)
    job = there.submit("demo", {"prompt": "later", "duration_s": 0}, run_after=there.clock.now() + 1.0).job
    qtbot.waitUntil(lambda: driver.plan is not None and driver.plan.reason == "run_after", timeout=WAIT_MS)
    with qtbot.waitSignal(driver.job_started, timeout=WAIT_MS) as started:
        pass
    assert started.args == [job.id]
