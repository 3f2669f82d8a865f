"""The result store: one durable JSON file per idempotency key, written once, never overwritten.

A result may carry a binary artifact (an image, an audio file) as ``artifact_b64``
(with ``artifact_name`` and ``mime``). The store writes the decoded bytes as a file
next to the JSON result, named by the key with the artifact's extension
(``results/ab/<key>.png``), *before* the JSON result; the stored JSON keeps
``artifact_ref`` (the file's path relative to the data dir), ``artifact_bytes``,
``artifact_sha256`` and ``mime`` instead of the base64 text.

The JSON result of a job is made durable by the journal record that marks the job
succeeded, which carries it; the file under ``results/`` is written when compaction
folds that record into a snapshot (or earlier, when someone asks for its path: see
:meth:`ResultStore.materialize`). Until then :meth:`ResultStore.get` answers from the
store's memory, so a lifecycle costs no result-file I/O.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ctypes
import glob
import hashlib
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from desktop_queue.core.errors import QueueError, StoreCorrupt
from desktop_queue.core.store.fileio import (
    CORRUPT_MARK,
    TEMP_MARK,
    atomic_write,
    fsync_dir,
    make_dirs,
    set_aside_if_possible,
)

log = logging.getLogger(__name__)

RESULT_FORMAT = "desktop-queue.result"

#: a key usable as a file name as it is (``\w`` is ``str.isalnum`` plus the underscore)
_TAME = re.compile(r"[\w.-]+")
_O_BINARY = getattr(os, "O_BINARY", 0)

#: mime type -> file extension, for artifacts whose name carries none
MIME_EXTENSIONS: dict[str, str] = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/webp": "webp",
    "image/gif": "gif",
    "audio/mpeg": "mp3",
    "audio/ogg": "opus",
    "audio/opus": "opus",
    "audio/aac": "aac",
    "audio/flac": "flac",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/L16": "pcm",
    "audio/pcm": "pcm",
}


class InvalidArtifact(ValueError):
    """A result's ``artifact_b64`` is not valid base64 (nothing was written)."""


@dataclass(frozen=True)
class ResultProblem:
    """Why a job that has a ``result_ref`` has no readable result (see :meth:`ResultStore.problem`).

    Attributes:
        kind: ``missing`` (no file, and the journal no longer holds it) or ``damaged``
            (the file could not be read as a result and was moved aside).
        ref: the job's ``result_ref`` (relative to the data dir).
        moved_to: where a damaged file was kept aside, or None.
    """

    kind: str
    ref: str
    moved_to: Path | None = None

    @property
    def message(self) -> str:
        if self.moved_to is not None:
            return f"result damaged, moved aside to {self.moved_to}"
        return f"result file missing: {self.ref} is not there any more"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "ref": self.ref,
            "moved_to": str(self.moved_to) if self.moved_to is not None else None,
        }


def artifact_extension(name: Any, mime: Any) -> str:
    """The artifact file's extension: the name's (if tame), else the mime type's, else ``bin``.

    Never ``json``: that is the result document's own extension.
    """
    if isinstance(name, str) and "." in name:
        ext = name.rsplit(".", 1)[1].lower()
        if 0 < len(ext) <= 8 and ext.isalnum() and ext != "json":
            return ext
    if isinstance(mime, str):
        return MIME_EXTENSIONS.get(mime.split(";", 1)[0].strip(), "bin")
    return "bin"


#: In results/: its modification time is when the last sweep of a first opener began
#: (see :meth:`ResultStore.remove_temp_files`).
SWEPT_MARK = ".swept"


def _changed_since(entry: os.DirEntry[str], since_ns: int) -> bool:
    """Whether a directory's entries changed at or after ``since_ns`` (True when unknown)."""
    try:
        return entry.stat(follow_symlinks=False).st_mtime_ns >= since_ns
    except OSError:
        return True


