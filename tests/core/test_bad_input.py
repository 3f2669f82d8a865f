"""Disk errors reach the user as one line naming the file (issue 10, "Damage and bad input").

An ``EIO`` while the store loads, catches up with other processes, takes its commit
lock or its compaction lock used to escape as a raw ``OSError``: a traceback in the
command line, and in the window an error without the file it happened to. The errors
are injected by patching the system calls (``Path.read_bytes``, ``os.pread``,
``fcntl.flock``, ``os.open``) for the one file or step aimed at, in a real
``desktop-queue`` process where a traceback would show.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue, StoreError
from desktop_queue.core.store.codec import segment_name, snapshot_name
from desktop_queue.core.store.fileio import FileLock
from desktop_queue.providers import discover

EIO_TEXT = os.strerror(errno.EIO)

#: Runs ``desktop_queue.cli.main(argv)`` with one disk error armed: ``MODE TARGET ARGV...``.
INJECT = r"""
import errno, fcntl, os, pathlib, sys

mode, target, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
armed = [mode == "read_bytes"]

def eio(path=None):
    return OSError(errno.EIO, os.strerror(errno.EIO), *([path] if path is not None else []))

real_read_bytes = pathlib.Path.read_bytes
def read_bytes(self):
    if armed[0] and mode == "read_bytes" and self.name.startswith(target):
        raise eio(str(self))
    return real_read_bytes(self)
pathlib.Path.read_bytes = read_bytes

# the target's descriptors: a read from one fails in "read_bytes" mode (as from any, in "pread")
target_fds = set()
real_os_open, real_os_close = os.open, os.close
def os_open(path, *args, **kwargs):
    fd = real_os_open(path, *args, **kwargs)
    if os.path.basename(os.fspath(path)).startswith(target):
        target_fds.add(fd)
    return fd
def os_close(fd):
    target_fds.discard(fd)
    return real_os_close(fd)
os.open, os.close = os_open, os_close

def failing(real):
    def read(fd, *args):
        if armed[0] and (mode == "pread" or (mode == "read_bytes" and fd in target_fds)):
            raise eio()
        return real(fd, *args)
    return read
os.pread = failing(os.pread)
os.preadv = failing(os.preadv)

real_flock = fcntl.flock
def flock(fd, op):
    if armed[0] and mode == "flock":
        raise eio()
    return real_flock(fd, op)
fcntl.flock = flock  # before the store binds it

from desktop_queue import cli
from desktop_queue.core import Queue

real_open = Queue.open.__func__
def opened(cls, *args, **kwargs):
    queue = real_open(cls, *args, **kwargs)
    armed[0] = True  # the errors after opening: catching up, committing
    return queue
Queue.open = classmethod(opened)
sys.exit(cli.main(argv))
"""


def run_cli(data_dir: Path, mode: str, target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", INJECT, mode, target, "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("desktop-queue: "), lines[0]
    assert EIO_TEXT in lines[0]
    return lines[0]


@pytest.fixture
def one_job(data_dir: Path) -> str:
    with Queue.open(data_dir, discover()) as queue:
        return queue.submit("demo", {"prompt": "kept"}).job.id


def test_eio_reading_the_journal_at_open_names_the_segment(data_dir: Path, one_job: str) -> None:
    proc = run_cli(data_dir, "read_bytes", "journal-", "list")

    assert str(data_dir / "store" / segment_name(1)) in one_line(proc)


def test_eio_reading_the_snapshot_at_open_names_it(data_dir: Path, one_job: str) -> None:
    with Queue.open(data_dir, discover(), background_compaction=False) as queue:
        queue.store.compact_now()
    [snapshot] = sorted((data_dir / "store").glob("snapshot-*"))
    assert snapshot.name == snapshot_name(1)

    proc = run_cli(data_dir, "read_bytes", "snapshot-", "list")

    assert str(snapshot) in one_line(proc)


def test_eio_catching_up_is_one_line_naming_the_segment(data_dir: Path, one_job: str) -> None:
    proc = run_cli(data_dir, "pread", "", "list")

    assert str(data_dir / "store" / segment_name(1)) in one_line(proc)


def test_eio_taking_the_commit_lock_is_one_line_and_changes_nothing(data_dir: Path, one_job: str) -> None:
    proc = run_cli(data_dir, "flock", "", "cancel", one_job)

    assert str(data_dir / "store") in one_line(proc)
    with Queue.open(data_dir, discover()) as queue:
        assert queue.get(one_job).state == "queued"


def test_eio_catching_up_in_process_is_a_store_error(
    data_dir: Path, one_job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the window sees: a StoreError (which it shows), not an OSError."""
    with Queue.open(data_dir, discover()) as queue:

        def pread(*_: Any) -> bytes:
            raise OSError(errno.EIO, EIO_TEXT)

        monkeypatch.setattr(os, "pread", pread)
        with pytest.raises(StoreError, match=segment_name(1)):
            queue.list()
        monkeypatch.undo()
        assert [j.id for j in queue.list()] == [one_job]


