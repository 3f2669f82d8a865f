"""Group commit within a process: a thread whose record another thread's sync covered
while it queued does not go on to queue for the sync file lock.

Each GroupSync object stands for a process; the hand-off between threads is driven by
events, so nothing sleeps and nothing depends on timing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from desktop_queue.core.store.groupsync import GroupSync


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


@pytest.fixture
def segment(store_dir: Path) -> Iterator[int]:
    fd = os.open(store_dir / "journal-000000000001.jsonl", os.O_RDWR | os.O_CREAT, 0o600)
    yield fd
    os.close(fd)


class _WatchedLock:
    """A threading lock that says when someone starts waiting for it."""

    def __init__(self) -> None:
        self.real = threading.Lock()
        self.waiting = threading.Event()

    def __enter__(self) -> None:
        self.waiting.set()
        self.real.acquire()

    def __exit__(self, *exc: object) -> None:
        self.real.release()


def test_a_thread_covered_while_it_waited_for_another_thread_does_not_take_the_file_lock(
    store_dir: Path, segment: int
) -> None:
    group = GroupSync(store_dir)
    other = GroupSync(store_dir)  # another process, whose sync covers this one's record
    watched = _WatchedLock()
    group._threads = watched  # type: ignore[assignment]
    file_locks: list[int] = []
    real_lock = group._lock.lock_exclusive

    def counting() -> object:
        file_locks.append(1)
        return real_lock()

    group._lock.lock_exclusive = counting  # type: ignore[method-assign]
    results: list[bool] = []
    try:
        os.pwrite(segment, b"a" * 99 + b"\n", 0)
        group.note_written(1, 100)
        with watched.real:  # a thread of this process is syncing
            waiter = threading.Thread(target=lambda: results.append(group.wait_durable(1, 100, segment)))
            waiter.start()
            assert watched.waiting.wait(timeout=30)
            assert other.wait_durable(1, 100, segment) is True  # the sync that covers it
        waiter.join(timeout=30)
        assert results == [False]  # covered: no sync of its own ...
        assert file_locks == []  # ... and no turn at the file lock behind other processes
        assert group.skipped == 1 and group.syncs == 0
    finally:
        group.close()
        other.close()