def _load_syncfs() -> Callable[[int], None] | None:
    """Linux's ``syncfs(fd)`` (glibc 2.14): flushes one file system, and reports a write-back error."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int]
    call.restype = ctypes.c_int

    def syncfs(fd: int) -> None:
        if call(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return syncfs


#: None where there is no ``syncfs``: each file and directory is synced then
_syncfs = _load_syncfs()


_OCTAL = re.compile(r"\\([0-7]{3})")


def _fs_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the file system ``path`` lies on (Linux), or None if it cannot be told."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        # (a mount point with a space or a tab in it is written with octal escapes)
        point = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, right.split()[0]
    return kind


def syncfs_reaches(path: str) -> bool:
    """Whether ``syncfs`` makes what was written under ``path`` durable.

    It does not on a FUSE file system (``fuse``, ``fuse.sshfs``, ``fuseblk``: an
    encrypted home through gocryptfs, a remote folder, an NTFS disk): the kernel hands
    the daemon no sync of the whole file system, and the call returns success all the
    same. There each file and directory is synced instead.
    """
    kind = _fs_type(path)
    return kind is not None and not kind.startswith("fuse")


class ResultStore:
    """Results keyed by idempotency key, under ``<data dir>/results/<k[:2]>/<k>.json``.

    A result is written before its job is marked ``succeeded``; a key that already
    has a result keeps the first one (so a result is never produced twice).

    Args:
        root: the ``results`` directory.
        carried: looks up a result document held by the journal and not yet written as
            a file (the store's :meth:`~desktop_queue.core.store.journal.Store.carried_result`).
        carried_keys: the keys of those documents (the store's ``carried_keys``).
        archived: looks up the result document of an archived job, which the archive
            holds instead of a file (the store's :meth:`~desktop_queue.core.store.journal.Store.archived_result`).
    """

    def __init__(
        self,
        root: Path,
        carried: Callable[[str], dict[str, Any] | None] | None = None,
        carried_keys: Callable[[], Iterable[str]] | None = None,
        archived: Callable[[str], dict[str, Any] | None] | None = None,
        archived_count: Callable[[], int] | None = None,
        fetch_artifact: Callable[[str], bytes | None] | None = None,
    ) -> None:
        self.root = Path(root)
        # (a store several machines share: the artifacts other machines made, see artifact_file)
        self._fetch_artifact = fetch_artifact
        self._root_s = str(self.root)
        self._syncfs_reaches: bool | None = None  # (asked once, the first time files are synced)
        self._carried = carried
        self._carried_keys = carried_keys
        self._archived = archived
        self._archived_count = archived_count

    @staticmethod
    def _safe(key: str) -> str:
        # keys are hex fingerprints or caller-chosen strings; keep file names tame
        if 0 < len(key) <= 128 and (key.isalnum() or (_TAME.fullmatch(key) and not key.startswith("."))):
            return key
        return "k-" + hashlib.sha256(key.encode()).hexdigest()

    def path_str_for(self, key: str) -> str:
        """:meth:`path_for` as a string, for loops over thousands of keys (a ``Path`` costs more than the look-up)."""
        name = self._safe(key)
        return f"{self._root_s}{os.sep}{name[:2]}{os.sep}{name}.json"

    def path_for(self, key: str) -> Path:
        name = self._safe(key)
        return self.root / name[:2] / f"{name}.json"

    def ref_for(self, key: str) -> str:
        """The ``result_ref`` stored on the job: a path relative to the data dir."""
        name = self._safe(key)
        return f"results{os.sep}{name[:2]}{os.sep}{name}.json"  # os.path.join's result, cheaper

    def artifact_path_for(self, key: str, extension: str, epoch: int | None = None) -> Path:
        """Where the artifact of ``key`` lives: next to its JSON result, ``<key>.<extension>``.

        An attempt's artifact written before its commit is named by its lease epoch
        too (``<key>-e<epoch>.<extension>``), so that a stale holder's file can never
        stand in for the current holder's.
        """
        name = self._safe(key)
        suffix = "" if epoch is None else f"-e{epoch}"
        return self.root / name[:2] / f"{name}{suffix}.{extension}"

    def resolve(self, ref: str) -> Path:
        """The absolute path of a ref relative to the data dir (``results/ab/<key>.png``)."""
        path = (self.root.parent / ref).resolve()
        if self.root.resolve() not in path.parents:
            raise ValueError(f"{ref!r} is not inside the result store")
        return path

    def artifact_file(self, ref: str) -> Path:
        """:meth:`resolve` for reading the artifact: one that another machine sharing the
        store made, and this one lacks, is fetched into this data dir first.

        A fetch that fails leaves the file missing (the caller says so, as of any missing
        artifact); the bytes come checked against the checksum they were stored with.

        Raises:
            ValueError: ``ref`` lies outside the result store.
        """
        path = self.resolve(ref)
        if self._fetch_artifact is not None and not os.path.exists(path):
            try:
                data = self._fetch_artifact(ref)
            except QueueError as exc:
                log.warning("could not fetch the artifact %s: %s", ref, exc)
                return path
            if data is not None:
                try:
                    make_dirs(path.parent)
                    # (no fsync: a copy of what the shared store keeps, fetched again if lost;
                    # one fetched meanwhile by another thread or process is kept)
                    atomic_write(path, data, overwrite=False, durable=False)
                except OSError as exc:
                    log.warning("could not keep the fetched artifact %s: %s", path, exc)
        return path

    def read_artifact(self, ref: str) -> bytes | None:
        """The bytes of the artifact file ``ref`` in this data dir, or None (missing, or outside the store)."""
        try:
            return self.resolve(ref).read_bytes()
        except (ValueError, OSError):
            return None

    def artifact_path(self, key: str) -> Path | None:
        """The artifact file of the result stored for ``key``, or None (no result, no artifact)."""
        doc = self.get(key)
        result = doc.get("result") if doc is not None else None
        ref = result.get("artifact_ref") if isinstance(result, Mapping) else None
        if not isinstance(ref, str):
            return None
        try:
            return self.artifact_file(ref)
        except ValueError:
            return None

    def _store_artifact(self, key: str, result: Any, epoch: int | None = None) -> Any:
        """Writes a result's ``artifact_b64`` as a file; returns the result that refers to it.

        The file is written atomically and never replaced: one left by an earlier
        attempt of the same key (a crash between artifact and JSON, or a concurrent
        writer that wins the JSON too) is kept, and the result describes that file.
        """
        if not isinstance(result, Mapping) or "artifact_b64" not in result:
            return result
        encoded = result["artifact_b64"]
        try:
            if not isinstance(encoded, str):
                raise TypeError("not a string")
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise InvalidArtifact(f"the result's artifact is not valid base64 ({exc})") from None
        ext = artifact_extension(result.get("artifact_name"), result.get("mime"))
        path = self.artifact_path_for(key, ext, epoch)
        make_dirs(path.parent)
        if not atomic_write(path, data, overwrite=False):
            data = path.read_bytes()  # the first complete artifact of this key stays
        out = {k: v for k, v in result.items() if k != "artifact_b64"}
        out["artifact_name"] = path.name
        out["artifact_ref"] = str(Path("results") / path.relative_to(self.root))
        out["artifact_bytes"] = len(data)
        out["artifact_sha256"] = hashlib.sha256(data).hexdigest()
        if not out.get("mime"):
            out["mime"] = "application/octet-stream"
        return out

    def put(
        self, key: str, result: Any, *, job_id: str, epoch: int, produced_at: float, durable: bool = True
    ) -> tuple[str, bool]:
        """Stores ``result`` for ``key`` unless one exists.

        An artifact (``artifact_b64``) is written as its own file first (always durably),
        then the JSON result that refers to it (see the module docstring). With
        ``durable=False`` the JSON file is not fsynced: the caller makes the result durable
        another way (the queue carries it in the journal record that marks the job
        ``succeeded``, and compaction syncs the files before that record is folded away).

        Returns:
            ``(result_ref, created)``: created is False when an earlier result was kept.

        Raises:
            InvalidArtifact: ``artifact_b64`` is not base64 (nothing was stored).
        """
        doc = self.put_new(key, result, job_id=job_id, epoch=epoch, produced_at=produced_at, durable=durable)
        return self.ref_for(key), doc is not None

    def put_new(
        self, key: str, result: Any, *, job_id: str, epoch: int, produced_at: float, durable: bool = True
    ) -> dict[str, Any] | None:
        """:meth:`put`, for a caller that wants the document it wrote: that, or None when
        an earlier result was kept."""
        path = self.path_for(key)
        make_dirs(path.parent)
        if self.has(key):  # write-once: the first result (and its artifact) is kept, file or journal
            return None
        result = self._store_artifact(key, result)
        doc = self.document(key, result, job_id=job_id, epoch=epoch, produced_at=produced_at)
        return doc if atomic_write(path, orjson.dumps(doc), overwrite=False, durable=durable) else None

    def _pending_path(self, key: str, epoch: int) -> Path:
        return Path(self._pending_s(key, epoch))

    def _pending_s(self, key: str, epoch: int) -> str:
        return f"{self._root_s}{os.sep}pending{os.sep}{self._safe(key)}.{int(epoch)}.json"

    def put_pending(self, key: str, result: Any, *, job_id: str, epoch: int, produced_at: float) -> dict[str, Any]:
        """Keeps an attempt's result until its commit: never the key's result by itself.

        The worker writes this the moment the provider answers, so that a crash before
        the commit does not lose what was paid for; only the holder of the lease
        ``epoch`` can turn it into the key's result (:meth:`Queue.complete
        <desktop_queue.core.queue.Queue.complete>`, or the reaper and start-up
        reconciliation when that holder died with the lease still current). A stale
        holder's pending result is never read. The artifact, if any, is written durably
        under the epoch's own name; the JSON is not synced (the commit's journal record
        carries it).

        Returns:
            The result document (artifact already replaced by its reference).

        Raises:
            InvalidArtifact: ``artifact_b64`` is not base64 (nothing was stored).
        """
        doc = self.attempt_document(key, result, job_id=job_id, epoch=epoch, produced_at=produced_at)
        self.keep_pending(doc, durable=False)
        return doc

    def keep_pending(self, doc: dict[str, Any], *, durable: bool) -> None:
        """Writes an attempt's document (see :meth:`attempt_document`) as its pending result.

        ``durable`` when no journal record will carry it: an answer a refused commit held
        in memory, kept as the process ends.
        """
        path = self._pending_path(doc["key"], doc["epoch"])
        make_dirs(path.parent)
        atomic_write(path, orjson.dumps(doc), durable=durable)

    def attempt_document(self, key: str, result: Any, *, job_id: str, epoch: int, produced_at: float) -> dict[str, Any]:
        """The document of one attempt's result; its artifact, if any, written (durably) first."""
        return self.document(
            key, self._store_artifact(key, result, epoch), job_id=job_id, epoch=epoch, produced_at=produced_at
        )

    def pending(self, key: str, epoch: int) -> dict[str, Any] | None:
        """The result the holder of lease ``epoch`` kept before its commit, or None."""
        path = self._pending_s(key, epoch)
        if not os.access(path, os.F_OK):
            return None  # the usual case on every commit: told without raising
        try:
            with open(path, "rb") as fh:
                doc = orjson.loads(fh.read())
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("format") != RESULT_FORMAT or doc.get("epoch") != epoch:
            return None
        return doc

    def drop_pending(self, key: str, epoch: int) -> None:
        """Removes a pending result once its commit made it the key's result (or it went stale)."""
        with contextlib.suppress(OSError):
            os.unlink(self._pending_s(key, epoch))

    @staticmethod
    def document(key: str, result: Any, *, job_id: str, epoch: int, produced_at: float) -> dict[str, Any]:
        """The JSON document stored for a result without an artifact (see :meth:`put`)."""
        return {
            "format": RESULT_FORMAT,
            "schema_version": 1,
            "key": key,
            "job_id": job_id,
            "epoch": epoch,
            "produced_at": produced_at,
            "result": result,
        }

    @staticmethod
    def has_artifact(result: Any) -> bool:
        """True when ``result`` carries an artifact that :meth:`put` writes as its own file."""
        return isinstance(result, Mapping) and "artifact_b64" in result

    def write(self, doc: dict[str, Any], *, durable: bool) -> bool:
        """Writes a result document unless the key has one already; True if written."""
        path = self.path_for(doc["key"])
        make_dirs(path.parent)
        return atomic_write(path, orjson.dumps(doc), overwrite=False, durable=durable)

    def restore(self, doc: dict[str, Any], *, durable: bool = True) -> bool:
        """Writes a result document (from the journal) if its file is missing.

        Returns True if a file was written.
        """
        key = doc.get("key")
        if not isinstance(key, str) or doc.get("format") != RESULT_FORMAT:
            return False
        if self.path_for(key).exists():
            return False
        return self.write(doc, durable=durable)

    def materialize(self, key: str) -> Path | None:
        """The result file of ``key``, written now if only the journal holds it yet; None if no result.

        The file is written without an fsync: the journal already makes it durable, and
        compaction syncs it before folding the record away.
        """
        path = self.path_for(key)
        if path.exists():
            return path
        doc = self._carried(key) if self._carried is not None else None
        if doc is None and self._archived is not None:
            doc = self._archived(key)  # a copy for whoever wants a file; the archive keeps the original
        if doc is None:
            return None
        self.write(doc, durable=False)
        return path

    def make_durable(self, keys: Iterable[str]) -> None:
        """Flushes the result files of ``keys`` (and their directories' new names) to disk.

        Raises:
            OSError: the disk did not take them all: a compaction that was to fold away the
                journal records carrying them stops, and those records stay.
        """
        paths = [p for p in (self.path_for(k) for k in keys) if p.exists()]
        if not paths:
            return
        if _syncfs is not None and self._syncfs_reaches is None:
            self._syncfs_reaches = syncfs_reaches(self._root_s)
        if _syncfs is not None and self._syncfs_reaches:
            # one call for every file, and for the data dir's file system only: sync(2) would
            # wait for every mounted disk (a slow USB stick too), and says nothing of a failed write
            fd = os.open(self._root_s, os.O_RDONLY)
            try:
                _syncfs(fd)
            finally:
                os.close(fd)
            return
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        # the files' names, and their shard directories' names where a shard is new
        for directory in {p.parent for p in paths} | {self.root}:
            fsync_dir(directory)

    def get(
        self, key: str, *, archived: bool | Callable[[], bool] = True, carried: bool = True
    ) -> dict[str, Any] | None:
        """The stored result document for ``key``, or None.

        A damaged result file is moved aside (``*.corrupt-<time>``) and reported as missing.

        Args:
            key: the idempotency key.
            archived: also ask the archive (False: the caller knows it holds no result
                for ``key``, see :meth:`Queue.stored_result
                <desktop_queue.core.queue.Queue.stored_result>`); a callable is asked
                only when the archive would be, as the answer may cost a read.
            carried: also ask the backend for a result committed with a success (False:
                the caller's commit checks that itself, see ``Backend.carried_result``).
        """
        if carried and self._carried is not None:
            doc = self._carried(key)
            if doc is not None:
                return doc
        path_s = self.path_str_for(key)
        if not os.access(path_s, os.F_OK):
            # the usual miss, told without raising (a third of a failed open's cost)
            if self._archived is None or not (archived() if callable(archived) else archived):
                return None
            return self._archived(key)
        try:
            fd = os.open(path_s, os.O_RDONLY | _O_BINARY)
        except FileNotFoundError:
            return None
        try:
            with open(fd, "rb") as fh:
                raw = fh.read()
        except OSError:
            return None
        path = Path(path_s)
        try:
            doc = orjson.loads(raw)
            if not isinstance(doc, dict) or doc.get("format") != RESULT_FORMAT:
                raise ValueError("not a result file")
            return doc
        except ValueError:
            set_aside_if_possible(path)
            return None

    def problem(self, key: str) -> ResultProblem | None:
        """Why ``key`` has no readable result, or None when it has one (as a file or in the journal).

        For a job whose ``result_ref`` says it has a result: :meth:`get` moves a damaged
        file aside and answers None like a missing one, so this tells the two apart by
        the copies kept beside it (the newest is named), which an earlier reader in any
        process may have made.
        """
        if self.get(key) is not None:
            return None
        path = self.path_for(key)
        try:
            # stamps sort by time, and a second copy within the same second after the first
            copies = sorted(p for p in path.parent.glob(f"{glob.escape(path.name)}{CORRUPT_MARK}*"))
        except OSError:
            copies = []
        if copies:
            return ResultProblem("damaged", self.ref_for(key), copies[-1])
        return ResultProblem("missing", self.ref_for(key))

    def remove_stale_pending(self, live: Iterable[tuple[str, int]]) -> int:
        """Deletes the pending results no commit can use any more; returns how many.

        A pending result counts only for the lease epoch it names (see :meth:`pending`):
        once its job has finished, been requeued or leased again, nothing reads it. Only
        safe while no other process runs (a worker writes one for a lease it holds, and
        that lease may be newer than what the caller read).

        Args:
            live: ``(key, lease epoch)`` of every job still running.
        """
        keep = {f"{self._safe(key)}.{int(epoch)}.json" for key, epoch in live}
        try:
            with os.scandir(os.path.join(self._root_s, "pending")) as entries:
                # dot names are writes in progress or abandoned: remove_temp_files decides those
                stale = [e.path for e in entries if not e.name.startswith(".") and e.name not in keep]
        except FileNotFoundError:
            return 0
        removed = 0
        for path in stale:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed += 1
        return removed

    def remove_temp_files(self, older_than_s: float | None = None) -> int:
        """Deletes unfinished writes left by a crash; returns how many.

        Without ``older_than_s`` this is only safe while no other process runs (another
        one's write in progress would go too): the first opener of the store, at open.
        Compaction passes an hour, far longer than any write takes.

        The first opener's sweep (every command's, when no window runs) looks only in
        the directories changed since the last such sweep began: creating a file
        changes its directory's modification time, and ``results/.swept`` keeps that
        time (the file system's own clock) from the sweep before. A long history
        leaves hundreds of directories, which would each be listed at every command's
        start. Compaction's sweep still lists them all.
        """
        removed = 0
        cutoff = time.time() - older_than_s if older_than_s is not None else None
        marker = os.path.join(self._root_s, SWEPT_MARK)
        since = self._begin_sweep(marker) if older_than_s is None else None
        try:
            subdirs = [
                e.path
                for e in os.scandir(self._root_s)
                if e.is_dir(follow_symlinks=False) and (since is None or _changed_since(e, since))
            ]
        except FileNotFoundError:
            return 0
        for subdir in subdirs:
            with contextlib.suppress(OSError), os.scandir(subdir) as entries:
                leftovers = [
                    e.path
                    for e in entries
                    if e.name.startswith(".")
                    and TEMP_MARK in e.name
                    and (cutoff is None or e.stat(follow_symlinks=False).st_mtime < cutoff)
                ]
            for path in leftovers:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                    removed += 1
        if older_than_s is None:
            # (a sweep that failed on the way leaves the marker of the one before)
            with contextlib.suppress(OSError):
                os.replace(marker + "-next", marker)
        return removed

    @staticmethod
    def _begin_sweep(marker: str) -> int | None:
        """When the last complete sweep began (ns, as the file system tells time), or None;
        notes when this one begins (in ``.swept-next``, which becomes the marker once done)."""
        try:
            since: int | None = os.stat(marker).st_mtime_ns
        except OSError:
            since = None
        try:
            Path(marker + "-next").touch(0o600)  # now, by the clock that stamps the directories
        except OSError:
            return None  # (no results directory yet, or it cannot be written: look everywhere)
        return since

    def has(self, key: str) -> bool:
        if self._carried is not None and self._carried(key) is not None:
            return True
        return self.path_for(key).exists() or (self._archived is not None and self._archived(key) is not None)

    def count(self) -> int:
        """How many keys have a result: files, carried by the journal, or archived (walks the directory).

        An archived result that :meth:`materialize` has copied out as a file again counts twice.
        """
        names = (
            {p.stem for p in self.root.glob("*/*.json") if p.parent.name != "pending"} if self.root.exists() else set()
        )
        if self._carried_keys is not None:
            names.update(self._safe(k) for k in self._carried_keys())
        return len(names) + (self._archived_count() if self._archived_count is not None else 0)


__all__ = ["InvalidArtifact", "MIME_EXTENSIONS", "ResultProblem", "ResultStore", "StoreCorrupt", "artifact_extension"]
