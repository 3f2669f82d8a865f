"""The notification outbox: each finished job is announced once, across processes and restarts.

A job that ends (``succeeded`` or ``dead``) gets an entry keyed by ``id:run:state``, so a
job retried and dead again is announced again, but a job is never announced twice for
the same ending. Entries are derived from the store (:meth:`Outbox.feed` reads the jobs a
change touched, :meth:`Outbox.add_missing` the whole hot set), so a process that died
before announcing loses nothing: whoever looks next adds what is missing.

Delivery is claim, deliver, acknowledge, every step a line appended under
``outbox/.lock``: a deliverer (the window's notifier, ``work``'s log) claims pending
entries, tells people, then acknowledges them. Two deliverers never claim the same entry.
While a window is open it holds ``outbox/.window.lock`` and a worker delivers nothing:
people see the notices on their desktop, not in a log.
A claim whose holder died before acknowledging is found by the repair scan
(:meth:`Outbox.stale_claims`) and queued again (:meth:`Outbox.requeue`).

The file is ``outbox/outbox.jsonl``: a header line (with ``since``: jobs that finished
before it are never announced: opening an old data dir does not announce its history),
then ``add`` / ``claim`` / ``ack`` / ``requeue`` lines. A torn last line (a crash while
appending) is skipped with a note. When it has grown, the file is rewritten atomically
with only what is still needed, under a header naming that version of the file.

Each process keeps what it last read of the file, and reads only the lines appended
since (by anyone: every change is an append under the lock), as long as the file is the
one it read (same inode, same header line, not shorter).
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from desktop_queue.core.errors import QueueError, StoreError
from desktop_queue.core.liveness import holder_alive, this_process
from desktop_queue.core.model import State
from desktop_queue.core.store.fileio import FileLock, append_lines, atomic_write, locked, make_dirs
from desktop_queue.core.wording import counted

OUTBOX_DIR = "outbox"
OUTBOX_FILE = "outbox.jsonl"
LOCK_FILE = ".lock"
#: held (shared) by every open window: a worker then leaves the notices to the window
WINDOW_LOCK = ".window.lock"
FORMAT = "desktop-queue.outbox"
SCHEMA_VERSION = 1
#: the states people are told about
ANNOUNCED = frozenset({State.SUCCEEDED, State.DEAD})
#: rewrite the file when it holds this many lines
COMPACT_LINES = 5000
#: a claim not acknowledged in this long counts as lost even if its holder lives
CLAIM_TIMEOUT_S = 600.0
#: a log gets a line per notice up to this many at once; more, and the finished ones are counted
LOG_EACH = 3
#: dead-lettered jobs named one by one in a log, at most, in one delivery
LOG_DEAD = 10


@dataclass(frozen=True, slots=True)
class Notice:
    """One notification: a job that ended.

    Attributes:
        key: ``id:run:state``.
        job_id: the job.
        state: ``succeeded`` or ``dead``.
        title: the job's title (never its input).
        kind: the job's kind.
        finished_at: when it ended.
    """

    key: str
    job_id: str
    state: str
    title: str
    kind: str
    finished_at: float

    def text(self) -> str:
        """For the window: by title (what the job tables show), quoted.

        A title is often a prompt's first line, ending in its own full stop or question
        mark: "Write a poem.: finished" read as a typo, “Write a poem.” finished does not.
        """
        name = f"“{self.title}”" if self.title else f"{self.kind} job {self.job_id[:8]}"
        return f"{name} {self._ending()}"

    def log_text(self) -> str:
        """For a log: by id and kind, never the title (a job without one is titled by its prompt)."""
        return f"job {self.job_id} ({self.kind}): {self._ending()}"

    def _ending(self) -> str:
        return "finished" if self.state == State.SUCCEEDED else "dead-lettered; it waits for you in Dead letters"

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "job_id": self.job_id,
            "state": self.state,
            "title": self.title,
            "kind": self.kind,
            "finished_at": self.finished_at,
        }


def _header_line(since: float) -> bytes:
    """The first line of a new version of the file: ``file`` tells it from an earlier
    version at the same inode number (see :meth:`Outbox._read`)."""
    header = {
        "op": "header",
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "since": since,
        "file": secrets.token_hex(8),
    }
    return orjson.dumps(header) + b"\n"


def notice_of(job: Mapping[str, Any]) -> Notice | None:
    """The notice a finished job gets, or None (not an announced ending)."""
    state = job.get("state")
    if state not in ANNOUNCED or job.get("finished_at") is None:
        return None
    key = f"{job['id']}:{job.get('run', 1)}:{state}"
    title = str(job.get("title") or "")[:120]
    return Notice(key, job["id"], str(state), title, str(job.get("kind") or ""), float(job["finished_at"]))


def log_lines(notices: Sequence[Notice]) -> list[str]:
    """What a log says of one delivery: a line per notice, or for many, the finished ones counted.

    A worker that drains a backlog finishes thousands of jobs between two looks; a line
    each buries the few that need a person. Dead-lettered jobs keep a line each (up to
    :data:`LOG_DEAD`, then a count and where to find them).
    """
    if len(notices) <= LOG_EACH:
        return [n.log_text() for n in notices]
    done = [n for n in notices if n.state == State.SUCCEEDED]
    dead = [n for n in notices if n.state != State.SUCCEEDED]
    lines = []
    if done:
        kinds = Counter(n.kind for n in done)
        per_kind = "; ".join(f"{kind} {n:,}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"{counted(len(done), 'job')} finished ({per_kind})")
    lines += [n.log_text() for n in dead[:LOG_DEAD]]
    if len(dead) > LOG_DEAD:
        more = len(dead) - LOG_DEAD
        lines.append(
            f"{counted(more, 'more job')} dead-lettered; {'it waits' if more == 1 else 'they wait'} for you in Dead letters "
            "(desktop-queue list --state dead)"
        )
    return lines


@dataclass
class _Read:
    """What a process last read of the outbox file (see :meth:`Outbox._read`)."""

    file: tuple[int, int]  # (device, inode)
    header: bytes  # its first line, with the version of the file it names
    offset: int  # bytes read (whole lines)
    lines: int  # lines read, blank ones too (damaged lines are told by number)
    view: OutboxView


@dataclass(slots=True)
class _Entry:
    notice: Notice
    claimed_by: str | None = None
    claimed_at: float | None = None
    acked: bool = False


@dataclass
class OutboxView:
    """The outbox as read: every entry by key, and what was wrong with the file."""

    since: float
    entries: dict[str, _Entry] = field(default_factory=dict)
    lines: int = 0
    notices: list[str] = field(default_factory=list)

    def pending(self) -> list[Notice]:
        return [e.notice for e in self.entries.values() if not e.acked and e.claimed_by is None]

    def delivered(self, key: str) -> bool:
        entry = self.entries.get(key)
        return entry is not None and entry.acked


class Outbox:
    """The outbox of one data dir.

    Args:
        data_dir: the data directory.
        now: wall time (the queue's clock in tests).
        alive: whether a claim holder (``host/pid/start``) still runs (default: the process table).
    """

    def __init__(
        self,
        data_dir: Path | str,
        now: Callable[[], float],
        *,
        alive: Callable[[str], bool | None] | None = None,
    ) -> None:
        self.dir = Path(data_dir) / OUTBOX_DIR
        self.path = self.dir / OUTBOX_FILE
        self.now = now
        self.alive = alive or holder_alive
        self.me = this_process()
        self._version: int | None = None  # the store version fed up to (None: not yet)
        self._looked = False  # the hot set was looked through once for what is missing
        self._window: FileLock | None = None
        self._lines = 0  # in the file, as this process last read or wrote it
        self._last: _Read | None = None
        self.notices: list[str] = []

    # ------------------------------------------------------------------ file

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.dir / LOCK_FILE)

    def _read(self) -> OutboxView:
        """The outbox as it is now (callers hold the lock, and only look at what it gives).

        Reads the lines appended since this process last read, onto what it read then,
        if the file is still the one read then; the whole file otherwise. A file ending
        in a torn line (a crash while appending) is read whole each time, and not kept.
        """
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 (a with below: the missing file is told apart first)
        except FileNotFoundError:
            self._last = None
            view = OutboxView(self.now(), lines=1)
            header = _header_line(view.since)
            atomic_write(self.path, header)
            self._remember(header, 1, view)
            return view
        with fh:
            st = os.fstat(fh.fileno())
            last = self._last
            header = fh.readline()
            if (
                last is not None
                and last.file == (st.st_dev, st.st_ino)
                and last.header == header
                and st.st_size >= last.offset
            ):
                view, offset, n = last.view, last.offset, last.lines
                fh.seek(offset)
            else:
                view, offset, n = OutboxView(0.0), 0, 0
                fh.seek(0)
            # a line at a time: only the entries are held, not the file and its lines beside them
            whole = True
            for line in fh:
                n += 1
                offset += len(line)
                whole = line.endswith(b"\n")  # (only the last line can lack one)
                if not line.strip():
                    continue
                try:
                    rec = orjson.loads(line)
                    op = rec["op"]
                    self._apply(view, rec, op)
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    view.notices.append(
                        "the last outbox line was torn (a crash while writing); it was skipped"
                        if not whole
                        else f"outbox line {n} is damaged; it was skipped"
                    )
        self._last = _Read((st.st_dev, st.st_ino), header, offset, n, view) if whole else None
        for note in view.notices:
            if note not in self.notices:
                self.notices.append(note)
        self._lines = view.lines
        return view

    @staticmethod
    def _apply(view: OutboxView, rec: Mapping[str, Any], op: str) -> None:
        """One line of the file into ``view`` (raises KeyError/TypeError/ValueError on a malformed one)."""
        view.lines += 1
        if op == "header":
            if int(rec.get("schema_version", 0)) > SCHEMA_VERSION:
                raise OSError("the outbox was written by a newer version")
            view.since = float(rec.get("since") or 0.0)
        elif op == "add":
            notice = Notice(
                key=str(rec["key"]),
                job_id=str(rec["job_id"]),
                # (one copy of each state and kind for the thousands of entries a read keeps)
                state=sys.intern(str(rec["state"])),
                title=str(rec.get("title") or ""),
                kind=sys.intern(str(rec.get("kind") or "")),
                finished_at=float(rec["finished_at"]),
            )
            view.entries.setdefault(notice.key, _Entry(notice))
        elif (entry := view.entries.get(rec.get("key", ""))) is not None:
            if op == "claim":
                entry.claimed_by, entry.claimed_at = rec.get("by"), rec.get("at")
            elif op == "ack":
                entry.acked = True
            elif op == "requeue":
                entry.claimed_by = entry.claimed_at = None

    def _append(self, records: Sequence[Mapping[str, Any]]) -> None:
        if not records:
            return
        payload = b"".join(orjson.dumps(dict(r)) + b"\n" for r in records)
        device, inode, size = append_lines(self.path, payload)
        self._lines += len(records)
        last = self._last
        if last is not None and last.file == (device, inode) and last.offset == size:
            # nobody appended since this process read (the lock is held): what it wrote
            # goes onto what it read, and the next read starts after it
            for record in records:
                self._apply(last.view, record, record["op"])
            last.offset += len(payload)
            last.lines += len(records)

    def _compact(self, view: OutboxView, hot_ids: set[str] | None) -> None:
        """Rewrites the file with the entries still needed.

        Acknowledged entries are kept while their job is in the hot set (so the job is
        not announced again); ``since`` moves past those dropped.
        """
        keep: list[dict[str, Any]] = []
        since = view.since
        for entry in view.entries.values():
            if entry.acked and (hot_ids is None or entry.notice.job_id not in hot_ids):
                since = max(since, entry.notice.finished_at)
                continue
            keep.append({"op": "add", **entry.notice.to_json()})
            if entry.acked:
                keep.append({"op": "ack", "key": entry.notice.key})
            elif entry.claimed_by is not None:
                keep.append({"op": "claim", "key": entry.notice.key, "by": entry.claimed_by, "at": entry.claimed_at})
        header = _header_line(since)
        body = b"".join(orjson.dumps(r) + b"\n" for r in keep)
        atomic_write(self.path, header + body)
        self._lines = 1 + len(keep)
        # what this process wrote is what the next read would find (the lock is held)
        kept = OutboxView(since, lines=1)
        for record in keep:
            self._apply(kept, record, record["op"])
        self._remember(header + body, 1 + len(keep), kept)

    def _remember(self, written: bytes, lines: int, view: OutboxView) -> None:
        """Keeps ``view`` as the read of the file this process has just written whole (lock held)."""
        try:
            st = os.stat(self.path)
        except OSError:
            self._last = None
            return
        header = written[: written.index(b"\n") + 1]
        self._last = _Read((st.st_dev, st.st_ino), header, len(written), lines, view)

    # ------------------------------------------------------------------ adding

    def start(self, queue: Any = None) -> None:
        """Creates the outbox if there is none, so that every job that ends from now on is announced.

        Given the queue, the feed follows its changes from now: a worker's first feed comes
        a moment after it starts leasing, and the jobs it finished meanwhile may be
        archived by then, out of the hot set that a first feed looks through (a worker
        on 3,000 instant jobs never announced its first 660).

        Never raises: an outbox that cannot be written now is created by the next feed.
        """
        if queue is not None and self._version is None:
            with contextlib.suppress(QueueError, OSError):
                self._version = queue.refresh()
        with contextlib.suppress(OSError, StoreError):
            self._touch()

    def view(self) -> OutboxView:
        """The outbox as it is now (under the lock: a consistent read), the caller's to keep."""
        with self._locked():
            return copy.deepcopy(self._read())

    def _touch(self) -> None:
        """Reads the outbox, creating it if there is none (no copy of it is handed out)."""
        with self._locked():
            self._read()

    def add(self, jobs: Iterable[Mapping[str, Any]]) -> list[Notice]:
        """Adds the notices of the finished ``jobs`` not in the outbox yet; returns those added."""
        candidates = [n for n in (notice_of(j) for j in jobs) if n is not None]
        if not candidates:
            return []
        with self._locked():
            view = self._read()
            new = [n for n in candidates if n.key not in view.entries and n.finished_at >= view.since]
            unique = list({n.key: n for n in new}.values())
            self._append([{"op": "add", **n.to_json()} for n in unique])
            return unique

    def feed(self, queue: Any) -> list[Notice]:
        """Adds the notices of the jobs changed since the last feed (the store's changes feed),
        and rewrites the file if it has grown past :data:`COMPACT_LINES`."""
        added = self._feed(queue)
        if self._lines >= COMPACT_LINES:
            # here, not only in the repair scan: a worker run shorter than a scan's period
            # never compacted, and every read of the file (each feed, claim and ack) then
            # parsed all that the runs before it had appended
            with contextlib.suppress(OSError, StoreError):
                self.compact(queue)
        return added

    def _feed(self, queue: Any) -> list[Notice]:
        if self._version is None:
            # the first feed looks at the hot set whole: only the version to follow from is
            # wanted (changes since the beginning would name every job ever written)
            version = queue.refresh()
            self._touch()  # the outbox starts now if it did not exist: later endings count
            missing = self.add_missing(queue)
            self._version, self._looked = version, True
            return missing
        version, ids = queue.changed_since(self._version)
        if ids is None:
            missing = self.add_missing(queue)
            self._version = version
            return missing
        added: list[Notice] = []
        if ids:
            # hot or archived since they changed (a busy worker finishes more jobs between two
            # feeds than the hot set keeps, and each must be told), read as add() folds them
            # into notices, a chunk at a time: thousands of jobs copied at once were a peak
            # that the process's memory kept afterwards
            added = self.add(queue.job_dicts(ids))
        # only now: jobs whose notices a full disk refused are looked at again next time
        self._version = version
        if not self._looked:
            # once: what a process that died before announcing left in the hot set (the
            # jobs just looked at aside)
            self._looked = True
            added += self.add_missing(queue, done=ids)
        return added

    def add_missing(self, queue: Any, done: Collection[str] = ()) -> list[Notice]:
        """Adds a notice for every finished job of the hot set that has none (the repair
        scan's pass), but those of ``done``; reads them a chunk at a time, as a feed does."""
        skip = set(done)
        return self.add(queue.job_dicts([i for i in queue.hot_ids(ANNOUNCED) if i not in skip]))

    # ------------------------------------------------------------------ delivering

    def claim(self, limit: int | None = None) -> list[Notice]:
        """Takes the pending notices (up to ``limit``) for this process to deliver (oldest first)."""
        with self._locked():
            view = self._read()
            pending = sorted(view.pending(), key=lambda n: n.finished_at)[:limit]
            now = self.now()
            self._append([{"op": "claim", "key": n.key, "by": self.me, "at": now} for n in pending])
            return pending

    def ack(self, notices: Iterable[Notice]) -> None:
        """Marks ``notices`` delivered."""
        keys = [n.key for n in notices]
        if not keys:
            return
        with self._locked():
            self._append([{"op": "ack", "key": k, "at": self.now()} for k in keys])

    def deliver(self, send: Callable[[list[Notice]], None], limit: int | None = None) -> list[Notice]:
        """Claims pending notices, hands them to ``send``, acknowledges them; returns them.

        Every pending notice by default: a deliverer looks every half minute or so, and a
        worker that finishes more than a page of jobs in that time must not fall behind
        (the window tells a batch in one notification).

        If ``send`` raises, the claim stays unacknowledged and the repair scan queues the
        notices again once this process is gone (or the claim is old).
        """
        notices = self.claim(limit)
        if notices:
            send(notices)
            self.ack(notices)
        return notices

    # ------------------------------------------------------------------ who delivers

    def hold_window(self) -> None:
        """Says, while this process runs, that a window delivers the notices (desktop notifications).

        An OS lock, released by the OS when the process dies: a worker that finds it held
        leaves the notices to the window, so that people see them on the desktop rather
        than in a worker's log.
        """
        if self._window is None:
            make_dirs(self.dir)
            lock = FileLock(self.dir / WINDOW_LOCK)
            lock.acquire(exclusive=False)
            self._window = lock

    def release_window(self) -> None:
        if self._window is not None:
            self._window.release()
            self._window.close()
            self._window = None

    def window_present(self) -> bool:
        """Whether a window on this data dir delivers the notices (holds :data:`WINDOW_LOCK`)."""
        if self._window is not None:
            return True
        make_dirs(self.dir)
        lock = FileLock(self.dir / WINDOW_LOCK)
        try:
            free = lock.acquire(exclusive=True, blocking=False)
            if free:
                lock.release()
            return not free
        finally:
            lock.close()

    # ------------------------------------------------------------------ repair

    def stale_claims(self, timeout_s: float = CLAIM_TIMEOUT_S) -> list[Notice]:
        """Claimed, never acknowledged, and the claimer is gone (or the claim is older than ``timeout_s``)."""
        with self._locked():
            held = [
                (e.notice, e.claimed_by, e.claimed_at or 0.0)
                for e in self._read().entries.values()
                if not e.acked and e.claimed_by is not None
            ]
        now = self.now()
        out = []
        for notice, holder, at in held:
            gone = holder != self.me and self.alive(holder) is False
            if gone or now - at > timeout_s:
                out.append(notice)
        return out

    def requeue(self, notices: Iterable[Notice]) -> list[Notice]:
        """Makes claimed, unacknowledged ``notices`` pending again (checked under the lock)."""
        wanted = {n.key for n in notices}
        if not wanted:
            return []
        with self._locked():
            view = self._read()
            again = [
                e.notice for k, e in view.entries.items() if k in wanted and not e.acked and e.claimed_by is not None
            ]
            self._append([{"op": "requeue", "key": n.key, "at": self.now()} for n in again])
            return again

    def compact(self, queue: Any = None) -> bool:
        """Rewrites the file if it has grown past :data:`COMPACT_LINES`; True if it did.

        Given the queue, acknowledged entries whose job the hot set still holds are kept.
        It is asked with the lock held (no process takes the two the other way round),
        about those jobs only.
        """
        with self._locked():
            view = self._read()
            if view.lines < COMPACT_LINES:
                return False
            acked = {e.notice.job_id for e in view.entries.values() if e.acked}
            self._compact(view, None if queue is None else queue.hot_among(acked))
            return True


__all__ = ["ANNOUNCED", "Notice", "Outbox", "OutboxView", "log_lines", "notice_of"]
