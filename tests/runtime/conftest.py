"""Fixtures for the runtime tests: a queue in a temp dir, lease drivers that always shut down."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QThreadPool

from desktop_queue.core import Outcome, Queue, RunContext
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.runtime import LeaseDriver

#: How long a test waits for something that normally takes milliseconds.
WAIT_MS = 5000


class Hanging(DemoProvider):
    """Attempts that run until they are told to stop (or 30 s, a safety net)."""

    def __init__(self) -> None:
        super().__init__(tick_s=0.01)
        self.entered = threading.Event()
        self.stopped = threading.Event()

    def run(self, job: Any, context: RunContext) -> Outcome:
        self.entered.set()
        context.cancelled.wait(30)
        self.stopped.set()
        return Outcome.failure("retryable", "stopped")


def idle(qtbot: Any, driver: Any, timeout_ms: int = WAIT_MS) -> None:
    """Waits for the driver's first look to be over and its watcher to follow the store."""
    qtbot.waitUntil(lambda: driver.plan is not None and driver.watcher is not None, timeout=timeout_ms)
    qtbot.waitUntil(lambda: driver.watcher is not None and driver.watcher.ready, timeout=timeout_ms)
    # the first look, and the one the watcher asks for once it follows
    qtbot.waitUntil(lambda: driver.ticks >= 2, timeout=timeout_ms)


class BlockingDemo(DemoProvider):
    """A demo provider whose attempts wait for ``gate`` and ignore cancellation.

    It stands for a slow remote call that cannot be interrupted: the result arrives
    whenever the gate opens, whether or not the lease is still held.

    Attributes:
        entered: set when an attempt has started.
        gate: set by the test to let every attempt return.
        calls: how many attempts started.
    """

    #: a remote call is paid for: its answer is kept on disk before its commit
    paid = True

    def __init__(self) -> None:
        super().__init__(tick_s=0.01)
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def run(self, job: Any, context: RunContext) -> Outcome:
        with self._lock:
            self.calls += 1
        self.entered.set()
        if not self.gate.wait(30):  # a safety net: never hang the suite
            return Outcome.failure("retryable", "gate never opened")
        return Outcome.success({"text": f"late answer for {job.id}", "provider": "demo"})

    def release(self) -> None:
        self.gate.set()


@pytest.fixture
def queue(data_dir: Path) -> Iterator[Queue]:
    """The engine over a fresh data dir, with the built-in demo provider."""
    q = Queue.open(data_dir, {"demo": DemoProvider()})
    yield q
    q.close()


DriverFactory = Callable[..., LeaseDriver]


@pytest.fixture
def make_driver(queue: Queue, qtbot: Any) -> Iterator[DriverFactory]:
    """Builds lease drivers on ``queue`` (or ``on=``); each is shut down and the pool drained afterwards.

    Providers with a ``release()`` method (see :class:`BlockingDemo`) are released first,
    so that no test can leave a pool thread blocked.
    """
    made: list[tuple[LeaseDriver, Mapping[str, Any]]] = []

    def make(providers: Mapping[str, Any] | None = None, *, on: Queue | None = None, **kwargs: Any) -> LeaseDriver:
        providers = providers if providers is not None else {"demo": DemoProvider(tick_s=0.01)}
        kwargs.setdefault("tick_ms", 50)
        kwargs.setdefault("worker_id", f"test-worker-{len(made) + 1}")
        driver = LeaseDriver(on or queue, providers, **kwargs)
        made.append((driver, providers))
        return driver

    yield make
    for driver, providers in made:
        for provider in providers.values():
            if hasattr(provider, "release"):
                provider.release()
        driver.shutdown(timeout_ms=WAIT_MS)
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS), "the pool did not drain"
