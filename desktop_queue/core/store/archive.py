"""The archive of finished jobs: compressed append-only segments, and an index derived from them.

A process keeps only the *hot set* in memory: queued and running jobs, and the jobs
finished most recently (see :func:`choose_archived`). Compaction moves the others out of
the snapshot into an archive segment, so opening the store and every commit cost the
same whether it holds a thousand finished jobs or a million.

Layout of ``<data dir>/store/archive/``::

    segment-000000042.dqa   one compaction's finished jobs, written once, atomically
    index.sqlite3           the derived index (and its -wal / -shm files)

A segment is a header line (JSON: format, version, a random ``nonce``, the job count),
then *blocks*: ``b"DQB1"``, the length and the CRC-32 of the compressed bytes (two
little-endian u32), and a zstd frame holding up to :data:`BLOCK_JOBS` jobs as JSON lines.
Each job is the whole stored job (its events included) plus, under ``"_res"``, its result
document when it has one (the text, or the JSON describing an image or audio file that
stays in ``results/``). Compressing a block of similar jobs together keeps a finished text
job near 150 bytes on disk; reading one job decompresses one block of one segment.

The segments are the store of record, fsynced like everything else. The index is a
cache: an SQLite database (``synchronous=NORMAL`` in WAL mode, so a crash can lose its
last changes but never corrupts it) mapping ids, idempotency keys, states, kinds,
profiles, titles and times to where each job lies, with running totals for ``stats``. It
can be deleted at any time: whoever opens the store next rebuilds it from the segments
(:meth:`Archive.catch_up`), and a damaged index is rebuilt the same way. A segment
written and not yet indexed (a crash between the two) is indexed at the next look.

A job can be in two segments: a dead job that is retried after it was archived comes back
to the hot set, and is archived again later. The newest copy is the job (the index keeps
where the older copies are, so that purging removes them all).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import secrets
import sqlite3
import struct
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, TypedDict, TypeVar, cast

import orjson
import zstandard

from desktop_queue.core.errors import StoreCorrupt, StoreError
from desktop_queue.core.model import EventType, State, events_of
from desktop_queue.core.records import JobDict
from desktop_queue.core.search import escape_like, prompt_text
from desktop_queue.core.store.fileio import atomic_write, fsync_dir, make_dirs, set_aside_if_possible

log = logging.getLogger(__name__)

ARCHIVE_FORMAT = "desktop-queue.archive"
ARCHIVE_VERSION = 1
#: 3: the prompt's text in the search index, dead letters' resolution and error signature
INDEX_VERSION = 3
#: jobs compressed together: larger blocks compress little better and cost more to read one job
BLOCK_JOBS = 32
_BLOCK_MAGIC = b"DQB1"
_BLOCK_HEAD = struct.Struct("<4sII")
_SEGMENT_RE = re.compile(r"^segment-(\d{9})\.dqa$")
FINISHED_STATES = (State.SUCCEEDED, State.DEAD, State.CANCELLED)
#: a result document larger than this stays a file in results/ (it would bloat its block)
INLINE_RESULT_MAX = 1 << 20
#: run and wait times are kept as counts per bucket of this relative width (2 %)
_BUCKET_BASE = math.log(1.02)
#: a title search reads this many of the newest archived jobs before asking the trigram index
SCAN_FIRST = 20_000


#: how many times an index step that found the index busy is tried, and the pause before
#: the n-th retry (n times this)
BUSY_TRIES = 8
BUSY_PAUSE_S = 0.01
_busy_pause = time.sleep  # (looked up at each call: tests replace it)
_T = TypeVar("_T")


def _busy(exc: sqlite3.DatabaseError) -> bool:
    """Whether an SQLite error is SQLITE_BUSY or SQLITE_LOCKED (a lock held elsewhere), not damage."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)  # (extended codes keep the primary one in the low byte)
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("database is locked" in text or "busy" in text)


