"""The worker's hot path: successes committed in batches, freed slots filled without a tick."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
from PySide6.QtCore import QThreadPool

from desktop_queue.core import Outcome, Queue, RunContext
from desktop_queue.core.model import State
from desktop_queue.providers.demo import DemoProvider

from .conftest import WAIT_MS, DriverFactory

#: long enough that the driver's timer never fires during a test: only its first tick runs
NEVER_MS = 600_000  # (with follow=False: no look but the one start() makes, not even the feed's)


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
    driver = make_driver({"demo": provider}, concurrency=1, tick_ms=NEVER_MS, follow=False)
    finished: list[str] = []
    driver.job_finished.connect(lambda job_id, state: finished.append(state))

    driver.start()
    qtbot.waitUntil(lambda: len(finished) == len(ids), timeout=WAIT_MS)

    assert finished == ["succeeded"] * len(ids)
    assert [queue.get(i).state for i in ids] == [State.SUCCEEDED] * len(ids)
    # one tick (the one start() runs): every later job was leased into the slot its
    # predecessor freed, with no tick (and no round of questions to every provider)
    assert provider.asked == 1


def test_successes_reported_together_are_committed_in_one_commit_then_synced(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [queue.submit("demo", instant(f"job {i}")).job.id for i in range(3)]
    provider = CountingDemo()
    driver = make_driver({"demo": provider}, concurrency=3, tick_ms=NEVER_MS, follow=False)
    batches: list[int] = []
    synced_after: list[bool] = []
    complete_and_lease, sync = queue.complete_and_lease, queue.sync

    def counting_complete_and_lease(done: Any, n: int, **kwargs: Any) -> Any:
        if done:  # (lease_many is this verb without successes)
            batches.append(len(done))
        return complete_and_lease(done, n, **kwargs)

    def watching_sync() -> None:
        sync()
        synced_after.append(bool(batches) and threading.current_thread() is not threading.main_thread())

    monkeypatch.setattr(queue, "complete_and_lease", counting_complete_and_lease)
    monkeypatch.setattr(queue, "sync", watching_sync)
    finished: list[tuple[str, str]] = []
    driver.job_finished.connect(lambda job_id, state: finished.append((job_id, state)))

    driver.tick()  # three leases in one commit, handed to the pool; no event loop runs meanwhile
    assert driver.running == 3
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)
    # the attempts ran on the pool and reported; nothing is committed until the driver takes them
    assert provider.threads and all(t is not threading.main_thread() for t in provider.threads)
    assert [queue.get(i).state for i in ids] == [State.RUNNING] * 3

    with qtbot.assertNotEmitted(driver.stale_result):
        qtbot.waitUntil(lambda: len(finished) == 3, timeout=WAIT_MS)
    assert batches == [3], "the three successes went into one commit"
    assert sorted(finished) == sorted((i, "succeeded") for i in ids)
    # nothing more to start (whose first act would be the sync): a sync off the driver's thread
    qtbot.waitUntil(lambda: any(synced_after), timeout=WAIT_MS)
    for job_id in ids:
        job = queue.get(job_id)
        assert job.state == State.SUCCEEDED and job.result_ref is not None
        assert [e.type for e in job.events] == ["submitted", "leased", "succeeded"]
        assert queue.results.get(job.idempotency_key) is not None
    assert driver.running == 0
    assert driver.keeper.kept() == []


def test_reports_that_arrive_together_are_settled_in_one_batch(
    qtbot: Any, queue: Queue, make_driver: DriverFactory
) -> None:
    ids = [queue.submit("demo", instant(f"job {i}")).job.id for i in range(6)]
    provider = CountingDemo()
    driver = make_driver({"demo": provider}, concurrency=3, tick_ms=NEVER_MS, follow=False)
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


def test_a_free_answer_is_not_kept_on_disk_before_its_commit_a_paid_one_is(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept: list[str] = []
    put_pending = queue.results.put_pending

    def spy(key: str, result: Any, **kwargs: Any) -> Any:
        kept.append(key)
        return put_pending(key, result, **kwargs)

    monkeypatch.setattr(queue.results, "put_pending", spy)

    class PaidDemo(CountingDemo):
        paid = True

    free = queue.submit("demo", instant("free")).job
    driver = make_driver({"demo": CountingDemo()}, tick_ms=NEVER_MS, follow=False)
    with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS):
        driver.start()
    assert kept == [], "the demo's answer costs nothing: no pending copy"
    assert queue.get(free.id).state == State.SUCCEEDED
    assert queue.results.get(free.idempotency_key) is not None
    driver.shutdown(timeout_ms=WAIT_MS)

    paid = queue.submit("demo", instant("paid")).job
    driver = make_driver({"demo": PaidDemo()}, tick_ms=NEVER_MS, follow=False)
    with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS):
        driver.start()
    assert kept == [paid.idempotency_key], "a paid answer is kept before its commit"
    assert queue.get(paid.id).state == State.SUCCEEDED
    assert list((queue.results.root / "pending").glob("*")) == [], "and dropped once the commit carries it"


def test_a_provider_is_asked_whether_it_can_run_only_when_its_kind_has_work(
    qtbot: Any, queue: Queue, make_driver: DriverFactory
) -> None:
    provider = CountingDemo()
    driver = make_driver({"demo": provider}, tick_ms=NEVER_MS, follow=False)
    driver.tick()
    driver.tick()
    assert provider.asked == 0, "nothing queued: the (possibly slow) check is not made"

    job_id = queue.submit("demo", instant("now there is")).job.id
    with qtbot.waitSignal(driver.job_finished, timeout=WAIT_MS):
        driver.tick()
    assert provider.asked == 1
    assert queue.get(job_id).state == State.SUCCEEDED


def test_a_batch_of_successes_and_the_leases_into_their_slots_share_one_commit(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [queue.submit("demo", instant(f"job {i}")).job.id for i in range(4)]
    driver = make_driver({"demo": CountingDemo()}, concurrency=2, tick_ms=NEVER_MS, follow=False)
    calls: list[tuple[list[str], list[str]]] = []
    complete_and_lease = queue.complete_and_lease

    def spy(done: Any, n: int, **kwargs: Any) -> Any:
        answers, leases = complete_and_lease(done, n, **kwargs)
        if done:  # (lease_many is this verb without successes)
            calls.append(([lease.job_id for lease, _r, _d in done], [lease.job_id for lease in leases]))
        return answers, leases

    monkeypatch.setattr(queue, "complete_and_lease", spy)
    finished: list[str] = []
    driver.job_finished.connect(lambda job_id, state: finished.append(job_id))

    driver.tick()  # the first two leased; both report before the loop runs
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)
    qtbot.waitUntil(lambda: len(finished) == len(ids), timeout=WAIT_MS)

    # the two successes and the two leases into their slots: one commit
    assert sorted(calls[0][0]) == sorted(ids[:2]) and calls[0][1] == ids[2:]
    assert [queue.get(i).state for i in ids] == [State.SUCCEEDED] * len(ids)
    for job_id in ids:
        assert [e.type for e in queue.get(job_id).events] == ["submitted", "leased", "succeeded"]


class PaidDemo(CountingDemo):
    """The demo provider, as if each answer cost money (``paid``: kept and synced like a real provider's)."""

    paid = True


@pytest.mark.parametrize("paid", [False, True])
def test_only_a_paid_attempt_waits_for_the_disk_before_it_runs_and_every_commit_is_synced(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch, paid: bool
) -> None:
    """A paid attempt syncs the lease first (nothing is paid for on a lease a crash forgets);
    a free one has nothing to protect and runs at once; what the driver committed is synced all the same."""
    ids = [queue.submit("demo", instant(f"job {i}")).job.id for i in range(4)]
    provider = PaidDemo() if paid else CountingDemo()
    driver = make_driver({"demo": provider}, concurrency=1, tick_ms=NEVER_MS, follow=False)
    lock = threading.Lock()
    seen: list[tuple[str, str]] = []  # (what, thread name), in order
    sync, complete_and_lease, complete = queue.sync, queue.complete_and_lease, queue.complete
    run = provider.run

    def note(what: str) -> None:
        with lock:
            seen.append((what, threading.current_thread().name))

    def watching_sync() -> None:
        sync()
        # (an attempt's own sync, or one the driver started: a pool thread runs either)
        note("attempt's sync" if sys._getframe(1).f_code.co_name == "_attempt" else "sync")

    def watching(verb: Any) -> Any:
        def committing(*args: Any, **kwargs: Any) -> Any:
            out = verb(*args, **kwargs)
            note("commit")
            return out

        return committing

    def watching_run(job: Any, context: RunContext) -> Outcome:
        note("run")
        return run(job, context)

    monkeypatch.setattr(queue, "sync", watching_sync)
    monkeypatch.setattr(queue, "complete_and_lease", watching(complete_and_lease))
    monkeypatch.setattr(queue, "complete", watching(complete))  # (a paid success: its runnable commits it)
    monkeypatch.setattr(provider, "run", watching_run)
    finished: list[str] = []
    driver.job_finished.connect(lambda job_id, state: finished.append(state))

    driver.start()
    qtbot.waitUntil(lambda: len(finished) == len(ids), timeout=WAIT_MS)
    assert finished == ["succeeded"] * len(ids)
    runs = [i for i, (what, _) in enumerate(seen) if what == "run"]
    assert len(runs) == len(ids)
    for i in runs:
        # what the attempt's thread did just before the provider ran
        before = [what for what, thread in seen[:i] if thread == seen[i][1]]
        assert (before[-1:] == ["attempt's sync"]) is paid, seen
    assert ("attempt's sync" in [what for what, _ in seen]) is paid, seen
    if paid:
        return  # (each success was committed durably by its attempt)
    # the driver's commits (leases, successes) wait for no disk: the last is put there by
    # a sync the driver starts off its thread, as no attempt is left to start
    qtbot.waitUntil(lambda: "sync" in [what for what, _ in seen[_last(seen, "commit") :]], timeout=WAIT_MS)


def _last(seen: list[tuple[str, str]], what: str) -> int:
    return max(i for i, (w, _) in enumerate(seen) if w == what)
