"""A full disk: a clear error, nothing half-written, nothing lost, and the store works again once there is room."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from desktop_queue.core import Queue, State, StoreError
from desktop_queue.core.store import journal as storage_module

OpenQueue = Callable[..., Queue]


def _disk_fills_after(monkeypatch: pytest.MonkeyPatch, room: int) -> None:
    """Every journal write gets ``room`` bytes onto the disk, then ENOSPC.

    Zeros written back over those bytes (the store undoing the torn write) go through: they
    overwrite space the file already has, which a full disk still allows.
    """

    def pwrite_all(fd: int, data: bytes, offset: int) -> None:
        if not data.strip(b"\0"):
            os.pwrite(fd, data, offset)
            return
        if room:
            os.pwrite(fd, data[:room], offset)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(storage_module, "_pwrite_all", pwrite_all)


def _journal(data_dir: Path) -> Path:
    return max((data_dir / "store").glob("journal-*.jsonl"))


@pytest.mark.parametrize("room", [0, 7, 60])
def test_a_full_disk_refuses_the_change_clearly_and_leaves_the_journal_as_it_was(
    open_queue: OpenQueue, data_dir: Path, monkeypatch: pytest.MonkeyPatch, room: int
) -> None:
    queue = open_queue()
    kept = queue.submit("demo", {"prompt": "before"}).job
    before = _journal(data_dir).read_bytes()

    with monkeypatch.context() as patch:
        _disk_fills_after(patch, room)
        with pytest.raises(StoreError, match="No space left on device.*not made"):
            queue.submit("demo", {"prompt": "while full"})

    # nothing half-written: the torn bytes were cut off again
    assert _journal(data_dir).read_bytes() == before
    assert [j.id for j in queue.list()] == [kept.id]
    # room again: the same process goes on, and nothing was lost or damaged
    again = queue.submit("demo", {"prompt": "while full"}).job
    queue.close()
    reopened = open_queue()
    assert {j.id for j in reopened.list()} == {kept.id, again.id}
    assert not reopened.report.notices


def test_a_full_disk_during_a_lease_changes_nothing(
    open_queue: OpenQueue, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = open_queue()
    job = queue.submit("demo", {"prompt": "p"}).job
    with monkeypatch.context() as patch:
        _disk_fills_after(patch, 20)
        with pytest.raises(StoreError):
            queue.lease("w1")
    after = queue.get(job.id)
    assert (after.state, after.attempts) == (State.QUEUED, 0)
    lease = queue.lease("w1")
    assert lease is not None and lease.attempt == 1