def _unwritable(exc: sqlite3.DatabaseError) -> bool:
    """Whether an SQLite error is the disk refusing (full, failing, read-only), not damage.

    Deleting the index then would gain nothing: rebuilding it needs the disk it could
    not write, and at a million jobs takes minutes once the disk is back.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        # PERM, READONLY, IOERR, FULL, CANTOPEN (extended codes keep the primary one in the low byte)
        return code & 0xFF in (3, 8, 10, 13, 14)
    text = str(exc).lower()
    return any(t in text for t in ("disk is full", "disk i/o error", "unable to open", "readonly"))


def as_hot(job: JobDict) -> JobDict:
    """An archived job as the hot set holds it: without the result document it carries
    (``_res``; the result store reads that from the archive by key)."""
    job.pop("_res", None)  # type: ignore[typeddict-item]
    return job


def segment_file(number: int) -> str:
    return f"segment-{number:09d}.dqa"


def bucket_of(seconds: float) -> int:
    """The histogram bucket of a duration (0 for anything under a millisecond)."""
    return int(math.log1p(max(0.0, seconds) * 1000.0) / _BUCKET_BASE)


def bucket_value(bucket: int) -> float:
    """The duration a bucket stands for (the middle of its range), in seconds."""
    return (math.expm1(_BUCKET_BASE * (bucket + 0.5))) / 1000.0


# --------------------------------------------------------------------------- contributions


@dataclass
class Contribution:
    """What one job adds to the figures of ``stats`` (see :func:`desktop_queue.core.metrics.compute`)."""

    attempts: int = 0
    retries: int = 0
    throttled: int = 0
    lease_expiries: int = 0
    reconciled: int = 0
    stale_results: int = 0
    waits: list[float] = field(default_factory=list)
    runs: list[float] = field(default_factory=list)


def contribution(job: JobDict) -> Contribution:
    """Walks a job's timeline once: queue wait runs from a job becoming runnable to its next
    lease, run time from a lease to the success that ended it."""
    out = Contribution()
    ready_at: float | None = None
    leased_at: float | None = None
    for ev in events_of(job):
        kind = ev["type"]
        at = ev["at"]
        if kind in (EventType.SUBMITTED, EventType.RETRIED):
            ready_at = at
        elif kind in (EventType.RETRY_SCHEDULED, EventType.THROTTLED):
            ready_at = (ev.get("detail") or {}).get("run_after", at)
            out.retries += kind == EventType.RETRY_SCHEDULED
            out.throttled += kind == EventType.THROTTLED
        elif kind == EventType.LEASED:
            out.attempts += 1
            if ready_at is not None:
                out.waits.append(max(0.0, at - ready_at))
            ready_at = None
            leased_at = at
        elif kind == EventType.SUCCEEDED and leased_at is not None:
            out.runs.append(max(0.0, at - leased_at))
            leased_at = None
        elif kind == EventType.LEASE_EXPIRED:
            out.lease_expiries += 1
            ready_at = at
        elif kind == EventType.RECONCILED:
            out.reconciled += 1
            ready_at = at
        elif kind == EventType.STALE_RESULT:
            out.stale_results += 1
    return out


_COUNTERS = ("attempts", "retries", "throttled", "lease_expiries", "reconciled", "stale_results")


@dataclass
class Totals:
    """The archived jobs' share of ``stats``: counts per state, counters, time histograms."""

    counts: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNTERS, 0))
    waits: dict[int, int] = field(default_factory=dict)
    runs: dict[int, int] = field(default_factory=dict)

    def add(self, state: str, c: dict[str, Any], sign: int) -> None:
        self.counts[state] = self.counts.get(state, 0) + sign
        for name in _COUNTERS:
            self.counters[name] += sign * c.get(name, 0)
        for hist, values in ((self.waits, c.get("w", ())), (self.runs, c.get("r", ()))):
            for b in values:
                n = hist.get(b, 0) + sign
                if n:
                    hist[b] = n
                else:
                    hist.pop(b, None)

    def to_blob(self) -> bytes:
        return orjson.dumps(
            {"counts": self.counts, "counters": self.counters, "w": self.waits, "r": self.runs},
            option=orjson.OPT_NON_STR_KEYS,
        )

    @classmethod
    def from_blob(cls, blob: bytes) -> Totals:
        doc = orjson.loads(blob)
        return cls(
            counts=doc["counts"],
            counters=doc["counters"],
            waits={int(k): v for k, v in doc["w"].items()},
            runs={int(k): v for k, v in doc["r"].items()},
        )


def _compact_contribution(job: JobDict) -> dict[str, Any]:
    c = contribution(job)
    out: dict[str, Any] = {name: getattr(c, name) for name in _COUNTERS if getattr(c, name)}
    if c.waits:
        out["w"] = [bucket_of(v) for v in c.waits]
    if c.runs:
        out["r"] = [bucket_of(v) for v in c.runs]
    return out


# --------------------------------------------------------------------------- segments


def encode_segment(jobs: Sequence[JobDict]) -> tuple[bytes, list[tuple[int, int, int]]]:
    """A segment's bytes, and where each job of ``jobs`` lies in them: ``(block offset, block length, line)``.

    Blocks hold jobs of one state together (in ``jobs``' order within a state): a page of
    a rare state, such as the dead letters among a million successes, then reads one
    block per 32 of its jobs instead of nearly one block per job.
    """
    head = orjson.dumps(
        {"format": ARCHIVE_FORMAT, "version": ARCHIVE_VERSION, "nonce": secrets.token_hex(8), "jobs": len(jobs)}
    )
    parts = [head, b"\n"]
    offset = len(head) + 1
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].get("state") or "")  # (stable: seq order stays)
    where: list[tuple[int, int, int]] = [(0, 0, 0)] * len(jobs)
    compressor = zstandard.ZstdCompressor(level=3)
    for start in range(0, len(order), BLOCK_JOBS):
        block = order[start : start + BLOCK_JOBS]
        packed = compressor.compress(b"\n".join(orjson.dumps(jobs[i]) for i in block))
        frame = _BLOCK_HEAD.pack(_BLOCK_MAGIC, len(packed), zlib.crc32(packed)) + packed
        for line, i in enumerate(block):
            where[i] = (offset, len(frame), line)
        parts.append(frame)
        offset += len(frame)
    return b"".join(parts), where


def _written(
    data: bytes, jobs: Sequence[JobDict], where: list[tuple[int, int, int]]
) -> tuple[dict[str, Any], list[tuple[int, int, int, JobDict]]]:
    """What :func:`read_segment` returns for a segment :func:`encode_segment` just made of ``jobs``."""
    head = orjson.loads(data[: data.index(b"\n")])
    entries = [(offset, length, line, jobs[i]) for i, (offset, length, line) in enumerate(where)]
    entries.sort(key=lambda e: (e[0], e[2]))  # (the order of the file, as read_segment gives it)
    return head, entries


#: ids per ``IN (...)`` look-up (SQLite allows 32,766 parameters; smaller keeps statements cheap to prepare)
_IN_CHUNK = 500


