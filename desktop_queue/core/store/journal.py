"""The durable task store: a checksummed JSON-lines journal plus atomic JSON snapshots.

Layout of ``<data dir>/store/``::

    snapshot-000000000007.json   every job as of the end of journal segment 7 (one JSON
                                 line with the jobs, then their events: see encode_snapshot)
    journal-000000000008.jsonl   the changes since, one checksummed JSON record a line,
                                 written over the zeros the segment was created with
    spare-000000000009.jsonl     the next segment, made in advance (see prepare_spare)
    commit.lock, presence.lock   Windows only: the two locks below are taken on these there

The locks are taken on directories, which cannot be deleted from under their holders as
a lock file can (:meth:`~desktop_queue.core.store.fileio.FileLock.on_directory`): the *commit
lock* is the data directory, held exclusively around each commit and shared by a read,
in every process; *presence* is ``store/``, held shared by every process that has the
store open, so the one that gets it exclusively is alone and reconciles what the dead
left running (:meth:`Store.open`).

A commit takes the commit lock, first applies the records other processes appended
since its last look (catch-up), asks the caller for the records of its change,
writes them with one ``pwrite`` where the written part ends, applies them in memory,
and releases the lock; a durable one then waits for one ``fdatasync``, which it shares
with every committer of any process that wrote before it started (group commit: see
:mod:`~desktop_queue.core.store.groupsync`). The cost of a commit therefore does not grow with
the number of stored jobs, and as the segment's size never changes while it fills, the
sync flushes data only. Readers find the end of the written part at the first zero byte.

Some commits need not wait for the disk: a lease, a heartbeat. They are written (so
they survive the process, and every other process sees them) but not fsynced;
:meth:`Store.sync` makes them durable, and so does the next durable commit of this
process, whose ``fsync`` covers everything written before it. The lease driver calls
``sync`` on the worker thread just before it calls a provider, so an attempt is on
disk before anything is paid for, and several leases share one ``fsync``.

The record that marks a job succeeded carries the result document (``res``), so one
``fsync`` makes the result and the state durable together. Until compaction writes the
result files under ``results/`` (durably, before it folds those records away), the
store keeps these documents in memory (:meth:`Store.carried_result`).

When the current segment grows past a threshold it is closed and a new one opened
(under the lock); a child process then folds the closed segments into a new snapshot
from the files alone, never touching the live state, and deletes what the *previous*
snapshot no longer needs. Two snapshots and their segments are kept, so a corrupt
newest snapshot still leaves a complete history to load. One compaction runs at a
time; when a burst closes segments faster, the next one starts as soon as it ends, and
:meth:`Store.close` folds a backlog so that the next open does not replay it.

The store fails stop. A commit whose write fails is reported as not made only once its
bytes are zeros on disk again (synced); after a failed ``fsync``, or a write that could
not be undone, the store is *poisoned*: what reached the disk is no longer known, so every
later commit and sync raises a message saying so, until the store is closed and opened
again, which reads and checks everything from the files (:meth:`Store._write_failed`). A
rotation that fails leaves the process on its segment with nothing sealed, or poisoned
once its seal is written, never appending past its own seal (:meth:`Store._rotate`).

A record that fails its checksum is never silently dropped: a torn last line (a
writer that died mid-``write``) is cut off, anything else is quarantined as
``*.corrupt-<time>`` and the user is told what was lost.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import orjson

from desktop_queue.core.backend import Change, OpenReport, Orphans, wait_out
from desktop_queue.core.errors import StoreCorrupt, StoreError
from desktop_queue.core.lapse import Lapse
from desktop_queue.core.records import (
    JobDict,
    Record,
    SealRecord,
)
from desktop_queue.core.store.archive import (
    FINISHED_STATES,
    Archive,
)
from desktop_queue.core.store.codec import (
    _SEGMENT_RE,
    _SNAPSHOT_RE,
    _SPARE_RE,
    SCHEMA_VERSION,
    SegmentRead,
    _check_header,
    _written_end,
    encode_record,
    journal_header,
    read_segment,
    read_segment_file,
    segment_head,
    segment_name,
    snapshot_name,
    spare_name,
)
from desktop_queue.core.store.compaction import (
    KEEP_FINISHED,
    KEEP_FINISHED_S,
    compact,
)
from desktop_queue.core.store.fileio import (
    TEMP_MARK,
    FileLock,
    WriteCancelled,
    atomic_write,
    fsync_dir,
    make_dirs,
    set_aside,
)
from desktop_queue.core.store.groupsync import GroupSync
from desktop_queue.core.store.snapshot import (
    decode_snapshot,
    encode_snapshot,
)
from desktop_queue.core.store.state import (
    ChangeLog,
    StoreState,
    set_aside_orphans,
)
from desktop_queue.core.wording import counted

log = logging.getLogger(__name__)

T = TypeVar("T")


#: how often a process looks whether a compaction archived jobs it still holds
FOLLOW_ARCHIVE_S = 2.0


def _datasync(fd: int) -> None:
    """``fdatasync`` where the OS has it (else ``fsync``).

    A segment is written into space filled in advance, so there is no size or block
    map to flush, only the data (and the disk's cache).
    """
    if _HAS_FDATASYNC:
        os.fdatasync(fd)
    else:
        os.fsync(fd)


_HAS_FDATASYNC = hasattr(os, "fdatasync")


_HAS_PREAD = hasattr(os, "pread") and hasattr(os, "pwrite")


_NO_NEWS = frozenset((b"", b"\0"))


#: what the compaction child runs (its arguments follow, as ``sys.argv[1:]``). The
#: ``desktop_queue.core`` package loads its re-exported names on first use, so this
#: imports the store alone, not the queue and flow control the child never uses (a test
#: runs this exact string: tests/core/test_compaction_cost.py)
_CHILD = "import sys; from desktop_queue.core.store.compaction import main; sys.exit(main(sys.argv[1:]))"

#: how often commits look whether a running compaction has ended (seconds)
POLL_COMPACTOR_S = 0.05
#: how often a durable commit checks that its segment is still in the data dir (see Store._check_linked)
LINK_CHECK_EVERY_S = 1.0


#: a journal tail the last process to close leaves unfolded (see Store._fold_tail_if_last):
#: a few hundred records, which the next open replays in a few milliseconds
CLOSE_FOLD_BYTES = 256 << 10

#: space written past the rotation threshold when a segment is created (the commit that
#: crosses the threshold, and a little more, still lands in filled space)
PREFILL_SLACK = 256 << 10


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Writes every byte of ``data`` at ``offset`` (callers hold the mutex on Windows)."""
    if _HAS_PREAD and os.pwrite(fd, data, offset) == len(data):
        return  # the usual case: one call wrote it all
    view = memoryview(data)
    while view:
        if _HAS_PREAD:
            written = os.pwrite(fd, view, offset)
        else:
            os.lseek(fd, offset, os.SEEK_SET)
            written = os.write(fd, view)
        view = view[written:]
        offset += written


def _zero_range(fd: int, offset: int, length: int) -> None:
    """Writes ``length`` zeros at ``offset``: undoes a failed commit's write (callers hold the mutex on Windows).

    It overwrites bytes just written, so it needs no new space: a full disk that
    refused the rest of a commit's write still lets it through.
    """
    _pwrite_all(fd, bytes(length), offset)


def _cut_torn_tail(fd: int, end: int, length: int) -> None:
    """Zeroes the ``length`` bytes a writer left half written at ``end`` (the segment keeps
    its filled space, and a reader holding it open sees exactly what was there before)."""
    _pwrite_all(fd, bytes(length), end)
    _datasync(fd)


def _pread(fd: int, size: int, offset: int) -> bytes:
    """``os.pread`` where the OS has it; a seek and read elsewhere (Windows; callers hold the mutex)."""
    if _HAS_PREAD:
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, size)


