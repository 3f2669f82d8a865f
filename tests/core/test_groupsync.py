"""Group commit (core/store/groupsync.py): committers share syncs, and no mark claims more than was synced.

The syncs are real ``fdatasync`` calls on real files, wrapped (``os.fdatasync`` is
patched in this process) to count them and to note, as each one starts, how far the
file had been written: a committer is covered only by a sync that started after its
write. Grouping is made certain, not likely, by holding the first sync (or the sync
lock, across processes) until the others have written; nothing sleeps.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from desktop_queue.core.store import groupsync as groupsync_module
from desktop_queue.core.store.groupsync import STATE_NAME, STATE_SIZE, GroupSync, initial_state

PACKAGE_ROOT = Path(groupsync_module.__file__).resolve().parents[2]
WAIT_S = 30.0


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


@pytest.fixture
def groups(store_dir: Path) -> Iterator[Callable[[], GroupSync]]:
    """Opens GroupSync objects on ``store_dir`` (each one stands for a process); closes them at teardown."""
    opened: list[GroupSync] = []

    def _open() -> GroupSync:
        group = GroupSync(store_dir)
        opened.append(group)
        return group

    yield _open
    for group in opened:
        group.close()


@pytest.fixture
def segment(store_dir: Path) -> Iterator[int]:
    fd = os.open(store_dir / "journal-000000000001.jsonl", os.O_RDWR | os.O_CREAT, 0o600)
    yield fd
    os.close(fd)


def _eio(*_: object) -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


def _raise_eio(*_: object) -> None:
    raise _eio()


def _write(fd: int, offset: int, length: int) -> int:
    os.pwrite(fd, b"r" * (length - 1) + b"\n", offset)
    return offset + length


# --------------------------------------------------------------------------- threads


class Journal:
    """A file written by committing threads, each under a commit lock, and the syncs made on it."""

    def __init__(self, fd: int, group: GroupSync, threads: int) -> None:
        self.fd = fd
        self.group = group
        self.threads = threads
        self.commit_lock = threading.Lock()
        self.end = 0  # written (pwrite returned) up to here
        self.noted = 0
        self.noted_changed = threading.Condition()
        #: for each sync that returned: how far the file was written when it started
        self.completed: list[int] = []
        self.uncovered: list[tuple[int, int]] = []  # (end, covered up to) for a commit that returned too early

    def fdatasync(self, fd: int, real: Callable[[int], None]) -> None:
        started_at = self.end
        if not self.completed:
            # the first sync waits until every thread has written: they all queue behind it
            with self.noted_changed:
                assert self.noted_changed.wait_for(lambda: self.noted >= self.threads, timeout=WAIT_S)
        real(fd)
        self.completed.append(started_at)

    def commit(self, length: int) -> None:
        with self.commit_lock:
            end = _write(self.fd, self.end, length)
            self.end = end
            self.group.note_written(1, end)
        with self.noted_changed:
            self.noted += 1
            self.noted_changed.notify_all()
        self.group.wait_durable(1, end, self.fd)
        best = max(self.completed, default=0)
        if best < end:
            self.uncovered.append((end, best))


def test_threads_share_syncs_and_none_returns_before_a_sync_covers_it(
    groups: Callable[[], GroupSync], segment: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads, per_thread = 6, 20
    group = groups()
    journal = Journal(segment, group, threads)
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: journal.fdatasync(fd, real))
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            for i in range(per_thread):
                journal.commit(40 + index + i)  # distinct lengths: distinct records
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT_S)
    assert not any(worker.is_alive() for worker in workers) and errors == []
    assert journal.uncovered == []
    commits = threads * per_thread
    assert len(journal.completed) == group.syncs
    assert group.syncs + group.skipped == commits
    assert group.syncs <= commits - (threads - 1)  # the first sync covered every first commit
    assert group.synced() == (1, journal.end)


def test_a_record_written_while_a_sync_runs_is_not_covered_by_it(
    groups: Callable[[], GroupSync], segment: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = groups()
    first = _write(segment, 0, 100)
    group.note_written(1, first)
    real = os.fdatasync
    late: list[int] = []

    def fdatasync(fd: int) -> None:
        if not late:
            late.append(_write(segment, first, 50))  # another committer, during the sync
            group.note_written(1, late[0])
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    assert group.wait_durable(1, first, segment)
    assert group.synced() == (1, first)  # the target was read before the sync started
    assert not group.covers(1, late[0])
    assert group.wait_durable(1, late[0], segment)
    assert group.synced() == (1, late[0]) and group.syncs == 2


# --------------------------------------------------------------------------- processes

_CHILD = r"""
import os, sys, orjson
from pathlib import Path
from desktop_queue.core.store.fileio import FileLock
from desktop_queue.core.store.groupsync import GroupSync
store, tag = Path(sys.argv[1]), int(sys.argv[2])
group = GroupSync(store)
fd = os.open(store / "journal-000000000001.jsonl", os.O_RDWR)
commit = FileLock(store / "commit.lock")
with commit.held():
    end = os.fstat(fd).st_size
    record = b"%d" % tag * (30 + tag) + b"\n"
    os.pwrite(fd, record, end)
    end += len(record)
    group.note_written(1, end)
