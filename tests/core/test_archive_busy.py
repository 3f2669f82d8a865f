"""A busy archive index (another connection's lock) is waited out, never taken for damage.

Several processes on one data dir open the index at once (the first compaction of a
store creates it while every worker reads it); SQLite then reports "database is
locked" in cases its busy timeout does not cover. Resetting the index there deleted
the files the other processes were using and told the user it had been damaged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.errors import StoreError
from desktop_queue.core.store import archive as archive_module
from desktop_queue.core.store.archive import BUSY_TRIES, Archive
from tests.core.test_archive import run_jobs


@pytest.fixture
def archived(open_queue: Callable[..., Queue], clock: FakeClock) -> tuple[Queue, list[str]]:
    """A queue whose first jobs have been archived (5 finished jobs stay hot; compaction inline)."""
    queue = open_queue(keep_finished=5, background_compaction=False)
    ids = run_jobs(queue, clock, 30)
    clock.advance(10_000)
    queue.store.compact_now()  # type: ignore[attr-defined]
    assert queue.store.archive.count() > 0  # type: ignore[attr-defined]
    return queue, ids


def _busy_first(monkeypatch: pytest.MonkeyPatch, archive: Archive, times: int) -> list[float]:
    """Makes the index connection report "database is locked" ``times`` times; returns the pauses made."""
    pauses: list[float] = []
    monkeypatch.setattr(archive_module, "_busy_pause", pauses.append)
    real = archive._connect
    left = [times]

    def connect() -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise sqlite3.OperationalError("database is locked")
        return real()

    monkeypatch.setattr(archive, "_connect", connect)
    return pauses


def test_a_busy_index_is_tried_again_and_not_reset(
    archived: tuple[Queue, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, ids = archived
    archive: Archive = queue.store.archive  # type: ignore[attr-defined]
    first = next(i for i in ids if archive.has_id(i))
    index = archive.index_path
    inode = index.stat().st_ino
    pauses = _busy_first(monkeypatch, archive, 3)
    job = archive.get(first)
    assert job is not None and job["id"] == first
    assert len(pauses) == 3
    assert index.stat().st_ino == inode  # the index other processes use was not deleted
    assert not [n for n in archive.notices if "damaged" in n]
    pauses.clear()
    _busy_first(monkeypatch, archive, 2)
    archive.catch_up()
    assert index.stat().st_ino == inode and not [n for n in archive.notices if "damaged" in n]


def test_an_index_that_stays_busy_is_one_clear_error_and_loses_nothing(
    archived: tuple[Queue, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, ids = archived
    archive: Archive = queue.store.archive  # type: ignore[attr-defined]
    first = next(i for i in ids if archive.has_id(i))
    inode = archive.index_path.stat().st_ino
    pauses = _busy_first(monkeypatch, archive, BUSY_TRIES)
    with pytest.raises(StoreError, match="stayed busy"):
        archive.get(first)
    assert len(pauses) == BUSY_TRIES - 1
    assert archive.index_path.stat().st_ino == inode
    job = archive.get(first)  # no longer busy: answered from the same index
    assert job is not None and job["id"] == first


def test_a_damaged_index_is_still_rebuilt(archived: tuple[Queue, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    queue, ids = archived
    archive: Archive = queue.store.archive  # type: ignore[attr-defined]
    first = next(i for i in ids if archive.has_id(i))
    real = archive._connect
    left = [1]

    def connect() -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise sqlite3.DatabaseError("database disk image is malformed")
        return real()

    monkeypatch.setattr(archive, "_connect", connect)
    job = archive.get(first)
    assert job is not None and job["id"] == first
    assert [n for n in archive.notices if "damaged" in n]


def test_busy_is_told_apart_from_damage() -> None:
    assert archive_module._busy(sqlite3.OperationalError("database is locked"))
    assert not archive_module._busy(sqlite3.DatabaseError("database disk image is malformed"))
    assert not archive_module._busy(sqlite3.OperationalError("no such table: jobs"))


def test_a_real_busy_error_is_told_by_its_code(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(sqlite3.OperationalError) as caught:
            other.execute("BEGIN EXCLUSIVE")
        assert archive_module._busy(caught.value)
    finally:
        holder.close()
        other.close()


def test_a_compaction_that_finds_the_index_busy_waits_and_archives(
    open_queue: Callable[..., Queue], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Indexing the segment compaction just wrote waits out a busy index (several processes
    opening a new one at once) instead of failing the compaction."""
    pauses: list[float] = []
    monkeypatch.setattr(archive_module, "_busy_pause", pauses.append)
    real = Archive._ingest
    left = [3]

    def ingest(self: Archive, *args: Any, **kwargs: Any) -> None:
        if left[0] > 0:  # (where SQLite said so: the index transaction's BEGIN IMMEDIATE)
            left[0] -= 1
            raise sqlite3.OperationalError("database is locked")
        real(self, *args, **kwargs)

    queue = open_queue(keep_finished=5, background_compaction=False)
    ids = run_jobs(queue, clock, 30)
    clock.advance(10_000)
    queue.store.compact_now()  # type: ignore[attr-defined]
    archive: Archive = queue.store.archive  # type: ignore[attr-defined]
    before = archive.count()
    assert before > 0
    more = run_jobs(queue, clock, 30, tag="k")
    clock.advance(10_000)
    monkeypatch.setattr(Archive, "_ingest", ingest)
    queue.store.compact_now()  # type: ignore[attr-defined]
    assert left[0] == 0 and len(pauses) == 3
    assert archive.count() > before
    assert not [n for n in archive.notices if "damaged" in n]
    for job_id in ids + more:
        assert queue.get(job_id).id == job_id


def _disk_full() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = 13  # SQLITE_FULL, as SQLite sets it
    exc.sqlite_errorname = "SQLITE_FULL"
    return exc


@pytest.mark.parametrize(
    "error",
    [_disk_full, lambda: sqlite3.OperationalError("disk I/O error")],
    ids=["full (with its code)", "failing (text only)"],
)
def test_an_index_the_disk_refuses_is_one_clear_error_not_a_reset(
    archived: tuple[Queue, list[str]],
    open_queue: Callable[..., Queue],
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: Callable[[], sqlite3.DatabaseError],
) -> None:
    """A full disk at open: `work` died with an SQLite traceback, after deleting a good index
    (which at a million jobs takes minutes to rebuild) and failing to rebuild it."""
    queue, ids = archived
    index = queue.store.archive.index_path  # type: ignore[attr-defined]
    queue.close()
    inode = index.stat().st_ino

    def refused(self: Archive) -> Any:
        raise error()

    with monkeypatch.context() as full:
        full.setattr(Archive, "_connect", refused)
        with pytest.raises(StoreError, match=r"the archive index .*index.* cannot be written: .*nothing was changed"):
            open_queue(keep_finished=5, background_compaction=False)
    assert index.stat().st_ino == inode  # kept

    again = open_queue(keep_finished=5, background_compaction=False)
    assert sorted(j.id for j in again.list(limit=None)) == sorted(ids)
    assert not [n for n in again.report.notices if "damaged" in n]