def _in_chunks(ids: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """``(marks, chunk)`` for each :data:`_IN_CHUNK` ids of ``ids``: the ``?,?,...`` of an
    ``IN (...)`` and the values it stands for."""
    ids = list(ids)
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = ids[start : start + _IN_CHUNK]
        yield ",".join("?" * len(chunk)), chunk


def _decode_block(frame: bytes, name: str) -> list[bytes]:
    if len(frame) < _BLOCK_HEAD.size:
        raise StoreCorrupt(f"{name}: a block is cut short")
    magic, length, crc = _BLOCK_HEAD.unpack_from(frame)
    packed = frame[_BLOCK_HEAD.size : _BLOCK_HEAD.size + length]
    if magic != _BLOCK_MAGIC or len(packed) != length or zlib.crc32(packed) != crc:
        raise StoreCorrupt(f"{name}: a block fails its checksum")
    try:
        return zstandard.ZstdDecompressor().decompress(packed).split(b"\n")
    except zstandard.ZstdError as exc:
        raise StoreCorrupt(f"{name}: a block cannot be decompressed ({exc})") from exc


def read_segment(data: bytes, name: str) -> tuple[dict[str, Any], list[tuple[int, int, int, JobDict]]]:
    """Every job of a segment with where it lies: ``(header, [(offset, length, line, job)])``.

    Raises:
        StoreCorrupt: the header, a block's checksum or a job fails.
    """
    cut = data.find(b"\n")
    try:
        head = orjson.loads(data[:cut]) if cut > 0 else None
    except orjson.JSONDecodeError:
        head = None
    if not isinstance(head, dict) or head.get("format") != ARCHIVE_FORMAT:
        raise StoreCorrupt(f"{name} is not an archive segment")
    if head.get("version", 0) > ARCHIVE_VERSION:
        raise StoreError(f"{name} was written by a newer version of Desktop Queue")
    out: list[tuple[int, int, int, JobDict]] = []
    offset = cut + 1
    while offset < len(data):
        if len(data) - offset < _BLOCK_HEAD.size:
            raise StoreCorrupt(f"{name}: a block is cut short")
        length = _BLOCK_HEAD.unpack_from(data, offset)[1] + _BLOCK_HEAD.size
        lines = _decode_block(data[offset : offset + length], name)
        for line_no, line in enumerate(lines):
            out.append((offset, length, line_no, cast(JobDict, orjson.loads(line))))
        offset += length
    if len(out) != head.get("jobs"):
        raise StoreCorrupt(f"{name} holds {len(out)} jobs where its header says {head.get('jobs')}")
    return head, out


# --------------------------------------------------------------------------- index

#: the jobs that ended in a state since a time, through the index on ``finished``: the
#: ``+`` keeps SQLite from taking the index on ``state`` instead (it guesses an equality
#: narrower than a range), and would then read every succeeded job of the history to find
#: the last minute's
FINISHED_SINCE_SQL = "SELECT id, finished FROM jobs WHERE finished >= ? AND +state = ?"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS segments (n INTEGER PRIMARY KEY, nonce TEXT NOT NULL, jobs INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    seg INTEGER NOT NULL, off INTEGER NOT NULL, len INTEGER NOT NULL, line INTEGER NOT NULL,
    state TEXT NOT NULL, kind TEXT, profile TEXT, key8 INTEGER,
    created REAL, finished REAL, upd REAL, err TEXT, title TEXT,
    contrib BLOB,
    resolved REAL, sig TEXT, prompt TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, seq);
CREATE INDEX IF NOT EXISTS jobs_key ON jobs (key8);
CREATE INDEX IF NOT EXISTS jobs_seg ON jobs (seg);
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished);
CREATE INDEX IF NOT EXISTS jobs_kind ON jobs (kind, seq);
CREATE INDEX IF NOT EXISTS jobs_profile ON jobs (profile, seq);
CREATE INDEX IF NOT EXISTS jobs_err ON jobs (err, seq);
CREATE INDEX IF NOT EXISTS jobs_sig ON jobs (state, sig);
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created);
CREATE TABLE IF NOT EXISTS copies (id TEXT NOT NULL, seg INTEGER NOT NULL, PRIMARY KEY (id, seg)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS totals (k INTEGER PRIMARY KEY, blob BLOB NOT NULL);
-- title and prompt search by substring: a trigram index finds "study 42" among a million
-- jobs without reading them all (a LIKE scan of the jobs table takes over 100 ms there).
-- detail='none' keeps no token positions: LIKE does not need them (the text itself is
-- checked), and they were most of the index's size. (An index made before keeps its
-- positions and answers the same.)
CREATE VIRTUAL TABLE IF NOT EXISTS titles USING fts5(
    title, prompt, content='jobs', content_rowid='seq', tokenize='trigram', detail='none'
);
CREATE TRIGGER IF NOT EXISTS jobs_title_in AFTER INSERT ON jobs BEGIN
    INSERT INTO titles (rowid, title, prompt) VALUES (new.seq, new.title, new.prompt);
END;
CREATE TRIGGER IF NOT EXISTS jobs_title_out AFTER DELETE ON jobs BEGIN
    INSERT INTO titles (titles, rowid, title, prompt) VALUES ('delete', old.seq, old.title, old.prompt);
