"""A FUSE file system that forgets, on demand, everything not yet made durable: a power cut.

It passes every call through to a backing directory, and remembers what a power cut
would take back, in the strict model of POSIX (the one CrashMonkey and ALICE test
against; a real ext4 keeps more, never less):

* a file's data written since its last ``fsync``/``fdatasync`` (a cut restores the bytes
  it had then; a file never synced comes back empty);
* a name created, renamed, linked or unlinked in a directory since that directory's last
  ``fsync`` (a cut takes the change back).

``sync(2)`` and ``syncfs(2)`` do not reach a FUSE file system, so a process that relies
on them must sync file by file here (the drill arranges that).

Run as ``python crashfs.py BACKING MOUNT CONTROL``: it mounts in the foreground. Writing
``cut`` to ``CONTROL/cmd`` (once every process using the mount is killed) makes the cut;
``CONTROL/state`` then says ``done`` and what was taken back.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from typing import Any

from mfusepy import FUSE, FuseOSError, Operations


class CrashFS(Operations):
    use_ns = True  # utimens takes nanoseconds (mfusepy warns of floating-point seconds)

    def __init__(self, root: str, control: str) -> None:
        self.root = os.path.realpath(root)
        self.control = control
        # (not "lock": that name is the FUSE operation for POSIX locks)
        self.mutex = threading.RLock()
        self.synced: dict[int, bytes] = {}  # inode -> its bytes at its last sync (files written since)
        self.names: dict[str, list[tuple[Any, ...]]] = {}  # directory -> name changes since its last sync
        self.counts = {"writes": 0, "syncs": 0, "dirsyncs": 0}
        self.stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _keep(self, real: str) -> None:
        ino = os.stat(real).st_ino
        if ino not in self.synced:
            with open(real, "rb") as f:
                self.synced[ino] = f.read()

    def _name(self, real: str, change: tuple[Any, ...]) -> None:
        self.names.setdefault(os.path.dirname(real), []).append(change)

    # ------------------------------------------------------------------ the cut

    def _watch(self) -> None:
        cmd = os.path.join(self.control, "cmd")
        while not self.stop.wait(0.05):
            try:
                with open(cmd) as f:
                    word = f.read().strip()
            except OSError:
                continue
            if word == "cut":
                os.unlink(cmd)
                with self.mutex:
                    said = self.cut()
                with open(os.path.join(self.control, "state"), "w") as f:
                    f.write(f"done {said}\n")

    def cut(self) -> str:
        undone = 0
        for changes in self.names.values():
            for change in reversed(changes):
                kind, path = change[0], change[1]
                try:
                    if kind in ("create", "link"):
                        os.unlink(path)
                    elif kind == "mkdir":
                        os.rmdir(path)
                    elif kind == "rename":
                        _, src, dst, replaced = change
                        os.rename(dst, src)
                        if replaced is not None:
                            with open(dst, "wb") as f:
                                f.write(replaced)
                    elif kind == "unlink":
                        with open(path, "wb") as f:
                            f.write(change[2])
                    undone += 1
                except OSError as exc:
                    print(f"crashfs: could not take back {kind} {path}: {exc}", file=sys.stderr)
        self.names.clear()
        restored = 0
        for directory, _dirs, files in os.walk(self.root):
            for name in files:
                real = os.path.join(directory, name)
                before = self.synced.get(os.stat(real).st_ino)
                if before is not None:
                    with open(real, "wb") as f:
                        f.write(before)
                    restored += 1
        self.synced.clear()
        return f"names taken back {undone}, files restored {restored}, {self.counts}"

    # ------------------------------------------------------------------ passthrough

    def access(self, path: str, mode: int) -> None:
        if not os.access(self._real(path), mode):
            raise FuseOSError(errno.EACCES)

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._real(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._real(path), uid, gid)

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        st = os.lstat(self._real(path))
        attrs = {k: getattr(st, k) for k in ("st_gid", "st_mode", "st_nlink", "st_size", "st_uid", "st_ino")}
        # (use_ns: times in nanoseconds; the store tells a file was replaced by its mtime_ns)
        return {**attrs, "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

    def readdir(self, path: str, fh: Any) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, Any]:
        stv = os.statvfs(self._real(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag")
        return {k: getattr(stv, k) for k in (*keys, "f_frsize", "f_namemax")}

    def utimens(self, path: str, times: Any = None) -> None:
        if times is None:
            os.utime(self._real(path))
        else:
            os.utime(self._real(path), ns=tuple(times))

    def open(self, path: str, flags: int) -> int:
        real = self._real(path)
        with self.mutex:
            if flags & os.O_TRUNC:
                self._keep(real)
            return os.open(real, flags)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        real = self._real(path)
        with self.mutex:
            existed = os.path.exists(real)
            if existed:
                self._keep(real)
            fd = os.open(real, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
            if not existed:
                self._name(real, ("create", real))
                self.synced[os.fstat(fd).st_ino] = b""  # its bytes are not durable either
            return fd

    def mkdir(self, path: str, mode: int) -> None:
        real = self._real(path)
        with self.mutex:
            os.mkdir(real, mode)
            self._name(real, ("mkdir", real))

    def rmdir(self, path: str) -> None:
        os.rmdir(self._real(path))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self.mutex:
            return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self.mutex:
            if os.fstat(fh).st_ino not in self.synced:
                self._keep(self._real(path))
            self.counts["writes"] += 1
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: Any = None) -> None:
        real = self._real(path)
        with self.mutex:
            self._keep(real)
            os.truncate(real, length)

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            os.fsync(fh)
            self.synced.pop(os.fstat(fh).st_ino, None)
            self.counts["syncs"] += 1
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: Any) -> int:
        with self.mutex:
            self.names.pop(self._real(path).rstrip("/"), None)
            self.counts["dirsyncs"] += 1
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> None:
        os.close(fh)

    def rename(self, old: str, new: str) -> None:
        src, dst = self._real(old), self._real(new)
        with self.mutex:
            replaced = None
            if os.path.exists(dst):
                with open(dst, "rb") as f:
                    replaced = f.read()
            os.rename(src, dst)
            self._name(dst, ("rename", src, dst, replaced))

    def link(self, target: str, source: str) -> None:
        dst = self._real(target)
        with self.mutex:
            os.link(self._real(source), dst)
            self._name(dst, ("link", dst))

    def unlink(self, path: str) -> None:
        real = self._real(path)
        with self.mutex:
            try:
                with open(real, "rb") as f:
                    content = f.read()
            except OSError:
                content = b""
            os.unlink(real)
            self._name(real, ("unlink", real, content))

    def symlink(self, target: str, source: str) -> None:
        os.symlink(source, self._real(target))


if __name__ == "__main__":
    backing, mount, control = sys.argv[1:4]
    # the kernel caches no name or attribute: a cut changes the backing directory behind its back
    FUSE(
        CrashFS(backing, control),
        mount,
        foreground=True,
        nothreads=True,
        entry_timeout=0,
        attr_timeout=0,
        negative_timeout=0,
    )
