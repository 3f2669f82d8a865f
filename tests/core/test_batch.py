"""``Queue.submit_many``: a batch of jobs created in one durable commit, all or none (issue 11, "Batch")."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from desktop_queue.core import InputTooLarge, InvalidInput, Queue, QueueFull, State
from desktop_queue.core.queue import MAX_BATCH, MAX_INTERACTIVE_WAITING
from desktop_queue.providers import builtin_providers

OpenQueue = Callable[..., Queue]


def _segment(data_dir: Path) -> Path:
    return sorted((data_dir / "store").glob("journal-*.jsonl"))[-1]


def test_a_batch_creates_one_job_per_input_in_order(open_queue: OpenQueue) -> None:
    queue = open_queue()
    results = queue.submit_many("demo", [{"prompt": f"p{i}"} for i in range(5)], titles=[f"t{i}" for i in range(5)])
    assert [r.duplicate for r in results] == [False] * 5
    assert [r.job.input for r in results] == [{"prompt": f"p{i}"} for i in range(5)]
    assert [r.job.title for r in results] == [f"t{i}" for i in range(5)]
    assert len({r.job.id for r in results}) == 5
    # submission order is lease order within a lane: the seqs follow the inputs
    seqs = [r.job.seq for r in results]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    leased = [queue.lease("w") for _ in range(5)]
    assert [lease.job.id for lease in leased if lease] == [r.job.id for r in results]


def test_a_batch_survives_a_reopen(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    ids = [r.job.id for r in queue.submit_many("demo", [{"prompt": f"p{i}"} for i in range(20)])]
    queue.close()
    again = open_queue()
    assert sorted(j.id for j in again.list(State.QUEUED)) == sorted(ids)


def test_a_repeated_input_in_the_batch_or_the_store_is_a_duplicate(open_queue: OpenQueue) -> None:
    queue = open_queue()
    first = queue.submit("demo", {"prompt": f"p{1}"}).job
    results = queue.submit_many("demo", [{"prompt": f"p{1}"}, {"prompt": f"p{2}"}, {"prompt": f"p{2}"}])
    assert [r.duplicate for r in results] == [True, False, True]
    assert results[0].job.id == first.id
    assert results[2].job.id == results[1].job.id
    assert len(queue.list()) == 2


def test_one_bad_item_refuses_the_whole_batch_and_names_it(open_queue: OpenQueue) -> None:
    queue = open_queue(providers=builtin_providers())
    with pytest.raises(InvalidInput, match="item 2"):
        queue.submit_many("demo", [{"prompt": f"p{1}"}, {"prompt": "p", "duration_s": "soon"}, {"prompt": f"p{3}"}])
    with pytest.raises(InputTooLarge, match="item 1"):
        queue.submit_many("demo", [{"prompt": "x" * (1 << 20)}])
    with pytest.raises(InvalidInput, match="empty"):
        queue.submit_many("demo", [])
    with pytest.raises(InvalidInput, match="at most"):
        queue.submit_many("demo", [{"prompt": f"p{i}"} for i in range(MAX_BATCH + 1)])
    assert queue.list() == []


def test_the_interactive_limit_counts_the_batch_itself(open_queue: OpenQueue) -> None:
    queue = open_queue()
    with pytest.raises(QueueFull):
        queue.submit_many(
            "demo", [{"prompt": f"p{i}"} for i in range(MAX_INTERACTIVE_WAITING + 1)], priority="interactive"
        )
    assert queue.list() == []
    assert len(queue.submit_many("demo", [{"prompt": f"p{i}"} for i in range(2)], priority="interactive")) == 2


def test_a_torn_batch_leaves_none_of_its_jobs(open_queue: OpenQueue, data_dir: Path, tmp_path: Path) -> None:
    """A crash mid-write leaves part of the batch's line: the reopened store holds none of the batch."""
    queue = open_queue()
    kept = queue.submit("demo", {"prompt": "before"}).job.id
    start = queue.store.write_offset
    queue.submit_many("demo", [{"prompt": f"p{i}"} for i in range(6)])
    end = queue.store.write_offset
    queue.close()
    assert end - start > 600
    for cut in (start + 1, (start + end) // 2, end - 2):
        copy = tmp_path / f"cut-{cut}"
        shutil.copytree(data_dir, copy)
        segment = _segment(copy)
        raw = bytearray(segment.read_bytes())
        raw[cut:end] = bytes(end - cut)  # what a power cut leaves of unsynced pages
        segment.write_bytes(bytes(raw))
        reopened = open_queue(copy)
        assert [j.id for j in reopened.list()] == [kept], cut
        reopened.close()