END;
"""


def key8(key: str) -> int:
    """The first 64 bits of an idempotency key (hex) as a signed integer: an index entry a
    third the size of the key; a hit is checked against the whole key in the segment."""
    try:
        value = int(key[:16], 16)
    except ValueError:
        value = zlib.crc32(key.encode())
    return value - (1 << 64) if value >= 1 << 63 else value


def _profile_of(job: JobDict) -> str | None:
    value = job.get("profile")
    if isinstance(value, str):
        return value
    inp = job.get("input")
    if isinstance(inp, dict) and isinstance(inp.get("profile"), str):
        return cast(str, inp["profile"])
    return None


@dataclass(frozen=True)
class ArchivedRow:
    """What the index knows of an archived job, without reading its segment."""

    seq: int
    id: str
    state: str
    kind: str | None
    profile: str | None
    title: str | None
    created_at: float | None
    finished_at: float | None
    updated_at: float | None
    error_class: str | None
    #: where the job lies: segment number, block offset and length, line in the block
    location: tuple[int, int, int, int] = field(default=(0, 0, 0, 0), compare=False, repr=False)
    #: when a person resolved this dead letter (None: not resolved)
    resolved_at: float | None = None
    #: the error with its varying parts blanked (``present.error_signature``)
    signature: str | None = None


class HistoryQuery(TypedDict, total=False):
    """A page of the history as :meth:`Archive.rows` takes it, by keyword: the form in
    which :meth:`Queue.history <desktop_queue.core.queue.Queue.history>` hands it to a
    view that pages the history itself (PostgreSQL's ``history_rows``)."""

    state: str | None
    kind: str | None
    profile: str | None
    error_class: str | None
    text: str | None
    before_seq: int | None
    limit: int | None
    resolved: bool | None
    signature: str | None
    created_after: float | None
    created_before: float | None


def _row(r: Sequence[Any]) -> ArchivedRow:
    return ArchivedRow(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], (r[10], r[11], r[12], r[13]), r[14], r[15]
    )


_ROW_COLUMNS = "seq, id, state, kind, profile, title, created, finished, upd, err, seg, off, len, line, resolved, sig"

#: the key a job counts under in the totals: its state, or ``resolved`` for a dead letter a
#: person closed (it is no longer a dead letter waiting for anyone)
RESOLVED = "resolved"
_COUNT_KEY_SQL = f"CASE WHEN state = 'dead' AND resolved IS NOT NULL THEN '{RESOLVED}' ELSE state END"


def count_key(job: JobDict) -> str:
    """The totals key of a job (see :data:`RESOLVED`)."""
    return RESOLVED if job["state"] == "dead" and job.get("resolved_at") is not None else job["state"]


def signature_of(job: JobDict) -> str:
    if not job.get("last_error"):
        return ""
    # imported here: ``present`` pulls in flow control and the spend ledger, which the
    # compaction child otherwise never loads (most of its start-up), for dead letters only
    from desktop_queue.core.present import error_signature

    return error_signature(job)


@dataclass(frozen=True)
class PurgeFilter:
    """Which finished jobs a purge removes: in ``states``, finished before ``before`` (wall
    time), and, with ``ids``, only those jobs (a person's selection)."""

    before: float
    states: tuple[str, ...] = FINISHED_STATES
    ids: frozenset[str] | None = None

    def matches(self, job: JobDict) -> bool:
        finished = job.get("finished_at")
        return (
            job["state"] in self.states
            and finished is not None
            and finished < self.before
            and (self.ids is None or job["id"] in self.ids)
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"before": self.before, "states": list(self.states)}
        if self.ids is not None:
            doc["ids"] = sorted(self.ids)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PurgeFilter:
        ids = doc.get("ids")
        return cls(
            float(doc["before"]),
            tuple(doc.get("states") or FINISHED_STATES),
            frozenset(ids) if isinstance(ids, list) else None,
        )


