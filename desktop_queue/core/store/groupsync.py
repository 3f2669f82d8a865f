"""Group commit: concurrent committers share one ``fdatasync``, in one process and across processes.

A sync covers every byte written to the file before it started, whoever wrote them. So
a committer that finds its record covered by someone else's sync need not sync again.
Every process that has a store open maps one small file, ``store/sync.state``, which
holds two marks:

    written   (segment, end): every byte of journal segment ``segment`` before ``end``
              has been written. Published by a committer right after its ``pwrite``,
              while it still holds the store's commit lock (so one writer at a time).
    synced    (segment, end): every such byte is on disk. Published by a syncer after
              its ``fdatasync`` returned, under the *sync lock* (one syncer at a time).

A committer that needs its record on disk (:meth:`GroupSync.wait_durable`) looks at the
synced mark without any lock; if it does not cover the record, it queues for the sync
lock, looks again (the syncer ahead of it may have covered it), and otherwise reads the
written mark, syncs, and publishes that written mark as synced: the syncer makes durable
the records of everyone who wrote before it started, and they return without a sync.

Marks compare as ``(segment, end)`` tuples: a later segment covers every earlier one,
since the store makes a segment durable before it writes to the next one (a rotation
syncs, then seals; opening the store syncs the segment it appends to). Within a segment
the same offsets are never written twice with different bytes while the marks are in
use: the store rewrites a segment only while loading, under the commit lock, and then
calls :meth:`GroupSync.reset`.

The file is read without a lock and may be damaged (a crash in the middle of an update,
a disk that returned garbage, a truncation). Each mark carries a 64-bit check (CRC-32
and Adler-32) of its own slot, segment and end; a mark that fails it reads as "nothing",
so damage costs an extra sync, and a damaged mark could claim more than was synced only
by passing both checks by chance.

Layout (64 bytes, native byte order: the file never leaves the machine)::

    0   8 bytes  b"DQSYNC" + version (u16)
    8  24 bytes  written: segment (u64), end (u64), check (u64)
    32 24 bytes  synced:  segment (u64), end (u64), check (u64)
    56  8 bytes  zero

The sync lock is an ``flock`` on the state file itself (POSIX), so the lock and the
marks it guards are always the same file: even if the file were replaced under live
processes, each group would stay consistent on its own. ``flock`` is per open file,
which the threads of one process share, so they queue on a ``threading.Lock`` as well.
Windows locks ranges of a file against reading as well, so there the lock is a
separate ``sync.lock`` beside it, and ``fsync`` stands in for ``fdatasync``.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from desktop_queue.core.store.fileio import FileLock, write_all

STATE_NAME = "sync.state"
LOCK_NAME = "sync.lock"  # Windows only (see the module docstring)
MAGIC = b"DQSYNC"
VERSION = 1
STATE_SIZE = 64

_HEADER = MAGIC + struct.pack("=H", VERSION)
_SLOT = struct.Struct("=QQQ")
_WRITTEN_AT = 8
_SYNCED_AT = 32
_NOTHING = (0, 0)  # segments are numbered from 1: (0, 0) covers nothing that is ever written

Mark = tuple[int, int]


def _check(slot: int, gen: int, end: int) -> int:
    """The check word of a mark: CRC-32 and Adler-32 of its slot, segment and end.

    Two unrelated sums, so that a slot made of random bytes, or of words of two
    different updates (a read in the middle of one), passes only by a rare chance
    (a CRC alone is linear: its faults line up); keyed by the slot, so that a copy of
    one slot into the other fails. Cheap: it runs several times a commit.
    """
    data = _SLOT.pack(slot, gen, end)
    return zlib.crc32(data) | zlib.adler32(data) << 32


def datasync(fd: int) -> None:
    """``fdatasync`` where the OS has it, else ``fsync`` (looked up at each call, so tests can patch ``os``)."""
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:
        os.fsync(fd)


def initial_state() -> bytes:
    """A state file that says nothing is written and nothing is synced."""
    slots = _SLOT.pack(*_NOTHING, _check(_WRITTEN_AT, *_NOTHING)) + _SLOT.pack(*_NOTHING, _check(_SYNCED_AT, *_NOTHING))
    return (_HEADER + slots).ljust(STATE_SIZE, b"\0")


class GroupSync:
    """The shared written and synced marks of one store directory, and the lock syncers take.

    Args:
        store_dir: the ``store`` directory (``sync.state`` is created there if absent).
        sync: makes a descriptor's data durable; default :func:`datasync`. The store
            passes its own, so that what tests patch there is what runs.

    Attributes:
        syncs: syncs this object made.
        skipped: waits that found their record already covered (no sync).
        failures: syncs that raised.

    Raises:
        OSError: the state file cannot be created, opened or mapped.
    """

    def __init__(self, store_dir: Path, *, sync: Callable[[int], None] = datasync) -> None:
        self.path = Path(store_dir) / STATE_NAME
        self._sync = sync
        self.syncs = 0
        self.skipped = 0
        self.failures = 0
        #: the newest mark this process knows to be synced: checked first, with no system
        #: call and no read of the shared file
        self._local: Mark = _NOTHING
        #: the first sync that failed: after it, a later sync of this process may succeed
        #: without having written what was lost (the kernel reports a write-back error
        #: once), so nothing it did not know synced before is ever reported synced again
        self._failure: OSError | None = None
        self._threads = threading.Lock()
        self._counting = threading.Lock()  # the fast path counts without the sync lock
        self._create()
        self._lock = FileLock(self.path.with_name(LOCK_NAME) if sys.platform == "win32" else self.path)
        try:
            fd = os.open(self.path, os.O_RDWR)
            try:
                if not self._well_formed(fd):  # (looked at without the lock: a syncer may hold it for long)
                    with self.held():
                        self._repair(fd)
                self._map = mmap.mmap(fd, STATE_SIZE)
            finally:
                os.close(fd)
        except BaseException:
            self._lock.close()
            raise

    def _create(self) -> None:
        """Makes the state file if there is none, in place: never through a temp file.

        It is made before this process holds any lock of the store, and a first opener
        meanwhile removes every temp file of the store directory as an unfinished write.
        A file made in place and not yet written (or cut short by a crash) is not well
        formed, and whoever opens it next repairs it (see :meth:`_repair`).
        """
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        try:
            write_all(fd, initial_state())
        finally:
            os.close(fd)

    @staticmethod
    def _well_formed(fd: int) -> bool:
        os.lseek(fd, 0, os.SEEK_SET)  # (no pread on Windows; this descriptor is ours alone)
        head = os.read(fd, STATE_SIZE)
        return len(head) == STATE_SIZE and head.startswith(_HEADER)

    def _repair(self, fd: int) -> None:
        """Makes the file a full state saying "nothing" if it is not well formed (sync lock held).

        Done in place, never by replacing the file, so every process keeps mapping (and
        locking) the same one. The file is never made shorter: another process may map it.
        """
        if not self._well_formed(fd):
            os.ftruncate(fd, max(os.fstat(fd).st_size, STATE_SIZE))
            os.lseek(fd, 0, os.SEEK_SET)
            write_all(fd, initial_state())

    # ----------------------------------------------------------------- the marks

    def _read(self, at: int) -> Mark:
        """The mark in slot ``at``; :data:`_NOTHING` if the file or the slot is damaged (no lock)."""
        buf = self._map
        if buf[0:8] != _HEADER:
            return _NOTHING
        gen, end, check = _SLOT.unpack_from(buf, at)
        if check != _check(at, gen, end):
            return _NOTHING  # damaged, or read in the middle of an update
        return gen, end

    def _write(self, at: int, mark: Mark) -> None:
        _SLOT.pack_into(self._map, at, *mark, _check(at, *mark))

    def written(self) -> Mark:
        """The published written mark (``(0, 0)`` when unknown)."""
        return self._read(_WRITTEN_AT)

    def synced(self) -> Mark:
        """The published synced mark (``(0, 0)`` when unknown)."""
        return self._read(_SYNCED_AT)

    def covers(self, gen: int, end: int) -> bool:
        """Whether ``segment gen`` up to ``end`` is known to be on disk (no system call)."""
        mark = (gen, end)
        if mark <= self._local:
            return True
        if self._failure is not None:
            return False  # others' marks since may stand on what this process lost
        synced = self._read(_SYNCED_AT)
        if mark <= synced:
            self._local = synced
            return True
        return False

    def note_written(self, gen: int, end: int) -> None:
        """Publishes that segment ``gen`` is written up to ``end`` (callers hold the commit lock).

        Call it only once the bytes are final: a write that may still be undone must not
        be published, or a sync would mark the zeros put back over it as synced. The mark
        never goes back (a smaller or older one is ignored); a newer segment replaces it.
        """
        if (gen, end) > self._read(_WRITTEN_AT):
            self._write(_WRITTEN_AT, (gen, end))

    # ----------------------------------------------------------------- syncing

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Holds the sync lock: no thread or process syncs or publishes a synced mark meanwhile."""
        with self._threads:
            self._lock.lock_exclusive()
            try:
                yield
            finally:
                self._lock.unlock()

    def wait_durable(self, gen: int, end: int, fd: int) -> bool:
        """Returns once segment ``gen`` is on disk up to ``end``, syncing ``fd`` only if no one else did.

        Call it after releasing the commit lock, so that others write (and publish) while
        this one waits for the sync lock: the sync it then makes covers them too.

        Args:
            gen: the segment the record was written to.
            end: where the record ends.
            fd: a descriptor of that segment, open for the whole call.

        Returns:
            True if this call synced, False if the record was covered already.

        Raises:
            OSError: the sync failed (then and at every later call that is not covered
                already): no synced mark is published for it, and the caller must treat
                what it wrote as not known to be on disk.
        """
        if self.covers(gen, end):
            with self._counting:
                self.skipped += 1
            return False
        # (the locks by hand, not held(): a generator-based context costs a microsecond here)
        with self._threads:
            if self.covers(gen, end):
                # a thread of this process synced while this one waited for it: no need to
                # queue for the file lock behind every other process's syncer
                with self._counting:
                    self.skipped += 1
                return False
            self._lock.lock_exclusive()
            try:
                return self._sync_locked(gen, end, fd)
            finally:
                self._lock.unlock()

    def _sync_locked(self, gen: int, end: int, fd: int) -> bool:
        """The part of :meth:`wait_durable` under the sync lock."""
        mark = (gen, end)
        # (read once: no one else publishes a synced mark while the lock is held)
        synced = _NOTHING if self._failure is not None else self._read(_SYNCED_AT)
        if mark <= self._local or mark <= synced:  # the syncer ahead of this one covered it
            self._local = max(self._local, synced)
            with self._counting:
                self.skipped += 1
            return False
        if self._failure is not None:
            failure = self._failure
            raise OSError(failure.errno or errno.EIO, f"an earlier sync failed: {failure.strerror or failure}")
        # everything published as written before the sync starts is covered by it
        written = self._read(_WRITTEN_AT)
        target = max(mark, written) if written[0] == gen else mark
        try:
            self._sync(fd)
        except OSError as exc:
            self.failures += 1
            self._failure = exc
            raise
        self.syncs += 1
        synced = max(synced, target)
        self._write(_SYNCED_AT, synced)
        self._local = synced
        return True

    def reset(self) -> None:
        """Forgets both marks, for everyone (after a segment was rewritten: its offsets mean other bytes now).

        Taken under the sync lock, so no sync that started before lands its mark after.
        """
        with self.held():
            self._map[:] = initial_state()  # the header too: a damaged one would make every mark unreadable
            self._local = _NOTHING

    def close(self) -> None:
        """Unmaps the state and drops the lock (no call may follow)."""
        self._map.close()
        self._lock.close()
