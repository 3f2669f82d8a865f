"""A store that cannot commit pauses leasing: nothing is spent, a paid answer is committed once room returns."""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import Queue, State
from desktop_queue.core import reconcile as reconcile_module
from desktop_queue.core import results as results_module
from desktop_queue.core.errors import StoreError
from desktop_queue.core.store import journal as storage_module
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.runtime import driver as driver_module
from desktop_queue.runtime.driver import DISK_FULL

from .conftest import WAIT_MS, BlockingDemo, DriverFactory

#: retry refused commits quickly, so that a test sees several tries in a fraction of a second
FAST_RETRY = (0.05, 0.2)


class FullDisk:
    """Makes every journal write that carries data fail with ENOSPC while ``full`` is set.

    Zeros (the store undoing a torn write) go through: they overwrite space the file
    already has, which a full disk still allows.

    Attributes:
        refused: how many writes the disk refused.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = threading.Event()
        self.refused = 0
        real = storage_module._pwrite_all

        def pwrite_all(fd: int, data: bytes, offset: int) -> None:
            if self.full.is_set() and data.strip(b"\0"):
                self.refused += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(fd, data, offset)

        monkeypatch.setattr(storage_module, "_pwrite_all", pwrite_all)

    def fill(self) -> None:
        self.full.set()

    def free(self) -> None:
        self.full.clear()


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FullDisk:
    return FullDisk(monkeypatch)


def settled_unpaid_at_next_start(
    data_dir: Path, job_id: str, provider: BlockingDemo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next start (the process that held the lease has ended) settles the job from its
    kept answer: succeeded after one attempt, with the late answer, and no new call."""
    monkeypatch.setattr(reconcile_module, "holder_alive", lambda owner: False)
    reopened = Queue.open(data_dir, {"demo": DemoProvider()})
    try:
        job = reopened.get(job_id)
        assert job.state == State.SUCCEEDED and job.total_attempts == 1
        assert reopened.results.get(job.idempotency_key)["result"]["text"] == f"late answer for {job_id}"
        assert provider.calls == 1
    finally:
        reopened.close()


def test_an_answer_while_the_disk_is_full_is_paid_once_and_committed_when_room_returns(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, disk: FullDisk, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=driver_module.log.name)
    paid = queue.submit("demo", {"prompt": "answered while full"}).job.id
    waiting = queue.submit("demo", {"prompt": "queued behind"}).job.id
    provider = BlockingDemo()
    driver = make_driver({"demo": provider}, concurrency=1, store_retry_s=FAST_RETRY)
    errors: list[str] = []
    driver.error.connect(errors.append)
    driver.start()
    qtbot.waitUntil(provider.entered.is_set, timeout=WAIT_MS)

    disk.fill()
    with qtbot.waitSignal(driver.store_unavailable, timeout=WAIT_MS) as down:
        provider.release()  # the provider answers: paid for, but the commit is refused
    assert down.args == [DISK_FULL]
    refused = disk.refused
    qtbot.waitUntil(lambda: disk.refused >= refused + 3, timeout=WAIT_MS)  # tried again, and again

    # leasing stopped: the answer waits in memory, the job behind it was not started
    assert driver.held_ids() == [paid] and driver.store_problem == DISK_FULL
    assert provider.calls == 1
    held, behind = queue.get(paid), queue.get(waiting)
    assert (held.state, held.attempts) == (State.RUNNING, 1)
    assert (behind.state, behind.attempts, behind.total_attempts) == (State.QUEUED, 0, 0)
    assert errors == [DISK_FULL]  # said once, not on every try

    with qtbot.waitSignal(driver.store_available, timeout=WAIT_MS):
        disk.free()
    qtbot.waitUntil(lambda: queue.get(waiting).state == State.SUCCEEDED, timeout=WAIT_MS)
    done = queue.get(paid)
    assert done.state == State.SUCCEEDED
    assert (done.attempts, done.total_attempts) == (1, 1)
    assert queue.results.get(done.idempotency_key)["result"]["text"] == f"late answer for {paid}"
    assert provider.calls == 2  # one call per job: the held answer was never asked for again
    assert driver.held_ids() == [] and driver.store_problem is None
    assert errors == [DISK_FULL]
    # the log says it as the window does: once when the answer is held, once when it is taken
    about = [(r.levelno, r.getMessage()) for r in caplog.records if paid in r.getMessage()]
    assert about[0] == (logging.WARNING, f"the outcome of {paid} waits for the store to take it")
    assert about[1][0] == logging.INFO and about[1][1].startswith(
        f"the store took the outcome of {paid} (it had failed "
    )
    assert len(about) == 2


def test_a_lease_the_store_refuses_spends_nothing_and_leasing_resumes_by_itself(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, disk: FullDisk
) -> None:
    job_id = queue.submit("demo", {"prompt": "p", "duration_s": 0.01}).job.id
    calls: list[int] = []

    class Counting(DemoProvider):
        def run(self, job: Any, context: Any) -> Any:
            calls.append(context.attempt)
            return super().run(job, context)

    driver = make_driver({"demo": Counting(tick_s=0.01)}, store_retry_s=FAST_RETRY)
    disk.fill()
    with qtbot.waitSignal(driver.store_unavailable, timeout=WAIT_MS) as down:
        driver.start()
    assert down.args == [DISK_FULL]
    refused = disk.refused
    qtbot.waitUntil(lambda: disk.refused >= refused + 3, timeout=WAIT_MS)  # the lease is the probe
    job = queue.get(job_id)
    assert (job.state, job.attempts, job.total_attempts) == (State.QUEUED, 0, 0)
    assert calls == []

    with qtbot.waitSignal(driver.store_available, timeout=WAIT_MS):
        disk.free()
    qtbot.waitUntil(lambda: queue.get(job_id).state == State.SUCCEEDED, timeout=WAIT_MS)
    job = queue.get(job_id)
    assert (job.attempts, job.total_attempts) == (1, 1) and calls == [1]