def _fail_compact_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def open_(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path).endswith("compact.lock"):
            raise OSError(errno.EIO, EIO_TEXT, os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


def _fill_until_rotated(store_root: Path, queue: Queue) -> None:
    i = 0
    while not (store_root / segment_name(2)).exists():
        queue.submit("demo", {"prompt": f"filler {i}"})
        i += 1


def test_eio_taking_the_compaction_lock_in_process_is_a_warning_not_a_failed_commit(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    queue = Queue.open(data_dir, discover(), rotate_bytes=4096, background_compaction=False)
    _fail_compact_lock(monkeypatch)
    try:
        with caplog.at_level(logging.WARNING, logger="desktop_queue.core.store"):
            _fill_until_rotated(data_dir / "store", queue)  # the rotating commit compacts inline
    finally:
        monkeypatch.undo()
        queue.close()
    warnings = [r.getMessage() for r in caplog.records if "compaction skipped" in r.getMessage()]
    assert warnings and all("\n" not in w for w in warnings)
    assert str(data_dir / "store" / "compact.lock") in warnings[0]
    assert EIO_TEXT in warnings[0]


def test_eio_taking_the_compaction_lock_in_the_child_is_one_line(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The compaction child dies on the lock; what its parent logs is one line, not its traceback."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import errno, os\n"
        "_open = os.open\n"
        "def _eio_open(path, *a, **k):\n"
        "    if os.fspath(path).endswith('compact.lock'):\n"
        "        raise OSError(errno.EIO, os.strerror(errno.EIO), os.fspath(path))\n"
        "    return _open(path, *a, **k)\n"
        "os.open = _eio_open\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]))
    with caplog.at_level(logging.WARNING, logger="desktop_queue.core.store"):
        queue = Queue.open(data_dir, discover(), rotate_bytes=4096)
        try:
            _fill_until_rotated(data_dir / "store", queue)
        finally:
            queue.close()  # waits for the child
    failed = [r.getMessage() for r in caplog.records if "compaction failed" in r.getMessage()]
    assert failed, [r.getMessage() for r in caplog.records]
    assert all("\n" not in m and "Traceback" not in m for m in failed), failed
    assert "compact.lock" in failed[0] and EIO_TEXT in failed[0]


# ---------------------------------------------------------------------- leftovers of a crash
#
# A crash mid-write leaves ``.<name>.tmp-<pid>-…`` beside the result it was writing, and a
# worker that died keeps its attempt's result in ``results/pending/<key>.<epoch>.json``.
# The first opener (no other process has the store open) sweeps both at once; while a
# write may still be in progress (another opener, a compaction child, this process's own
# attempts) only what is far older than any write goes.


def _leftover(queue: Queue, name: str, hours_old: float = 0.0) -> Path:
    path = queue.results.root / "ab" / f".{name}.json.tmp-99999-deadbeef"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"half')
    if hours_old:
        then = time.time() - hours_old * 3600
        os.utime(path, (then, then))
    return path


def _pending(queue: Queue, key: str, epoch: int) -> Path:
    queue.results.put_pending(key, {"text": f"epoch {epoch}"}, job_id="x", epoch=epoch, produced_at=0.0)
    path = queue.results.root / "pending" / f"{key}.{epoch}.json"
    assert path.exists()
    return path


def test_the_first_opener_sweeps_leftover_writes_even_without_an_orphan(open_queue: Callable[..., Queue]) -> None:
    queue = open_queue()
    queue.submit("demo", {"prompt": "p"})
    fresh = _leftover(queue, "abcd")
    queue.close()

    reopened = open_queue()

    assert not fresh.exists()
    assert any("1 unfinished result write" in n for n in reopened.report.notices), reopened.report.notices


def test_the_first_openers_sweep_looks_only_where_files_changed_since_the_last_one(
    open_queue: Callable[..., Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each command's open would list every result directory of a long history; it lists
    those changed since the sweep before began, and still finds what a crash left there."""
    queue = open_queue()
    queue.submit("demo", {"prompt": "p"})
    root = queue.results.root
    for shard in ("aa", "ab", "cd"):
        (root / shard).mkdir(parents=True)
    queue.close()
    open_queue().close()  # a first opener: it sweeps, and notes when
    marker = root / ".swept"
    assert marker.exists() and not (root / ".swept-next").exists()
    before = marker.stat().st_mtime - 60
    for shard in ("aa", "ab", "cd", "pending"):
        if (root / shard).exists():
            os.utime(root / shard, (before, before))  # unchanged since that sweep
    crashed = root / "cd" / ".cdef.json.tmp-99999-deadbeef"
    crashed.write_bytes(b'{"half')  # a write a crash left since (it changes its directory)

    listed: list[str] = []
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        listed.append(os.path.basename(os.fspath(path)))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    reopened = open_queue()
    monkeypatch.undo()

    assert not crashed.exists()
    assert any("1 unfinished result write" in n for n in reopened.report.notices), reopened.report.notices
    assert "cd" in listed and "aa" not in listed and "ab" not in listed, listed
    reopened.close()

    marker.unlink()  # without the note, every directory is looked in
    for shard in ("aa", "ab"):
        os.utime(root / shard, (before, before))
    listed.clear()
    monkeypatch.setattr(os, "scandir", scandir)
    open_queue().close()
    monkeypatch.undo()
    assert {"aa", "ab", "cd"} <= set(listed), listed


def test_an_opener_that_is_not_first_sweeps_nothing(open_queue: Callable[..., Queue]) -> None:
    first = open_queue()
    first.submit("demo", {"prompt": "p"})
    in_progress = _leftover(first, "abcd")  # could be the first process's write right now

    second = open_queue()

    assert not second.report.first
    assert in_progress.exists()


def test_while_a_compaction_child_runs_only_old_leftovers_go(open_queue: Callable[..., Queue], data_dir: Path) -> None:
    queue = open_queue()
    queue.submit("demo", {"prompt": "p"})
    fresh, old = _leftover(queue, "abcd"), _leftover(queue, "abce", hours_old=2)
    queue.close()
    # a compaction child whose parent is gone holds this lock while it writes result files
    compaction = FileLock(data_dir / "store" / "compact.lock")
    assert compaction.acquire(blocking=False)
    try:
        reopened = open_queue()
    finally:
        compaction.close()

    assert reopened.report.first
    assert fresh.exists() and not old.exists()


def test_pending_results_nothing_can_commit_are_swept_and_the_current_one_is_used(
    open_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    queue = open_queue()
    done = queue.submit("demo", {"prompt": "done"}).job
    other = queue.lease("w")
    assert other is not None and other.job_id == done.id
    queue.complete(other, {"text": "finished"})
    job = queue.submit("demo", {"prompt": "p"}).job
    key = job.idempotency_key
    first = queue.lease("w", lease_s=5)
    assert first is not None and first.job_id == job.id
    clock.advance(10)  # its holder vanished: the lease expires (reaped by this lease)...
    assert queue.lease("w") is None
    clock.advance(120)  # ... and after its backoff the job is leased again
    second = queue.lease("w", lease_s=3600)
    assert second is not None and second.job_id == job.id and second.epoch > first.epoch
    stale = _pending(queue, key, first.epoch)  # the expired attempt answered late
    current = _pending(queue, key, second.epoch)  # the current holder answered, then died
    finished = _pending(queue, done.idempotency_key, other.epoch)  # a crash before its drop
    queue.close()

    reopened = open_queue()

    assert reopened.get(job.id).state == "succeeded"  # reconciled from the current attempt's result
    assert reopened.results.get(key)["result"] == {"text": f"epoch {second.epoch}"}
    assert not stale.exists() and not current.exists() and not finished.exists()
    assert list((reopened.results.root / "pending").iterdir()) == []
    assert any("2 kept results" in n for n in reopened.report.notices), reopened.report.notices


def test_a_reopen_beside_its_own_running_attempts_keeps_their_writes(open_queue: Callable[..., Queue]) -> None:
    """A process that reopens after a disk error is first, but its attempts still write."""
    queue = open_queue()
    job = queue.submit("demo", {"prompt": "p"}).job
    lease = queue.lease("w", kept=True)  # held by this (live) process
    assert lease is not None and lease.job_id == job.id
    fresh = _leftover(queue, "abcd")
    unknown = _pending(queue, "some-other-key", 1)
    queue.close()

    reopened = open_queue()

    assert reopened.report.first and reopened.get(job.id).state == "running"
    assert fresh.exists() and unknown.exists()
