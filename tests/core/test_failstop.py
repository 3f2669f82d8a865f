"""The store fails stop (shared/DESIGN.md section 4; issue 9, items 6 and 7).

After a failed ``fsync``, a write that cannot be undone, or a rotation that fails once
its seal is written, the store accepts no change until it is reopened; a commit
reported as not made never reappears; and who opened the store first, or who holds the
commit lock, does not depend on files that can be deleted from under live processes.

Disk errors are injected by patching the system calls the store makes (``os.fdatasync``,
``os.pwrite``, ``os.link``, ``os.open``) for the one file or step aimed at; the files
themselves are real, and so are the processes of the lock tests.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_multiprocess import _line, _spawn, children

from desktop_queue.core import Queue, State, StoreError, SystemClock
from desktop_queue.core.store import journal as storage_module
from desktop_queue.core.store.codec import segment_name
from desktop_queue.core.store.fileio import TEMP_MARK
from desktop_queue.core.store.journal import PREFILL_SLACK, Store, prepare_spare

OpenQueue = Callable[..., Queue]

POISONED = "no further changes are accepted until it is reopened"
ROTATE = 4096


def _eio(*_: Any) -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


def _ino(fd: int) -> int:
    return os.fstat(fd).st_ino


class Ledger:
    """What a test was told about each submit: acknowledged, not made, or unknown."""

    def __init__(self) -> None:
        self.acked: dict[str, str] = {}  # title -> job id
        self.not_made: list[str] = []  # titles whose submit said "the change was not made"
        self.errors: list[BaseException] = []

    def submit(self, queue: Queue, title: str) -> bool:
        try:
            job = queue.submit("demo", {"prompt": f"job {title}"}, title=title).job
        except Exception as exc:  # noqa: BLE001 - any error is recorded and checked below
            self.errors.append(exc)
            if "not made" in str(exc):
                self.not_made.append(title)
            return False
        self.acked[title] = job.id
        return True

    def check_reopened(self, queue: Queue) -> None:
        """Every acknowledged submit is there; none reported as not made is."""
        titles = {j.title: j.id for j in queue.list()}
        assert {t: titles.get(t) for t in self.acked} == self.acked
        assert [t for t in self.not_made if t in titles] == []
        for exc in self.errors:
            assert isinstance(exc, StoreError), repr(exc)


def _check_one_lease_each(leases: list[tuple[str, int]], queue: Queue) -> None:
    """No job leased twice: by the holders' own accounts and by every job's timeline."""
    job_ids = [job_id for job_id, _ in leases]
    assert len(job_ids) == len(set(job_ids)), "a job was leased twice"
    epochs = [epoch for _, epoch in leases]
    assert len(epochs) == len(set(epochs)), "two leases share an epoch"
    for job in queue.list(with_events=True):
        leased = [e.epoch for e in job.events if e.type == "leased"]
        assert len(leased) <= 1, f"{job.id} leased {len(leased)} times: epochs {leased}"


def _work_one(queue: Queue, tag: str, leases: list[tuple[str, int]]) -> bool:
    lease = queue.lease(tag)
    if lease is None:
        return False
    leases.append((lease.job_id, lease.epoch))
    queue.complete(lease, {"by": tag})
    return True


# =========================================================================== a failed fsync


def test_after_a_failed_fsync_nothing_more_is_accepted_until_reopened(
    open_queue: OpenQueue, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = open_queue()
    ledger = Ledger()
    for i in range(5):
        assert ledger.submit(queue, f"before {i}")
    segment_ino = _ino(queue.store._fd)
    real_fdatasync = os.fdatasync
    failures = [1]

    def fdatasync(fd: int) -> None:
        if failures[0] and _ino(fd) == segment_ino:
            failures[0] -= 1
            raise _eio()
        real_fdatasync(fd)

    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", fdatasync)
        with pytest.raises(StoreError) as info:
            queue.submit("demo", {"prompt": "job doomed"}, title="doomed")
    message = str(info.value)
    # written and visible to every process before its sync: it cannot be taken back
    assert "Input/output error" in message and "not known whether the change was saved" in message
    assert POISONED in message and "not made" not in message
    assert queue.store.poisoned is not None

    # the disk answers again, but this store has stopped: every change and sync raises
    assert not ledger.submit(queue, "after 1")
    assert not ledger.submit(queue, "after 2")
    assert all(POISONED in str(exc) for exc in ledger.errors)
    with pytest.raises(StoreError, match=POISONED):
        queue.lease("w")
    with pytest.raises(StoreError, match=POISONED):
        queue.sync()
    assert {j.title for j in queue.list()} - {"doomed"} == set(ledger.acked)  # reads still work
    queue.close()  # and closing does not raise again

    reopened = open_queue()
    ledger.check_reopened(reopened)
    assert {j.title for j in reopened.list()} - {"doomed"} == set(ledger.acked)
    assert reopened.report.notices == [] and reopened.store.poisoned is None
    # usable again, and it stays so across another open
    assert ledger.submit(reopened, "after reopen")
    lease = reopened.lease("w")
    assert lease is not None
    reopened.complete(lease, {"ok": True})
    reopened.close()
    ledger.check_reopened(open_queue())


def test_a_commit_whose_bytes_cannot_be_undone_is_never_reported_as_not_made(
    open_queue: OpenQueue, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A persistent error: the sync fails, then so does writing zeros over the record."""
    queue = open_queue()
    ledger = Ledger()
    for i in range(3):
        assert ledger.submit(queue, f"before {i}")
    segment_ino = _ino(queue.store._fd)
    real_fdatasync, real_pwrite = os.fdatasync, os.pwrite
    broken = [False]

    def fdatasync(fd: int) -> None:
        if _ino(fd) == segment_ino:
            broken[0] = True
            raise _eio()
        real_fdatasync(fd)

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if broken[0] and _ino(fd) == segment_ino:
            raise _eio()
        return real_pwrite(fd, data, offset)

    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", fdatasync)
        patch.setattr(os, "pwrite", pwrite)
        assert not ledger.submit(queue, "doomed")
        assert not ledger.submit(queue, "after")
        queue.close()
    first, later = (str(exc) for exc in ledger.errors)
    assert "not known whether the change was saved" in first and POISONED in first
    assert "not made" not in first
    assert POISONED in later

    reopened = open_queue()
    ledger.check_reopened(reopened)
    # the record's bytes were left in the file: it loads as made (it was never said not to be)
    assert "doomed" in {j.title for j in reopened.list()}
    assert "after" not in {j.title for j in reopened.list()}
    assert ledger.submit(reopened, "after reopen")