class Archive:
    """The archive segments of one store and their index (thread-safe; one per process)."""

    def __init__(self, store_dir: Path) -> None:
        self.dir = store_dir / "archive"
        self.index_path = self.dir / "index.sqlite3"
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._db_ino: tuple[int, int] | None = None
        self._blocks: OrderedDict[tuple[int, int], list[bytes]] = OrderedDict()
        self._fds: dict[int, int] = {}
        self.notices: list[str] = []

    # ----------------------------------------------------------------- files

    def numbers(self) -> list[int]:
        """The segment numbers on disk, oldest first."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _SEGMENT_RE.match(n)))

    def write(self, jobs: Sequence[JobDict]) -> int:
        """Writes a new segment holding ``jobs`` (durably) and indexes it; returns its number.

        Called by compaction (``compact.lock`` held) before the snapshot that leaves these
        jobs out is written: a job is always in the snapshot, the archive, or both.
        """
        make_dirs(self.dir)
        existing = self.numbers()
        number = (existing[-1] if existing else 0) + 1
        data, where = encode_segment(jobs)
        atomic_write(self.dir / segment_file(number), data)
        with self._lock:
            # indexed from what was just encoded: decompressing and parsing the segment
            # again would only give back ``jobs`` (an index is derived, and rebuilt from
            # the file whenever it is in doubt: see catch_up)
            # (the segment is on disk already: an index that stays busy catches up on it at its next open)
            self._while_busy(lambda: self._ingest(number, data, _written(data, jobs, where)))
        return number

    def rewrite(self, number: int, keep: Callable[[JobDict], bool]) -> int:
        """Writes segment ``number`` again with only the jobs ``keep`` accepts; returns how many went.

        An empty result removes the segment. Atomic: a crash leaves the old or the new file.
        """
        path = self.dir / segment_file(number)
        data = path.read_bytes()
        _, entries = read_segment(data, path.name)
        kept = [job for _, _, _, job in entries if keep(job)]
        gone = len(entries) - len(kept)
        if not gone:
            return 0
        with self._lock:
            if kept:
                new, where = encode_segment(kept)
                atomic_write(path, new)
                self._while_busy(lambda: self._ingest(number, new, _written(new, kept, where)))
            else:
                path.unlink()
                with contextlib.suppress(OSError):
                    fsync_dir(self.dir)
                self._while_busy(lambda: self._forget_segment(number))
        return gone

    def _fd(self, number: int) -> int:
        fd = self._fds.get(number)
        if fd is None:
            fd = os.open(self.dir / segment_file(number), os.O_RDONLY | getattr(os, "O_BINARY", 0))
            if len(self._fds) >= 64:
                os.close(self._fds.pop(next(iter(self._fds))))
            self._fds[number] = fd
        return fd

    def _block(self, number: int, offset: int, length: int) -> list[bytes]:
        cached = self._blocks.get((number, offset))
        if cached is not None:
            self._blocks.move_to_end((number, offset))
            return cached
        try:
            frame = os.pread(self._fd(number), length, offset)
        except OSError:
            self._drop_fd(number)
            raise
        lines = _decode_block(frame, segment_file(number))
        self._blocks[(number, offset)] = lines
        if len(self._blocks) > 16:
            self._blocks.popitem(last=False)
        return lines

    def _drop_fd(self, number: int) -> None:
        fd = self._fds.pop(number, None)
        if fd is not None:
            os.close(fd)
        for k in [k for k in self._blocks if k[0] == number]:
            del self._blocks[k]

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._blocks.clear()
            if self._db is not None:
                self._db.close()
                self._db = None

    # ----------------------------------------------------------------- index upkeep

    def _connect(self) -> sqlite3.Connection:
        """The index connection, (re)made when the file was replaced or deleted under it."""
        try:
            st = os.stat(self.index_path)
            ino: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            ino = None
        if self._db is not None and ino == self._db_ino and ino is not None:
            return self._db
        if self._db is not None:
            self._db.close()
            self._db = None
        make_dirs(self.dir)
        db = sqlite3.connect(self.index_path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA recursive_triggers=ON")  # a REPLACE's delete keeps the title index right
            # statement journals in memory: each row an index fold replaces (a REPLACE firing
            # the search triggers) otherwise writes its pages to a file in /var/tmp, several
            # pages a job; a statement touches few pages, so memory stays small
            db.execute("PRAGMA temp_store=MEMORY")
            db.executescript(_SCHEMA)
            row = db.execute("SELECT v FROM meta WHERE k = 'version'").fetchone()
            if row is None:
                db.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)", (str(INDEX_VERSION),))
            elif row[0] != str(INDEX_VERSION):
                raise sqlite3.DatabaseError(f"index version {row[0]}")
        except sqlite3.DatabaseError:
            db.close()
            raise
        st = os.stat(self.index_path)
        self._db, self._db_ino = db, (st.st_dev, st.st_ino)
        return db

    def _while_busy(self, step: Callable[[], _T]) -> _T:
        """Runs ``step``, again while the index is busy (another connection's lock), up to :data:`BUSY_TRIES` times.

        Busy is not damage: SQLite's busy timeout does not cover every case (a connection
        whose read snapshot went stale when it came to write, as happens when several
        processes create a new index at once), and resetting the index there would delete
        the files other processes are using.

        Raises:
            StoreError: the index stayed busy, or the disk refused it (full, failing): one
                clear error, and nothing is reset.
            sqlite3.DatabaseError: what ``step`` met that is neither (damage, say).
        """
        for attempt in range(1, BUSY_TRIES + 1):
            try:
                return step()
            except sqlite3.DatabaseError as exc:
                if _unwritable(exc):
                    raise StoreError(
                        f"the archive index {self.index_path} cannot be written: {exc}; nothing was changed"
                    ) from exc
                if not _busy(exc):
                    raise
                if attempt == BUSY_TRIES:
                    raise self._busy_error(exc) from exc
                log.info("the archive index is busy (%s); trying again", exc)
                _busy_pause(BUSY_PAUSE_S * attempt)
        raise AssertionError("unreachable")  # (the loop returns or raises)

    def _busy_error(self, exc: sqlite3.DatabaseError) -> StoreError:
        return StoreError(f"the archive index {self.index_path} stayed busy: {exc}; try again")

    def _reset_index(self, why: str) -> None:
        """Deletes a damaged index (it is rebuilt from the segments right after)."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.index_path}{suffix}")
        self.notices.append(f"the archive index was damaged ({why}); it was rebuilt from the archive (nothing lost)")
        log.warning("archive index reset: %s", why)

    def catch_up(self) -> list[int]:
        """Indexes every segment the index does not know (all of them if it was deleted or damaged),
        and forgets those that are gone; returns the segment numbers on disk, oldest first
        (what :meth:`numbers` would say: an open needs both, and the listing grows with history)."""
        with self._lock:
            try:
                return self._while_busy(self._catch_up)
            except sqlite3.DatabaseError as exc:
                self._reset_index(str(exc))
                return self._while_busy(self._catch_up)

    def _catch_up(self) -> list[int]:
        numbers = self.numbers()
        if not numbers and not self.index_path.exists():
            return numbers
        db = self._connect()
        known = dict(db.execute("SELECT n, nonce FROM segments").fetchall())
        on_disk = set(numbers)
        for number in known.keys() - on_disk:
            self._forget_segment(number)
        unknown = [number for number in numbers if number not in known]
        for number in unknown:  # (one written again but not indexed: see _reindex)
            self._reindex(number)
        return self.numbers() if unknown else numbers  # (a damaged one was moved aside)

    def _quarantine(self, path: Path, why: str) -> None:
        target = set_aside_if_possible(path)
        self.notices.append(
            f"archive segment {path.name} is damaged ({why}); it was moved aside as {target.name} "
            "and the finished jobs it held cannot be shown"
        )
        log.warning("quarantined %s: %s", path.name, why)

    def _totals(self, db: sqlite3.Connection) -> Totals:
        row = db.execute("SELECT blob FROM totals WHERE k = 0").fetchone()
        return Totals.from_blob(row[0]) if row else Totals()

    def _ingest(
        self,
        number: int,
        data: bytes,
        decoded: tuple[dict[str, Any], list[tuple[int, int, int, JobDict]]] | None = None,
    ) -> None:
        """Puts segment ``number`` into the index (replacing what it said of an older version of it).

        ``decoded`` is what :func:`read_segment` would return for ``data``, when the caller
        has it already (it has just encoded the segment).
        """
        head, entries = decoded if decoded is not None else read_segment(data, segment_file(number))
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            known = db.execute("SELECT nonce FROM segments WHERE n = ?", (number,)).fetchone()
            if known is not None and known[0] == head["nonce"]:
                db.execute("ROLLBACK")
                return  # another process indexed it meanwhile
            totals = self._totals(db)
            if known is not None:
                self._remove_rows(db, totals, "seg = ?", (number,))
                db.execute("DELETE FROM copies WHERE seg = ?", (number,))
            self._put_all(db, totals, number, entries)
            db.execute("INSERT OR REPLACE INTO segments VALUES (?, ?, ?)", (number, head["nonce"], len(entries)))
            db.execute("INSERT OR REPLACE INTO totals VALUES (0, ?)", (totals.to_blob(),))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self._blocks.clear()
        self._drop_fd(number)

    @staticmethod
    def _remove_rows(db: sqlite3.Connection, totals: Totals, where: str, args: tuple[Any, ...]) -> None:
        for state, contrib in db.execute(f"SELECT {_COUNT_KEY_SQL}, contrib FROM jobs WHERE {where}", args).fetchall():
            totals.add(state, orjson.loads(contrib), -1)
        db.execute(f"DELETE FROM jobs WHERE {where}", args)

    def _put_all(
        self, db: sqlite3.Connection, totals: Totals, number: int, entries: list[tuple[int, int, int, JobDict]]
    ) -> None:
        """Indexes the jobs of segment ``number``: one look-up of the rows they replace, one batch of inserts.

        A job indexed already from a newer segment stays as it is (this copy is only
        recorded in ``copies``); one indexed from an older segment is replaced.
        """
        old: dict[str, tuple[int, str, bytes]] = {}
        for marks, chunk in _in_chunks(job["id"] for _, _, _, job in entries):
            for job_id, seg, key, contrib in db.execute(
                f"SELECT id, seg, {_COUNT_KEY_SQL}, contrib FROM jobs WHERE id IN ({marks})", chunk
            ):
                old[job_id] = (seg, key, contrib)
        copies: list[tuple[str, int]] = []
        replaced: list[tuple[str]] = []
        rows: list[tuple[Any, ...]] = []
        for offset, length, line, job in entries:
            job_id = job["id"]
            before = old.get(job_id)
            if before is not None:
                if before[0] > number:  # a newer copy is indexed already: this one is an older copy
                    copies.append((job_id, number))
                    continue
                copies.append((job_id, before[0]))
                totals.add(before[1], orjson.loads(before[2]), -1)
                replaced.append((job_id,))
            contrib = _compact_contribution(job)
            totals.add(count_key(job), contrib, +1)
            error = job.get("last_error")
            rows.append(
                (
                    job["seq"],
                    job_id,
                    number,
                    offset,
                    length,
                    line,
                    job["state"],
                    job.get("kind"),
                    _profile_of(job),
                    key8(job["key"]),
                    job.get("created_at"),
                    job.get("finished_at"),
                    job.get("updated_at"),
                    error.get("class") if isinstance(error, dict) else None,
                    job.get("title"),
                    orjson.dumps(contrib),
                    job.get("resolved_at"),
                    signature_of(job) if job["state"] == "dead" else None,
                    prompt_text(job.get("input")) or None,
                )
            )
        if copies:
            db.executemany("INSERT OR IGNORE INTO copies VALUES (?, ?)", copies)
        if replaced:
            db.executemany("DELETE FROM jobs WHERE id = ?", replaced)
        db.executemany("INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)

    def _forget_segment(self, number: int) -> None:
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            totals = self._totals(db)
            self._remove_rows(db, totals, "seg = ?", (number,))
            db.execute("DELETE FROM copies WHERE seg = ?", (number,))
            db.execute("DELETE FROM segments WHERE n = ?", (number,))
            db.execute("INSERT OR REPLACE INTO totals VALUES (0, ?)", (totals.to_blob(),))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self._drop_fd(number)

    # ----------------------------------------------------------------- reading

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        with self._lock:
            if self._db is None and not self.index_path.exists():
                if not self.numbers():
                    return []
                self.catch_up()
            try:
                return self._while_busy(lambda: self._connect().execute(sql, tuple(args)).fetchall())
            except sqlite3.DatabaseError as exc:
                self._reset_index(str(exc))
                self._while_busy(self._catch_up)
                return self._while_busy(lambda: self._connect().execute(sql, tuple(args)).fetchall())

    def _load(self, number: int, offset: int, length: int, line: int) -> JobDict | None:
        with self._lock:
            try:
                lines = self._block(number, offset, length)
            except (FileNotFoundError, StoreCorrupt):
                # purged or written again since the index was read, or damaged: the caller
                # reads the whole segment again (_reindex), which tells the two apart
                self._drop_fd(number)
                return None
        if line >= len(lines):
            return None
        return cast(JobDict, orjson.loads(lines[line]))

    def get(self, job_id: str) -> JobDict | None:
        """The archived job with this id (its events and ``_res`` included), or None."""
        for _ in range(2):  # a segment rewritten between the index read and the segment read
            rows = self._query("SELECT seg, off, len, line FROM jobs WHERE id = ?", (job_id,))
            if not rows:
                return None
            job = self._load(*rows[0])
            if job is not None and job.get("id") == job_id:
                return job
            self._reindex(rows[0][0])
        return None

    def _reindex(self, number: int) -> None:
        """Indexes segment ``number`` again if the file is not what the index says it is.

        A purge writes a segment again and then indexes it; a crash between the two (or
        another process's rewrite seen mid-way) leaves rows pointing at the old layout.
        """
        with self._lock:
            self._drop_fd(number)
            path = self.dir / segment_file(number)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                with contextlib.suppress(sqlite3.Error):
                    self._forget_segment(number)
                return
            try:
                self._ingest(number, data)  # (a no-op when the index already has this version)
            except StoreCorrupt as exc:
                self._quarantine(path, str(exc))
                with contextlib.suppress(sqlite3.Error):
                    self._forget_segment(number)

    def with_prefix(self, prefix: str, limit: int = 3) -> list[str]:
        """Ids of archived jobs starting with ``prefix`` (at most ``limit``)."""
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\uffff"
        rows = self._query("SELECT id FROM jobs WHERE id >= ? AND id < ? LIMIT ?", (prefix, upper, limit))
        return [r[0] for r in rows]

    def by_key(self, key: str, states: Sequence[str] = (State.SUCCEEDED,)) -> JobDict | None:
        """The archived job holding idempotency key ``key`` in one of ``states``, or None."""
        marks = ",".join("?" * len(states))
        rows = self._query(
            f"SELECT seg, off, len, line FROM jobs WHERE key8 = ? AND state IN ({marks}) ORDER BY seq DESC",
            (key8(key), *states),
        )
        for row in rows:
            job = self._load(*row)
            if job is not None and job.get("key") == key:
                return job
        return None

    def has_id(self, job_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM jobs WHERE id = ?", (job_id,)))

    def rows(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        profile: str | None = None,
        error_class: str | None = None,
        text: str | None = None,
        before_seq: int | None = None,
        limit: int | None = None,
        resolved: bool | None = None,
        signature: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> list[ArchivedRow]:
        """Archived jobs, newest first, by the indexed fields (``text``: in the title or the
        prompt, any case; ``resolved``: only resolved dead letters, or only the others).

        A text search first scans the newest :data:`SCAN_FIRST` jobs (a common word fills
        a page there at once), then asks the trigram index for the older ones (a rare
        word is found among a million jobs without reading them).
        """
        where: list[str] = []
        args: list[Any] = []
        for column, value in (
            ("state", state),
            ("kind", kind),
            ("profile", profile),
            ("err", error_class),
            ("sig", signature),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if resolved is not None:
            where.append("resolved IS NOT NULL" if resolved else "resolved IS NULL")
        if created_after is not None:
            where.append("created >= ?")
            args.append(created_after)
        if created_before is not None:
            where.append("created < ?")
            args.append(created_before)
        if before_seq is not None:
            where.append("seq < ?")
            args.append(before_seq)
        if not text:
            return self._select(where, args, limit)
        pattern = "%" + escape_like(text) + "%"
        scan = (
            ["(title LIKE ? ESCAPE '\\' OR prompt LIKE ? ESCAPE '\\')"],
            [pattern, pattern],
        )
        if len(text) < 3 or any(c in text for c in "%_\\"):
            return self._select(where + scan[0], args + scan[1], limit)  # the trigram index cannot help
        found = self._query("SELECT max(seq) FROM jobs")
        if not found or found[0][0] is None:
            return []  # nothing archived yet (no index is made before there is)
        top = found[0][0]
        bound = min(top + 1, before_seq or top + 1) - SCAN_FIRST
        newest = self._select([*where, *scan[0], "seq >= ?"], [*args, *scan[1], bound], limit)
        if limit is not None and len(newest) >= limit:
            return newest
        older = self._select(
            [
                *where,
                "seq IN (SELECT rowid FROM titles WHERE title LIKE ? UNION SELECT rowid FROM titles WHERE prompt LIKE ?)",
                "seq < ?",
            ],
            [*args, f"%{text}%", f"%{text}%", bound],
            None if limit is None else limit - len(newest),
        )
        return newest + older

    def _select(self, where: list[str], args: list[Any], limit: int | None) -> list[ArchivedRow]:
        sql = f"SELECT {_ROW_COLUMNS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args = [*args, limit]
        return [_row(r) for r in self._query(sql, args)]

    def rows_of(self, ids: Iterable[str]) -> list[ArchivedRow]:
        """The rows of the archived jobs among ``ids``, in the order they lie in their segments.

        In that order :meth:`jobs` decompresses each block once, however many of its jobs
        are wanted; in the order of ``ids`` (a set's, say) each job could cost its block.
        """
        out: list[ArchivedRow] = []
        for marks, chunk in _in_chunks(ids):
            out.extend(_row(r) for r in self._query(f"SELECT {_ROW_COLUMNS} FROM jobs WHERE id IN ({marks})", chunk))
        out.sort(key=attrgetter("location"))
        return out

    def jobs(self, rows: Iterable[ArchivedRow]) -> Iterator[JobDict]:
        """The whole archived jobs of ``rows``, read from their segments (a block serves 32 of them)."""
        for row in rows:
            job = self._load(*row.location)
            if job is None or job.get("id") != row.id:
                job = self.get(row.id)  # the segment was written again since the rows were read
            if job is not None:
                yield job

    def contributions_of(self, ids: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
        """``(totals key, contribution)`` of each archived job of ``ids`` (to take them out of the
        totals): the key is the state, or ``resolved`` for a resolved dead letter."""
        out: list[tuple[str, dict[str, Any]]] = []
        for marks, chunk in _in_chunks(ids):
            for state, blob in self._query(f"SELECT {_COUNT_KEY_SQL}, contrib FROM jobs WHERE id IN ({marks})", chunk):
                out.append((state, orjson.loads(blob)))
        return out

    def dead_groups(self, *, resolved: bool = False) -> list[tuple[str, int, str | None]]:
        """``(error signature, how many, error class)`` of the archived dead letters, largest first
        (``resolved``: the resolved ones instead of those waiting)."""
        rows = self._query(
            "SELECT coalesce(sig, ''), count(*), max(err) FROM jobs WHERE state = 'dead' AND resolved IS "
            + ("NOT NULL" if resolved else "NULL")
            + " GROUP BY coalesce(sig, '') ORDER BY count(*) DESC"
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def facts_of(self, ids: Iterable[str]) -> dict[str, tuple[str, float | None, str | None]]:
        """``id -> (state, resolved_at, signature)`` of the archived jobs of ``ids`` (their newest copies)."""
        out: dict[str, tuple[str, float | None, str | None]] = {}
        for marks, chunk in _in_chunks(ids):
            for job_id, state, resolved, sig in self._query(
                f"SELECT id, state, resolved, sig FROM jobs WHERE id IN ({marks})", chunk
            ):
                out[job_id] = (state, resolved, sig)
        return out

    def finished_since(self, cutoff: float, state: str) -> dict[str, float]:
        """``id -> finished_at`` of the archived jobs that ended in ``state`` at or after ``cutoff`` (by jobs_finished)."""
        rows = self._query(FINISHED_SINCE_SQL, (cutoff, str(state)))
        return {job_id: finished for job_id, finished in rows}

    def totals(self) -> Totals:
        """Counts and stats figures of every archived job (kept up to date as segments are indexed)."""
        rows = self._query("SELECT blob FROM totals WHERE k = 0")
        return Totals.from_blob(rows[0][0]) if rows else Totals()

    def count(self) -> int:
        return sum(n for n in self.totals().counts.values())

    def indexed(self) -> set[int]:
        """The numbers of the segments the index holds (a segment being written may not be one yet)."""
        if self._db is None and not self.index_path.exists():
            return set()
        return {r[0] for r in self._query("SELECT n FROM segments")}

    def in_segment(self, number: int) -> list[tuple[str, float | None, str]]:
        """``(id, updated_at, state)`` of the jobs segment ``number`` holds as their newest copy."""
        return [(r[0], r[1], r[2]) for r in self._query("SELECT id, upd, state FROM jobs WHERE seg = ?", (number,))]

    def segments_of(self, ids: Iterable[str]) -> dict[int, set[str]]:
        """Segment number -> which of ``ids`` it holds (newest and older copies)."""
        out: dict[int, set[str]] = {}
        for marks, chunk in _in_chunks(ids):
            for job_id, seg in self._query(
                f"SELECT id, seg FROM jobs WHERE id IN ({marks}) UNION SELECT id, seg FROM copies WHERE id IN ({marks})",
                chunk + chunk,
            ):
                out.setdefault(seg, set()).add(job_id)
        return out

    def matching(self, purge: PurgeFilter) -> list[str]:
        """Ids of archived jobs a purge removes."""
        marks = ",".join("?" * len(purge.states))
        sql = f"SELECT id FROM jobs WHERE finished < ? AND state IN ({marks})"
        if purge.ids is None:
            return [r[0] for r in self._query(sql, (purge.before, *purge.states))]
        out: list[str] = []
        for marks, chunk in _in_chunks(sorted(purge.ids)):
            rows = self._query(f"{sql} AND id IN ({marks})", (purge.before, *purge.states, *chunk))
            out.extend(r[0] for r in rows)
        return out

    def size_bytes(self) -> int:
        total = 0
        for number in self.numbers():
            with contextlib.suppress(OSError):
                total += os.path.getsize(self.dir / segment_file(number))
        return total


# --------------------------------------------------------------------------- policy


def choose_archived(jobs: Iterable[JobDict], *, now: float, keep_finished: int, keep_for_s: float) -> list[JobDict]:
    """The finished jobs a compaction moves out of the hot set.

    A finished job stays hot while it is among the ``keep_finished`` most recently
    finished and finished less than ``keep_for_s`` ago: those are the jobs a person is
    still looking at, and a duplicate submit most often matches.
    """
    finished = [j for j in jobs if j["state"] in FINISHED_STATES]
    finished.sort(key=lambda j: j.get("finished_at") or j.get("updated_at") or 0.0, reverse=True)
    out: list[JobDict] = []
    for rank, job in enumerate(finished):
        at = job.get("finished_at") or job.get("updated_at") or 0.0
        if rank >= keep_finished or now - at >= keep_for_s:
            out.append(job)
    out.sort(key=lambda j: j["seq"])
    return out
