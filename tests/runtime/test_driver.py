"""The QThreadPool lease driver: runs jobs, respects its limit, cancels, pauses, shuts down cleanly,
and never lets a late result from a lost lease change a job."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QThreadPool

from desktop_queue.core import FakeClock, Outcome, Queue, RetryPolicy, RunContext, State
from desktop_queue.providers import discover
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.runtime import LeaseDriver

from .conftest import WAIT_MS, BlockingDemo, DriverFactory


def _blocked_attempt(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, prompt: str
) -> tuple[str, BlockingDemo, LeaseDriver]:
    """Submits a demo job and starts a driver whose provider holds the attempt until its gate opens."""
    job_id = queue.submit("demo", demo(prompt)).job.id
    provider = BlockingDemo()
    driver = make_driver({"demo": provider})
    driver.start()
    qtbot.waitUntil(provider.entered.is_set, timeout=WAIT_MS)
    return job_id, provider, driver


def demo(prompt: str, duration_s: float = 0.05, **extra: Any) -> dict[str, Any]:
    return {"prompt": prompt, "duration_s": duration_s, **extra}


def states(queue: Queue, ids: list[str]) -> list[str]:
    return [queue.get(i).state for i in ids]


def event_types(queue: Queue, job_id: str) -> list[str]:
    return [e.type for e in queue.get(job_id).events]


class CountingDemo(DemoProvider):
    """Measures how many attempts run inside the provider at the same moment."""

    def __init__(self) -> None:
        super().__init__(tick_s=0.01)
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def run(self, job: Any, context: RunContext) -> Outcome:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            return super().run(job, context)
        finally:
            with self._lock:
                self.now -= 1


class RaisesOnce(DemoProvider):
    """Raises an unexpected exception (with input text in its message) on the first attempt."""

    def __init__(self) -> None:
        super().__init__(tick_s=0.01)
        self.raised = False

    def run(self, job: Any, context: RunContext) -> Outcome:
        if not self.raised:
            self.raised = True
            raise RuntimeError(f"socket died while sending {job.input['prompt']!r}")
        return super().run(job, context)


# ---------------------------------------------------------------------- running


def test_jobs_run_to_succeeded_then_the_driver_is_idle(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    ids = [queue.submit("demo", demo(f"job {i}")).job.id for i in range(6)]
    driver = make_driver(concurrency=4)

    with qtbot.waitSignal(driver.idle, timeout=WAIT_MS):
        driver.start()

    assert states(queue, ids) == ["succeeded"] * 6
    for job_id in ids:
        job = queue.get(job_id)
        assert (job.attempts, job.total_attempts) == (1, 1)
        assert job.result_ref is not None
        stored = queue.results.get(job.idempotency_key)
        assert stored is not None and stored["result"]["provider"] == "demo"
        assert [e.type for e in job.events] == ["submitted", "leased", "succeeded"]
        assert job.events[1].worker == driver.worker_id
    assert driver.running == 0


def test_started_then_finished_in_strict_order(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    job_id = queue.submit("demo", demo("one")).job.id
    driver = make_driver()
    emitted: list[tuple[object, ...]] = []  # PySide signals carry no names for blocker.all_signals_and_args
    driver.job_started.connect(lambda *args: emitted.append(("started", *args)))
    driver.job_finished.connect(lambda *args: emitted.append(("finished", *args)))

    with qtbot.assertNotEmitted(driver.stale_result), qtbot.assertNotEmitted(driver.error):
        with qtbot.waitSignals(
            [driver.job_started, driver.job_finished],
            order="strict",
            timeout=WAIT_MS,
            check_params_cbs=[lambda i: i == job_id, lambda i, state: (i, state) == (job_id, "succeeded")],
        ) as blocker:
            driver.start()

    assert blocker.signal_triggered
    assert emitted == [("started", job_id), ("finished", job_id, "succeeded")]
    assert queue.get(job_id).state == State.SUCCEEDED


def test_concurrency_never_exceeds_the_limit(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    ids = [queue.submit("demo", demo(f"job {i}", 0.1)).job.id for i in range(10)]
    provider = CountingDemo()
    driver = make_driver({"demo": provider}, concurrency=3)
    seen: list[int] = []
    driver.job_started.connect(lambda _id: seen.append(driver.running))
    driver.job_finished.connect(lambda _id, _state: seen.append(driver.running))

    driver.start()
    qtbot.waitUntil(lambda: states(queue, ids) == ["succeeded"] * 10, timeout=WAIT_MS)

    assert max(seen) == 3  # it did fill its slots...
    assert provider.peak <= 3  # ...and never ran more than that
    assert len([n for n in seen if n]) >= 10


def test_set_concurrency_lowers_the_limit_for_new_leases(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    ids = [queue.submit("demo", demo(f"job {i}", 0.05)).job.id for i in range(6)]
    driver = make_driver(concurrency=3)
    seen: list[int] = []
    driver.set_concurrency(1)
    driver.job_started.connect(lambda _id: seen.append(driver.running))

    driver.start()
    qtbot.waitUntil(lambda: states(queue, ids) == ["succeeded"] * 6, timeout=WAIT_MS)

    assert driver.concurrency == 1
    assert set(seen) == {1}


# ---------------------------------------------------------------------- cancel and lost leases


def test_cancel_a_running_job(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    job_id = queue.submit("demo", demo("long", 60)).job.id
    driver = make_driver()
    with qtbot.waitSignal(driver.job_started, timeout=WAIT_MS):
        driver.start()
    assert queue.get(job_id).state == State.RUNNING

    with qtbot.assertNotEmitted(driver.stale_result):
        with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS) as blocker:
            driver.cancel(job_id)

    assert blocker.args == [job_id, "cancelled"]
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)
    job = queue.get(job_id)
    assert job.state == State.CANCELLED
    assert [e.type for e in job.events] == ["submitted", "leased", "cancelled"]
    assert job.events[-1].actor == "user"
    assert driver.running == 0
    assert queue.results.get(job.idempotency_key) is None


def test_cancel_a_queued_job_through_the_driver(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    driver = make_driver()
    driver.pause()
    driver.start()
    job_id = queue.submit("demo", demo("not yet")).job.id

    with qtbot.assertNotEmitted(driver.job_started, wait=200):
        driver.cancel(job_id)
    driver.resume()
    with qtbot.assertNotEmitted(driver.job_started, wait=200):
        driver.wake()

    assert event_types(queue, job_id) == ["submitted", "cancelled"]


def test_heartbeats_keep_a_long_attempt_leased(qtbot: Any, tmp_path: Path, make_driver: DriverFactory) -> None:
    # a 3 s attempt under a 2.4 s lease: only heartbeats (every 0.8 s at most) keep it
    with Queue.open(tmp_path / "short-leases", {"demo": DemoProvider()}, policy=RetryPolicy(lease_s=2.4)) as short:
        job_id = short.submit("demo", demo("long", 3.0)).job.id
        driver = make_driver(on=short)
        try:
            with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS * 2) as blocker:
                driver.start()
        finally:
            driver.shutdown()  # before this queue closes

        assert blocker.args == [job_id, "succeeded"]
        job = short.get(job_id)
        assert [e.type for e in job.events] == ["submitted", "leased", "succeeded"]
        assert job.total_attempts == 1


def test_late_success_after_a_cancel_by_another_process_is_rejected(
    qtbot: Any, queue: Queue, data_dir: Path, make_driver: DriverFactory
) -> None:
    job_id, provider, driver = _blocked_attempt(qtbot, queue, make_driver, "slow remote call")
    epoch = queue.get(job_id).lease_epoch

    # "another process": its own Queue object, its own file descriptors and locks
    with Queue.open(data_dir, discover()) as other:
        assert other.cancel(job_id, "cli").state == State.CANCELLED

    emitted: list[tuple[object, ...]] = []
    driver.stale_result.connect(lambda *args: emitted.append(("stale", *args)))
    driver.job_finished.connect(lambda *args: emitted.append(("finished", *args)))
    with qtbot.waitSignals([driver.stale_result, driver.job_finished], order="strict", timeout=WAIT_MS):
        provider.gate.set()

    assert emitted == [("stale", job_id), ("finished", job_id, "cancelled")]
    job = queue.get(job_id)
    assert job.state == State.CANCELLED
    assert job.result_ref is None
    assert [e.type for e in job.events] == ["submitted", "leased", "cancelled", "stale_result"]
    stale = job.events[-1]
    assert (stale.epoch, stale.detail["stale_epoch"]) == (epoch, epoch)
    assert driver.running == 0


def test_late_success_after_the_lease_expired_elsewhere_is_rejected(
    qtbot: Any, queue: Queue, data_dir: Path, make_driver: DriverFactory
) -> None:
    job_id, provider, driver = _blocked_attempt(qtbot, queue, make_driver, "slow remote call")
    epoch = queue.get(job_id).lease_epoch

    # the holder's renewals stop (as a holder on another host that lost the network would
    # look), and another process whose clock is an hour ahead finds the lease long expired
    driver.keeper.remove(driver.keeper.lease_of(job_id))
    later = FakeClock(start=time.time() + 3600)
    with Queue.open(data_dir, discover(), clock=later) as other:
        assert other.reap() == [job_id]

    with qtbot.waitSignal(driver.stale_result, timeout=WAIT_MS) as blocker:
        provider.gate.set()

    assert blocker.args == [job_id]
    job = queue.get(job_id)
    assert job.state == State.QUEUED  # waiting to be leased again, by the other clock's "now"
    assert [e.type for e in job.events] == ["submitted", "leased", "lease_expired", "stale_result"]
    assert job.events[-1].detail["stale_epoch"] == epoch
    assert job.lease_epoch == epoch and job.result_ref is None
    assert provider.calls == 1


# ---------------------------------------------------------------------- pause, resume, stop


def test_pause_leases_nothing_until_resumed(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    driver = make_driver()
    with qtbot.waitSignal(driver.paused_changed, timeout=WAIT_MS) as paused:
        driver.pause()
    driver.start()
    ids = [queue.submit("demo", demo(f"job {i}")).job.id for i in range(3)]

    with qtbot.assertNotEmitted(driver.job_started, wait=500):
        driver.wake()

    assert paused.args == [True] and driver.paused
    assert states(queue, ids) == ["queued"] * 3
    with qtbot.waitSignal(driver.paused_changed, timeout=WAIT_MS) as resumed:
        driver.resume()
    assert resumed.args == [False] and not driver.paused
    qtbot.waitUntil(lambda: states(queue, ids) == ["succeeded"] * 3, timeout=WAIT_MS)


def test_pause_lets_running_attempts_finish(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    first = queue.submit("demo", demo("first", 0.3)).job.id
    second = queue.submit("demo", demo("second")).job.id
    driver = make_driver(concurrency=1)
    with qtbot.waitSignal(driver.job_started, timeout=WAIT_MS):
        driver.start()

    driver.pause()
    with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS) as blocker:
        pass
    with qtbot.assertNotEmitted(driver.job_started, wait=300):
        driver.wake()

    assert blocker.args == [first, "succeeded"]
    assert queue.get(second).state == State.QUEUED


def test_stop_after_current(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    ids = [queue.submit("demo", demo(f"job {i}", 0.2)).job.id for i in range(3)]
    driver = make_driver(concurrency=1)
    with qtbot.waitSignal(driver.job_started, timeout=WAIT_MS) as started:
        driver.start()

    with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS) as finished:
        driver.stop_after_current()
    with qtbot.assertNotEmitted(driver.job_started, wait=400):
        driver.wake()

    assert started.args == [ids[0]]
    assert finished.args == [ids[0], "succeeded"]
    assert driver.paused and driver.running == 0
    assert states(queue, ids) == ["succeeded", "queued", "queued"]
    driver.resume()
    qtbot.waitUntil(lambda: states(queue, ids) == ["succeeded"] * 3, timeout=WAIT_MS)


# ---------------------------------------------------------------------- shutdown


def test_shutdown_releases_unfinished_leases(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    running = [queue.submit("demo", demo(f"long {i}", 60)).job.id for i in range(2)]
    waiting = queue.submit("demo", demo("never started")).job.id
    driver = make_driver(concurrency=2)
    driver.start()
    qtbot.waitUntil(lambda: states(queue, running) == ["running"] * 2, timeout=WAIT_MS)

    clean = driver.shutdown(timeout_ms=WAIT_MS)

    assert clean is True
    assert QThreadPool.globalInstance().activeThreadCount() == 0
    for job_id in running:
        job = queue.get(job_id)
        assert (job.state, job.attempts, job.total_attempts) == ("queued", 0, 1)
        assert [e.type for e in job.events] == ["submitted", "leased", "released"]
        assert queue.lease_token(job_id) is None
    assert event_types(queue, waiting) == ["submitted"]
    assert driver.running == 0


def test_shutdown_gives_back_a_lease_whose_worker_does_not_stop(
    qtbot: Any, queue: Queue, make_driver: DriverFactory
) -> None:
    job_id, provider, driver = _blocked_attempt(qtbot, queue, make_driver, "stuck")

    clean = driver.shutdown(timeout_ms=100)

    assert clean is False
    job = queue.get(job_id)
    assert job.state == State.QUEUED
    assert job.events[-1].type == "released"
    assert "did not stop in time" in job.events[-1].detail["reason"]
    # the stuck call returns later: its result must not complete the released job
    with qtbot.waitSignal(driver.stale_result, timeout=WAIT_MS):
        provider.gate.set()
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)
    assert queue.get(job_id).state == State.QUEUED


# ---------------------------------------------------------------------- other processes and failures


def test_a_job_submitted_by_another_process_is_picked_up(
    qtbot: Any, queue: Queue, data_dir: Path, make_driver: DriverFactory
) -> None:
    driver = make_driver(tick_ms=250)
    with qtbot.waitSignal(driver.idle, timeout=WAIT_MS):
        driver.start()

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "desktop_queue",
            "--data-dir",
            str(data_dir),
            "submit",
            "demo",
            "--input",
            json.dumps(demo("from the shell")),
            "--json",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    job_id = json.loads(proc.stdout)["id"]
    submitted = time.monotonic()
    with qtbot.waitSignal(driver.job_started, timeout=2000, check_params_cb=lambda i: i == job_id):
        pass
    picked_up_after = time.monotonic() - submitted

    assert picked_up_after < 2.0
    qtbot.waitUntil(lambda: queue.get(job_id).state == State.SUCCEEDED, timeout=WAIT_MS)


def test_a_provider_exception_is_classified_retryable(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    job_id = queue.submit("demo", demo("the secret launch plan")).job.id
    driver = make_driver({"demo": RaisesOnce()})

    with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS) as first:
        driver.start()

    assert first.args == [job_id, "queued"]
    failed = queue.get(job_id)
    assert failed.last_error is not None
    assert failed.last_error["class"] == "retryable"
    assert failed.last_error["message"] == "demo: unexpected RuntimeError"
    retry = failed.events[-1]
    assert retry.type == "retry_scheduled"
    assert retry.detail["error_class"] == "retryable"
    assert 0 <= retry.detail["delay_s"] <= 1.0  # full jitter under the 1 s base
    # invariant 7: not in the error or the timeline (the title is the prompt's first line,
    # as every front end names a job: a field of the job, like its input)
    assert "secret launch plan" not in json.dumps({**failed.to_json(with_input=False), "title": None})
    # the retry runs once its backoff is over
    qtbot.waitUntil(lambda: queue.get(job_id).state == State.SUCCEEDED, timeout=WAIT_MS)
    done = queue.get(job_id)
    assert [e.type for e in done.events] == ["submitted", "leased", "retry_scheduled", "leased", "succeeded"]
    assert (done.attempts, done.total_attempts, done.last_error) == (2, 2, None)


@pytest.mark.parametrize("fail_with", ["fatal", 401])
def test_a_fatal_failure_is_dead_lettered_at_once(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, fail_with: object
) -> None:
    job_id = queue.submit("demo", demo("bad request", 0.01, fail_times=1, fail_with=fail_with)).job.id
    driver = make_driver()

    with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS) as blocker:
        driver.start()

    assert blocker.args == [job_id, "dead"]
    job = queue.get(job_id)
    assert job.last_error is not None and job.last_error["class"] == "fatal"
    assert [e.type for e in job.events] == ["submitted", "leased", "dead_lettered"]


def test_no_finished_attempt_stays_in_memory(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    """PySide keeps the Python object of some auto-deleted ``QRunnable`` subclasses alive
    (a few in a hundred), each with its lease (the job and its input), its events and
    the queue, for the life of the process. An attempt is a plain callable in the pool."""
    import gc

    from desktop_queue.runtime.driver import JobRunnable

    ids = [queue.submit("demo", {"prompt": f"kept? {i}", "duration_s": 0}).job.id for i in range(300)]
    driver = make_driver(concurrency=4)
    finished: list[str] = []
    driver.job_finished.connect(lambda job_id, state: finished.append(job_id))
    driver.start()
    qtbot.waitUntil(lambda: len(finished) == len(ids), timeout=WAIT_MS)
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)
    qtbot.wait(50)  # (the pool lets go of what it ran once it is done with it)
    gc.collect()
    assert [o for o in gc.get_objects() if isinstance(o, JobRunnable)] == []
