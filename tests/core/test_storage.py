"""The durable store on real files: torn and corrupt journals and snapshots, schema versions, compaction.

shared/DESIGN.md section 4 and invariants 1 and 6: the store always opens; a damaged
file is kept aside (``*.corrupt-<time>``), the last good state is loaded and the user is
told what was lost.
"""

from __future__ import annotations

import copy
import os
import random
import shutil
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from desktop_queue.core import ErrorClass, FakeClock, Outcome, Queue, State, StoreCorrupt, StoreError
from desktop_queue.core.results import ResultStore
from desktop_queue.core.store import compaction as compaction_module
from desktop_queue.core.store import journal as storage_module
from desktop_queue.core.store.codec import (
    SCHEMA_VERSION,
    encode_record,
    journal_header,
    new_segment_bytes,
    read_segment,
    segment_name,
    snapshot_name,
    spare_name,
)
from desktop_queue.core.store.fileio import TEMP_MARK, write_all
from desktop_queue.core.store.journal import PREFILL_SLACK, Store, prepare_spare
from desktop_queue.core.store.snapshot import decode_snapshot

OpenQueue = Callable[..., Queue]
REPO = Path(__file__).resolve().parents[2]


def journal_lines(seg: Path) -> list[bytes]:
    """The records of a journal segment as lines (the zeros it was created with left out)."""
    return seg.read_bytes().split(b"\0", 1)[0].splitlines(keepends=True)


def all_jobs(queue: Queue) -> dict[str, dict[str, Any]]:
    return {j.id: j.to_json() for j in queue.list(with_events=True)}


def store_dir(data_dir: Path) -> Path:
    return data_dir / "store"


def segments(data_dir: Path) -> list[Path]:
    return sorted(store_dir(data_dir).glob("journal-*.jsonl"))


def snapshots(data_dir: Path) -> list[Path]:
    return sorted(store_dir(data_dir).glob("snapshot-*.json"))


def corrupt_files(data_dir: Path) -> list[Path]:
    return sorted(p for p in store_dir(data_dir).iterdir() if ".corrupt-" in p.name)


def open_raw_store(data_dir: Path) -> Store:
    """The store alone: no reconciliation, so the loaded state is exactly what the files say."""
    store = Store(store_dir(data_dir))
    store.open()
    return store


def workload(queue: Queue, clock: FakeClock, n: int, start: int = 0) -> None:
    """Jobs in every finished state and some queued, with retries and replays; none left running."""
    for i in range(start, start + n):
        queue.submit("demo", {"prompt": f"job number {i}", "pad": "x" * (i % 7)}, title=f"job {i}")
        kind = i % 6
        if kind in (0, 1, 2, 3):
            lease = queue.lease("w")
            assert lease is not None
            if kind == 0:
                queue.complete(lease, {"text": f"result {i}"})
            elif kind == 1:
                queue.fail(lease, Outcome.failure(ErrorClass.RETRYABLE, "timeout", retry_after=0))
            elif kind == 2:
                queue.fail(lease, Outcome.failure(ErrorClass.FATAL, "bad request", status=400))
                queue.retry(lease.job_id)
            else:
                queue.cancel(lease.job_id)
                queue.replay(lease.job_id)
        clock.advance(1.5)
    # drain what the loop left queued so that leases never pick stale work in later calls
    while (lease := queue.lease("w")) is not None:
        queue.complete(lease, {"text": "drained"})


# =========================================================================== torn journal tails


def _commits_with_offsets(queue: Queue, clock: FakeClock) -> list[tuple[int, dict[str, Any]]]:
    """Runs single-record commits; returns (end of the written journal, raw state) after each."""
    seg = segments(queue.data_dir)[-1]
    history = [(queue.store.write_offset, copy.deepcopy(queue.store.state.jobs))]

    def mark() -> None:
        assert segments(queue.data_dir)[-1] == seg, "this test needs a single segment"
        history.append((queue.store.write_offset, copy.deepcopy(queue.store.state.jobs)))

    for i in range(12):
        job = queue.submit(
            "demo", {"prompt": f"torn tail {i}"}, priority="interactive" if i % 3 == 0 else "background"
        ).job
        mark()
        if i % 3 == 0:
            lease = queue.lease("w")
            assert lease is not None and lease.job_id == job.id
            mark()
            queue.complete(lease, {"text": str(i)})
            mark()
        elif i % 3 == 1:
            queue.cancel(job.id)
            mark()
        clock.advance(1)
    return history


