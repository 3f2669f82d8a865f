"""A Qt pool thread keeps its Python thread state from one callable to the next."""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import QThreadPool

from desktop_queue.core import Outcome, Queue, RunContext
from desktop_queue.core.model import State
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.runtime.threadstate import keep_thread_state, keep_threads

from .conftest import WAIT_MS, DriverFactory

#: what one thread state carries from a call to the next (a fresh state starts without it)
_local = threading.local()


def _runs_in(pool: QThreadPool, fn: Any, times: int) -> list[Any]:
    """Runs ``fn`` ``times`` times, one after the other, on ``pool``; returns what each call gave."""
    seen: list[Any] = []
    threads: set[int] = set()
    for _ in range(times):
        done = threading.Event()

        def call(done: threading.Event = done) -> None:
            threads.add(threading.get_ident())
            seen.append(fn())
            done.set()

        pool.start(call)
        # (not waitForDone: it ends the pool's threads, and the next call would get a new one)
        assert done.wait(WAIT_MS / 1000)
    assert len(threads) == 1
    return seen


def _count_calls() -> int:
    _local.calls = getattr(_local, "calls", 0) + 1
    return int(_local.calls)


def _pool() -> QThreadPool:
    pool = QThreadPool()
    pool.setMaxThreadCount(1)  # every call on the same thread
    keep_threads(pool)
    return pool


def test_without_it_each_call_on_a_pool_thread_starts_a_new_state(qtbot: Any) -> None:
    # what the module works around: PySide makes a state per call, and drops it after
    assert _runs_in(_pool(), _count_calls, 3) == [1, 1, 1]


def test_a_kept_state_carries_from_one_call_to_the_next(qtbot: Any) -> None:
    def call() -> int:
        keep_thread_state()
        return _count_calls()

    assert _runs_in(_pool(), call, 3) == [1, 2, 3]


def test_only_the_first_call_on_a_thread_takes_the_state(qtbot: Any) -> None:
    assert _runs_in(_pool(), keep_thread_state, 3) == [True, False, False]


def test_a_python_thread_is_left_as_it_is() -> None:
    took: list[bool] = []
    thread = threading.Thread(target=lambda: took.append(keep_thread_state()))
    thread.start()
    thread.join()
    assert took == [False]


def test_the_pool_keeps_its_threads(qtbot: Any) -> None:
    assert _pool().expiryTimeout() == -1


class _Counting(DemoProvider):
    """Demo answers that say how many attempts their pool thread's state has run."""

    def run(self, job: Any, context: RunContext) -> Outcome:
        return Outcome.success({"text": str(_count_calls()), "provider": "demo"})


def test_the_drivers_attempts_share_their_threads_states(qtbot: Any, queue: Queue, make_driver: DriverFactory) -> None:
    pool = QThreadPool()
    pool.setMaxThreadCount(1)
    driver = make_driver({"demo": _Counting(tick_s=0.01)}, concurrency=1, pool=pool)
    ids = [queue.submit("demo", {"prompt": f"p{i}", "duration_s": 0}).job.id for i in range(3)]
    driver.start()
    qtbot.waitUntil(lambda: all(queue.get(i).state == State.SUCCEEDED for i in ids), timeout=WAIT_MS)
    driver.shutdown(timeout_ms=WAIT_MS)

    stored = [queue.results.get(queue.get(i).idempotency_key) for i in ids]
    answers = sorted(int(doc["result"]["text"]) for doc in stored if doc is not None)
    assert answers == [1, 2, 3]
    assert pool.expiryTimeout() == -1
