"""Compaction: folding closed journal segments into a new snapshot, from the files alone.

On the way, finished jobs that leave the hot set move to the archive, recorded purges are
carried out, and result documents the journal carried are written as files. It runs in
a child process (``python -m desktop_queue.core.store.compaction ROOT UPTO [KEEP_FINISHED
KEEP_FINISHED_S NOW]``), so that parsing and writing a large snapshot never holds the
caller's GIL (see :meth:`desktop_queue.core.store.journal.Store._compact_soon`), or inline
in tests.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

import orjson

from desktop_queue.core.errors import StoreCorrupt, StoreError
from desktop_queue.core.model import State, events_of
from desktop_queue.core.records import (
    JobDict,
    PurgeRecord,
    Record,
)
from desktop_queue.core.results import ResultStore
from desktop_queue.core.store.archive import (
    INLINE_RESULT_MAX,
    Archive,
    PurgeFilter,
    choose_archived,
)
from desktop_queue.core.store.codec import (
    _SEGMENT_RE,
    _SNAPSHOT_RE,
    read_segment,
    read_segment_file,
    segment_name,
    snapshot_name,
)
from desktop_queue.core.store.fileio import FileLock, atomic_write, fsync_dir
from desktop_queue.core.store.snapshot import (
    decode_snapshot,
    encode_snapshot,
)
from desktop_queue.core.store.state import (
    apply_plain,
    fault_in,
    is_orphan,
    set_aside_orphans,
)

log = logging.getLogger(__name__)


#: the finished jobs a compaction keeps in the snapshot (see archive.choose_archived)
KEEP_FINISHED = 200


KEEP_FINISHED_S = 15 * 60.0


#: the most journal segments one compaction step folds (see compact)
FOLD_SEGMENTS = 2


#: a snapshot is written in pieces of this size, each synced before the next (see fileio.write_all)
SNAPSHOT_SYNC_EVERY = 4 << 20


def compact(
    root: Path,
    upto: int,
    notices: list[str] | None = None,
    *,
    keep_finished: int = KEEP_FINISHED,
    keep_finished_s: float = KEEP_FINISHED_S,
    now: float | None = None,
) -> int:
    """Writes ``snapshot-<upto>`` from the newest snapshot and the closed segments after it.

    On the way, the finished jobs that leave the hot set (:func:`choose_archived`) are
    written to a new archive segment with their result documents, which is indexed,
    before the snapshot that leaves them out replaces the previous one; their result
    files are removed only after that. Purges recorded in the folded segments remove
    the hot jobs they match and write the archive segments holding matches again
    without them. A crash at any step leaves every job in the snapshot, the archive,
    or both (where the snapshot's copy wins until the next compaction).

    Keeps the newest two snapshots and the segments the older of them still needs.
    Callers hold ``compact.lock``. Returns the new snapshot's size (0 if nothing to do).
    Updates of jobs that do not exist are set aside (:func:`set_aside_orphans`) before
    the snapshot folds their segment away; what was said about them goes to ``notices``.

    ``upto`` may be the newest snapshot's own generation: the snapshot is then written
    again if it holds jobs to archive (a store written before the archive existed). If a
    newer snapshot exists, the segments are folded already and nothing is done.

    Raises:
        StoreError: a segment is damaged, or they could not be set aside (nothing folded).
    """
    now = time.time() if now is None else now
    archive = Archive(root)
    written = 0
    try:
        archive.catch_up()
        if notices is not None:
            notices.extend(archive.notices)
        # a few segments at a time: memory is then bounded by what those hold, however
        # large a burst's backlog (each step leaves a complete snapshot behind it)
        while True:
            names = os.listdir(root)
            snaps = sorted(int(m.group(1)) for n in names if (m := _SNAPSHOT_RE.match(n)))
            if snaps and snaps[-1] > upto:
                # another process folded past upto while this request waited: folding
                # again from an older snapshot would write an older state, and restore
                # the result files of jobs that compaction has archived since
                return written
            base = max((g for g in snaps if g <= upto), default=0)
            step = min(upto, base + FOLD_SEGMENTS) if base < upto else upto
            size = _compact(root, step, snaps, archive, notices, keep_finished, keep_finished_s, now)
            written = size or written
            if step >= upto or not size:
                return written
    finally:
        archive.close()


def _compact(
    root: Path,
    upto: int,
    snaps: list[int],
    archive: Archive,
    notices: list[str] | None,
    keep_finished: int,
    keep_finished_s: float,
    now: float,
) -> int:
    base_gen = 0
    jobs: dict[str, JobDict] = {}
    seq = epoch = last_n = 0
    for gen in reversed(snaps):
        if gen > upto:
            continue
        try:
            doc, _ = decode_snapshot((root / snapshot_name(gen)).read_bytes(), snapshot_name(gen))
        except StoreCorrupt:
            continue  # the next open quarantines it
        data = doc["data"]
        jobs = {job["id"]: job for job in data["jobs"]}
        if gen == upto and not choose_archived(
            jobs.values(), now=now, keep_finished=keep_finished, keep_for_s=keep_finished_s
        ):
            return 0
        seq, epoch, base_gen = data.get("seq", 0), data.get("epoch", 0), gen
        last_n = data.get("n", 0)
        break
    results = ResultStore(root.parent / "results")
    carried: dict[str, dict[str, Any]] = {}
    purges: list[PurgeFilter] = []
    purged_keys: set[str] = set()
    for gen in range(base_gen + 1, upto + 1):
        data = read_segment_file(root / segment_name(gen))
        read = read_segment(data, 0, last_n)
        if read.bad_line is not None or read.torn_tail:
            raise StoreCorrupt(f"{segment_name(gen)} is damaged; left for the next open to recover")
        orphans: list[Record] = []
        for record in read.records[1:]:
            number = record.get("n")
            if isinstance(number, int):
                last_n = number
            fault_in(jobs, archive, record)
            if is_orphan(jobs, record):
                orphans.append(record)
                continue
            res = record.get("res")
            if isinstance(res, dict) and isinstance(res.get("key"), str):
                carried[res["key"]] = res
            if record.get("op") == "purge":
                purge = PurgeFilter.from_json(cast(PurgeRecord, record)["filter"])
                purges.append(purge)
                for hot in jobs.values():
                    if purge.matches(hot) and hot["state"] == State.SUCCEEDED:
                        purged_keys.add(hot["key"])
                        _remove_artifact(results.get(hot["key"]), results)
            job = apply_plain(jobs, record)
            if job is not None:
                seq = max(seq, job.get("seq", 0))
                epoch = max(epoch, job.get("lease_epoch") or 0)
        if orphans:
            notice, kept = set_aside_orphans(root, segment_name(gen), orphans)
            if not kept:  # folding would remove the only copy of what they say
                raise StoreError(f"{notice}; nothing was folded")
            if notices is not None:
                notices.append(notice)
    gone_results = _purge_archive(archive, purges, jobs, results) | purged_keys
    leaving = choose_archived(jobs.values(), now=now, keep_finished=keep_finished, keep_for_s=keep_finished_s)
    inlined: set[str] = set()  # keys whose result document the archive holds from now on
    as_files: set[str] = set()  # keys whose (large) result stays a file
    if leaving:
        packed: list[JobDict] = []
        for job in leaving:
            out: dict[str, Any] = dict(job)
            out["events"] = events_of(job)
            out.pop("lease_token", None)
            if job["state"] == State.SUCCEEDED:
                found, fits = _result_doc(job, carried, results, archive)
                if fits and found is not None:
                    out["_res"] = found
                    inlined.add(job["key"])
                elif found is not None:
                    as_files.add(job["key"])
            packed.append(cast(JobDict, out))
        archive.write(packed)  # durable and indexed before the snapshot leaves them out
        for job in leaving:
            del jobs[job["id"]]
    leaving_keys = {j["key"] for j in leaving if j["state"] == State.SUCCEEDED}
    # the journal records being folded away were what made the hot jobs' results durable,
    # and those of archived jobs too large to inline (their file is then their only copy)
    hot_keys = [k for k in carried if k not in leaving_keys or k in as_files]
    for key in hot_keys:
        results.restore(carried[key], durable=False)  # all synced at once below
    results.make_durable(hot_keys)
    results.remove_temp_files(older_than_s=3600)  # writes a crash left behind, long abandoned
    raw = encode_snapshot(upto, jobs.values(), seq, epoch, last_n)
    # paced: written all at once, 100 MiB would hold up every commit's sync for as long
    atomic_write(root / snapshot_name(upto), raw, sync_every=SNAPSHOT_SYNC_EVERY)
    # the archive holds these documents now, and no snapshot or kept segment needs the files
    _remove_result_files(results, inlined | gone_results)
    # keep this snapshot and the previous one, with the segments the previous one needs
    keep_from = base_gen if base_gen < upto else upto
    for gen in snaps:
        if gen < keep_from:
            with contextlib.suppress(OSError):
                (root / snapshot_name(gen)).unlink()
    for name in os.listdir(root):
        m = _SEGMENT_RE.match(name)
        if m and int(m.group(1)) <= keep_from:
            with contextlib.suppress(OSError):
                (root / name).unlink()
    fsync_dir(root)
    return len(raw)


def _result_doc(
    job: JobDict, carried: dict[str, dict[str, Any]], results: ResultStore, archive: Archive
) -> tuple[dict[str, Any] | None, bool]:
    """The result document of a succeeded job leaving the hot set, and whether it is archived with it.

    A document larger than :data:`INLINE_RESULT_MAX` stays a file (written from the
    journal's copy if need be: see :func:`_compact`).
    """
    key = job["key"]
    doc: dict[str, Any] | None = carried.get(key) or results.get(key)
    if doc is None:
        older = archive.get(job["id"])  # retried or replayed after an earlier archiving
        found = cast(dict[str, Any], older).get("_res") if older is not None else None
        doc = found if isinstance(found, dict) else None
    return doc, doc is None or len(orjson.dumps(doc)) <= INLINE_RESULT_MAX


def _remove_result_files(results: ResultStore, keys: set[str]) -> None:
    """Removes the result files of ``keys`` that exist, from one listing of each directory.

    Most of the keys a fold archives never had a file (the journal record carried the
    result, and the archive now holds it): one ``listdir`` per directory tells which
    did, where an ``unlink`` per key would mostly fail. A file written after the listing
    (a ``show`` that wants a path, in another process) is a copy of what the archive
    holds, as one written after an unlink would be.
    """
    by_dir: dict[str, list[str]] = {}
    for key in keys:
        shard, name = os.path.split(results.path_str_for(key))
        by_dir.setdefault(shard, []).append(name)
    for directory, names in by_dir.items():
        try:
            present = set(os.listdir(directory))
        except OSError:
            continue  # no directory: no file
        for name in names:
            if name in present:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(directory, name))


def _purge_archive(
    archive: Archive,
    purges: list[PurgeFilter],
    hot: dict[str, JobDict],
    results: ResultStore,
) -> set[str]:
    """Writes the archive segments holding jobs ``purges`` match again without them.

    What went is the purge's answer, told by whoever asked for it (``purge`` says how
    many): not a notice, which is for what the store set aside and a person must hear of.

    Returns the keys of purged succeeded jobs, whose result files go once the snapshot
    is written; their artifacts (images, audio) go now, as nothing refers to them.
    """
    keys: set[str] = set()
    for purge in purges:
        ids = archive.matching(purge)
        if not ids:
            continue
        removed = 0
        for number in sorted(archive.segments_of(ids)):

            def keep(job: JobDict, purge: PurgeFilter = purge) -> bool:
                if purge.matches(job) and job["id"] not in hot:
                    if job["state"] == State.SUCCEEDED:
                        keys.add(job["key"])
                        _remove_artifact(cast(dict[str, Any], job).get("_res"), results)
                    return False
                return True

            removed += archive.rewrite(number, keep)
        if removed:
            log.info("purged %d archived jobs finished before %s", removed, time.ctime(purge.before))
    return keys


def _remove_artifact(doc: Any, results: ResultStore) -> None:
    """Removes the image or audio file a result document refers to."""
    result = doc.get("result") if isinstance(doc, dict) else None
    ref = result.get("artifact_ref") if isinstance(result, dict) else None
    if isinstance(ref, str):
        with contextlib.suppress(OSError, ValueError):
            results.resolve(ref).unlink()


def main(argv: list[str]) -> int:
    """Folds the journal segments up to ``UPTO`` into a snapshot; 0 when done or not needed."""
    root, upto = Path(argv[0]), int(argv[1])
    keep_finished, keep_finished_s, now = KEEP_FINISHED, KEEP_FINISHED_S, None
    if len(argv) >= 5:
        keep_finished, keep_finished_s, now = int(argv[2]), float(argv[3]), float(argv[4])
    gc.disable()  # a short-lived process: the collector would only slow the big parse
    if hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(10)  # background work: the processes serving people come first for the CPU
    lock = FileLock(root / "compact.lock")
    try:
        if not lock.acquire(blocking=False):
            return 0  # another process is compacting
        notices: list[str] = []
        compact(root, upto, notices, keep_finished=keep_finished, keep_finished_s=keep_finished_s, now=now)
        for notice in notices:  # the parent reports these lines (Store._reap_compactor)
            sys.stderr.write(notice.replace("\n", " ") + "\n")
        return 0
    except (StoreError, OSError) as exc:
        sys.stderr.write(f"compaction skipped: {exc}\n")
        return 1
    finally:
        lock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
