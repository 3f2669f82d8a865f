"""A full disk: a clear error, nothing half-written, nothing lost, and the store works again once there is room."""

from __future__ import annotations

import errno
import logging
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


def test_a_segment_that_cannot_rotate_keeps_taking_commits_and_says_so_once(
    open_queue: OpenQueue, data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Past its rotation size, every commit asks for the next segment: on a full disk, told once."""
    queue = open_queue(rotate_bytes=4096, background_compaction=False)
    full = {"on": True}
    real_write = storage_module.atomic_write

    def atomic_write(path: Path, data: bytes, **kwargs: object) -> bool:
        if full["on"]:
            raise StoreError(f"could not write {path.name}: No space left on device; nothing was changed")
        return real_write(path, data, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(storage_module, "atomic_write", atomic_write)
    caplog.set_level(logging.INFO, logger=storage_module.log.name)
    ids = [queue.submit("demo", {"prompt": f"job {n}"}).job.id for n in range(40)]
    assert len(list(data_dir.glob("store/journal-*.jsonl"))) == 1  # the current one took them all
    full["on"] = False
    ids.append(queue.submit("demo", {"prompt": "with room"}).job.id)
    assert len(list(data_dir.glob("store/journal-*.jsonl"))) == 2

    said = [(r.levelno, r.getMessage()) for r in caplog.records if "journal segment" in r.getMessage()]
    assert len(said) == 2
    assert said[0] == (
        logging.WARNING,
        "could not start a new journal segment: could not write journal-000000000002.jsonl: "
        "No space left on device; nothing was changed",
    )
    assert said[1][0] == logging.INFO
    assert said[1][1].startswith("started a new journal segment again (it had failed ")
    queue.close()
    assert sorted(j.id for j in open_queue().list()) == sorted(ids)