def prepare_spare(root: Path, gen: int, size: int, cancelled: Callable[[], bool] | None = None) -> bool:
    """Creates segment ``gen`` ahead of the rotation that will need it, as ``spare-<gen>``.

    A new segment is ``size`` bytes of zeros after its header, several MiB written and
    synced: done in the commit that rotates, the whole write holds up that commit and
    every other process's. Each rotation instead starts a thread that makes the next
    segment in advance (in synced pieces, see :func:`~desktop_queue.core.store.fileio.write_all`;
    the writes leave the GIL free), and the next rotation, in whichever process, only
    links it into place (:meth:`Store._start_segment`). Spares of earlier segments, left
    behind when a rotation came before its spare was ready, are removed.

    ``cancelled`` stops the write between two synced pieces (:meth:`Store.close`: a spare
    is for a later rotation, which can write its segment itself).

    Returns:
        True if the spare was written (False: the segment or its spare exists already).

    Raises:
        StoreError: the disk is full or not writable (the rotation then writes the segment itself).
        WriteCancelled: ``cancelled`` said so; no spare (and no temp file) is left.
    """
    for name in os.listdir(root):
        m = _SPARE_RE.match(name)
        if m and int(m.group(1)) < gen:
            with contextlib.suppress(OSError):
                (root / name).unlink()
    if (root / segment_name(gen)).exists() or (root / spare_name(gen)).exists():
        return False
    return atomic_write(
        root / spare_name(gen), segment_head(gen), overwrite=False, sync_every=1 << 20, cancelled=cancelled, pad_to=size
    )


class _NeedsExclusive(Exception):
    """Catching up needs a reload, which must run under the exclusive commit lock."""


@dataclass(frozen=True)
class _Waiting:
    """A durable commit's wait for its sync, outside the locks (see :meth:`Store._durable_wait`)."""

    gen: int
    end: int
    fd: int  #: a descriptor of segment ``gen`` that the wait owns
    written: int  #: the writes of this process that the sync covers (Store._written then)


