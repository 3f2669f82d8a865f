"""The jobs in memory and their indexes (:class:`StoreState`), and applying a record to them.

The JSON store and the memory backend share this state; it implements
:class:`desktop_queue.core.backend.View`, which is all the queue's verbs read.
"""

from __future__ import annotations

import heapq
import logging
import os
import time
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from desktop_queue.core.errors import StoreCorrupt, StoreError
from desktop_queue.core.model import State, events_of
from desktop_queue.core.records import (
    BatchRecord,
    JobDict,
    NewRecord,
    PurgeRecord,
    Record,
    UpdateRecord,
)
from desktop_queue.core.store.archive import (
    Archive,
    PurgeFilter,
    as_hot,
)
from desktop_queue.core.store.codec import (
    encode_record,
)
from desktop_queue.core.store.fileio import CORRUPT_MARK, atomic_write
from desktop_queue.core.wording import counted

log = logging.getLogger(__name__)


LIVE_OR_DONE = (State.QUEUED, State.RUNNING, State.SUCCEEDED)


#: the job fields StoreState indexes (an update touching none of them moves no index)
_INDEXED = frozenset({"state", "run_after", "priority", "key", "seq", "lease_epoch"})


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.localtime()) + f"-{os.getpid()}"


def is_orphan(jobs: dict[str, JobDict], record: Record) -> bool:
    """True for an update of a job that ``jobs`` does not hold (its creation record is missing)."""
    return record.get("op") == "upd" and record.get("id") not in jobs