def test_a_failed_sync_of_leases_poisons_and_the_provider_is_not_called(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = open_queue()
    queue.submit("demo", {"prompt": "p"})
    lease = queue.lease("w")  # written, not yet synced
    assert lease is not None
    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", lambda fd: (_ for _ in ()).throw(_eio()))
        with pytest.raises(StoreError, match="Input/output error.*" + POISONED):
            queue.sync()
    with pytest.raises(StoreError, match=POISONED):
        queue.sync()
    with pytest.raises(StoreError, match=POISONED):
        queue.complete(lease, {"text": "never stored"})


def test_a_failed_fsync_while_closing_is_raised(open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = open_queue()
    queue.submit("demo", {"prompt": "p"})
    assert queue.lease("w") is not None  # unsynced until close
    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", lambda fd: (_ for _ in ()).throw(_eio()))
        with pytest.raises(StoreError, match=POISONED):
            queue.close()
    assert queue.store._closed


# =========================================================================== a rotation that fails at each step


@contextmanager
def _during_rotation(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Yields a dict whose "armed" is True while a rotation runs, and "fired" once an injected error was raised."""
    state: dict[str, Any] = {"armed": False, "fired": False}
    real_rotate = Store._rotate

    def rotate(self: Store) -> bool:
        state["armed"] = not state["fired"]
        try:
            return real_rotate(self)
        finally:
            state["armed"] = False

    monkeypatch.setattr(Store, "_rotate", rotate)
    yield state


def _fire(state: dict[str, Any]) -> OSError:
    state["fired"], state["armed"] = True, False
    return _eio()


def _inject(step: str, monkeypatch: pytest.MonkeyPatch, state: dict[str, Any], root: Path) -> None:
    """Makes the one system call of ``step`` fail once, in the first rotation."""
    real_fdatasync, real_link, real_open = os.fdatasync, os.link, os.open
    real_pwrite_all, real_fsync_dir, real_pread = (
        storage_module._pwrite_all,
        storage_module.fsync_dir,
        storage_module._pread,
    )
    next_segment = str(root / segment_name(2))
    if step == "flush-old-segment":

        def fdatasync(fd: int) -> None:
            if state["armed"]:
                raise _fire(state)
            real_fdatasync(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)
    elif step == "link-spare":

        def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if state["armed"] and str(dst) == next_segment:
                raise _fire(state)
            real_link(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "link", link)
    elif step == "write-segment":

        def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if state["armed"] and TEMP_MARK in str(path) and segment_name(2) in str(path):
                raise _fire(state)
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", open_)
    elif step == "sync-directory":

        def fsync_dir(path: Path) -> None:
            if state["armed"]:
                raise _fire(state)
            real_fsync_dir(path)

        monkeypatch.setattr(storage_module, "fsync_dir", fsync_dir)
    elif step == "write-seal":

        def pwrite_all(fd: int, data: bytes, offset: int) -> None:
            if state["armed"] and data.startswith(b'{"op":"seal"'):
                real_pwrite_all(fd, data[:5], offset)  # half of it lands
                raise _fire(state)
            real_pwrite_all(fd, data, offset)

        monkeypatch.setattr(storage_module, "_pwrite_all", pwrite_all)
    elif step == "open-next-segment":

        def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if state["armed"] and str(path) == next_segment and not flags & os.O_CREAT:
                raise _fire(state)
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", open_)
    elif step == "read-next-header":

        def pread(fd: int, size: int, offset: int) -> bytes:
            if state["armed"] and offset == 0 and os.fstat(fd).st_ino == os.stat(next_segment).st_ino:
                raise _fire(state)
            return real_pread(fd, size, offset)

        monkeypatch.setattr(storage_module, "_pread", pread)
    else:  # pragma: no cover
        raise AssertionError(step)


#: step -> whether the store is poisoned after it (else it stays on segment 1, nothing sealed)
ROTATION_STEPS = {
    "flush-old-segment": True,  # a failed fsync, wherever it happens
    "link-spare": False,
    "write-segment": False,
    "sync-directory": False,  # the spare's name is taken back, and that is synced
    "write-seal": False,  # the half seal is zeroed and synced
    "open-next-segment": True,  # sealed already: it must not write past its seal
    "read-next-header": True,
}


@pytest.mark.parametrize("step", list(ROTATION_STEPS))
def test_a_rotation_failing_at_each_step_leases_no_job_twice_and_loses_nothing(
    open_queue: OpenQueue, data_dir: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    root = data_dir / "store"
    one = open_queue(rotate_bytes=ROTATE, background_compaction=False)
    two = open_queue(rotate_bytes=ROTATE, background_compaction=False)
    if step in ("link-spare", "sync-directory"):
        assert prepare_spare(root, 2, ROTATE + PREFILL_SLACK)
    ledger = Ledger()
    leases: list[tuple[str, int]] = []
    with monkeypatch.context() as patch, _during_rotation(patch) as state:
        _inject(step, patch, state, root)
        n = 0
        while not state["fired"]:
            assert n < 1000, "no rotation happened"
            ledger.submit(one, f"one {n}")
            n += 1
    rotating_errors = list(ledger.errors)
    stayed = one.store.segment == 1 and not (root / segment_name(2)).exists()

    # both go on: the other one submits and leases; this one submits and leases if it may
    refused: list[BaseException] = []
    for i in range(60):
        ledger.submit(two, f"two {i}")
        _work_one(two, "two", leases)
        if not ledger.submit(one, f"one more {i}"):
            refused.append(ledger.errors[-1])
        try:
            _work_one(one, "one", leases)
        except Exception as exc:  # noqa: BLE001 - checked below
            refused.append(exc)
    while _work_one(two, "two", leases):
        pass
    _check_one_lease_each(leases, two)
    one.list()  # catches up
    followed = one.store.segment == two.store.segment > 2
    one.close()
    two.close()

    reopened = open_queue(rotate_bytes=ROTATE, background_compaction=False)
    ledger.check_reopened(reopened)
    _check_one_lease_each(leases, reopened)
    assert reopened.report.notices == []
    assert all(j.state == State.SUCCEEDED for j in reopened.list())
    # usable: it takes commits and rotates again
    segment = reopened.store.segment
    i = 0
    while reopened.store.segment == segment:
        assert ledger.submit(reopened, f"after {i}")
        i += 1
    reopened.close()
    ledger.check_reopened(open_queue())

    # the commit that rotated is made, and said so; then the store either stopped with a
    # clear message, or stayed on its segment (nothing sealed) and later followed the other
    assert rotating_errors == []
    if ROTATION_STEPS[step]:
        assert refused and all(isinstance(e, StoreError) and POISONED in str(e) for e in refused)
        assert "disk error" in str(refused[0])
    else:
        assert stayed and refused == [] and followed


# =========================================================================== deleted lock files

_HOLD_THEN_WORK = r"""
import sys, orjson
from desktop_queue.core import Queue, RetryPolicy
q = Queue.open(sys.argv[1], policy=RetryPolicy(lease_s=3600), rotate_bytes=8192)
tag = sys.argv[2]
held = q.lease(tag)
print(orjson.dumps({"held": held.job_id, "epoch": held.epoch, "first": q.report.first,
                    "reconciled": [r.job_id for r in q.reconciled]}).decode(), flush=True)
sys.stdin.readline()
leases = [[held.job_id, held.epoch]]
while (lease := q.lease(tag)) is not None:
    leases.append([lease.job_id, lease.epoch])
    q.complete(lease, {"by": tag})
print(orjson.dumps(leases).decode(), flush=True)
sys.stdin.readline()
q.complete(held, {"by": tag})
q.close()
"""


def _delete_lock_files(data_dir: Path) -> None:
    """Deletes whatever lock files there are (a cleanup tool, a person tidying up)."""
    for path in [*(data_dir / "store").glob("*.lock"), *data_dir.glob("*.lock")]:
        path.unlink(missing_ok=True)


def _say(proc: Any, line: str) -> None:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def test_deleting_the_lock_files_under_live_workers_leases_no_job_twice(data_dir: Path, open_queue: OpenQueue) -> None:
    setup = open_queue(clock=SystemClock())
    jobs = [setup.submit("demo", {"prompt": f"job {i}"}).job.id for i in range(200)]
    setup.close()

    workers = [_spawn(_HOLD_THEN_WORK, str(data_dir), f"w{k}") for k in (1, 2)]
    procs = list(workers)
    with children(*procs):
        held = [orjson.loads(_line(w)) for w in workers]
        assert sorted(h["first"] for h in held) == [False, True]
        _delete_lock_files(data_dir)
        # a process started now must see the workers as alive: it reconciles nothing
        newcomer = _spawn(_HOLD_THEN_WORK, str(data_dir), "w3")
        procs.append(newcomer)
        held.append(orjson.loads(_line(newcomer)))
        assert held[2]["first"] is False and held[2]["reconciled"] == []
        workers.append(newcomer)
        for w in workers:
            _say(w, "go")
        _delete_lock_files(data_dir)  # and again while all three commit
        reports = [orjson.loads(_line(w)) for w in workers]
        _delete_lock_files(data_dir)
        # one more opener in this process, while every worker still holds its job
        look = open_queue(clock=SystemClock())
        assert look.report.first is False and look.reconciled == []
        for h in held:
            assert look.get(h["held"]).state == State.RUNNING
        look.close()
        for w in workers:
            _say(w, "done")
        for w in workers:
            assert w.wait(timeout=60) == 0

    final = open_queue()
    leases = [(job_id, epoch) for report in reports for job_id, epoch in report]
    _check_one_lease_each(leases, final)
    assert sorted(job_id for job_id, _ in leases) == sorted(jobs)
    assert all(j.state == State.SUCCEEDED and j.attempts == 1 for j in final.list())
    assert final.report.notices == []


def test_a_deleted_presence_lock_does_not_make_a_newcomer_the_first(data_dir: Path, open_queue: OpenQueue) -> None:
    holder = open_queue(clock=SystemClock())
    job = holder.submit("demo", {"prompt": "held"}).job
    lease = holder.lease("holder")
    assert lease is not None and holder.report.first
    _delete_lock_files(data_dir)
    newcomer = open_queue(clock=SystemClock())
    assert newcomer.report.first is False and newcomer.reconciled == []
    assert newcomer.get(job.id).state == State.RUNNING
    holder.complete(lease, {"text": "done"})  # the holder's token is still the current one
    assert newcomer.get(job.id).state == State.SUCCEEDED


_HOLD_ONE = r"""
import sys, orjson
from desktop_queue.core import Queue, RetryPolicy
q = Queue.open(sys.argv[1], policy=RetryPolicy(lease_s=3600))
lease = q.lease("holder")
print(orjson.dumps({"job": lease.job_id, "first": q.report.first}).decode(), flush=True)
sys.stdin.readline()
"""


def test_the_first_opener_after_every_holder_died_still_reconciles(data_dir: Path, open_queue: OpenQueue) -> None:
    setup = open_queue(clock=SystemClock())
    job = setup.submit("demo", {"prompt": "orphan"}).job
    setup.close()
    holder = _spawn(_HOLD_ONE, str(data_dir))
    with children(holder):
        assert orjson.loads(_line(holder)) == {"job": job.id, "first": True}
        _delete_lock_files(data_dir)
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=30) == -signal.SIGKILL
    after = open_queue(clock=SystemClock())
    assert after.report.first is True
    assert [(r.job_id, r.decision) for r in after.reconciled] == [(job.id, "requeued")]


@pytest.mark.parametrize("reconciling_ends", ["done", "failed"])
def test_an_open_waits_for_the_first_opener_to_finish_reconciling(data_dir: Path, reconciling_ends: str) -> None:
    """``on_first`` runs before anyone else may open: an open meanwhile waits, then joins as not
    first; had the first opener failed (or died) instead, the waiting one is first."""
    reconciling = threading.Event()
    release = threading.Event()

    def on_first() -> None:
        reconciling.set()
        assert release.wait(timeout=30)
        if reconciling_ends == "failed":
            raise StoreError("reconciliation failed")

    first = Store(data_dir / "store")
    errors: list[BaseException] = []

    def open_first() -> None:
        try:
            first.open(on_first=on_first)
        except StoreError as exc:
            errors.append(exc)

    opener = threading.Thread(target=open_first)
    opener.start()
    assert reconciling.wait(timeout=30)
    second = Store(data_dir / "store")
    joined = threading.Thread(target=second.open)
    joined.start()
    joined.join(timeout=0.5)
    assert joined.is_alive()  # still waiting for the first opener
    release.set()
    opener.join(timeout=30)
    joined.join(timeout=30)
    assert not joined.is_alive()
    if reconciling_ends == "done":
        assert errors == [] and first.report.first is True and second.report.first is False
        first.close()
    else:
        assert len(errors) == 1 and second.report.first is True
    second.close()


def test_a_journal_segment_deleted_while_in_use_acknowledges_nothing_more(
    open_queue: OpenQueue, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removed by hand (or by a cleanup or sync tool) while a worker runs: the segment still
    took writes and syncs through its open descriptor, and every submission after that was
    acknowledged into a file nobody would read again."""
    monkeypatch.setattr(storage_module, "LINK_CHECK_EVERY_S", 0.0)  # (at most once a second otherwise)
    queue = open_queue()
    queue.submit("demo", {"prompt": "before"}, title="before")
    segment = data_dir / "store" / segment_name(queue.store.segment)  # type: ignore[attr-defined]
    segment.unlink()

    with pytest.raises(StoreError, match=rf"not saved where the store can find it.*{segment.name} was deleted"):
        queue.submit("demo", {"prompt": "after"}, title="after")
    assert queue.store.poisoned is not None and "deleted while in use" in queue.store.poisoned
    with pytest.raises(StoreError, match=POISONED):
        queue.submit("demo", {"prompt": "later"})
    queue.close()

    reopened = open_queue()  # what is left, and a notice of what is not
    assert "after" not in {j.title for j in reopened.list()}
    assert any(segment.name in notice and "missing" in notice for notice in reopened.report.notices)
    assert reopened.submit("demo", {"prompt": "usable again"}).job.state == State.QUEUED