class Store:
    """The journal + snapshot store of one data directory, shared safely between processes.

    Args:
        root: the ``store`` directory.
        rotate_bytes: minimum segment size before it is folded into a snapshot.
        background_compaction: fold segments in a child process (False: inline, in this one).
        keep_finished, keep_finished_s: how many finished jobs, finished how recently, stay
            in the hot set (the snapshot and memory) when compaction archives the others.
        now: the wall clock the jobs' times are measured by (the queue's).
    """

    def __init__(
        self,
        root: Path,
        *,
        rotate_bytes: int = 4 << 20,
        background_compaction: bool = True,
        keep_finished: int = KEEP_FINISHED,
        keep_finished_s: float = KEEP_FINISHED_S,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.root = Path(root)
        self.now = now
        self._root_s = str(self.root)
        self.rotate_bytes = rotate_bytes
        self.background_compaction = background_compaction
        self.keep_finished = keep_finished
        self.keep_finished_s = keep_finished_s
        self.archive = Archive(self.root)
        self._archive_seen = 0  # the newest archive segment whose jobs this process has let go of
        self._follow_at = 0.0  # when a read or commit next looks for others' compactions
        self.state = StoreState()
        self.report = OpenReport(first=False)
        #: key -> (segment, result document) carried by journal records not yet folded
        #: into a snapshot (whose compaction writes the result files)
        self._carried: dict[str, tuple[int, dict[str, Any]]] = {}
        self._mutex = threading.RLock()
        self._unrotated = Lapse(log, "could not start a new journal segment", "started a new journal segment again")
        self._link_check_at = 0.0  # (monotonic) when a durable commit next checks its segment is linked
        #: the written and synced marks shared by every process on this store (while open)
        self._group: GroupSync | None = None
        self._written = 0  # commits written by this process (durable or not)
        #: seconds this process's commits waited for the commit lock, and held it (the
        #: lock every process on the data dir takes in turn: what bounds their sum)
        self.lock_wait_s = 0.0
        self.lock_held_s = 0.0
        self._synced = 0  # ... of which known to be on disk
        self._gen = 0
        self._fd = -1
        self._offset = 0
        self._size = 0  # the segment file's size as this process last knew it
        self._sealed = False
        self._snapshot_bytes = 0
        self._compactor: subprocess.Popen[bytes] | None = None
        self._reaping = threading.Lock()  # held while a thread collects the child (_reap_compactor)
        self._spare_maker: threading.Thread | None = None  # see _prepare_next_segment
        self._closing = threading.Event()  # set by close: a spare being made is not needed
        self._poll_at = 0.0  # when a commit next looks whether the compaction child ended
        self._fold_wanted = 0  # the newest closed segment this process asked to fold
        self._snapshot_finished = 0  # finished jobs in the snapshot the last load read
        #: open, and holding its share of the store: not closing a failed open (whose first
        #: opener keeps the store to itself until it lets go)
        self._sharing = False
        self._reaped_gen = 0  # the newest snapshot when this process last collected a compaction
        self._closed = True
        #: why commits are refused (closed, or poisoned: see _poison_with); None when open
        self._refusal: str | None = "the task store is closed"
        #: set by a disk error after which this process accepts no more changes until reopened
        self._poison: str | None = None
        self._commit_lock: FileLock | None = None
        self._presence: FileLock | None = None

    # ----------------------------------------------------------------- open / close

    def open(self, on_first: Callable[[], None] | None = None) -> OpenReport:
        """Loads the store; if no other process has it open, runs ``on_first`` before anyone else may.

        Who is first is decided by locks on the directories themselves, which a deleted
        file cannot fake (see :meth:`FileLock.on_directory`): every process that has the
        store open holds ``store/`` shared, so whoever gets it exclusively has it alone.
        It keeps it exclusive through ``on_first`` (reconciling what the dead left
        running), then shares it. Openers look and take their share under the commit
        lock, so none looks while another is between the two.

        Loading reads every record from the files and checks it (a reopen after a disk
        error trusts nothing it had in memory), then syncs the segment it will append
        to, so a disk that still fails is found now and not by the first commit.

        Raises:
            StoreError: the directory cannot be used, or was written by a newer version.
        """
        self._closing.clear()
        try:
            make_dirs(self.root)
            presence = self._presence = FileLock.on_directory(self.root, self.root / "presence.lock")
            commit = self._commit_lock = FileLock.on_directory(self.root.parent, self.root / "commit.lock")
            # (a lambda: _datasync is looked up at each sync, so what tests patch is what runs)
            self._group = GroupSync(self.root, sync=lambda fd: _datasync(fd))
        except OSError as exc:
            self.close()
            raise self._io_error("cannot use the data directory", exc) from exc
        try:
            while True:
                with self._mutex:
                    commit.acquire(exclusive=True)
                    try:
                        first = presence.acquire(exclusive=True, blocking=False)
                        joined = first or presence.acquire(exclusive=False, blocking=False)
                        if joined:
                            self.report = OpenReport(first=first)
                            if first:
                                self._remove_temp_files()
                            self._load()
                            self._poison = self._refusal = None
                            self._closed = False
                    finally:
                        commit.release()
                if joined:
                    break
                # a first opener is reconciling: wait until it shares the store, then look
                # again (had it died meanwhile, this one would be first now)
                presence.acquire(exclusive=False)
                presence.release()
            if first:
                if on_first is not None:
                    on_first()  # should it fail, closing drops the exclusive lock: the next opener is first
                with self._mutex:
                    commit.acquire(exclusive=True)  # no opener looks while the lock changes
                    try:
                        presence.downgrade()  # others may open now
                    finally:
                        commit.release()
        except BaseException as exc:
            # a refused open (newer schema, unreadable files) holds nothing: a later open
            # in this process must see the store as it is, and be the first if it is
            self.close()
            if isinstance(exc, OSError):
                raise self._io_error("cannot read the task store", exc) from exc
            raise
        self._sharing = True
        if first and self._archivable_backlog():
            self._compact_soon(self._newest_snapshot_gen())  # e.g. a store from before the archive
        return self.report

    def _archivable_backlog(self) -> bool:
        """Whether the snapshot loaded holds far more finished jobs than the hot set keeps.

        Counted in the snapshot alone: the jobs that finished in the segments replayed
        after it are archived when those segments are folded, and counting them here
        would start a compaction of the snapshot at every first open, folding nothing.
        """
        return self._snapshot_finished > 2 * self.keep_finished + 1000 and self._newest_snapshot_gen() > 0

    def _io_error(self, doing: str, exc: OSError, where: str | Path | None = None) -> StoreError:
        """One line for the user: what failed, on which file, and the system's reason.

        Args:
            doing: what was being done ("cannot read the task store").
            exc: the error.
            where: the file, when ``exc`` came from a descriptor and names none (default: the store).
        """
        path = exc.filename if exc.filename is not None else where if where is not None else self.root
        return StoreError(f"{doing}: {path}: {exc.strerror or exc}")

    @property
    def poisoned(self) -> str | None:
        """Why this store accepts no more changes until reopened (a disk error), or None."""
        return self._poison

    def close(self) -> None:
        """Waits for a running compaction (and a segment being made in advance), folds a
        backlog it left, then releases files and locks.

        A burst of commits can close segments faster than compactions fold them (one runs
        at a time); if two or more closed segments are still unfolded, they are folded now
        so that the next open does not replay them.
        """
        maker = self._spare_maker
        if maker is not None:
            # a spare only saves a later rotation (in any process) writing its segment
            # itself: stop it after the piece being synced, and wait for that piece only,
            # so that no temp file is left behind
            self._closing.set()
            maker.join()
        # The compaction child holds compact.lock and works from the files alone, so a
        # fold it leaves half-done is recovered by the next one. It is still waited for:
        # what it set aside must reach the user (its stderr comes to this process), the
        # work it does is this process's (a caller counting its children's CPU, or
        # deleting the data dir once closed, must see it ended), and the next open
        # replays less. Its cost is kept small instead (see compaction).
        self._reap_compactor(wait=True)
        if not self._closed and self._fold_wanted - self._newest_snapshot_gen() >= 2:
            self._compact_soon(self._fold_wanted)
            self._reap_compactor(wait=True)
        if self._sharing:
            self._fold_tail_if_last()
        self._sharing = False
        error: StoreError | None = None
        with self._mutex:
            if self._fd >= 0:
                try:
                    self._sync_current()
                except StoreError as exc:
                    error = exc  # raised once everything is released
                os.close(self._fd)
                self._fd = -1
            self.archive.close()
            for lock in (self._presence, self._commit_lock):
                if lock is not None:
                    lock.close()
            self._presence = self._commit_lock = None
            if self._group is not None:
                self._group.close()
                self._group = None
            self._closed = True
            self._refusal = "the task store is closed"
        if error is not None:
            raise error

    def fold_ahead(self) -> None:
        """Starts the fold that closing would make (see :meth:`_fold_tail_if_last`) without
        waiting for it, for a caller with more to do before it closes (a worker announcing
        what it ran): the two then overlap. Closing waits for it, and folds again only what
        was committed after it."""
        if self._sharing and not self._closed:
            self._fold_tail_if_last(wait=False)

    def _fold_tail_if_last(self, wait: bool = True) -> None:
        """Folds the journal's tail into a snapshot when this is the last process to close
        the store, so that the next open reads the snapshot and replays next to nothing.

        Each open replays every record after the newest snapshot: a segment of 4 MiB (a
        few thousand records) costs an open several times what reading the snapshot of
        the hot set does. As SQLite checkpoints its write-ahead log when its last
        connection closes, the last process folds the tail as it leaves: the records
        are folded once either way, and it is the one moment no process is appending.
        A process that others still share the store with leaves it to them (a CLI
        command beside the window stays quick), and a tail too small to matter next to
        the snapshot is left as it is: a fold writes the whole snapshot again, and
        beside tens of thousands of queued jobs that costs more than the next open
        saves.
        """
        if self._refusal is not None or self._commit_lock is None:
            return
        try:
            with self._mutex, self._commit_lock.held():
                if not self._alone():
                    return
                self._catch_up(exclusive=True)
                sealed = max(0, self._gen - 1 - self._newest_snapshot_gen())  # closed, not yet folded
                tail = sealed * self._rotate_threshold() + self._offset
                if tail <= max(CLOSE_FOLD_BYTES, self._snapshot_bytes // 4):
                    return
                # (a current segment with little in it stays: a rotation would make a new one)
                if self._offset > CLOSE_FOLD_BYTES and not self._rotate():
                    return
                upto = self._gen - 1
        except (OSError, StoreError) as exc:
            # nothing is lost: the next open replays the tail instead (and meets the disk
            # error itself, if it lasts, where it is told)
            log.info("could not fold the journal at close: %s", exc)
            return
        # in a child, as every other fold: folding two segments of finished jobs holds
        # about 30 MiB more, which a worker otherwise reached only as it exited
        self._compact_soon(upto)
        if wait:
            self._reap_compactor(wait=True)

    def _alone(self) -> bool:
        """Whether no other process has the store open (commit lock held, so no opener looks).

        ``flock`` drops the shared lock when a conversion to exclusive fails: it is taken
        back at once, and no one can have taken the lock exclusively in between, since
        openers only try under the commit lock held here.
        """
        presence = self._presence
        if presence is None:
            return False
        if presence.acquire(exclusive=True, blocking=False):
            presence.downgrade()
            return True
        presence.acquire(exclusive=False)
        return False

    def _remove_temp_files(self) -> None:
        for path in self.root.iterdir():
            if TEMP_MARK in path.name:
                with contextlib.suppress(OSError):
                    path.unlink()
                self.report.notices.append(f"removed {path.name}, an unfinished write left by a crash (nothing lost)")

    def _list(self) -> tuple[list[int], list[int]]:
        snaps: list[int] = []
        segs: list[int] = []
        for name in os.listdir(self.root):
            m = _SNAPSHOT_RE.match(name)
            if m:
                snaps.append(int(m.group(1)))
                continue
            m = _SEGMENT_RE.match(name)
            if m:
                segs.append(int(m.group(1)))
        return sorted(snaps), sorted(segs)

    def _quarantine(self, path: Path, why: str) -> Path:
        target = set_aside(path)
        fsync_dir(self.root)
        log.warning("quarantined %s: %s", path.name, why)
        return target

    def _load(self) -> None:
        """Reads the newest good snapshot and replays the segments after it (commit lock held).

        The garbage collector is paused meanwhile (it would triple the parse time of a large
        snapshot by scanning the new objects again and again) and the loaded objects are
        then frozen out of its way.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._load_files()
            if self._group is not None:
                # loading may have rewritten a segment: the marks' offsets would mean other bytes
                self._group.reset()
        finally:
            if was_enabled:
                gc.enable()
            gc.freeze()

    def _load_files(self) -> None:
        """Loads the newest readable snapshot, then replays the journal segments after it."""
        self._carried = {}
        # read before the files: what anyone had synced when this look began is on disk now
        synced = self._group.synced() if self._group is not None else (0, 0)
        notices_before = len(self.report.notices)
        snaps, segs = self._list()
        jobs, seq, epoch, base, last_n = self._load_snapshot(snaps, segs)
        lost = self._lost_by_synced_mark(synced, base, segs)  # a missing segment; a cut one is seen below
        if lost:
            self.report.notices.append(lost)
        archived = self.archive.catch_up()  # replaying may bring archived jobs back (a retry of a dead one)
        self.report.notices.extend(self.archive.notices)
        self.archive.notices.clear()
        self._archive_seen = archived[-1] if archived else 0
        state = StoreState(archive=self.archive)
        state.rebuild(jobs, seq, epoch)
        state.n = last_n
        self._snapshot_finished = sum(len(state.by_state.get(s, ())) for s in FINISHED_STATES)
        pending, end_offset = self._replay(state, [g for g in segs if g > base], base, synced, segs, lost)
        state.version = self.state.version + 1
        state.changes = ChangeLog([(state.version, "*")])
        self.state = state
        if pending:
            self._open_segment(pending[-1], end_offset)
        else:
            gen = base + 1
            if not (self.root / segment_name(gen)).exists():
                self._start_segment(gen)
            self._open_segment(gen)
        # what was just read is on disk before anything is built on it (and a disk that
        # failed a sync since it was written says so here), unless a sync that returned
        # after it was written says so already and this load changed no file
        clean = len(self.report.notices) == notices_before
        if not (clean and synced >= (self._gen, self._offset) and synced[0] == self._gen):
            _datasync(self._fd)

    def _load_snapshot(self, snaps: list[int], segs: list[int]) -> tuple[dict[str, JobDict], int, int, int, int]:
        """The newest snapshot that reads (migrated if older): ``(jobs, seq, epoch, its gen, last n)``.

        A damaged one is quarantined and the one before it tried; none at all is an empty store.
        """
        for gen in reversed(snaps):
            path = self.root / snapshot_name(gen)
            raw = path.read_bytes()
            try:
                doc, migrated = decode_snapshot(raw, path.name)
            except StoreCorrupt as exc:
                moved = self._quarantine(path, str(exc))
                self.report.notices.append(
                    f"{exc}; it was moved aside as {moved.name} and the previous good state was loaded"
                )
                continue
            data = doc["data"]
            jobs = {job["id"]: job for job in data["jobs"]}
            seq, epoch = data.get("seq", 0), data.get("epoch", 0)
            self._snapshot_bytes = len(raw)
            if migrated:
                # (the version is in the first line: since schema 3 the events follow it)
                was = orjson.loads(raw.split(b"\n", 1)[0]).get("schema_version", 0)
                backup = path.with_name(f"{path.name}.v{was}-backup")
                atomic_write(backup, raw)
                atomic_write(path, encode_snapshot(gen, jobs.values(), seq, epoch))
                self.report.notices.append(
                    f"{path.name} was migrated to schema {SCHEMA_VERSION} (backup: {backup.name})"
                )
            return jobs, seq, epoch, gen, data.get("n", 0)
        if snaps and segs and segs[0] > 1:
            self.report.notices.append(
                "no readable snapshot was left and older journal segments are gone: "
                "jobs recorded only in the lost snapshot could not be recovered"
            )
        return {}, 0, 0, 0, 0

    def _replay(
        self,
        state: StoreState,
        pending: list[int],
        base: int,
        synced: tuple[int, int],
        segs: list[int],
        lost: str | None,
    ) -> tuple[list[int], int | None]:
        """Applies the segments after snapshot ``base`` to ``state``, mending or setting aside damage.

        Returns the segments that remain in use and where appends continue in the last
        of them (None: at its written end). ``lost`` is what the synced mark said was lost
        before the first segment was read.
        """
        expected = base + 1
        end_offset: int | None = None
        for index, gen in enumerate(pending):
            if gen != expected:
                kept = [self._quarantine(self.root / segment_name(g), "gap") for g in pending[index:]]
                self.report.notices.append(
                    f"journal segment {expected} is missing; later segments were kept aside "
                    f"({', '.join(m.name for m in kept)}) and the state before the gap was loaded"
                )
                return pending[:index], end_offset
            is_last = index == len(pending) - 1
            end, stop, lost = self._replay_segment(state, gen, is_last, base, synced, segs, pending[index + 1 :], lost)
            end_offset = end
            expected = gen + 1
            if stop:
                return pending[: index + 1], end_offset
        return pending, end_offset

    def _replay_segment(
        self,
        state: StoreState,
        gen: int,
        is_last: bool,
        base: int,
        synced: tuple[int, int],
        segs: list[int],
        later: list[int],
        lost: str | None,
    ) -> tuple[int | None, bool, str | None]:
        """Applies one segment: ``(where appends continue in it, whether later segments are set
        aside, what is known lost so far)``."""
        path = self.root / segment_name(gen)
        data = read_segment_file(path)
        if gen == synced[0]:
            lost = self._lost_by_synced_mark(synced, base, segs, data)
            if lost:
                self.report.notices.append(lost)
        read = read_segment(data, 0, state.n)
        if not read.records or read.records[0].get("op") != "header":
            if is_last and not read.lost_after:
                if data:
                    moved = self._quarantine(path, "no header")
                    self.report.notices.append(
                        f"{path.name} had no readable header; it was kept aside as {moved.name} "
                        + ("(the changes saved in it are lost)" if lost else "(no change lost)")
                    )
                self._start_segment(gen, replace=True)
                return None, False, lost
            read.bad_line = 0
            read.records = []
            read.end = 0
        else:
            _check_header(read.records[0], path.name)
        state.gen = gen
        for record in read.records[1:]:
            state.apply(record)
            if "res" in record:
                self._carry(gen, record["res"])
        orphans = state.take_orphans()
        if orphans:
            self.report.notices.append(set_aside_orphans(self.root, path.name, orphans)[0])
        if read.bad_line is not None or (read.torn_tail and not is_last):
            # appends and catch-up continue after the good prefix, which is already applied
            return self._recover_segment(path, gen, data, read, later), True, lost
        if not is_last and not (len(read.records) > 1 and read.records[-1].get("op") == "seal"):
            # a rotation died between creating the next segment and sealing this one:
            # processes still appending here would never look at the next one
            self._seal_segment(path, read.end, gen + 1)
        if read.torn_tail:
            fd = os.open(path, os.O_RDWR)
            try:
                _cut_torn_tail(fd, read.end, _written_end(data) - read.end)
            finally:
                os.close(fd)
            self.report.notices.append(
                f"the last journal record of {path.name} was only half written by a crash and was dropped "
                "(that change had not been acknowledged)"
            )
        return read.end, False, lost

    def _lost_by_synced_mark(
        self, synced: tuple[int, int], snapshot_gen: int, segs: list[int], data: bytes | None = None
    ) -> str | None:
        """What the group-sync mark says was lost: a segment gone or cut short below it.

        The mark names how far some process had seen a journal segment reach the disk
        (fdatasync returned). A segment that is missing, or whose written part ends
        before it, lost acknowledged changes, even if what is left reads as whole: a
        deleted current segment, a cut exactly at a record boundary, a zeroed file.

        Args:
            data: the marked segment's bytes, as the load read them; without them only a
                missing segment is told.
        """
        gen, end = synced
        if gen <= snapshot_gen or end <= 0:
            return None
        path = self.root / segment_name(gen)
        if gen not in segs:
            return (
                f"journal segment {path.name} is missing: changes that had been saved to disk "
                f"({end:,} bytes of it) are lost; the store was loaded without them"
            )
        if data is None:
            return None
        written = _written_end(data)
        if written < end:
            return (
                f"journal segment {path.name} ends at byte {written:,} where {end:,} bytes had been saved "
                "to disk: the changes in between are lost; the store was loaded without them"
            )
        return None

    def _recover_segment(self, path: Path, gen: int, data: bytes, read: SegmentRead, later: list[int]) -> int:
        """Keeps the good prefix of a damaged segment, quarantines the rest, says what was lost.

        Returns:
            the size of the good prefix (where appends continue).
        """
        moved = self._quarantine(path, "bad record")
        good = data[: read.end] if read.records else b""
        if not good:
            good = encode_record(journal_header(gen))
        atomic_write(path, good)
        lost_ids = sorted(
            {
                str(i)
                for r in read.lost_after
                if (i := r.get("id") or cast("dict[str, Any]", r.get("job") or {}).get("id"))
            }
        )
        lost_n = len(read.lost_after) + sum(
            len(read_segment((self.root / segment_name(g)).read_bytes(), 0).records) - 1 for g in later
        )
        for g in later:
            self._quarantine(self.root / segment_name(g), "after a bad record")
        detail = f" (jobs affected: {', '.join(lost_ids[:10])}{'…' if len(lost_ids) > 10 else ''})" if lost_ids else ""
        self.report.notices.append(
            f"{path.name} has a damaged record at byte {read.bad_line}"
            + (f" ({read.out_of_order}: a line repeated, lost or moved)" if read.out_of_order else "")
            + f"; it was kept aside as {moved.name}. "
            f"Everything before it was loaded; {counted(lost_n, 'later change')} could not be applied{detail}."
        )
        return len(good)

    @staticmethod
    def _seal(next_gen: int) -> bytes:
        """The record that closes a segment and names the next one (see :meth:`_catch_up`)."""
        seal: SealRecord = {"op": "seal", "next": next_gen}
        return encode_record(seal)

    def _seal_segment(self, path: Path, end: int, next_gen: int) -> None:
        """Appends the seal a rotation did not get to write (it died in between; load only)."""
        fd = os.open(path, os.O_RDWR)
        try:
            _pwrite_all(fd, self._seal(next_gen), end)
            _datasync(fd)
        finally:
            os.close(fd)

    def _undo_write(self, length: int) -> OSError | None:
        """Durably puts back what a failed write (or one whose sync failed) changed after ``_offset``.

        Zeros inside the file, nothing past its end, then a sync: only once that sync
        has returned can the commit be reported as not made, since every byte it may
        have put on disk is a zero there now (and no other process has read them: the
        commit lock is still held).

        Returns:
            None when done; else the error that stopped it (the caller poisons the store).
        """
        try:
            keep = max(self._size, self._offset)
            if os.fstat(self._fd).st_size > keep:
                os.ftruncate(self._fd, keep)
            if keep > self._offset:
                _zero_range(self._fd, self._offset, min(keep - self._offset, length))
            _datasync(self._fd)
        except OSError as exc:
            return exc
        return None

    def _poison_with(self, what: str) -> str:
        """Stops this store accepting changes until it is reopened; returns the message (mutex held).

        A failed ``fsync`` leaves it unknown what of this process's writes reached the
        disk, and a second ``fsync`` may well succeed without having written them (the
        kernel reports a write-back error once, then forgets the pages). Going on would
        acknowledge later commits on top of a journal whose middle may be missing; so
        every later commit and sync raises this message, and reopening reads and checks
        the files again (:meth:`open`).
        """
        if self._poison is None:
            self._poison = (
                f"the task store hit a disk error ({what}); no further changes are accepted until it is "
                "reopened (quit the window or the command and start it again: opening the store checks what is on disk)"
            )
            self._refusal = self._poison
            log.error("%s", self._poison)
        return self._poison

    def _write_failed(self, exc: OSError, length: int, *, flushing: bool) -> StoreError:
        """The error for a commit whose write (or, with ``flushing``, whose sync) failed (locks held).

        A commit is reported as not made only when :meth:`_undo_write` has made its
        bytes zeros on disk, so a commit reported as failed can never reappear. When
        even that fails, the bytes may be there, in whole or in part, and are read as a
        commit by any process that looks (they cannot be taken back once the lock is
        released): the error then says that it is not known whether the change was
        saved, and the store is poisoned, so nothing is ever appended after them. A
        reopen loads whatever the disk holds, as after a crash in the middle of that
        commit. A failed sync poisons the store in any case (see :meth:`_poison_with`).
        """
        cause = exc.strerror or str(exc)
        head = f"could not {'flush the task store to disk' if flushing else 'write to the task store'}: {cause}"
        undo = self._undo_write(length)
        if undo is not None:
            outcome = f"it is not known whether the change was saved (undoing it failed too: {undo.strerror or undo})"
        elif not flushing:
            return StoreError(f"{head}; the change was not made")  # the disk is usable: go on
        else:
            outcome = "the change was not made"
        return StoreError(f"{head}; {outcome}. {self._poison_with(cause)}")

    def _grow(self, end: int) -> None:
        """Zero-fills the current segment past ``end`` (under the commit lock) before a commit writes there.

        A segment is created filled to past the rotation threshold, but the threshold
        grows with the snapshot (a store of 100,000 jobs opens with a segment filled for
        a smaller one). Commits written past the filled space would make each sync flush
        the file's size and block map as well, about a third dearer here, until the
        segment rotates; one write of zeros puts them back into filled space.

        Raises:
            OSError: the disk refused (the caller undoes what was written).
        """
        size = os.fstat(self._fd).st_size  # another process may have grown it already
        if size < end:
            target = max(end, self._rotate_threshold()) + PREFILL_SLACK
            _pwrite_all(self._fd, bytes(target - size), size)
            size = target
        self._size = size

    def _rotate_threshold(self) -> int:
        # fold the journal when it reaches a sixteenth of the snapshot (4 to 8 MiB):
        # compaction stays amortised O(1) per change and a cold open replays little
        return max(self.rotate_bytes, min(self._snapshot_bytes // 16, 8 << 20))

    def _start_segment(self, gen: int, replace: bool = False) -> None:
        """Creates segment ``gen``: its header, then zero bytes up to past the rotation threshold.

        Commits overwrite the zeros in place, so the file's size and block map never
        change while it fills: the per-commit ``fdatasync`` flushes only the data, not
        the file system's metadata (about a third cheaper on ext4 here).

        A rotation finds the segment made in advance as a spare (:func:`prepare_spare`)
        and links it into place; without one it writes the segment itself.
        """
        path = self.root / segment_name(gen)
        if not replace and self._take_spare(gen, path):
            return
        atomic_write(path, segment_head(gen), overwrite=replace, pad_to=self._rotate_threshold() + PREFILL_SLACK)

    def _prepare_next_segment(self) -> None:
        """Starts making the segment after the current one on a thread (see :func:`prepare_spare`)."""
        with self._mutex:
            if self._spare_maker is not None and self._spare_maker.is_alive():
                return
            gen, size = self._gen + 1, self._rotate_threshold() + PREFILL_SLACK
            self._spare_maker = threading.Thread(
                target=self._make_spare, args=(gen, size), name="desktop-queue-spare-segment", daemon=True
            )
            self._spare_maker.start()

    def _make_spare(self, gen: int, size: int) -> None:
        try:
            prepare_spare(self.root, gen, size, self._closing.is_set)
        except WriteCancelled:
            log.debug("stopped making journal segment %d in advance: the store is closing", gen)
        except (StoreError, OSError) as exc:  # the rotation will write the segment itself
            log.info("could not make journal segment %d in advance: %s", gen, exc)

    def _take_spare(self, gen: int, path: Path) -> bool:
        """Links ``spare-<gen>`` into place as segment ``gen``; False if there is none (or the segment exists)."""
        spare = self.root / spare_name(gen)
        try:
            os.link(spare, path)
        except FileNotFoundError:
            return False
        except FileExistsError:
            with contextlib.suppress(OSError):
                spare.unlink()
            return False
        with contextlib.suppress(OSError):
            spare.unlink()
        fsync_dir(self.root)  # the segment's name is on disk before any commit goes there
        return True

    def _segment_path(self, gen: int) -> str:
        return os.path.join(self._root_s, segment_name(gen))

    def _open_segment(self, gen: int, offset: int | None = None) -> None:
        """Switches appends and catch-up reads to segment ``gen``, at ``offset`` (default: after its header)."""
        fd = os.open(self.root / segment_name(gen), os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if offset is None:
                head = _pread(fd, 1 << 16, 0)
                nl = head.find(b"\n")
                offset = nl + 1 if nl >= 0 else 0
            if self._fd >= 0:
                self._sync_current()  # what this process wrote there must not lose its fsync
        except BaseException:
            os.close(fd)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd
        self._gen = gen
        self._sealed = False  # set when a seal is read here: commits go to the next segment
        self._size = size
        self._offset = offset

    # ----------------------------------------------------------------- catch-up

    def _unread(self) -> bytes:
        """What was written to the segment after ``_offset``: up to its first zero byte (or its end)."""
        chunk = 4096
        data = _pread(self._fd, chunk, self._offset)
        if not data or data[0] == 0:
            return b""  # the usual case: nothing new
        while b"\0" not in data and len(data) == chunk:
            chunk *= 4
            data = _pread(self._fd, chunk, self._offset)
        return data

    def _catch_up_segment(self, exclusive: bool) -> None:
        """Applies what others wrote to the current segment (noting a seal: see _catch_up)."""
        data = self._unread()
        if not data:
            return
        read = read_segment(data, 0, self.state.n)
        self.state.gen = self._gen
        for record in read.records:
            if record.get("op") == "seal":
                self._sealed = True
                continue
            self.state.apply(record)
            if "res" in record:
                self._carry(self._gen, record["res"])
        self._offset += read.end
        orphans = self.state.take_orphans()
        if orphans:
            # this process goes on with every other job; its window or log is where it is told
            notice = set_aside_orphans(self.root, segment_name(self._gen), orphans)[0]
            log.warning("%s", notice)
            self.report.notices.append(notice)
        if read.bad_line is not None:
            raise StoreCorrupt(
                f"{segment_name(self._gen)} has a damaged record at byte {self._offset}; "
                "restart Desktop Queue to recover the store"
            )
        if read.torn_tail and exclusive:
            try:
                _cut_torn_tail(self._fd, self._offset, _written_end(data) - read.end)  # a writer died mid-record
            except OSError as exc:
                raise StoreError(self._poison_with(f"could not cut a torn record: {exc.strerror or exc}")) from exc

    def _catch_up(self, exclusive: bool) -> None:
        """Applies every record other processes committed since this one last looked.

        A segment that was rotated away ends with a seal record, so following the journal
        costs one read of the current segment's tail, not a look for the next file.
        """
        self._catch_up_segment(exclusive)
        while self._sealed:  # kept across calls: a shared-lock look may have read the seal
            try:
                self._open_segment(self._gen + 1)
            except FileNotFoundError:
                # compacted away while this process looked elsewhere: what it has is complete
                # up to that seal, but the files are the truth now. Loading may cut a torn
                # tail or quarantine a file, which only the exclusive lock holder may do.
                if not exclusive:
                    raise _NeedsExclusive from None
                self._reload()
                return
            self._prune_carried()
            self._catch_up_segment(exclusive)

    def _reload(self) -> None:
        notices = self.report.notices
        self._load()
        self.report.notices = notices

    # ----------------------------------------------------------------- public API

    @property
    def closed(self) -> bool:
        return self._closed

    @contextlib.contextmanager
    def quiet(self) -> Iterator[bool]:
        """Holds ``compact.lock`` if no compaction holds it; yields whether it got it."""
        lock = FileLock(self.root / "compact.lock")
        try:
            yield lock.acquire(blocking=False)
        finally:
            lock.close()

    def peek(self, fn: Callable[[StoreState], T]) -> T:
        """Runs ``fn`` on the state as this process last saw it (no lock, no catch-up)."""
        return fn(self.state)

    def read(self, fn: Callable[[StoreState], T]) -> T:
        """Runs ``fn`` on an up-to-date state (others' commits applied), under a shared lock."""
        self._check_open()
        lock = self._commit_lock
        assert lock is not None
        with self._mutex:
            self._lock_or_raise(lock, exclusive=False)
            try:
                self._catch_up_or_raise(exclusive=False)
                if time.monotonic() >= self._follow_at:
                    self._follow_archive()
                return fn(self.state)
            except _NeedsExclusive:
                pass
            finally:
                lock.release()
            self._lock_or_raise(lock, exclusive=True)
            try:
                self._catch_up_or_raise(exclusive=True)
                return fn(self.state)
            finally:
                lock.release()

    def _lock_or_raise(self, lock: FileLock, exclusive: bool) -> None:
        try:
            lock.acquire(exclusive=exclusive)
        except OSError as exc:
            raise self._io_error("cannot lock the task store", exc) from exc

    def _catch_up_or_raise(self, exclusive: bool) -> None:
        # catching up reads others' records, and may load the whole store again
        try:
            self._catch_up(exclusive)
        except OSError as exc:
            raise self._io_error("cannot read the task store", exc, self._segment_path(self._gen)) from exc

    def commit(self, fn: Callable[[StoreState], Change[T]], *, durable: bool = True) -> T:
        """Commits the records of the :class:`~desktop_queue.core.backend.Change` ``fn`` returns; returns its value."""
        answers: list[T] = []

        def records(state: StoreState) -> Sequence[Record]:
            change = fn(state)
            answers.append(change.value)
            return change.records

        self.transact(records, durable=durable)
        return answers[-1]

    def transact(self, fn: Callable[[StoreState], Sequence[Record]], *, durable: bool = True) -> Sequence[Record]:
        """Commits the records ``fn`` derives from the current state, atomically across processes.

        ``fn`` must not change the state; it returns records (``new``/``upd``), which are
        written (and, if ``durable``, fsynced) and only then applied in memory. If ``fn``
        raises, nothing is written. A commit that is not durable survives the process
        and is seen by every other process; :meth:`sync` (or any later durable commit of
        this process) puts it on disk.

        Raises:
            StoreError: the write failed (disk full...): the journal is left as it was, and
                the message says the change was not made. After a failed sync, or a write
                that could not be undone, the store is poisoned (see :meth:`_write_failed`):
                this and every later commit raise until it is reopened.
        """
        with self._mutex:
            lock = self._commit_lock
            if lock is None or self._refusal is not None:  # (checked under the mutex: a poison is set under it)
                raise StoreError(self._refusal or "the task store is closed")
            asked = time.perf_counter()
            try:
                lock.lock_exclusive()  # not lock.held(): a generator-based context costs a microsecond a commit
            except OSError as exc:
                raise self._io_error("cannot lock the task store; the change was not made", exc) from exc
            got = time.perf_counter()
            try:
                records, rotate, waiting = self._commit(fn, durable)
            finally:
                lock.unlock()
                self.lock_wait_s += got - asked
                self.lock_held_s += time.perf_counter() - got
            if time.monotonic() >= self._follow_at:
                self._follow_archive()
        if rotate:
            # the commit is made: what follows only prepares later ones, and must not report it as failed
            try:
                self._prepare_next_segment()
            except RuntimeError as exc:  # no thread to spare: the next rotation writes its segment itself
                log.warning("could not start making the next journal segment: %s", exc)
            self._compact_soon(self._gen - 1)
        elif self._compactor is not None and (now := time.monotonic()) >= self._poll_at:
            # look (a system call) at most every POLL_COMPACTOR_S: at 100,000 jobs a
            # compaction runs for seconds, thousands of commits
            self._poll_at = now + POLL_COMPACTOR_S
            if self._reap_compactor(wait=False) is None and self._fold_wanted > self._reaped_gen:
                # the running compaction just finished; fold what closed meanwhile (a burst)
                self._compact_soon(self._fold_wanted)
        if waiting is not None:
            self._wait_durable(waiting)
        return records

    def _commit(
        self, fn: Callable[[StoreState], Sequence[Record]], durable: bool
    ) -> tuple[Sequence[Record], bool, _Waiting | None]:
        """The part of :meth:`transact` under the locks.

        Returns:
            the records, whether the segment rotated, and what a durable commit waits for
            once the locks are released (None: nothing, see :meth:`_durable_wait`).
        """
        fd = self._fd
        offset = self._offset
        try:
            # another process wrote after _offset unless one byte read there is nothing, or a zero
            if self._sealed or _pread(fd, 1, offset) not in _NO_NEWS:
                self._catch_up(exclusive=True)
                fd = self._fd
                offset = self._offset
        except OSError as exc:
            where = self._segment_path(self._gen)
            raise self._io_error("could not read the task store; the change was not made", exc, where) from exc
        state = self.state
        records = fn(state)
        if not records:
            return records, False, None
        for number, record in enumerate(records, start=state.n + 1):
            record["n"] = number  # a duplicated, lost or swapped line is then told apart
        payload = encode_record(records[0]) if len(records) == 1 else b"".join(encode_record(r) for r in records)
        try:
            if offset + len(payload) > self._size:
                self._grow(offset + len(payload))
            _pwrite_all(fd, payload, offset)
        except OSError as exc:
            raise self._write_failed(exc, len(payload), flushing=False) from exc
        self._written += 1
        gen = self._gen
        if self._group is not None:  # published once final: a sync by anyone from now on covers it
            self._group.note_written(gen, offset + len(payload))
        offset += len(payload)
        self._offset = offset
        if offset > self._size:
            self._size = offset
        state.gen = self._gen
        for record in records:
            state.apply(record)
            if "res" in record:
                self._carry(self._gen, record["res"])
        # (the threshold is never below rotate_bytes: most commits need not work it out)
        rotating = offset > self.rotate_bytes and offset > self._rotate_threshold()
        waiting = None
        if durable and (now := time.monotonic()) >= self._link_check_at:
            self._link_check_at = now + LINK_CHECK_EVERY_S
            self._check_linked(fd)
        if durable and rotating:
            # synced here, before the rotation: the commit is made whatever becomes of it
            self._wait_durable(_Waiting(gen, offset, fd, self._written), owned=False)
        elif durable:
            waiting = self._durable_wait(gen, offset)
        return records, rotating and self._rotate(), waiting

    def compact_now(self) -> None:
        """Closes the current segment and folds everything into a snapshot before returning."""
        if self._refusal is not None:
            raise StoreError(self._refusal)
        with self._mutex, self._commit_lock.held() if self._commit_lock else contextlib.nullcontext():
            self._catch_up(exclusive=True)
            self._rotate()
            upto = self._gen - 1
        self._reap_compactor(wait=True)
        self._compact(upto)

    def _rotate(self) -> bool:
        """Seals the current segment and moves appends to the next one (commit lock held).

        Returns whether it did; it never raises, since the commit that asked for it is
        made. Fail stop: until the seal is written, a failure leaves this process on the
        current segment with nothing sealed and no next segment (a later commit tries
        again). Once the seal is written, every other process follows it, so a failure
        after that poisons the store rather than let this process write past its own
        seal, where no one else reads. A failed sync poisons it at any step.
        """
        gen = self._gen
        next_gen = gen + 1
        try:
            # whatever any process left unsynced here (a lease) goes to disk before later
            # records land in the next segment, which this segment's syncs do not cover
            _datasync(self._fd)
        except OSError as exc:
            self._poison_with(f"could not flush {segment_name(gen)}: {exc.strerror or exc}")
            return False
        self._synced = self._written
        try:
            self._start_segment(next_gen)
        except (OSError, StoreError) as exc:
            self._unrotated.failed(exc)  # each commit tries again until the disk has room
            self._drop_segment(next_gen)
            return False
        self._unrotated.ended()
        # the seal tells every other process to move on (see _catch_up); written after the
        # next segment exists, so whoever reads it finds that segment
        seal = self._seal(next_gen)
        try:
            _pwrite_all(self._fd, seal, self._offset)
        except OSError as exc:
            log.warning("could not close the journal segment: %s", exc)
            undo = self._undo_write(len(seal))
            if undo is not None:
                self._poison_with(f"could not undo a half-written seal of {segment_name(gen)}: {undo.strerror or undo}")
            self._drop_segment(next_gen)
            return False
        self._offset += len(seal)
        self._sealed = True  # this process now follows its own seal, as every other one does
        try:
            self._open_segment(next_gen)
        except (OSError, StoreError) as exc:
            self._poison_with(f"could not open {segment_name(next_gen)} after sealing {segment_name(gen)}: {exc}")
            return False
        try:
            self._prune_carried()
        except OSError as exc:  # only memory: the next rotation or compaction prunes them
            log.warning("could not look for the newest snapshot: %s", exc)
        return True

    def _drop_segment(self, gen: int) -> None:
        """Removes segment ``gen`` that a rotation made but could not seal its way into (commit lock held).

        No process appends there: a process learns of a segment from a seal (none was
        written) or from opening the store, which seals the segment before it (the
        current one is not sealed). Left behind, it would still be harmless (the next
        open seals the current segment in front of it), but its name might not be on
        disk: a failure here poisons the store.
        """
        path = self.root / segment_name(gen)
        try:
            if os.path.lexists(path):
                os.unlink(path)
            fsync_dir(self.root)
        except OSError as exc:
            self._poison_with(f"could not remove the unsealed {path.name}: {exc.strerror or exc}")

    # ----------------------------------------------------------------- durability

    def on_orphans(self, recover: Orphans) -> None:
        """Nothing to set: orphans are reconciled by the first opener (``on_first``)."""

    def changes(self, version: int) -> tuple[int, set[str] | None]:
        return self.read(lambda state: state.changed_since(version))

    def wait_changes(self, version: int, timeout_s: float, stop: threading.Event | None = None) -> bool:
        return wait_out(timeout_s, stop)  # (no change feed: the caller reads at this pace)

    def sync(self) -> None:
        """Puts every commit this process has written on disk (a no-op if they are).

        The ``fsync`` runs outside the store's locks, so commits from other threads go on
        meanwhile; concurrent callers, and committers in every process, share one ``fsync``.

        Raises:
            StoreError: the disk refused, now or before: the store is poisoned (see
                :meth:`_poison_with`); the records stay written, not known to be durable.
        """
        with self._mutex:
            if self._poison is not None:
                raise StoreError(self._poison)
            if self._synced >= self._written or self._fd < 0:
                return
            waiting = self._durable_wait(self._gen, self._offset)
        if waiting is not None:
            self._wait_durable(waiting)

    def _check_linked(self, fd: int) -> None:
        """Refuses to call a change saved that went to a segment deleted while in use (locks held).

        Removed from the data dir by hand, or by a cleanup or sync tool, the segment still
        takes writes and syncs through its open descriptor, into a file nobody will read:
        every change acknowledged after that would be lost. Asked at most every
        :data:`LINK_CHECK_EVERY_S`, not at every commit: a ``stat`` of a file between its
        writes and their ``fdatasync`` makes that sync markedly dearer (ext4, measured), so
        the changes of the second after a deletion may still go where nobody reads.

        Raises:
            StoreError: it was deleted: the store is poisoned (a reopen finds what is left).
        """
        try:
            linked = os.fstat(fd).st_nlink > 0
        except OSError:
            return  # (the write or the sync that follows says what is wrong with the disk)
        if not linked:
            poison = self._poison_with(f"{segment_name(self._gen)} was deleted while in use")
            raise StoreError(f"the change was not saved where the store can find it. {poison}")

    def _group_sync(self, gen: int, end: int, fd: int) -> None:
        """Returns once segment ``gen`` is on disk up to ``end``, syncing ``fd`` unless another sync covered it.

        Raises:
            OSError: the sync failed.
        """
        if self._group is None:
            _datasync(fd)
        else:
            self._group.wait_durable(gen, end, fd)

    def _durable_wait(self, gen: int, end: int) -> _Waiting | None:
        """What a wait outside the locks needs for segment ``gen`` to be durable up to ``end`` (mutex held).

        None if a sync covers it already. Otherwise the wait syncs a descriptor of its own:
        the segment's may be closed meanwhile, by a rotation in another thread.
        """
        written = self._written
        if self._group is not None and self._group.covers(gen, end):
            self._synced = max(self._synced, written)
            return None
        try:
            return _Waiting(gen, end, os.dup(self._fd), written)
        except OSError:
            pass  # no descriptor to spare: wait here, under the locks (as before group commit)
        self._wait_durable(_Waiting(gen, end, self._fd, written), owned=False)
        return None

    def _wait_durable(self, waiting: _Waiting, *, owned: bool = True) -> None:
        """Waits for a commit's sync, closing the descriptor the wait owns.

        Raises:
            StoreError: the sync failed. The records are written, and other processes may
                have read them, so nothing can be taken back: the store is poisoned, and
                it is not known whether the change was saved.
        """
        try:
            self._group_sync(waiting.gen, waiting.end, waiting.fd)
        except OSError as exc:
            cause = exc.strerror or str(exc)
            with self._mutex:
                poison = self._poison_with(cause)
            raise StoreError(
                f"could not flush the task store to disk: {cause}; "
                f"it is not known whether the change was saved. {poison}"
            ) from exc
        finally:
            if owned:
                os.close(waiting.fd)
        with self._mutex:
            if self._poison is not None:
                # a sync failed meanwhile (a rotation's, a close's): this one may have succeeded
                # without the pages that failure lost (the kernel reports an error once)
                raise StoreError(f"it is not known whether the change was saved. {self._poison}")
            self._synced = max(self._synced, waiting.written)

    def _sync_current(self) -> None:
        """Fsyncs the segment being left or closed if this process wrote to it unsynced (mutex held).

        A poisoned store does not try: its error has said already that those writes may
        be lost, and a second sync could succeed without having written them.

        Raises:
            StoreError: the disk refused; the store is poisoned.
        """
        if self._synced < self._written and self._fd >= 0 and self._poison is None:
            try:
                _datasync(self._fd)
            except OSError as exc:
                cause = exc.strerror or str(exc)
                raise StoreError(
                    f"could not flush the task store to disk: {cause}. {self._poison_with(cause)}"
                ) from exc
            self._synced = self._written

    # ----------------------------------------------------------------- carried results

    def _carry(self, gen: int, doc: Any) -> None:
        key = doc.get("key") if isinstance(doc, dict) else None
        if isinstance(key, str):
            self._carried[key] = (gen, doc)

    def carried_result(self, key: str) -> dict[str, Any] | None:
        """The result document for ``key`` carried by a journal record not yet compacted, or None."""
        entry = self._carried.get(key)
        return entry[1] if entry is not None else None

    def archived_result(self, key: str) -> dict[str, Any] | None:
        """The result document of the archived succeeded job holding ``key``, or None."""
        try:
            job = self.archive.by_key(key)
        except (OSError, StoreError) as exc:
            log.warning("could not read the archive: %s", exc)
            return None
        doc = cast(dict[str, Any], job).get("_res") if job is not None else None
        return doc if isinstance(doc, dict) else None

    def carried_keys(self) -> list[str]:
        """The keys whose result documents only the journal holds so far."""
        return list(self._carried)

    def _prune_carried(self, newest: int | None = None) -> None:
        """Forgets carried results that a snapshot has folded (their files are on disk by then).

        Args:
            newest: the newest snapshot's generation, if the caller has just listed it.
        """
        if not self._carried:
            return
        if newest is None:
            newest = self._newest_snapshot_gen()
        if not newest:
            return
        if any(gen <= newest for gen, _ in self._carried.values()):
            self._carried = {k: v for k, v in self._carried.items() if v[0] > newest}

    def _compact_soon(self, upto: int) -> None:
        """Folds closed segments into a snapshot in a child process (or inline if asked).

        A child process, not a thread: parsing and writing a large snapshot holds the GIL
        for seconds, which would freeze the caller (and the window) meanwhile.
        """
        self._fold_wanted = max(self._fold_wanted, upto)
        if not self.background_compaction:
            self._compact(upto)
            return
        if self._reap_compactor(wait=False) is not None:
            return  # one at a time; the first commit after it ends starts the next
        try:
            self._compactor = subprocess.Popen(
                [
                    sys.executable,
                    # not ``-m``: the package imports the module first, and runpy then
                    # warns (on the child's stderr, which the parent reports) that it
                    # runs a module already imported
                    "-c",
                    _CHILD,
                    str(self.root),
                    str(upto),
                    str(self.keep_finished),
                    repr(self.keep_finished_s),
                    repr(self.now()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                close_fds=True,
            )
        except OSError as exc:
            log.warning("could not start compaction (%s); compacting inline", exc)
            self._compact(upto)

    def _reap_compactor(self, wait: bool) -> subprocess.Popen[bytes] | None:
        """Collects a finished compaction child; returns the one still running (if any)."""
        if self._compactor is None:
            return None
        # commits in several threads look (outside the store's locks): one collects the
        # child and reads what it said, the others see it running until that is done
        if not self._reaping.acquire(blocking=wait):
            return self._compactor
        try:
            return self._reap_locked(wait)
        finally:
            self._reaping.release()

    def _reap_locked(self, wait: bool) -> subprocess.Popen[bytes] | None:
        child = self._compactor
        if child is None:
            return None
        raw: bytes | None = None
        try:
            if wait:
                # read while waiting: a child with more to say than a pipe holds would
                # otherwise block on its stderr, and this wait on it
                raw = child.communicate(timeout=120)[1]
                code = child.returncode
            else:
                code = child.poll()
        except subprocess.TimeoutExpired:
            log.warning("compaction is taking long; leaving it to finish on its own")
            return child
        if code is None:
            return child
        if raw is None:
            # (communicate, not a read: it keeps what an earlier, timed-out wait read)
            raw = child.communicate()[1]
        err = (raw or b"").decode(errors="replace").strip()
        if code != 0:
            # its last line says why (a traceback's lines before it would reach the user's terminal)
            lines = err.splitlines()
            log.warning("compaction failed (exit %s): %s", code, lines[-1][-500:] if lines else "no message")
        else:
            for line in err.splitlines():  # what it set aside (see compact): the user must hear of it
                log.warning("compaction: %s", line[-2000:])
                self.report.notices.append(line)
        self._compactor = None
        gen, self._snapshot_bytes = self._newest_snapshot()
        self._reaped_gen = gen
        with self._mutex:
            self._prune_carried(gen)
            self._follow_archive(gen)
        return None

    def _follow_archive(self, snapshot_gen: int | None = None) -> None:
        """Lets go of the finished jobs that a compaction (this process's or another's) archived.

        Looks at most every :data:`FOLLOW_ARCHIVE_S` (a directory listing): memory then
        holds the hot set, whatever the history. A job changed since it was archived
        stays. Purges that a compaction has folded stop hiding archived jobs.

        While a compaction runs, only the segments indexed already are followed: one
        that is running writes its segment before it indexes it, and a look in between
        would index the whole segment here (all its jobs parsed at once, on the caller's
        thread: a worker's driver). Its segment is followed at the next look.
        """
        self._follow_at = time.monotonic() + FOLLOW_ARCHIVE_S
        with self._mutex:
            try:
                numbers = self.archive.numbers()
                if numbers and numbers[-1] > self._archive_seen:
                    indexed = self.archive.indexed() if self._compaction_running() else None
                    if indexed is None:
                        self.archive.catch_up()
                    for number in numbers:
                        if number <= self._archive_seen:
                            continue
                        if indexed is not None and number not in indexed:
                            break  # (and the ones after it wait with it)
                        self.state.evict(self.archive.in_segment(number))
                        self._archive_seen = number
                if self.state.purges:
                    folded = snapshot_gen if snapshot_gen is not None else self._newest_snapshot_gen()
                    pending = [(g, p) for g, p in self.state.purges if g > folded]
                    if len(pending) < len(self.state.purges):
                        self.state.purges = pending
                        # the archive lost jobs, which no record names: what readers keep of
                        # it (the window's counts, its history pages) must be read again
                        self.state.touch_all()
            except (OSError, StoreError) as exc:  # memory only: the next look tries again
                log.warning("could not follow the archive: %s", exc)
            for notice in self.archive.notices:
                log.warning("%s", notice)
                self.report.notices.append(notice)
            self.archive.notices.clear()

    def _compaction_running(self) -> bool:
        """Whether a compaction, this process's child or any other, holds ``compact.lock`` now."""
        if self._compactor is not None and self._compactor.poll() is None:
            return True
        with self.quiet() as free:
            return not free

    def _newest_snapshot_gen(self) -> int:
        return self._newest_snapshot()[0]

    def _newest_snapshot(self) -> tuple[int, int]:
        """The newest snapshot's generation and size (0, 0 if none), from one directory listing."""
        snaps, _ = self._list()
        if not snaps:
            return 0, 0
        try:
            return snaps[-1], (self.root / snapshot_name(snaps[-1])).stat().st_size
        except OSError:
            return snaps[-1], 0

    def _compact(self, upto: int) -> None:
        """Folds segments ``<= upto`` into ``snapshot-<upto>`` from the files alone."""
        try:
            lock = FileLock(self.root / "compact.lock")
        except OSError as exc:
            # compaction only saves replay time at the next open: say so, and go on
            log.warning("compaction skipped: %s", self._io_error("cannot lock", exc))
            return
        written = 0
        try:
            if not lock.acquire(blocking=False):
                return  # another process is compacting
            notices: list[str] = []
            written = compact(
                self.root,
                upto,
                notices,
                keep_finished=self.keep_finished,
                keep_finished_s=self.keep_finished_s,
                now=self.now(),
            )
            for notice in notices:
                log.warning("compaction: %s", notice)
            self.report.notices.extend(notices)
        except OSError as exc:
            log.warning("compaction skipped: %s", self._io_error("cannot compact the task store", exc))
        except StoreError as exc:
            log.warning("compaction skipped: %s", exc)
        finally:
            lock.close()
        if written:
            # (once the lock is let go: the archive is followed when no compaction runs)
            self._snapshot_bytes = written
            with self._mutex:
                self._prune_carried()
                self._follow_archive()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the task store is closed")

    @property
    def segment(self) -> int:
        """The journal segment this process appends to."""
        return self._gen

    @property
    def write_offset(self) -> int:
        """Where the next record goes in that segment (the end of what is written)."""
        return self._offset