@pytest.mark.parametrize("how", ["truncated", "zeroed"])
@pytest.mark.parametrize("seed", range(6))
def test_torn_journal_at_random_offsets(
    open_queue: OpenQueue, clock: FakeClock, tmp_path: Path, seed: int, how: str
) -> None:
    """A crash mid-write: the file cut short, or (a segment filled with zeros in advance)
    the written part ending early with the zeros still after it."""
    source = tmp_path / "source"
    queue = open_queue(source)
    history = _commits_with_offsets(queue, clock)
    queue.close()
    seg_name = segments(source)[-1].name
    full = (store_dir(source) / seg_name).read_bytes()
    written = history[-1][0]
    assert b"\0" not in full[:written] and not full[written:].strip(b"\0")  # records, then the zeros
    boundaries = {size for size, _ in history}

    rng = random.Random(seed)
    offsets = [rng.randrange(0, written) for _ in range(3)]
    if seed == 0:
        offsets += [history[5][0], history[5][0] - 1, history[0][0] - 3]  # on a boundary, one byte short, in the header
    for n, cut in enumerate(offsets):
        target = tmp_path / f"cut-{n}"
        shutil.copytree(source, target)
        seg = store_dir(target) / seg_name
        with open(seg, "r+b") as fh:
            if how == "truncated":
                fh.truncate(cut)
            else:
                fh.seek(cut)
                fh.write(bytes(written - cut))

        store = open_raw_store(target)
        expected = [jobs for size, jobs in history if size <= cut]
        # every change completely written before the cut is intact, nothing after it
        assert store.state.jobs == (expected[-1] if expected else {}), f"cut at {cut}"
        if cut not in boundaries:
            assert store.report.notices, f"cut at {cut}: something was dropped but nobody was told"
            assert any(seg_name in notice for notice in store.report.notices)
        store.close()

        # the recovered store takes new commits and reopens cleanly
        q2 = Queue.open(target, clock=clock)
        extra = q2.submit("demo", {"prompt": f"after the cut {n}"}).job
        state_after = all_jobs(q2)
        q2.close()
        q3 = Queue.open(target, clock=clock)
        assert all_jobs(q3) == state_after
        assert extra.id in state_after
        assert q3.report.notices == []
        q3.close()


def test_zero_length_journal_in_a_new_store(data_dir: Path, open_queue: OpenQueue) -> None:
    store_dir(data_dir).mkdir(parents=True)
    (store_dir(data_dir) / segment_name(1)).write_bytes(b"")
    queue = open_queue()
    assert queue.list() == []
    assert not corrupt_files(data_dir)  # nothing was in it, nothing to keep aside
    job = queue.submit("demo", {"prompt": "p"}).job
    queue.close()
    assert open_queue().get(job.id).state == State.QUEUED


