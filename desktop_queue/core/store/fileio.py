"""Durable file primitives: atomic writes, directory fsync and OS file locks."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from desktop_queue.core.errors import StoreError

TEMP_MARK = ".tmp-"
#: what marks a damaged file set aside (``<name>.corrupt-<time>``; retention deletes them)
CORRUPT_MARK = ".corrupt-"


def fsync_dir(path: Path) -> None:
    """Makes a directory's entries (a rename, a new file) durable."""
    if sys.platform == "win32":  # directories cannot be opened for fsync there
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """``mkdir -p`` that also makes each directory it creates durable in its parent."""
    missing = []
    here = path
    while not here.exists():
        missing.append(here)
        here = here.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue
        fsync_dir(directory.parent)


def set_aside(path: Path) -> Path:
    """Moves a damaged file out of the way as ``<name>.corrupt-<local time>``; where it went.

    A copy set aside within the same second is kept: the next one is named ``…-2``,
    ``…-3``. The caller makes the rename durable if it must (:func:`fsync_dir`).

    Raises:
        OSError: it could not be moved (it stays where it is).
    """
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}{CORRUPT_MARK}{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}{CORRUPT_MARK}{stamp}-{n}")
    os.replace(path, target)
    return target


def set_aside_if_possible(path: Path) -> Path:
    """:func:`set_aside`, or ``path`` itself when it could not be moved: a reader that
    goes on without the file names where it is either way."""
    try:
        return set_aside(path)
    except OSError:
        return path


def temp_path_for(path: Path) -> Path:
    """A unique temp name in the same directory (so the final rename is atomic)."""
    return path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


class WriteCancelled(Exception):
    """An :func:`atomic_write` given ``cancelled`` stopped between two pieces; nothing was changed."""


#: what ``write_all`` pads with, a piece at a time (never written to, so its pages stay
#: the system's shared zero page: reading them costs this process no memory)
_ZEROS = bytes(1 << 20)


def write_all(
    fd: int,
    data: bytes | memoryview,
    *,
    sync_every: int = 0,
    cancelled: Callable[[], bool] | None = None,
    pad_to: int = 0,
) -> None:
    """Writes every byte (``os.write`` may write fewer than asked).

    With ``sync_every``, the data goes out in pieces of that many bytes, each synced
    before the next is written: a large file written in the background (a snapshot)
    then never fills the disk's queue, where a commit's own sync would wait behind it.
    ``cancelled`` is asked before each piece after the first. ``pad_to`` writes zeros
    after ``data`` up to that size, from one shared buffer (a journal segment made in
    advance: megabytes of zeros, which a ``data`` holding them would allocate and fill).

    Raises:
        WriteCancelled: ``cancelled`` said so.
    """
    for n, chunk in enumerate(_pieces(memoryview(data), sync_every, pad_to)):
        if n and sync_every:
            os.fsync(fd)
            if cancelled is not None and cancelled():
                raise WriteCancelled
        while chunk:
            written = os.write(fd, chunk)
            chunk = chunk[written:]


def _pieces(view: memoryview, size: int, pad_to: int) -> Iterator[memoryview]:
    """``view`` in pieces of ``size`` bytes (0: whole), then zeros up to ``pad_to`` bytes."""
    step = size or len(view) or 1
    for at in range(0, len(view), step):
        yield view[at : at + step]
    zeros = memoryview(_ZEROS)
    step = min(size or len(zeros), len(zeros))
    for at in range(len(view), pad_to, step):
        yield zeros[: min(step, pad_to - at)]


