"""Damage a person or a disk can do to the files, on real files (issue 10, "Damage and bad input").

A journal update of a job whose creation record is missing is set aside with a message
(at open, at catch-up and in compaction), never applied, never dropped, and the other
jobs load (shared/DESIGN.md section 4 and invariant 6).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from desktop_queue.core import FakeClock, Queue, State
from desktop_queue.core.store.codec import decode_record, encode_record, read_segment, segment_name

OpenQueue = Callable[..., Queue]
REPO = Path(__file__).resolve().parents[2]

GHOST = "ghost-job-0001"
ORPHAN = {"op": "upd", "id": GHOST, "set": {"state": "succeeded"}, "ev": [{"type": "succeeded", "at": 5.0}]}


def store_dir(data_dir: Path) -> Path:
    return data_dir / "store"


def segments(data_dir: Path) -> list[Path]:
    return sorted(store_dir(data_dir).glob("journal-*.jsonl"))


def set_aside(data_dir: Path) -> list[Path]:
    return sorted(store_dir(data_dir).glob("*.orphans-*.corrupt-*"))


def journal_lines(seg: Path) -> list[bytes]:
    return seg.read_bytes().split(b"\0", 1)[0].splitlines(keepends=True)


def insert_line(seg: Path, at: int, line: bytes) -> None:
    """Puts ``line`` in as the ``at``-th record of ``seg`` (its checksum valid, its job unknown)."""
    lines = journal_lines(seg)
    seg.write_bytes(b"".join(lines[:at]) + line + b"".join(lines[at:]))


def append_as_another_process(queue: Queue, line: bytes) -> None:
    """Writes ``line`` where the open store's journal ends, as a commit of another process would."""
    fd = os.open(segments(queue.data_dir)[-1], os.O_RDWR)
    try:
        os.pwrite(fd, line, queue.store.write_offset)
    finally:
        os.close(fd)


def test_an_update_of_a_missing_job_is_set_aside_at_open(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    ids = [queue.submit("demo", {"prompt": f"p{i}"}).job.id for i in range(6)]
    queue.cancel(ids[4])
    queue.close()
    seg = segments(data_dir)[-1]
    line = encode_record(ORPHAN)
    insert_line(seg, 3, line)

    reopened = open_queue()  # raised StoreCorrupt before: no command worked on this store
    assert sorted(j.id for j in reopened.list()) == sorted(ids)
    assert reopened.get(ids[4]).state == State.CANCELLED  # the records after it were applied
    kept = set_aside(data_dir)
    assert len(kept) == 1 and kept[0].name.startswith(seg.name + ".orphans-")
    assert kept[0].read_bytes() == line  # kept as found, checksum and all
    notice = " ".join(reopened.report.notices)
    assert GHOST in notice and kept[0].name in notice and "creation record is missing" in notice
    reopened.submit("demo", {"prompt": "after"})
    reopened.close()

    # the segment still holds it, so the next open says so again, without another copy
    again = open_queue()
    assert GHOST in " ".join(again.report.notices)
    assert set_aside(data_dir) == kept


def test_an_update_of_a_job_missing_from_the_snapshot_is_set_aside(
    open_queue: OpenQueue, data_dir: Path, clock: FakeClock
) -> None:
    queue = open_queue(background_compaction=False)
    kept_job = queue.submit("demo", {"prompt": "in the snapshot"}).job
    queue.store.compact_now()
    later = queue.submit("demo", {"prompt": "in the journal"}).job
    queue.close()
    insert_line(segments(data_dir)[-1], 1, encode_record({**ORPHAN, "set": {"state": "running", "lease_epoch": 9}}))

    reopened = open_queue()
    assert {j.id for j in reopened.list()} == {kept_job.id, later.id}
    assert GHOST in " ".join(reopened.report.notices)
    # the orphan's lease epoch belongs to no job: it must not move the store's epoch either
    lease = reopened.lease("w")
    assert lease is not None and lease.job_id in {kept_job.id, later.id}


def test_catch_up_sets_aside_another_processs_orphan_update(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    first = queue.submit("demo", {"prompt": "before"}).job
    append_as_another_process(queue, encode_record(ORPHAN))

    # a read (shared lock) and a commit (exclusive) both catch up; neither may raise
    assert [j.id for j in queue.list()] == [first.id]
    second = queue.submit("demo", {"prompt": "after"}).job
    assert {j.id for j in queue.list()} == {first.id, second.id}
    kept = set_aside(data_dir)
    assert [decode_record(p.read_bytes().rstrip(b"\n")) for p in kept] == [ORPHAN]
    assert GHOST in " ".join(queue.report.notices)


def test_compaction_sets_aside_an_orphan_update_before_folding_it(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue(background_compaction=False)
    job = queue.submit("demo", {"prompt": "p"}).job
    append_as_another_process(queue, encode_record(ORPHAN))
    gen = queue.store.segment
    queue.store.compact_now()  # raised inside compact before: the segment was never folded

    assert (store_dir(data_dir) / f"snapshot-{gen:012d}.json").exists()
    kept = set_aside(data_dir)
    assert len(kept) == 1 and kept[0].name.startswith(segment_name(gen))
    assert GHOST in " ".join(queue.report.notices)
    queue.close()
    reopened = open_queue()
    assert [j.id for j in reopened.list()] == [job.id]
    assert set_aside(data_dir) == kept  # folded away once kept: nothing new to say or copy


def test_the_compaction_child_sets_aside_and_reports_an_orphan_update(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    job = queue.submit("demo", {"prompt": "p"}).job
    gen = queue.store.segment
    queue.close()
    insert_line(segments(data_dir)[-1], 1, encode_record(ORPHAN))

    child = subprocess.run(
        [sys.executable, "-m", "desktop_queue.core.store.compaction", str(store_dir(data_dir)), str(gen)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    assert GHOST in child.stderr and "set aside in" in child.stderr
    assert (store_dir(data_dir) / f"snapshot-{gen:012d}.json").exists()
    assert len(set_aside(data_dir)) == 1
    assert [j.id for j in open_queue().list()] == [job.id]


def test_the_set_aside_copy_reads_back_as_journal_records(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    queue.submit("demo", {"prompt": "p"})
    queue.close()
    second = {**ORPHAN, "id": "ghost-job-0002"}
    insert_line(segments(data_dir)[-1], 1, encode_record(ORPHAN) + encode_record(second))
    reopened = open_queue()
    (kept,) = set_aside(data_dir)
    assert read_segment(kept.read_bytes(), 0).records == [ORPHAN, second]
    notice = " ".join(reopened.report.notices)
    assert "2 updates of jobs" in notice and GHOST in notice and "ghost-job-0002" in notice
