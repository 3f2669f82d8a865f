"""Durable file primitives: atomic writes, directory fsync and OS file locks."""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

from desktop_queue.core.errors import StoreError

TEMP_MARK = ".tmp-"


def fsync_dir(path: Path) -> None:
    """Makes a directory's entries (a rename, a new file) durable."""
    if sys.platform == "win32":  # directories cannot be opened for fsync there
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path_for(path: Path) -> Path:
    """A unique temp name in the same directory (so the final rename is atomic)."""
    return path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def write_all(fd: int, data: bytes) -> None:
    """Writes every byte (``os.write`` may write fewer than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def atomic_write(path: Path, data: bytes, *, overwrite: bool = True) -> bool:
    """Writes ``data`` to ``path`` so that readers see the old file or the new one, never half.

    Temp file in the same directory, write, ``fsync``, rename (or hard link when
    ``overwrite`` is False), ``fsync`` of the directory.

    Returns:
        True if ``path`` now holds ``data``; False if ``overwrite`` is False and
        the file already existed (it is left untouched).

    Raises:
        StoreError: the disk is full or not writable; nothing was changed.
    """
    tmp = temp_path_for(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            write_all(fd, data)
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
        fsync_dir(path.parent)
        return created
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StoreError(f"could not write {path.name}: {exc.strerror or exc}; nothing was changed") from exc


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _lock(fd: int, exclusive: bool, blocking: bool) -> bool:
        mode = msvcrt.LK_LOCK if blocking else msvcrt.LK_NBLCK
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, mode, 1)
            return True
        except OSError:
            if blocking:
                raise
            return False

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

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


class FileLock:
    """An OS advisory lock on a file; released by the OS when the process dies.

    Args:
        path: the lock file (created if missing).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def acquire(self, exclusive: bool = True, blocking: bool = True) -> bool:
        """Takes the lock (shared or exclusive); returns False if not blocking and busy."""
        return _lock(self._fd, exclusive, blocking)

    def release(self) -> None:
        _unlock(self._fd)

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