def append_lines(path: Path, payload: bytes) -> tuple[int, int, int]:
    """Appends ``payload`` (whole lines) to ``path`` durably, for files read line by line.

    A last line a crashed writer left torn is ended first, so it stays one line that a
    reader skips and the new records start on a line of their own. ``write_all``: a full
    disk may take part of the payload, and the rest then fails instead of vanishing.

    Returns:
        ``(device, inode, size)`` of the file it appended to, its size before the append
        (for a caller that keeps what it read of the file: see ``Outbox._append``).

    Raises:
        OSError: naming ``path`` (an error on a descriptor names no file by itself).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            st = os.fstat(fd)
            size = st.st_size
            if size:
                with open(path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        payload = b"\n" + payload
            write_all(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    return st.st_dev, st.st_ino, size


def atomic_write(
    path: Path,
    data: bytes,
    *,
    overwrite: bool = True,
    durable: bool = True,
    sync_every: int = 0,
    cancelled: Callable[[], bool] | None = None,
    pad_to: int = 0,
) -> bool:
    """Writes ``data`` to ``path`` so that readers see the old file or the new one, never half.

    Temp file in the same directory, write, ``fsync``, rename (or hard link when
    ``overwrite`` is False), ``fsync`` of the directory. With ``durable=False`` both
    fsyncs are skipped: still atomic for readers and safe from a process crash, but a
    power cut may lose the file (for copies of data that is durable elsewhere).
    ``sync_every`` paces a large durable write (see :func:`write_all`), and between its
    pieces ``cancelled`` may stop it: the temp file is then removed. ``pad_to``: zeros
    follow ``data`` up to that size (see :func:`write_all`).

    Returns:
        True if ``path`` now holds ``data``; False if ``overwrite`` is False and
        the file already existed (it is left untouched).

    Raises:
        StoreError: the disk is full or not writable; nothing was changed.
        WriteCancelled: ``cancelled`` stopped the write; nothing was changed.
    """
    tmp = temp_path_for(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            write_all(fd, data, sync_every=sync_every if durable else 0, cancelled=cancelled, pad_to=pad_to)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp, path)
            created = True
        else:
            try:
                os.link(tmp, path)
                created = True
            except FileExistsError:
                created = False
            finally:
                os.unlink(tmp)
        if durable:
            fsync_dir(path.parent)
        return created
    except WriteCancelled:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StoreError(f"could not write {path.name}: {exc.strerror or exc}; nothing was changed") from exc


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import ctypes
    import msvcrt
    from ctypes import wintypes

    _LOCKFILE_FAIL_IMMEDIATELY = 0x1
    _LOCKFILE_EXCLUSIVE_LOCK = 0x2
    _ERROR_LOCK_VIOLATION = 33

    class _Overlapped(ctypes.Structure):
        _fields_ = [
            ("Internal", ctypes.c_void_p),
            ("InternalHigh", ctypes.c_void_p),
            ("Offset", wintypes.DWORD),
            ("OffsetHigh", wintypes.DWORD),
            ("hEvent", wintypes.HANDLE),
        ]

    _kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)

    def _lock(fd: int, exclusive: bool, blocking: bool) -> bool:
        # LockFileEx, unlike msvcrt.locking, has shared locks (several readers, one opener)
        flags = (_LOCKFILE_EXCLUSIVE_LOCK if exclusive else 0) | (0 if blocking else _LOCKFILE_FAIL_IMMEDIATELY)
        handle = msvcrt.get_osfhandle(fd)
        if _kernel32.LockFileEx(handle, flags, 0, 1, 0, ctypes.byref(_Overlapped())):
            return True
        error = ctypes.get_last_error()
        if not blocking and error == _ERROR_LOCK_VIOLATION:
            return False
        raise ctypes.WinError(error)

    def _unlock(fd: int) -> None:
        _kernel32.UnlockFileEx(msvcrt.get_osfhandle(fd), 0, 1, 0, ctypes.byref(_Overlapped()))

    def _downgrade(fd: int) -> None:
        # a shared lock on top of the exclusive one, then one unlock removes the exclusive one
        _lock(fd, exclusive=False, blocking=True)
        _unlock(fd)

    def _bind_exclusive(fd: int) -> Callable[[], object]:
        return functools.partial(_lock, fd, True, True)

    def _bind_unlock(fd: int) -> Callable[[], object]:
        return functools.partial(_unlock, fd)

else:
    import fcntl

    def _lock(fd: int, exclusive: bool, blocking: bool) -> bool:
        flags = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if not blocking:
            flags |= fcntl.LOCK_NB
        try:
            fcntl.flock(fd, flags)
            return True
        except BlockingIOError:
            return False

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

    def _downgrade(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_SH)

    def _bind_exclusive(fd: int) -> Callable[[], object]:
        return functools.partial(fcntl.flock, fd, fcntl.LOCK_EX)

    def _bind_unlock(fd: int) -> Callable[[], object]:
        return functools.partial(fcntl.flock, fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Holds an exclusive :class:`FileLock` on ``path`` (its folder made if missing) for a block.

    For a read-change-write of one small file shared by processes; the lock file is
    opened for the block and closed after it.
    """
    make_dirs(path.parent)
    lock = FileLock(path)
    try:
        with lock.held():
            yield
    finally:
        lock.close()


class FileLock:
    """An OS advisory lock on a file; released by the OS when the process dies.

    Args:
        path: the lock file (created if missing).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._bind(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))

    @classmethod
    def on_directory(cls, directory: Path, fallback: Path) -> FileLock:
        """A lock on ``directory`` itself, which nothing can delete from under its holders.

        A lock file can be: whoever opens the path afterwards creates a new file and
        locks that, and the lock no longer excludes anyone (two processes commit at
        once; a newcomer takes itself for the only one). A directory that holds files
        cannot be removed, and ``flock`` works on a directory's descriptor (POSIX).
        Windows cannot open a directory this way, but there a file that is open
        cannot be deleted either, so the lock is taken on ``fallback`` instead.

        Args:
            directory: the directory to lock.
            fallback: the lock file used where directories cannot be locked.
        """
        lock = cls.__new__(cls)
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            lock.path = fallback
            lock._bind(os.open(fallback, os.O_RDWR | os.O_CREAT, 0o600))
        else:
            lock.path = directory
            lock._bind(os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)))
        return lock

    def _bind(self, fd: int) -> None:
        self._fd = fd
        #: takes the lock exclusively, blocking: the store's commit path, bound once (a
        #: straight system call where there is one, not two Python calls a commit)
        self.lock_exclusive: Callable[[], object] = _bind_exclusive(fd)
        #: releases the lock, bound likewise
        self.unlock: Callable[[], object] = _bind_unlock(fd)

    def acquire(self, exclusive: bool = True, blocking: bool = True) -> bool:
        """Takes the lock (shared or exclusive); returns False if not blocking and busy."""
        return _lock(self._fd, exclusive, blocking)

    def release(self) -> None:
        _unlock(self._fd)

    def downgrade(self) -> None:
        """Turns a held exclusive lock into a shared one.

        ``flock`` may let a waiting process take the lock in between (the conversion
        drops the old lock first), so callers keep other lockers out meanwhile.
        """
        _downgrade(self._fd)

    @contextlib.contextmanager
    def held(self, exclusive: bool = True) -> Iterator[None]:
        self.acquire(exclusive)
        try:
            yield
        finally:
            self.release()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