print("noted", flush=True)
synced = group.wait_durable(1, end, fd)
print(orjson.dumps({"end": end, "synced": synced, "syncs": group.syncs, "skipped": group.skipped,
                    "covered": group.covers(1, end)}).decode(), flush=True)
"""


def test_processes_on_one_store_share_one_sync(groups: Callable[[], GroupSync], store_dir: Path, segment: int) -> None:
    """Four processes write while the sync lock is held; the first to get it syncs for all."""
    group = groups()
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    children: list[subprocess.Popen[str]] = []

    def kill_all() -> None:  # a child that never says "noted" must not hang the run
        for child in children:
            if child.poll() is None:
                child.kill()

    watchdog = threading.Timer(WAIT_S, kill_all)
    watchdog.start()
    try:
        with group.held():
            for tag in range(4):
                child = subprocess.Popen(
                    [sys.executable, "-c", _CHILD, str(store_dir), str(tag)],
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                )
                children.append(child)
            for child in children:
                assert child.stdout is not None
                assert child.stdout.readline().strip() == "noted"
        reports = []
        for child in children:
            out, _ = child.communicate(timeout=WAIT_S)
            assert child.returncode == 0
            reports.append(orjson.loads(out))
    finally:
        watchdog.cancel()
        kill_all()
        for child in children:
            child.wait()
    assert sum(r["syncs"] for r in reports) == 1
    assert sum(r["skipped"] for r in reports) == 3
    assert all(r["covered"] for r in reports)
    assert group.synced() == (1, os.fstat(segment).st_size)


def test_a_sync_in_another_process_covers_this_one(groups: Callable[[], GroupSync], segment: int) -> None:
    writer, other = groups(), groups()
    end = _write(segment, 0, 64)
    writer.note_written(1, end)
    assert writer.wait_durable(1, end, segment)
    assert other.covers(1, end) and not other.wait_durable(1, end, segment)
    assert (other.syncs, other.skipped) == (0, 1)


# --------------------------------------------------------------------------- damage


def _synced_state(group: GroupSync, segment: int) -> bytes:
    """Syncs segment 1 up to 1000 and returns the state file that says so."""
    end = _write(segment, 0, 1000)
    group.note_written(1, end)
    group.wait_durable(1, end, segment)
    group.close()
    return (group.path).read_bytes()


def _damage(kind: str, state: bytes) -> bytes:
    written, synced = state[8:32], state[32:56]
    torn = bytearray(state)
    torn[40:48] = (10**6).to_bytes(8, sys.byteorder)  # a newer end landed, its check did not
    return {
        "random bytes": os.urandom(STATE_SIZE),
        "zeros": bytes(STATE_SIZE),
        "truncated": state[:40],
        "empty": b"",
        "random slots": state[:8] + os.urandom(48) + state[56:],
        "written copied to synced": state[:8] + written + written + state[56:],
        "synced slot zeroed": state[:8] + written + bytes(24) + state[56:],
        "wrong version": state[:6] + b"\x09\x00" + written + synced + state[56:],
        "torn update": bytes(torn),
    }[kind]


@pytest.mark.parametrize(
    "kind",
    [
        "random bytes",
        "zeros",
        "truncated",
        "empty",
        "random slots",
        "written copied to synced",
        "synced slot zeroed",
        "wrong version",
        "torn update",
    ],
)
def test_a_damaged_state_file_claims_nothing_synced(
    kind: str, groups: Callable[[], GroupSync], store_dir: Path, segment: int
) -> None:
    state = _synced_state(groups(), segment)
    assert state != initial_state()
    (store_dir / STATE_NAME).write_bytes(_damage(kind, state))
    group = groups()
    assert group.synced() == (0, 0) and not group.covers(1, 1)
    assert group.wait_durable(1, 1000, segment)  # so it syncs
    assert group.synced() == (1, 1000)


def test_damage_while_mapped_is_seen_at_once(groups: Callable[[], GroupSync], store_dir: Path, segment: int) -> None:
    writer, reader = groups(), groups()
    end = _write(segment, 0, 100)
    writer.note_written(1, end)
    writer.wait_durable(1, end, segment)
    assert reader.synced() == (1, end)
    fd = os.open(store_dir / STATE_NAME, os.O_RDWR)
    try:
        os.pwrite(fd, b"\xff", 33)  # one byte of the synced mark's segment
    finally:
        os.close(fd)
    assert groups().synced() == (0, 0)  # a process that has not seen the mark yet
    assert writer.covers(1, end)  # ... while the one that synced knows it did


def test_reset_forgets_both_marks_for_everyone(groups: Callable[[], GroupSync], segment: int) -> None:
    owner, other = groups(), groups()
    end = _write(segment, 0, 100)
    owner.note_written(1, end)
    owner.wait_durable(1, end, segment)
    owner.reset()
    assert owner.written() == owner.synced() == (0, 0)
    assert not owner.covers(1, 1) and not other.covers(1, 1)


def test_reset_mends_a_header_damaged_while_mapped(groups: Callable[[], GroupSync], store_dir: Path) -> None:
    group = groups()
    fd = os.open(store_dir / STATE_NAME, os.O_RDWR)
    try:
        os.pwrite(fd, b"XX", 0)
    finally:
        os.close(fd)
    group.note_written(1, 10)
    assert group.written() == (0, 0)  # unreadable, so useless (every wait syncs), never wrong
    group.reset()
    group.note_written(1, 10)
    assert group.written() == (1, 10)


# --------------------------------------------------------------------------- failures and segments


def test_a_failed_sync_raises_and_publishes_nothing(
    groups: Callable[[], GroupSync], segment: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    group, other = groups(), groups()
    end = _write(segment, 0, 100)
    group.note_written(1, end)
    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", _raise_eio)
        with pytest.raises(OSError) as info:
            group.wait_durable(1, end, segment)
    assert info.value.errno == errno.EIO
    assert group.synced() == (0, 0) and not other.covers(1, end)
    assert (group.syncs, group.failures) == (0, 1)
    # the disk answers again, but a second sync may succeed without what was lost: still refused
    with pytest.raises(OSError, match="an earlier sync failed"):
        group.wait_durable(1, end, segment)
    assert group.synced() == (0, 0)
    assert other.wait_durable(1, end, segment)  # another process's own sync is its own affair


def test_a_new_segment_replaces_the_marks_and_covers_the_older_ones(
    groups: Callable[[], GroupSync], segment: int, store_dir: Path
) -> None:
    group, other = groups(), groups()
    end = _write(segment, 0, 500)
    group.note_written(1, end)
    assert group.wait_durable(1, end, segment)
    fd = os.open(store_dir / "journal-000000000002.jsonl", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        second = _write(fd, 0, 40)
        group.note_written(2, second)
        assert group.written() == (2, second)
        group.note_written(1, end + 10)  # late news of an older segment is ignored
        assert group.written() == (2, second)
        assert not other.covers(2, second)  # (1, 500) says nothing about segment 2
        assert other.wait_durable(2, second, fd)
    finally:
        os.close(fd)
    assert group.synced() == (2, second)
    assert group.covers(1, 10**9)  # segment 1 was synced in full before segment 2 was written
    assert not group.covers(2, second + 1)


def test_a_covered_record_costs_no_system_call(
    groups: Callable[[], GroupSync], segment: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = groups()
    end = _write(segment, 0, 100)
    group.note_written(1, end)
    group.wait_durable(1, end, segment)
    monkeypatch.setattr(os, "fdatasync", _raise_eio)
    monkeypatch.setattr(group._lock, "lock_exclusive", _raise_eio)
    assert not group.wait_durable(1, end - 50, segment)
    assert not group.wait_durable(1, end, segment)
    assert (group.syncs, group.skipped) == (1, 2)


def test_a_first_opener_sweeping_unfinished_writes_does_not_break_a_state_being_made(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes open a new data dir at once: one makes ``sync.state`` before it holds any
    lock, while the other, first to the store, removes what looks like an unfinished write."""
    from desktop_queue.core.store import fileio

    real = fileio.write_all

    def swept_meanwhile(fd: int, data: bytes, **kwargs: object) -> None:
        for path in store_dir.iterdir():
            if fileio.TEMP_MARK in path.name:
                path.unlink()
        real(fd, data, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fileio, "write_all", swept_meanwhile)
    monkeypatch.setattr(groupsync_module, "write_all", swept_meanwhile)
    group = GroupSync(store_dir)
    try:
        assert (store_dir / STATE_NAME).read_bytes() == initial_state()
    finally:
        group.close()
