"""The last process to close the store folds the journal's tail, so the next open replays
next to nothing (issue 10: an open that is constant in history); the others leave it.

No timing: what is checked is which records the next open has to replay.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.model import State
from desktop_queue.core.store import journal
from desktop_queue.core.store.codec import read_segment, segment_name


def run_jobs(queue: Queue, clock: FakeClock, n: int, tag: str = "j") -> list[str]:
    ids = []
    for i in range(n):
        job = queue.submit("demo", {"prompt": f"{tag}{i} " + "words " * 40}, title=f"{tag} {i}").job
        lease = queue.lease("w")
        assert lease is not None and lease.job_id == job.id
        clock.advance(1.0)
        queue.complete(lease, {"text": f"answer {tag}{i}"})
        ids.append(job.id)
    return ids


def snapshots(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / "store").glob("snapshot-*.json"))


def tail_records(queue: Queue) -> int:
    """The records after the header of the segment an opened queue appends to: what its open replayed."""
    store = queue.store
    data = (store.root / segment_name(store.segment)).read_bytes()
    return len(read_segment(data, 0).records) - 1


@pytest.fixture
def small_fold(monkeypatch: pytest.MonkeyPatch) -> int:
    """A close-fold threshold a few dozen jobs exceed (the real one is a few hundred)."""
    monkeypatch.setattr(journal, "CLOSE_FOLD_BYTES", 16 << 10)
    return 16 << 10


def test_the_last_to_close_folds_the_tail_and_the_next_open_replays_none(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path, small_fold: int
) -> None:
    queue = open_queue(keep_finished=5)
    ids = run_jobs(queue, clock, 40)
    queued = queue.submit("demo", {"prompt": "still waiting"}).job.id
    assert queue.store.write_offset > small_fold
    before = {job_id: queue.get(job_id).state for job_id in [*ids, queued]}
    queue.close()
    assert snapshots(data_dir), "the close folded nothing"

    again = open_queue(keep_finished=5)
    assert tail_records(again) == 0
    assert {job_id: again.get(job_id).state for job_id in [*ids, queued]} == before
    assert [job.id for job in again.list(State.QUEUED)] == [queued]
    assert len(again.store.state.jobs) == 6  # the queued job and the five newest finished: the rest archived
    assert again.results.get(again.get(ids[0]).idempotency_key)["result"] == {"text": "answer j0"}


def test_a_process_that_others_still_share_the_store_with_leaves_the_tail(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path, small_fold: int
) -> None:
    """A CLI command closing beside an open window must not pay for a fold."""
    window = open_queue(keep_finished=5)
    command = open_queue(keep_finished=5)
    run_jobs(command, clock, 40)
    command.close()
    assert snapshots(data_dir) == []
    window.store.read(lambda view: None)  # (still usable: closing the other kept its share of the store)
    window.close()  # the last one
    assert snapshots(data_dir)


def test_a_small_tail_is_left_as_it_is(open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path) -> None:
    queue = open_queue(keep_finished=5)
    run_jobs(queue, clock, 3)
    segment = queue.store.segment
    queue.close()
    assert snapshots(data_dir) == []
    again = open_queue(keep_finished=5)
    assert again.store.segment == segment
    assert tail_records(again) == 3 * 3  # submitted, leased, succeeded


def test_a_second_closer_becomes_the_last_and_folds(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path, small_fold: int
) -> None:
    """A close that finds others still there folds nothing and takes nothing from them: a
    newcomer is not taken for the first opener (which would reconcile the live lease), and
    the one that closes last folds."""
    first = open_queue(keep_finished=5)
    second = open_queue(keep_finished=5)
    run_jobs(second, clock, 40)
    lease_holder = second.submit("demo", {"prompt": "running"}).job
    lease = second.lease("w")
    assert lease is not None and lease.job_id == lease_holder.id
    first.close()  # not the last
    assert snapshots(data_dir) == []
    third = open_queue(keep_finished=5)
    assert not third.store.report.first  # second still holds the store
    assert third.get(lease_holder.id).state == State.RUNNING  # nothing reconciled its live lease
    third.close()
    second.complete(lease, {"text": "done"})
    second.close()
    assert snapshots(data_dir)


def test_the_first_open_starts_no_compaction_for_jobs_that_finished_after_the_snapshot(
    open_queue: Callable[..., Queue],
    clock: FakeClock,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backlog to archive is one the snapshot holds (a store from before the archive);
    the finished jobs of the replayed tail go when their segments are folded. Counting
    them started a compaction child at every first open that folded nothing new."""
    queue = open_queue(keep_finished=2, background_compaction=False)
    run_jobs(queue, clock, 3, tag="a")
    queue.store.compact_now()
    assert snapshots(data_dir)
    run_jobs(queue, clock, 1010, tag="b")  # more finished than 2 * keep_finished + 1000, all after it
    monkeypatch.setattr(journal, "CLOSE_FOLD_BYTES", 1 << 40)  # left unfolded, as a killed process leaves it
    queue.close()
    monkeypatch.undo()

    again = open_queue(keep_finished=2, background_compaction=True)
    assert again.store.report.first
    assert again.store._compactor is None