def test_zero_length_journal_after_a_snapshot(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    queue = open_queue(background_compaction=False)
    workload(queue, clock, 12)
    queue.store.compact_now()
    before = all_jobs(queue)
    queue.close()
    current = segments(data_dir)[-1]
    current.write_bytes(b"")
    reopened = open_queue()
    assert all_jobs(reopened) == before
    job = reopened.submit("demo", {"prompt": "new"}).job
    reopened.close()
    assert job.id in all_jobs(open_queue())


def test_a_torn_tail_left_by_another_writer_is_cut_by_the_next_commit(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    a = queue.submit("demo", {"prompt": "a"}).job
    # a writer in another process died in the middle of its write
    with open(segments(data_dir)[-1], "r+b") as fh:
        fh.seek(queue.store.write_offset)  # where the next record goes (the zeros after it stay)
        fh.write(encode_record({"op": "new", "job": {"id": "half"}})[:30])
    b = queue.submit("demo", {"prompt": "b"}).job
    queue.close()
    store = open_raw_store(data_dir)
    assert set(store.state.jobs) == {a.id, b.id}
    assert store.report.notices == []
    store.close()


def test_commits_past_the_filled_space_fill_more_first(open_queue: OpenQueue, data_dir: Path) -> None:
    """A segment is created filled with zeros to past the rotation threshold, but the
    threshold grows with the snapshot: the commit that would write past the filled space
    fills more first, in one go, so that commits never extend the file (each sync would
    then flush its size and block map too)."""
    queue = open_queue(rotate_bytes=4096)
    seg = segments(data_dir)[-1]
    filled = seg.stat().st_size
    queue.store.rotate_bytes = filled * 3  # as a grown snapshot would raise it
    sizes: list[int] = []
    ids = []
    while queue.store.write_offset < filled + 4096:
        ids.append(queue.submit("demo", {"prompt": f"p{len(ids)}"}).job.id)
        size = seg.stat().st_size
        assert size > queue.store.write_offset  # never written up to the end
        if not sizes or sizes[-1] != size:
            sizes.append(size)
    assert sizes == [filled, filled * 3 + PREFILL_SLACK]  # filled once more, to past the new threshold
    assert seg.read_bytes()[queue.store.write_offset :].strip(b"\0") == b""
    assert queue.store.segment == 1  # no rotation meanwhile
    queue.close()
    reopened = open_queue()
    assert set(ids) <= set(all_jobs(reopened))
    assert reopened.report.notices == []


# =========================================================================== a damaged record in the middle


def test_garbage_line_in_the_middle_is_quarantined(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    ids = [queue.submit("demo", {"prompt": f"p{i}"}).job.id for i in range(10)]
    queue.close()
    seg = segments(data_dir)[-1]
    lines = journal_lines(seg)
    assert len(lines) == 11  # header + 10 submissions
    damaged = b"".join(lines[:6]) + b'{"op":"upd","id":"nope","set":{}, garbage\n' + b"".join(lines[6:])
    seg.write_bytes(damaged)

    reopened = open_queue()
    assert sorted(j.id for j in reopened.list()) == sorted(ids[:5])
    moved = corrupt_files(data_dir)
    assert len(moved) == 1 and moved[0].name.startswith(seg.name + ".corrupt-")
    assert moved[0].read_bytes() == damaged  # kept aside exactly as found
    notice = " ".join(reopened.report.notices)
    assert moved[0].name in notice
    assert "5 later changes" in notice
    for lost in ids[5:]:
        assert lost in notice
    # the recovered journal takes new commits
    job = reopened.submit("demo", {"prompt": "after"}).job
    reopened.close()
    again = open_queue()
    assert job.id in {j.id for j in again.list()}
    assert again.report.notices == []


def test_recovery_does_not_apply_the_good_prefix_twice(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    """After cutting a damaged segment back to its good prefix, later reads must not replay that prefix."""
    queue = open_queue(background_compaction=False)
    a = queue.submit("demo", {"prompt": "a"}).job
    queue.store.compact_now()  # ``a`` now lives in a snapshot
    queue.fail(queue.lease("w"), Outcome.failure(ErrorClass.RETRYABLE, "timeout", retry_after=0))  # type: ignore[arg-type]
    b = queue.submit("demo", {"prompt": "b"}).job
    expected_a = queue.get(a.id).to_json()
    queue.close()
    seg = segments(data_dir)[-1]
    lines = journal_lines(seg)
    assert len(lines) == 4  # header, lease of a, failure of a, new b
    seg.write_bytes(b"".join(lines[:3]) + b"garbage\n" + lines[3])

    reopened = open_queue()
    assert reopened.report.notices and b.id in " ".join(reopened.report.notices)
    assert reopened.get(a.id).to_json() == expected_a
    reopened.submit("demo", {"prompt": "c"})  # a commit catches up with the segment again
    assert reopened.get(a.id).to_json() == expected_a
    assert [e.type for e in reopened.get(a.id).events] == ["submitted", "leased", "retry_scheduled"]
    reopened.close()
    assert open_queue().get(a.id).to_json() == expected_a


def test_repeated_quarantines_never_overwrite_each_other(open_queue: OpenQueue, data_dir: Path) -> None:
    for round_ in range(3):
        queue = open_queue()
        for i in range(3):
            queue.submit("demo", {"prompt": f"r{round_} p{i}"})
        queue.close()
        seg = segments(data_dir)[-1]
        lines = journal_lines(seg)
        seg.write_bytes(b"".join(lines[:-1]) + b"garbage\n" + lines[-1])
    queue = open_queue()
    queue.close()
    # three damaged versions of the same segment, each kept (the same second, the same process)
    assert len(corrupt_files(data_dir)) == 3
    assert len({p.read_bytes() for p in corrupt_files(data_dir)}) == 3


# =========================================================================== snapshots


def _two_snapshots(open_queue: OpenQueue, clock: FakeClock) -> tuple[Queue, dict[str, Any]]:
    queue = open_queue(background_compaction=False)
    workload(queue, clock, 10)
    queue.store.compact_now()
    workload(queue, clock, 10, start=10)
    queue.store.compact_now()
    workload(queue, clock, 5, start=20)  # in the live segment only
    return queue, all_jobs(queue)


def _flip_checksummed_byte(path: Path) -> None:
    raw = path.read_bytes()
    at = raw.index(b'"title":"job ') + len(b'"title":"job ')
    path.write_bytes(raw[:at] + (b"7" if raw[at : at + 1] != b"7" else b"8") + raw[at + 1 :])


def test_bad_snapshot_checksum_falls_back_to_the_previous_snapshot(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path
) -> None:
    queue, before = _two_snapshots(open_queue, clock)
    queue.close()
    snaps = snapshots(data_dir)
    assert len(snaps) == 2
    newest = snaps[-1]
    damaged = newest.read_bytes()
    _flip_checksummed_byte(newest)
    damaged = newest.read_bytes()
    orjson.loads(damaged.split(b"\n", 1)[0])  # still valid JSON: only the checksum can tell

    reopened = open_queue()
    assert all_jobs(reopened) == before
    moved = corrupt_files(data_dir)
    assert [p.name.split(".corrupt-")[0] for p in moved] == [newest.name]
    assert moved[0].read_bytes() == damaged
    assert any("failed its checksum" in n and moved[0].name in n for n in reopened.report.notices)
    assert snaps[0].exists()


@pytest.mark.parametrize("damage", ["flipped", "cut", "extra"])
def test_a_damaged_events_section_is_caught(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path, damage: str
) -> None:
    """Schema 3 keeps every job's events after the JSON line; the checksum and the length cover them."""
    queue, before = _two_snapshots(open_queue, clock)
    queue.close()
    newest = snapshots(data_dir)[-1]
    raw = newest.read_bytes()
    line_end = raw.index(b"\n")
    assert orjson.loads(raw[:line_end])["events_bytes"] == len(raw) - line_end - 2
    if damage == "flipped":
        at = raw.index(b'"type":"leased"', line_end) + len(b'"type":"')
        damaged = raw[:at] + b"L" + raw[at + 1 :]
    elif damage == "cut":
        damaged = raw[:-40]
    else:
        damaged = raw + b'[{"type":"submitted"}]\n'
    newest.write_bytes(damaged)
    reopened = open_queue()
    assert all_jobs(reopened) == before
    assert [p.read_bytes() for p in corrupt_files(data_dir)] == [damaged]
    assert reopened.report.notices


def test_a_snapshot_that_is_not_json_is_quarantined(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    queue, before = _two_snapshots(open_queue, clock)
    queue.close()
    newest = snapshots(data_dir)[-1]
    newest.write_bytes(newest.read_bytes()[:200])
    reopened = open_queue()
    assert all_jobs(reopened) == before
    assert len(corrupt_files(data_dir)) == 1
    assert reopened.report.notices


def test_both_snapshots_lost_still_opens_and_says_so(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    queue, _ = _two_snapshots(open_queue, clock)
    queue.close()
    for snap in snapshots(data_dir):
        _flip_checksummed_byte(snap)
    reopened = open_queue()  # invariant 6: it opens
    assert reopened.report.notices
    assert any("could not be recovered" in n for n in reopened.report.notices)
    assert len(corrupt_files(data_dir)) >= 2
    job = reopened.submit("demo", {"prompt": "life goes on"}).job
    reopened.close()
    assert job.id in all_jobs(open_queue())


def test_leftover_temp_file_is_removed_on_first_open(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    queue.submit("demo", {"prompt": "p"})
    queue.close()
    leftover = store_dir(data_dir) / f".{snapshot_name(1)}.tmp-123-abcd"
    leftover.write_bytes(b'{"format":"desktop-queue.snapshot", half')
    first = open_queue()
    assert not leftover.exists()
    assert any(leftover.name in n and "nothing lost" in n for n in first.report.notices)
    # a second opener leaves temp files alone: they may belong to a live writer
    leftover.write_bytes(b"in progress")
    second = open_queue()
    assert not second.report.first
    assert leftover.exists()


# =========================================================================== schema versions


def _newer(raw: bytes) -> bytes:
    return raw.replace(b'"schema_version":%d' % SCHEMA_VERSION, b'"schema_version":%d' % (SCHEMA_VERSION + 1), 1)


def test_newer_snapshot_is_refused_and_left_untouched(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    queue = open_queue(background_compaction=False)
    workload(queue, clock, 6)
    queue.store.compact_now()
    queue.close()
    snap = snapshots(data_dir)[-1]
    snap.write_bytes(_newer(snap.read_bytes()))
    before = {p.name: p.read_bytes() for p in store_dir(data_dir).iterdir() if not p.name.endswith(".lock")}

    with pytest.raises(StoreError) as info:
        Queue.open(data_dir, clock=clock)
    assert not isinstance(info.value, StoreCorrupt)
    message = str(info.value)
    assert snap.name in message and "newer" in message and "upgrade" in message
    assert "not been touched" in message
    after = {p.name: p.read_bytes() for p in store_dir(data_dir).iterdir() if not p.name.endswith(".lock")}
    assert after == before


def test_newer_journal_is_refused_and_left_untouched(data_dir: Path, clock: FakeClock) -> None:
    store_dir(data_dir).mkdir(parents=True)
    header = {"op": "header", "format": "desktop-queue.journal", "schema_version": SCHEMA_VERSION + 1, "gen": 1}
    body = encode_record(header) + encode_record({"op": "frobnicate", "x": 1}) + b'{"op":"half'  # even a torn tail
    seg = store_dir(data_dir) / segment_name(1)
    seg.write_bytes(body)
    with pytest.raises(StoreError) as info:
        Queue.open(data_dir, clock=clock)
    assert not isinstance(info.value, StoreCorrupt)
    assert seg.name in str(info.value) and "newer" in str(info.value)
    assert seg.read_bytes() == body
    assert not corrupt_files(data_dir)


def test_a_refused_open_releases_its_locks(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    """After a refused open, fixing the files and opening again in the same process must be the first open."""
    queue = open_queue(background_compaction=False)
    job = queue.submit("demo", {"prompt": "p"}).job
    queue.lease("w")
    queue.store.compact_now()
    queue.close()
    snap = snapshots(data_dir)[-1]
    good = snap.read_bytes()
    snap.write_bytes(_newer(good))
    with pytest.raises(StoreError):
        Queue.open(data_dir, clock=clock)
    snap.write_bytes(good)
    reopened = open_queue()
    assert reopened.report.first  # so the orphan is reconciled
    assert reopened.get(job.id).state == State.QUEUED
    assert [r.decision for r in reopened.reconciled] == ["requeued"]


def test_migration_from_schema_0_writes_a_backup_first(data_dir: Path, open_queue: OpenQueue, clock: FakeClock) -> None:
    now = clock.now()

    def v0_job(n: int, state: str, attempts: int, epoch: int) -> dict[str, Any]:
        return {
            "id": f"job{n:06d}", "seq": n, "kind": "demo", "title": f"old job {n}", "priority": "background",
            "input": {"prompt": f"old {n}"}, "input_digest": f"d{n}", "key": f"key-{n}", "max_attempts": 5,
            "state": state, "attempts": attempts, "created_at": now - 100 + n, "updated_at": now - 50,
            "run_after": now - 100 + n, "lease_token": None, "lease_epoch": epoch, "lease_expires_at": None,
            "worker": None, "last_error": None, "result_ref": None, "events": [
                {"type": "submitted", "at": now - 100 + n, "attempt": 0, "epoch": 0, "worker": None,
                 "actor": "user", "detail": {}},
            ],
        }  # fmt: skip

    jobs = {j["id"]: j for j in (v0_job(1, "queued", 0, 0), v0_job(2, "succeeded", 1, 1), v0_job(3, "dead", 2, 2))}
    doc = {"format": "desktop-queue.snapshot", "schema_version": 0, "data": {"seq": 3, "epoch": 2, "jobs": jobs}}
    store_dir(data_dir).mkdir(parents=True)
    snap = store_dir(data_dir) / snapshot_name(1)
    original = orjson.dumps(doc)
    snap.write_bytes(original)

    queue = open_queue()
    backup = store_dir(data_dir) / f"{snap.name}.v0-backup"
    assert backup.read_bytes() == original
    assert any("migrated" in n and backup.name in n for n in queue.report.notices)
    migrated, was_migrated = decode_snapshot(snap.read_bytes(), snap.name)
    assert not was_migrated and migrated["schema_version"] == SCHEMA_VERSION
    assert migrated["checksum"].startswith("crc32:")
    listed = {j.id: j for j in queue.list(with_events=True)}
    assert set(listed) == set(jobs)
    assert listed["job000003"].total_attempts == 2
    assert all(j.run == 1 and j.key_source == "fingerprint" for j in listed.values())
    assert listed["job000002"].state == State.SUCCEEDED
    # the migrated store works: leases continue the old epochs and sequence
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == "job000001" and lease.epoch == 3
    assert queue.submit("demo", {"prompt": "new"}).job.seq == 4
    queue.close()
    again = open_queue()
    assert not any("migrated" in n for n in again.report.notices)
    assert backup.read_bytes() == original


def test_migration_from_schema_2_keeps_every_event(data_dir: Path, open_queue: OpenQueue, clock: FakeClock) -> None:
    """Schema 2 kept each job's events as a JSON string inside the document."""
    now = clock.now()
    events = [
        {"type": "submitted", "at": now - 10, "attempt": 0, "epoch": 0, "actor": "user", "detail": {"kind": "demo"}},
        {"type": "leased", "at": now - 9, "attempt": 1, "epoch": 1, "worker": "w", "actor": "system", "detail": {}},
        {"type": "succeeded", "at": now - 8, "attempt": 1, "epoch": 1, "worker": "w", "actor": "system", "detail": {}},
    ]
    job = {
        "id": "job000001", "seq": 1, "kind": "demo", "title": "old", "priority": "background",
        "input": {"prompt": "old"}, "input_digest": "d1", "key": "key-1", "key_source": "fingerprint",
        "max_attempts": 5, "state": "succeeded", "attempts": 1, "total_attempts": 1, "run": 1,
        "created_at": now - 10, "updated_at": now - 8, "run_after": now - 10, "lease_epoch": 1,
        "events": orjson.dumps(events).decode(),
    }  # fmt: skip
    data = orjson.dumps({"seq": 1, "epoch": 1, "jobs": [job]})
    head = orjson.dumps(
        {"format": "desktop-queue.snapshot", "schema_version": 2, "gen": 1, "checksum": f"crc32:{zlib.crc32(data):08x}"}
    )
    original = head[:-1] + b',"data":' + data + b"}\n"
    store_dir(data_dir).mkdir(parents=True)
    snap = store_dir(data_dir) / snapshot_name(1)
    snap.write_bytes(original)

    queue = open_queue()
    assert (store_dir(data_dir) / f"{snap.name}.v2-backup").read_bytes() == original
    migrated, was_migrated = decode_snapshot(snap.read_bytes(), snap.name)
    assert not was_migrated and migrated["schema_version"] == SCHEMA_VERSION == 4
    [listed] = queue.list(with_events=True)
    assert [(e.type, e.at) for e in listed.events] == [(e["type"], e["at"]) for e in events]
    assert listed.state == State.SUCCEEDED
    queue.close()
    assert [(e.type, e.attempt) for e in open_queue().get("job000001").events] == [
        ("submitted", 0),
        ("leased", 1),
        ("succeeded", 1),
    ]


# =========================================================================== compaction


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
def test_compaction_keeps_every_job_and_event(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path, background: bool
) -> None:
    queue = open_queue(rotate_bytes=4096, background_compaction=background)
    workload(queue, clock, 120)
    before = all_jobs(queue)
    assert len(before) >= 120
    queue.close()  # waits for a compaction in flight
    assert len(snapshots(data_dir)) in (1, 2)
    gens = [int(p.name[8:20]) for p in segments(data_dir)]
    assert gens == list(range(gens[0], gens[-1] + 1))  # no gap
    assert gens[-1] > 5  # it did rotate many times ...
    assert len(gens) < gens[-1]  # ... and deleted folded segments
    reopened = open_queue()
    assert all_jobs(reopened) == before
    assert reopened.report.notices == []
    # a second reopen, with a compaction of what the first one wrote, still agrees
    workload(reopened, clock, 20, start=1000)
    reopened.store.compact_now()
    after = all_jobs(reopened)
    reopened.close()
    assert all_jobs(open_queue()) == after


def test_compaction_is_seen_by_another_open_queue(open_queue: OpenQueue, clock: FakeClock) -> None:
    writer = open_queue(rotate_bytes=2048, background_compaction=False)
    reader = open_queue()
    workload(writer, clock, 60)
    assert all_jobs(reader) == all_jobs(writer)
    lease_job = writer.submit("demo", {"prompt": "last"}).job
    assert reader.get(lease_job.id).state == State.QUEUED


# =========================================================================== durability across processes

_DURABILITY_READER = r"""
import sys, orjson
from desktop_queue.core import Queue
data_dir = sys.argv[1]
for line in sys.stdin:
    job_id = line.strip()
    q = Queue.open(data_dir)
    try:
        job = q.get(job_id)
        out = {"id": job.id, "state": job.state, "first": q.report.first}
    except Exception as exc:
        out = {"id": job_id, "error": type(exc).__name__}
    finally:
        q.close()
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
    sys.stdout.flush()
"""


def test_every_acknowledged_submit_is_seen_by_a_fresh_open_in_another_process(
    open_queue: OpenQueue, data_dir: Path
) -> None:
    queue = open_queue()
    child = subprocess.Popen(
        [sys.executable, "-c", _DURABILITY_READER, str(data_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    try:
        for i in range(8):
            job = queue.submit(
                "demo", {"prompt": f"durable {i}"}, priority="interactive" if i % 2 else "background"
            ).job
            child.stdin.write(job.id + "\n")
            child.stdin.flush()
            seen = orjson.loads(child.stdout.readline() or b"{}")
            assert seen == {"id": job.id, "state": "queued", "first": False}
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert child.returncode == 0, child.stderr.read() if child.stderr else ""


# =========================================================================== the result store


def test_result_store_keeps_the_first_result(tmp_path: Path) -> None:
    results = ResultStore(tmp_path / "results")
    ref, created = results.put("abc123", {"n": 1}, job_id="j1", epoch=1, produced_at=1.0)
    ref2, created2 = results.put("abc123", {"n": 2}, job_id="j2", epoch=2, produced_at=2.0)
    assert (created, created2) == (True, False) and ref == ref2
    doc = results.get("abc123")
    assert doc is not None and doc["result"] == {"n": 1} and doc["job_id"] == "j1"
    assert results.count() == 1
    assert not [p for p in (tmp_path / "results").rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize("key", ["../../escape", "/etc/passwd", ".hidden", "a/b", "k" * 300, "ключ"])
def test_result_paths_stay_inside_the_result_store(tmp_path: Path, key: str) -> None:
    root = tmp_path / "results"
    results = ResultStore(root)
    results.put(key, {"ok": True}, job_id="j", epoch=1, produced_at=0.0)
    path = results.path_for(key).resolve()
    assert path.is_relative_to(root.resolve())
    assert [p for p in tmp_path.rglob("*.json")] == [path]
    assert results.get(key) is not None


def test_a_damaged_result_file_is_kept_aside(tmp_path: Path) -> None:
    results = ResultStore(tmp_path / "results")
    results.put("key1", {"n": 1}, job_id="j", epoch=1, produced_at=0.0)
    path = results.path_for("key1")
    path.write_bytes(b'{"format": "desktop-queue.res')
    assert results.get("key1") is None
    assert not path.exists()
    moved = list(path.parent.glob("key1.json.corrupt-*"))
    assert len(moved) == 1 and moved[0].read_bytes() == b'{"format": "desktop-queue.res'


def test_a_result_damaged_twice_keeps_both_copies(tmp_path: Path) -> None:
    results = ResultStore(tmp_path / "results")
    for n in range(2):
        results.put("key1", {"n": n}, job_id="j", epoch=1, produced_at=0.0)
        results.path_for("key1").write_bytes(b"damaged %d" % n)
        assert results.get("key1") is None
    moved = sorted(results.path_for("key1").parent.glob("key1.json.corrupt-*"))
    assert sorted(p.read_bytes() for p in moved) == [b"damaged 0", b"damaged 1"]


def test_read_segment_classifies_damage() -> None:
    good = [encode_record({"op": "new", "n": i}) for i in range(3)]
    whole = b"".join(good)
    assert [r["n"] for r in read_segment(whole, 0).records] == [0, 1, 2]
    torn = read_segment(whole[:-5], 0)
    assert torn.torn_tail and [r["n"] for r in torn.records] == [0, 1] and torn.end == len(good[0] + good[1])
    flipped = good[1].replace(b'"n":1', b'"n":7')
    bad = read_segment(good[0] + flipped + good[2], 0)
    assert bad.bad_line == len(good[0]) and [r["n"] for r in bad.lost_after] == [2]


def test_unfinished_result_writes_are_swept(open_queue: OpenQueue, data_dir: Path) -> None:
    """A crash mid-write leaves ``.<name>.tmp-<pid>-…``: the first opener sweeps them (those
    older than an hour only, while a write may still be in progress); compaction sweeps
    those older than an hour."""
    queue = open_queue(background_compaction=False)
    job = queue.submit("demo", {"prompt": "p"}).job
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job.id
    queue.complete(lease, {"text": "r"})
    results = queue.results.root
    (results / "ab").mkdir(parents=True, exist_ok=True)
    old = results / "ab" / ".abcd.json.tmp-1234-deadbeef"
    fresh = results / "ab" / ".abce.json.tmp-1234-feedface"
    for path in (old, fresh):
        path.write_bytes(b'{"half')
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    queue.store.compact_now()
    assert not old.exists() and fresh.exists()  # a fresh one may be another process's write in progress
    # a worker died mid-attempt: the next first opener sweeps every leftover
    queue.submit("demo", {"prompt": "q"})
    assert queue.lease("w") is not None
    queue.close()
    reopened = open_queue()
    assert not fresh.exists()
    assert any("unfinished result write" in n for n in reopened.report.notices)


def test_a_rotated_segment_ends_with_a_seal_that_moves_every_reader_on(open_queue: OpenQueue, data_dir: Path) -> None:
    writer = open_queue(rotate_bytes=2048, background_compaction=False)
    reader = open_queue()
    first = writer.submit("demo", {"prompt": "first"}).job
    assert reader.get(first.id).state == State.QUEUED  # the reader is on segment 1 now
    while writer.store.segment == 1:
        writer.submit("demo", {"prompt": f"filler {writer.store.write_offset}"})
    records = read_segment((store_dir(data_dir) / segment_name(1)).read_bytes(), 0).records
    assert records[-1] == {"op": "seal", "next": 2}
    assert sum(r.get("op") == "seal" for r in records) == 1
    later = writer.submit("demo", {"prompt": "in segment 2"}).job
    assert reader.get(later.id).state == State.QUEUED
    assert reader.store.segment == writer.store.segment
    # and the reader's own commits land where the writer looks
    mine = reader.submit("demo", {"prompt": "from the reader"}).job
    assert writer.get(mine.id).state == State.QUEUED


def test_a_rotation_that_died_before_its_seal_is_sealed_by_the_next_open(open_queue: OpenQueue, data_dir: Path) -> None:
    """A process died after creating segment 2 and before sealing segment 1: a process
    still appending to segment 1 must not be cut off from one that opens later."""
    live = open_queue()
    early = live.submit("demo", {"prompt": "early"}).job
    header = {"op": "header", "format": "desktop-queue.journal", "schema_version": SCHEMA_VERSION, "gen": 2}
    (store_dir(data_dir) / segment_name(2)).write_bytes(encode_record(header))
    meanwhile = live.submit("demo", {"prompt": "still in segment 1"}).job  # the live one has no idea
    late = open_queue()
    assert {early.id, meanwhile.id} <= {j.id for j in late.list()}
    records = read_segment((store_dir(data_dir) / segment_name(1)).read_bytes(), 0).records
    assert records[-1] == {"op": "seal", "next": 2}
    from_late = late.submit("demo", {"prompt": "from the late one"}).job
    assert late.store.segment == 2
    assert live.get(from_late.id).state == State.QUEUED  # the seal moved the live one on
    from_live = live.submit("demo", {"prompt": "from the live one"}).job
    assert late.get(from_live.id).state == State.QUEUED
    live.close()
    late.close()
    assert {j.id for j in open_queue().list()} == {early.id, meanwhile.id, from_late.id, from_live.id}


# =========================================================================== a snapshot written in paced pieces


def test_a_paced_write_syncs_each_piece_before_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_size), real_fsync(fd))[1])
    data = os.urandom(10_000)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        write_all(fd, data, sync_every=4096)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == data
    assert synced == [4096, 8192]  # the last piece is synced by the caller (atomic_write does)


def test_compaction_writes_the_snapshot_in_synced_pieces(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[tuple[str, int]] = []
    real_atomic_write = compaction_module.atomic_write

    def atomic_write(path: Path, data: bytes, **kwargs: Any) -> bool:
        writes.append((path.name, kwargs.get("sync_every", 0)))
        return real_atomic_write(path, data, **kwargs)

    monkeypatch.setattr(compaction_module, "atomic_write", atomic_write)
    queue = open_queue(background_compaction=False)
    workload(queue, clock, 30)
    before = all_jobs(queue)
    queue.store.compact_now()
    queue.close()
    snapshot = snapshots(data_dir)[-1].name
    assert (snapshot, compaction_module.SNAPSHOT_SYNC_EVERY) in writes
    assert all_jobs(open_queue()) == before


# =========================================================================== segments made in advance


def _rotate_once(queue: Queue) -> None:
    gen = queue.store.segment
    n = 0
    while queue.store.segment == gen:
        queue.submit("demo", {"prompt": f"fill {gen}-{n}"})
        n += 1


def test_a_spare_segment_is_the_segment_a_rotation_would_write(tmp_path: Path) -> None:
    assert prepare_spare(tmp_path, 5, 8192)
    data = (tmp_path / spare_name(5)).read_bytes()
    assert data == new_segment_bytes(5, 8192) and len(data) == 8192
    assert read_segment(data, 0).records == [journal_header(5)]
    assert not prepare_spare(tmp_path, 5, 8192)  # made already
    (tmp_path / segment_name(6)).write_bytes(b"")
    assert not prepare_spare(tmp_path, 6, 8192)  # the segment exists: no spare for it
    assert prepare_spare(tmp_path, 7, 4096)
    assert sorted(p.name for p in tmp_path.iterdir()) == [segment_name(6), spare_name(7)]  # spare 5 was stale


def test_a_segment_is_made_without_holding_its_size_in_memory(tmp_path: Path) -> None:
    """A worker's peak on the million-job store held the spare segment being made twice
    over: 4.25 MiB of zeros, and its header joined to a copy of them."""
    import tracemalloc

    size = 4 << 20
    tracemalloc.start()
    try:
        assert prepare_spare(tmp_path, 2, size + 12345)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / spare_name(2)).read_bytes() == new_segment_bytes(2, size + 12345)
    assert peak < size // 16, f"making a {size:,}-byte segment held {peak:,} bytes"


def test_a_rotation_links_the_spare_in_and_makes_the_next(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue(rotate_bytes=4096, background_compaction=False)
    root = store_dir(data_dir)
    assert prepare_spare(root, 2, 4096 + PREFILL_SLACK)
    inode = (root / spare_name(2)).stat().st_ino
    _rotate_once(queue)
    assert queue.store.segment == 2
    assert (root / segment_name(2)).stat().st_ino == inode  # linked into place, not written again
    assert not (root / spare_name(2)).exists()
    queue.close()  # waits for the segment being made in advance
    assert (root / spare_name(3)).read_bytes() == new_segment_bytes(3, 4096 + PREFILL_SLACK)
    reopened = open_queue(rotate_bytes=4096, background_compaction=False)
    before = all_jobs(reopened)
    _rotate_once(reopened)
    assert reopened.store.segment == 3 and not (root / spare_name(3)).exists()
    reopened.close()
    after = open_queue()
    assert set(before) < set(all_jobs(after)) and after.report.notices == []


def test_a_rotation_without_a_spare_writes_the_segment_itself(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue(rotate_bytes=4096, background_compaction=False)
    _rotate_once(queue)  # the first rotation of a store finds no spare
    assert queue.store.segment == 2
    queue.close()
    root = store_dir(data_dir)
    assert (root / segment_name(2)).stat().st_size >= 4096 + PREFILL_SLACK
    assert not any(TEMP_MARK in p.name for p in root.iterdir())


def test_a_rotation_killed_between_linking_and_removing_its_spare_loses_nothing(
    open_queue: OpenQueue, data_dir: Path
) -> None:
    queue = open_queue(rotate_bytes=4096, background_compaction=False)
    root = store_dir(data_dir)
    _rotate_once(queue)
    queue.close()
    # as if killed right after linking spare 2 in: the spare's name still points at segment 2
    os.link(root / segment_name(2), root / spare_name(2))
    # and a spare of segment 3 half written when the process died
    (root / f".{spare_name(3)}{TEMP_MARK}999-dead").write_bytes(b"\0" * 100)
    reopened = open_queue(rotate_bytes=4096, background_compaction=False)
    assert any("unfinished write" in n for n in reopened.report.notices)
    before = all_jobs(reopened)
    _rotate_once(reopened)  # to segment 3, which the spare-maker then follows with spare 4
    reopened.close()
    names = {p.name for p in root.iterdir()}
    assert spare_name(2) not in names and segment_name(2) in names  # only the spare's name went
    after = open_queue()
    assert set(before) < set(all_jobs(after)) and after.report.notices == []


# =========================================================================== compactions through a burst


def _newest_snapshot_gen(data_dir: Path) -> int:
    return max((int(p.name.split("-")[1].split(".")[0]) for p in snapshots(data_dir)), default=0)


def _burst(queue: Queue, rotations: int) -> None:
    """Closes ``rotations`` segments with heartbeats: commits not synced, far faster than a
    compaction child process can start (compactions run one at a time)."""
    queue.submit("demo", {"prompt": "held through the burst"})
    lease = queue.lease("w")
    assert lease is not None
    target = queue.store.segment + rotations
    while queue.store.segment < target:
        queue.heartbeat(lease)


def test_close_folds_what_a_burst_left_unfolded(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue(rotate_bytes=4096)  # compactions in a child process, one at a time
    _burst(queue, 6)
    closed_up_to = queue.store.segment - 1
    queue.close()
    assert _newest_snapshot_gen(data_dir) == closed_up_to  # the next open replays one segment
    reopened = open_queue()
    assert reopened.report.notices == []


def test_the_first_commit_after_a_compaction_ends_starts_the_next(
    open_queue: OpenQueue, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = open_queue(rotate_bytes=4096)
    _burst(queue, 6)
    closed_up_to = queue.store.segment - 1
    queue.store.rotate_bytes = 32 << 20  # no more rotations: only the chaining can fold the rest
    monkeypatch.setattr(storage_module, "POLL_COMPACTOR_S", 0.0)  # every commit looks whether it ended
    deadline = time.monotonic() + 20
    n = 0
    while _newest_snapshot_gen(data_dir) < closed_up_to and time.monotonic() < deadline:
        # durable commits: 45,000 of them before 32 MiB would rotate (and fold) again
        queue.submit("demo", {"prompt": f"after the burst {n}"})
        n += 1
    assert queue.store.segment == closed_up_to + 1
    assert _newest_snapshot_gen(data_dir) == closed_up_to
    queue.close()


def test_the_compaction_child_reports_nothing_when_all_is_well(
    open_queue: OpenQueue, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever the child prints is shown to the user as a warning: a healthy fold prints nothing."""
    queue = open_queue(rotate_bytes=4096)  # compactions in a child process
    _burst(queue, 2)
    with caplog.at_level("WARNING", logger=storage_module.__name__):
        queue.close()  # waits for the child and folds what is left
    assert _newest_snapshot_gen(data_dir) >= 1  # a child folded
    assert [r.getMessage() for r in caplog.records if r.name == storage_module.__name__] == []


def test_a_skip_that_raises_leaves_every_queued_job_in_line(open_queue: Callable[..., Queue]) -> None:
    """``runnable`` pops the jobs its ``skip`` passes over and pushes them back; when ``skip``
    raised (flow control asking for its session), they stayed out of the line for good."""
    queue = open_queue()
    ids = [queue.submit("demo", {"prompt": f"job {i}"}).job.id for i in range(3)]
    seen: list[str] = []

    def skip(job: Any) -> bool:
        seen.append(job["id"])
        if job["id"] == ids[2]:
            raise RuntimeError("ask again inside a session")
        return True  # the first two: taken by this commit already

    with pytest.raises(RuntimeError):
        queue.store.peek(lambda st: st.runnable("background", float("inf"), skip))  # type: ignore[attr-defined]
    assert seen == ids
    order = []
    while (lease := queue.lease("w")) is not None:
        order.append(lease.job_id)
    assert order == ids