def set_aside_orphans(root: Path, segment: str, records: list[Record]) -> tuple[str, bool]:
    """Keeps updates of jobs whose creation record is missing, and says so.

    They cannot be applied, and dropping them would lose whatever they say without a
    trace: they are copied, as checksummed journal lines, to
    ``<segment>.orphans-<crc>.corrupt-<time>`` in ``root``. The segment itself is left
    as it is (other processes may be reading it), so every open finds them again until
    compaction folds the segment away; the name carries the CRC of the copy so that
    finding the same records again keeps one copy, not one per open.

    Returns:
        The message for the user, and whether the copy is on disk (False: the disk
        refused, and the segment is the only place that still holds them).
    """
    payload = b"".join(encode_record(r) for r in records)
    tag = f"{segment}.orphans-{zlib.crc32(payload):08x}{CORRUPT_MARK}"
    ids = sorted({str(r.get("id")) for r in records})
    what = (
        f"{segment} holds {counted(len(records), 'update')} of {'job' if len(ids) == 1 else 'jobs'} {', '.join(ids)} "
        "whose creation record is missing; "
        "they were not applied (every other job loaded)"
    )
    try:
        kept = next((name for name in os.listdir(root) if name.startswith(tag)), None)
        if kept is None:
            kept = tag + _stamp()
            atomic_write(root / kept, payload, overwrite=False)
    except (OSError, StoreError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return f"{what}; they could not be copied aside ({reason}) and stay in {segment}", False
    return f"{what} and were set aside in {kept}", True


def apply_plain(jobs: dict[str, JobDict], record: Record) -> JobDict | None:
    """Applies one record to a plain ``id -> job`` map (no indexes); returns the job touched."""
    op = record.get("op")
    if op == "new":
        new = cast(NewRecord, record)  # records read from disk are checked by op only
        job = new["job"].copy()
        job["events"] = list(new.get("ev") or ())
        jobs[job["id"]] = job
        return job
    if op == "batch":
        last = None
        for sub in cast(BatchRecord, record)["new"]:
            last = apply_plain(jobs, cast(Record, sub))
        return last  # (the batch's highest seq: compaction takes the store's from it)
    if op == "upd":
        upd = cast(UpdateRecord, record)
        found = jobs.get(upd["id"])
        if found is None:
            raise StoreCorrupt(f"journal updates job {upd['id']} that does not exist")
        job = found
        job.update(upd.get("set") or {})
        events = upd.get("ev")
        if events:
            events_of(job).extend(events)
        return job
    if op == "purge":
        purge = PurgeFilter.from_json(cast(PurgeRecord, record)["filter"])
        for job_id in [i for i, j in jobs.items() if purge.matches(j)]:
            del jobs[job_id]
    return None  # headers and unknown-but-checksummed records change no job


def fault_in(jobs: dict[str, JobDict], archive: Archive | None, record: Record) -> JobDict | None:
    """Brings an archived job back into ``jobs`` when ``record`` updates it; returns it, or None.

    A finished job changes after it was archived when it is retried or replayed: it is
    hot again from then on, and archived again (a newer copy) once it is finished long
    enough. Its result document stays in the archive's older copy meanwhile.
    """
    if archive is None or record.get("op") != "upd":
        return None
    job_id = cast(UpdateRecord, record).get("id", "")
    if job_id in jobs:
        return None
    archived = archive.get(job_id)
    if archived is None:
        return None
    jobs[job_id] = as_hot(archived)
    return archived


#: the changes a log keeps at most; past it, the older half goes (a reader that far
#: behind is told "everything", and reads the hot set again)
CHANGE_LOG_MAX = 200_000


class ChangeLog:
    """``(version, job id)`` of the latest changes, oldest first ("*": anything may have changed).

    What :meth:`StoreState.changed_since` answers from: it lets the window, the
    notification outbox and the change feed read only what changed. Versions and ids
    are kept in two flat arrays, not as a tuple per change: a busy process keeps up to
    :data:`CHANGE_LOG_MAX` of them.
    """

    __slots__ = ("ids", "versions")

    def __init__(self, entries: Iterable[tuple[int, str]] = ()) -> None:
        self.versions = array("q")
        self.ids: list[str] = []
        for version, job_id in entries:
            self.append(version, job_id)

    def append(self, version: int, job_id: str) -> None:
        self.versions.append(version)
        self.ids.append(job_id)
        if len(self.ids) > CHANGE_LOG_MAX:
            half = CHANGE_LOG_MAX // 2
            del self.versions[:half]
            del self.ids[:half]

    def clear(self) -> None:
        del self.versions[:]
        self.ids.clear()

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return zip(self.versions, self.ids, strict=True)

    def first_version(self) -> int:
        """The oldest version logged (the log must not be empty)."""
        return self.versions[0]

    def newest_first(self) -> Iterator[tuple[int, str]]:
        return zip(reversed(self.versions), reversed(self.ids), strict=True)


@dataclass
class StoreState:
    """Every job in memory, with the indexes that keep each verb's cost flat.

    Attributes:
        jobs: id -> job dict (with its ``events`` list).
        by_state: state -> ids in that state.
        keys: idempotency key -> the live or succeeded job holding it.
        lanes: priority -> heap of ``(run_after, seq, id)`` for queued jobs (lazy deletion).
        queued_by_lane: priority -> ids of the queued jobs waiting in that lane.
        queued_by_kind: kind -> ids of the queued jobs of that kind (a worker that runs
            none of the kinds waiting need not scan the lanes).
        seq: the highest submission number given out.
        epoch: the highest lease epoch given out.
        version: bumped by every applied record; ``changes`` logs ``(version, id)``.
        orphans: updates not applied because their job does not exist (see
            :func:`set_aside_orphans`), until the reader of the records takes them.
        archive: where finished jobs that left the hot set are (see :mod:`.archive`);
            ``jobs`` and the indexes hold the hot set only.
        purges: purges recorded but not yet folded into the archive by a compaction,
            with the journal segment that recorded them: archived jobs they match are
            hidden until then.
    """

    jobs: dict[str, JobDict] = field(default_factory=dict)
    by_state: dict[str, set[str]] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    lanes: dict[str, list[tuple[float, int, str]]] = field(default_factory=dict)
    seq: int = 0
    epoch: int = 0
    version: int = 0
    changes: ChangeLog = field(default_factory=ChangeLog)
    queued_by_lane: dict[str, set[str]] = field(default_factory=dict)
    queued_by_kind: dict[str, set[str]] = field(default_factory=dict)
    orphans: list[Record] = field(default_factory=list)
    archive: Archive | None = None
    purges: list[tuple[int, PurgeFilter]] = field(default_factory=list)
    #: the journal segment whose records are being applied (for ``purges``)
    gen: int = 0
    #: the number of the last record applied (records are numbered 1, 2, ... store-wide)
    n: int = 0

    # ------------------------------------------------------------- hot set and archive

    def job(self, job_id: str) -> JobDict | None:
        """The job with this id, hot or archived (an archived one is a copy: reading it changes nothing)."""
        job = self.jobs.get(job_id)
        if job is not None or self.archive is None:
            return job
        archived = self.archive.get(job_id)
        if archived is None or self.purged(archived):
            return None
        return as_hot(archived)

    def jobs_by_id(self, ids: Sequence[str]) -> list[JobDict]:
        """The jobs of ``ids`` that exist, hot or archived, in that order: what :meth:`job`
        gives for each, with the archived ones read together (see :meth:`Archive.rows_of`)."""
        found: dict[str, JobDict] = {}
        archived: list[str] = []
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None:
                found[job_id] = job
            else:
                archived.append(job_id)
        if archived and self.archive is not None:
            for job in self.archive.jobs(self.archive.rows_of(archived)):
                if not self.purged(job):
                    found[job["id"]] = as_hot(job)
        return [found[i] for i in ids if i in found]

    def purged(self, job: JobDict) -> bool:
        return bool(self.purges) and any(p.matches(job) for _, p in self.purges)

    # (the rest of backend.View)

    def hot(self, job_id: str) -> JobDict | None:
        return self.jobs.get(job_id)

    def hot_jobs(self) -> dict[str, JobDict]:
        return self.jobs

    def ids_in(self, state: str) -> set[str] | tuple[()]:
        return self.by_state.get(state, ())

    def holder_id(self, key: str) -> str | None:
        return self.keys.get(key)

    def queued_in_lane(self, lane: str) -> int:
        return len(self.queued_by_lane.get(lane, ()))

    def queued_of_kinds(self, kinds: Iterable[str]) -> bool:
        return any(self.queued_by_kind.get(kind) for kind in kinds)

    def holder(self, key: str) -> JobDict | None:
        """The live or succeeded job holding idempotency key ``key``, hot or archived."""
        held = self.keys.get(key)
        if held is not None:
            return self.jobs[held]
        if self.archive is None:
            return None
        archived = self.archive.by_key(key)
        if archived is None or archived["id"] in self.jobs or self.purged(archived):
            return None  # (a hot copy is newer, and does not hold the key, or it would be in keys)
        return as_hot(archived)

    def exists(self, job_id: str) -> bool:
        """Whether any job, hot or archived, has this id."""
        return job_id in self.jobs or (self.archive is not None and self.archive.has_id(job_id))

    def evict(self, archived: Iterable[tuple[str, float | None, str]]) -> int:
        """Drops from memory the finished jobs an archive segment holds as they are here.

        Args:
            archived: ``(id, updated_at, state)`` of the jobs the segment holds.
        Returns:
            how many were dropped.
        """
        dropped = 0
        for job_id, updated_at, state in archived:
            job = self.jobs.get(job_id)
            if job is None or job["state"] != state or job.get("updated_at") != updated_at:
                continue  # changed since it was archived (retried, replayed): it stays hot
            del self.jobs[job_id]
            bucket = self.by_state.get(state)
            if bucket is not None:
                bucket.discard(job_id)
            if self.keys.get(job["key"]) == job_id:
                del self.keys[job["key"]]
            dropped += 1
        if dropped:
            self.version += 1
        return dropped

    def take_orphans(self) -> list[Record]:
        """The updates of missing jobs met since the last call (see ``orphans``)."""
        taken, self.orphans = self.orphans, []
        return taken

    def _index(self, job: JobDict) -> None:
        """Adds ``job`` to the index entries of its values (adding what is there already changes nothing)."""
        job_id = job["id"]
        state = job["state"]
        bucket = self.by_state.get(state)
        if bucket is None:
            bucket = self.by_state[state] = set()
        bucket.add(job_id)
        if state in LIVE_OR_DONE:
            self.keys[job["key"]] = job_id
        if state == State.QUEUED:
            self.queued_by_lane.setdefault(job["priority"], set()).add(job_id)
            self.queued_by_kind.setdefault(job["kind"], set()).add(job_id)
            heapq.heappush(
                self.lanes.setdefault(job["priority"], []),
                (job.get("run_after") or 0.0, job["seq"], job_id),
            )
        if job["seq"] > self.seq:
            self.seq = job["seq"]
        epoch = job.get("lease_epoch") or 0
        if epoch > self.epoch:
            self.epoch = epoch

    def apply(self, record: Record) -> None:
        """Applies one journal record (:func:`apply_plain`) and moves the job in the indexes.

        An update moves the job only out of the index entries its change touches: a
        lease moves it from one state to another; a heartbeat moves it nowhere. An
        update of a job that does not exist changes nothing and is kept in ``orphans``
        (a damaged journal must not stop every other job from loading).
        """
        old: tuple[str, str, str] | None = None
        number = record.get("n")
        if isinstance(number, int) and number > self.n:
            self.n = number
        op = record.get("op")
        if op == "purge":
            self._apply_purge(record)
            return
        if op == "batch":
            for sub in cast(BatchRecord, record)["new"]:
                self.apply(cast(Record, sub))
            return
        is_update = op == "upd"
        if is_update:
            upd = cast(UpdateRecord, record)
            current = self.jobs.get(upd.get("id", ""))
            if current is None:
                current = fault_in(self.jobs, self.archive, record)
                if current is None or self.purged(current):
                    self.jobs.pop(upd.get("id", ""), None)
                    self.orphans.append(record)
                    return
                self._index(current)
            if not _INDEXED.isdisjoint(upd.get("set") or ()):
                old = (current["state"], current["key"], current["priority"])
        job = apply_plain(self.jobs, record)
        if job is None:
            return
        if not is_update:
            self._index(job)
        elif old is not None:
            self._reindex(job, *old)
        self.version += 1
        self.changes.append(self.version, job["id"])

    def _apply_purge(self, record: Record) -> None:
        purge = PurgeFilter.from_json(cast(PurgeRecord, record)["filter"])
        gone = [i for i, j in self.jobs.items() if purge.matches(j)]
        for job_id in gone:
            job = self.jobs.pop(job_id)
            bucket = self.by_state.get(job["state"])
            if bucket is not None:
                bucket.discard(job_id)
            if self.keys.get(job["key"]) == job_id:
                del self.keys[job["key"]]
            self.version += 1
            self.changes.append(self.version, job_id)
        self.purges.append((self.gen, purge))
        self.touch_all()

    def touch_all(self) -> None:
        """Says that anything may have changed (:meth:`changed_since` answers None past this)."""
        self.version += 1
        self.changes.append(self.version, "*")

    def _reindex(self, job: JobDict, old_state: str, old_key: str, old_lane: str) -> None:
        """Moves ``job`` (just updated) out of the index entries of its old values, then indexes it."""
        job_id = job["id"]
        if job["state"] != old_state:
            bucket = self.by_state.get(old_state)
            if bucket is not None:
                bucket.discard(job_id)
        if old_state == State.QUEUED:
            bucket = self.queued_by_lane.get(old_lane)
            if bucket is not None:
                bucket.discard(job_id)
            bucket = self.queued_by_kind.get(job["kind"])
            if bucket is not None:
                bucket.discard(job_id)
        if self.keys.get(old_key) == job_id and (job["key"] != old_key or job["state"] not in LIVE_OR_DONE):
            del self.keys[old_key]
        self._index(job)

    def rebuild(self, jobs: dict[str, JobDict], seq: int, epoch: int) -> None:
        """Replaces everything with ``jobs`` and rebuilds the indexes."""
        self.jobs = jobs
        self.by_state = {}
        self.keys = {}
        self.lanes = {}
        self.queued_by_lane = {}
        self.queued_by_kind = {}
        self.seq = seq
        self.epoch = epoch
        # finished jobs (nearly all of a large store) only need their state and key indexed:
        # do that inline, and leave the general _index to the queued and running ones
        by_state = self.by_state
        keys = self.keys
        top_seq = top_epoch = 0
        for job_id, job in jobs.items():
            state = job["state"]
            if state == State.SUCCEEDED or state == State.DEAD or state == State.CANCELLED:
                bucket = by_state.get(state)
                if bucket is None:
                    bucket = by_state[state] = set()
                bucket.add(job_id)
                if state == State.SUCCEEDED:
                    keys[job["key"]] = job_id
                if job["seq"] > top_seq:
                    top_seq = job["seq"]
                epoch = job.get("lease_epoch") or 0
                if epoch > top_epoch:
                    top_epoch = epoch
            else:
                self._index(job)  # keeps self.seq and self.epoch up to date itself
        self.seq = max(self.seq, top_seq)
        self.epoch = max(self.epoch, top_epoch)
        self.version += 1
        self.changes.clear()
        self.changes.append(self.version, "*")

    def _head(self, heap: list[tuple[float, int, str]]) -> JobDict | None:
        """The job at the top of a lane heap, after dropping stale entries (lazy deletion)."""
        while heap:
            run_after, _seq, job_id = heap[0]
            job = self.jobs.get(job_id)
            if job is not None and job["state"] == State.QUEUED and (job.get("run_after") or 0.0) == run_after:
                return job
            heapq.heappop(heap)
        return None

    def next_wake(self) -> float | None:
        """When the earliest queued job becomes runnable, or None if none is queued."""
        heads = [self._head(heap) for heap in self.lanes.values()]
        times = [job.get("run_after") or 0.0 for job in heads if job is not None]
        return min(times) if times else None

    def runnable(self, lane: str, now: float, skip: Callable[[JobDict], bool] | None = None) -> JobDict | None:
        """The next queued job of ``lane`` whose ``run_after`` has come, or None."""
        heap = self.lanes.get(lane)
        if not heap:
            return None
        skipped: list[tuple[float, int, str]] = []
        found: JobDict | None = None
        try:
            while True:
                job = self._head(heap)
                if job is None or heap[0][0] > now:
                    break
                if skip is not None and skip(job):
                    skipped.append(heapq.heappop(heap))
                    continue
                found = job
                break
        finally:
            # also when ``skip`` raises (flow control asks for its session mid-scan): a job
            # left out of the heap would never be leased by this process again
            for entry in skipped:
                heapq.heappush(heap, entry)
        return found

    def changed_since(self, version: int) -> tuple[int, set[str] | None]:
        """Ids changed after ``version``; None means "everything" (a reload happened)."""
        if not self.changes or version >= self.version:
            return self.version, set()
        first = self.changes.first_version()
        if version < first - 1:
            return self.version, None
        out: set[str] = set()
        for v, job_id in self.changes.newest_first():
            if v <= version:
                break
            if job_id == "*":
                return self.version, None
            out.add(job_id)
        return self.version, out