def test_a_tail_small_next_to_a_large_hot_set_is_left(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path, small_fold: int
) -> None:
    """A fold writes the whole snapshot again: beside many queued jobs, a tail that the
    next open replays in a fraction of the snapshot's time is not worth one."""
    queue = open_queue(keep_finished=5, background_compaction=False)
    for i in range(400):
        queue.submit("demo", {"prompt": f"waiting {i} " + "words " * 40})
    queue.store.compact_now()
    folded = snapshots(data_dir)
    snapshot_bytes = (data_dir / "store" / folded[-1]).stat().st_size
    start = queue.store.write_offset
    for i in range(40):
        queue.submit("demo", {"prompt": f"later {i} " + "words " * 40})
    tail = queue.store.write_offset - start
    assert small_fold < tail < snapshot_bytes // 4
    queue.close()
    assert snapshots(data_dir) == folded


def test_a_closed_segment_small_next_to_a_large_hot_set_is_left(
    open_queue: Callable[..., Queue], data_dir: Path, small_fold: int
) -> None:
    """The same for a segment that closed but was not folded (its compaction could not
    run): what counts is how much the next open replays, not that a segment closed."""
    from desktop_queue.core.store.fileio import FileLock

    queue = open_queue(keep_finished=5, background_compaction=False, rotate_bytes=4096)
    for i in range(400):
        queue.submit("demo", {"prompt": f"waiting {i} " + "words " * 40})
    queue.store.compact_now()
    folded = snapshots(data_dir)
    held = FileLock(data_dir / "store" / "compact.lock")
    assert held.acquire(blocking=False)  # another process's compaction, all along
    segment = queue.store.segment
    i = 0
    while queue.store.segment == segment:
        queue.submit("demo", {"prompt": f"later {i} " + "words " * 40})
        i += 1
    held.close()
    queue.close()
    assert snapshots(data_dir) == folded


def test_the_fold_at_close_runs_in_a_child_not_in_the_closing_process(
    open_queue: Callable[..., Queue],
    clock: FakeClock,
    data_dir: Path,
    small_fold: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Folding two segments of finished jobs holds about 30 MiB: inline, that was a worker's
    peak as it exited (103 MiB on a million-job store). A child holds it instead."""
    queue = open_queue(keep_finished=5)
    ids = run_jobs(queue, clock, 40)

    def inline(*args: object, **kwargs: object) -> int:
        raise AssertionError("the closing process folded the tail itself")

    monkeypatch.setattr(journal, "compact", inline)
    queue.close()
    assert snapshots(data_dir), "the close folded nothing"
    again = open_queue(keep_finished=5)
    assert tail_records(again) == 0
    assert [again.get(i).state for i in ids] == [State.SUCCEEDED] * 40


@pytest.mark.usefixtures("small_fold")
def test_a_fold_started_ahead_of_the_close_is_the_close_fold(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker announces what it ran before it closes: its last fold runs meanwhile, in its
    child, and the close waits for it instead of starting one."""
    queue = open_queue(keep_finished=5)
    ids = run_jobs(queue, clock, 40)
    queue.prepare_close()
    assert queue.store._compactor is not None  # started, not waited for
    assert [queue.get(i).state for i in ids] == [State.SUCCEEDED] * 40  # (the queue still reads)
    started: list[int] = []
    monkeypatch.setattr(journal.Store, "_compact_soon", lambda self, upto: started.append(upto))
    queue.close()
    assert started == [] and snapshots(data_dir)
    again = open_queue(keep_finished=5)
    assert tail_records(again) == 0
    assert [again.get(i).state for i in ids] == [State.SUCCEEDED] * 40


def test_what_is_committed_after_a_fold_started_ahead_is_folded_by_the_close(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path, small_fold: int
) -> None:
    queue = open_queue(keep_finished=5)
    run_jobs(queue, clock, 40)
    queue.prepare_close()
    later = run_jobs(queue, clock, 40, tag="later")
    queue.close()
    again = open_queue(keep_finished=5)
    assert tail_records(again) == 0
    assert [again.get(i).state for i in later] == [State.SUCCEEDED] * 40
