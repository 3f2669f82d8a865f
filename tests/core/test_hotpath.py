"""The worker's commit path: what a success costs once the provider has answered.

Counted, not timed: the pending result is not read back, the archive is not asked for
a key whose holder is the hot job being run, and the semantics stay (a result is never
produced twice, a stale holder's answer never becomes the result).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue, StaleLease, State
from desktop_queue.core.results import ResultStore
from desktop_queue.core.store.archive import Archive

PAYLOAD = {"prompt": "x", "duration_s": 0}


@pytest.fixture
def archived_queue(open_queue: Callable[..., Queue], clock: FakeClock) -> Queue:
    """A queue whose archive holds finished jobs (5 kept hot), so key look-ups could ask it."""
    queue = open_queue(keep_finished=5, background_compaction=False)
    for i in range(20):
        queue.submit("demo", PAYLOAD, key=f"old-{i}")
        lease = queue.lease("w")
        assert lease is not None
        queue.complete(lease, {"text": f"old {i}"})
        clock.advance(1)
    queue.store.compact_now()
    assert queue.store.archive.count() == 15
    return queue


@pytest.fixture
def archive_queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every SQL statement the archive index runs."""
    seen: list[str] = []
    real = Archive._query

    def counting(self: Archive, sql: str, args: Any = ()) -> list[Any]:
        seen.append(sql)
        return real(self, sql, args)

    monkeypatch.setattr(Archive, "_query", counting)
    yield seen


@pytest.fixture
def pending_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = ResultStore.pending

    def counting(self: ResultStore, key: str, epoch: int) -> dict[str, Any] | None:
        seen.append(key)
        return real(self, key, epoch)

    monkeypatch.setattr(ResultStore, "pending", counting)
    return seen


def run_as_the_driver_does(queue: Queue, key: str, queries: list[str] | None = None) -> tuple[Any, dict[str, Any]]:
    """Submits, leases, looks for a stored result, keeps the answer pending: what a runnable does.

    ``queries`` is cleared after the submission (which asks the archive for the key, rightly).
    """
    queue.submit("demo", PAYLOAD, key=key)
    if queries is not None:
        queries.clear()
    lease = queue.lease("w")
    assert lease is not None
    assert queue.stored_result(lease) is None
    doc = queue.results.put_pending(key, {"text": "new"}, job_id=lease.job_id, epoch=lease.epoch, produced_at=1.0)
    return lease, doc


def test_a_success_with_its_kept_document_reads_nothing_back(
    archived_queue: Queue, archive_queries: list[str], pending_reads: list[str]
) -> None:
    queue = archived_queue
    lease, doc = run_as_the_driver_does(queue, "new-1", archive_queries)

    job = queue.complete(lease, {"text": "new"}, document=doc)

    assert job.state == State.SUCCEEDED
    assert pending_reads == []  # the runnable handed its document over
    assert archive_queries == []  # neither the lookup before the run nor the commit asked the archive
    assert queue.results.get("new-1") == doc
    assert not list((queue.data_dir / "results" / "pending").iterdir())  # the pending copy is gone


def test_the_lookup_before_a_run_asks_the_archive_only_for_a_key_no_hot_job_holds(
    archived_queue: Queue, archive_queries: list[str]
) -> None:
    queue = archived_queue
    lease, _doc = run_as_the_driver_does(queue, "new-2", archive_queries)
    assert archive_queries == []
    # the same lookup for a lease whose job does not hold the key asks the archive
    stray = dataclasses.replace(lease, job_id="someone-else")
    assert queue.stored_result(stray) is None
    assert archive_queries


def test_a_kept_document_of_another_epoch_is_not_taken(archived_queue: Queue, pending_reads: list[str]) -> None:
    queue = archived_queue
    lease, doc = run_as_the_driver_does(queue, "new-3")
    stale = {**doc, "epoch": lease.epoch - 1, "result": {"text": "stale"}}

    queue.complete(lease, {"text": "fresh"}, document=stale)

    assert pending_reads == ["new-3"]  # looked up as before: this epoch's own pending copy
    stored = queue.results.get("new-3")
    assert stored is not None and stored["epoch"] == lease.epoch and stored["result"] == {"text": "new"}


def test_a_stale_holder_with_its_kept_document_is_turned_away(queue: Queue, clock: FakeClock) -> None:
    lease, doc = run_as_the_driver_does(queue, "k")
    queue.cancel(lease.job_id)

    with pytest.raises(StaleLease):
        queue.complete(lease, {"text": "late"}, document=doc)

    assert queue.get(lease.job_id).state == State.CANCELLED
    assert queue.results.get("k") is None
    assert queue.get(lease.job_id).events[-1].type == "stale_result"
    assert not list((queue.data_dir / "results" / "pending").iterdir())


def test_a_result_stored_for_the_key_meanwhile_is_not_produced_again(queue: Queue) -> None:
    lease, doc = run_as_the_driver_does(queue, "k")
    first = dict(doc, job_id="other", epoch=99, result={"text": "first"})
    queue.store._carried["k"] = (queue.store._gen, first)  # a result the journal carries for the key

    job = queue.complete(lease, {"text": "second"}, document=doc)

    assert job.state == State.SUCCEEDED
    assert queue.results.get("k") == first  # the first result stays
    assert "not produced again" in job.events[-1].detail.get("reason", "")