def test_a_failure_the_store_refuses_is_committed_later_and_spends_one_attempt(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, disk: FullDisk
) -> None:
    """A refused failure commit is not lost (no lease expiry, no second failure): one attempt, one error."""
    job_id = queue.submit("demo", {"prompt": "refused"}, max_attempts=3).job.id
    gate = threading.Event()
    calls: list[int] = []

    class FailsFatally(DemoProvider):
        def run(self, job: Any, context: Any) -> Any:
            from desktop_queue.core import Outcome

            calls.append(context.attempt)
            gate.wait(WAIT_MS / 1000)
            return Outcome.failure("fatal", "demo: refused (HTTP 400)", status=400)

    driver = make_driver({"demo": FailsFatally(tick_s=0.01)}, store_retry_s=FAST_RETRY)
    driver.start()
    qtbot.waitUntil(lambda: calls == [1], timeout=WAIT_MS)
    disk.fill()
    with qtbot.waitSignal(driver.store_unavailable, timeout=WAIT_MS):
        gate.set()
    assert queue.get(job_id).state == State.RUNNING
    with qtbot.waitSignal(driver.store_available, timeout=WAIT_MS):
        disk.free()
    qtbot.waitUntil(lambda: queue.get(job_id).state == State.DEAD, timeout=WAIT_MS)
    job = queue.get(job_id)
    assert (job.attempts, job.total_attempts) == (1, 1) and calls == [1]
    assert job.last_error is not None and job.last_error["class"] == "fatal"


def test_a_held_answer_survives_a_restart_in_its_pending_result(
    qtbot: Any,
    queue: Queue,
    data_dir: Path,
    make_driver: DriverFactory,
    disk: FullDisk,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The app is closed while the disk is still full: the next start commits the kept answer, unpaid."""
    job_id = queue.submit("demo", {"prompt": "closed while full"}).job.id
    provider = BlockingDemo()
    driver = make_driver({"demo": provider}, store_retry_s=FAST_RETRY)
    driver.start()
    qtbot.waitUntil(provider.entered.is_set, timeout=WAIT_MS)
    disk.fill()
    with qtbot.waitSignal(driver.store_unavailable, timeout=WAIT_MS):
        provider.release()
    driver.shutdown(timeout_ms=WAIT_MS)
    queue.close()
    disk.free()

    # the next start: the process that held the lease has ended
    settled_unpaid_at_next_start(data_dir, job_id, provider, monkeypatch)


def test_a_poisoned_store_stops_leasing_and_says_it_must_be_reopened(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease could not be put on disk: no provider is called, and nothing else starts."""
    first = queue.submit("demo", {"prompt": "a"}).job.id
    second = queue.submit("demo", {"prompt": "b"}).job.id

    def datasync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(storage_module, "_datasync", datasync)
    provider = BlockingDemo()
    driver = make_driver({"demo": provider}, concurrency=1, store_retry_s=FAST_RETRY)
    errors: list[str] = []
    driver.error.connect(errors.append)
    with qtbot.waitSignal(driver.store_unavailable, timeout=WAIT_MS) as down:
        driver.start()
    assert "reopened" in down.args[0] and queue.store.poisoned
    monkeypatch.undo()  # the disk works again, but a poisoned store takes nothing until reopened
    qtbot.waitUntil(lambda: driver.held_ids() == [first], timeout=WAIT_MS)
    with qtbot.assertNotEmitted(driver.store_available, wait=300):
        pass
    assert provider.calls == 0
    assert queue.get(second).attempts == 0
    assert len(errors) == 1


def test_an_answer_the_disk_had_no_room_for_is_kept_at_shutdown_and_not_paid_again(
    qtbot: Any,
    queue: Queue,
    data_dir: Path,
    make_driver: DriverFactory,
    disk: FullDisk,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The disk was full when the provider answered: neither the pending result nor the
    commit could be written, so the answer lives in memory only. Some room is made (a small
    file fits, the journal still does not) and the app is closed: the answer is kept then,
    and the next start settles the job from it without calling the provider again."""
    job_id = queue.submit("demo", {"prompt": "answered on a full disk"}).job.id
    provider = BlockingDemo()
    driver = make_driver({"demo": provider}, store_retry_s=FAST_RETRY)
    driver.start()
    qtbot.waitUntil(provider.entered.is_set, timeout=WAIT_MS)

    def no_room(*args: Any, **kwargs: Any) -> None:
        raise StoreError("could not write the result: No space left on device; nothing was changed")

    disk.fill()
    with monkeypatch.context() as full:
        full.setattr(results_module, "atomic_write", no_room)
        with qtbot.waitSignal(driver.store_unavailable, timeout=WAIT_MS):
            provider.release()
        qtbot.waitUntil(lambda: driver.held_ids() == [job_id], timeout=WAIT_MS)
    assert not list((data_dir / "results" / "pending").glob("*.json"))  # in memory only
    driver.shutdown(timeout_ms=WAIT_MS)  # a small file fits again; the journal still refuses
    queue.close()
    disk.free()

    settled_unpaid_at_next_start(data_dir, job_id, provider, monkeypatch)
