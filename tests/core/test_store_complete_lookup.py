"""``Queue.complete`` without a kept document (scripts, the benchmark) asks the archive only when it must.

Submitting looks the key up in the archive (a duplicate may be archived). Completing then
looks for a result stored for the key: while the lease's job holds the key in the hot set,
no archived job can hold one (the submission would have found it), so the archive is not
asked again; the journal's results and the result files still are. Counted, not timed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue, StaleLease, State
from desktop_queue.core.store.archive import Archive

PAYLOAD = {"prompt": "x", "duration_s": 0}


@pytest.fixture
def archived_queue(open_queue: Callable[..., Queue], clock: FakeClock) -> Queue:
    """A queue whose archive holds finished jobs (5 kept hot)."""
    queue = open_queue(keep_finished=5, background_compaction=False)
    for i in range(20):
        queue.submit("demo", PAYLOAD, key=f"old-{i}")
        lease = queue.lease("w")
        assert lease is not None
        queue.complete(lease, {"text": f"old {i}"})
        clock.advance(1)
    queue.store.compact_now()  # type: ignore[attr-defined]
    assert queue.store.archive.count() == 15  # type: ignore[attr-defined]
    return queue


@pytest.fixture
def key_queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The archive index's look-ups by key."""
    seen: list[str] = []
    real = Archive._query

    def counting(self: Archive, sql: str, args: Any = ()) -> list[Any]:
        if "key8" in sql:
            seen.append(sql)
        return real(self, sql, args)

    monkeypatch.setattr(Archive, "_query", counting)
    yield seen


def test_a_lifecycle_asks_the_archive_for_its_key_once(archived_queue: Queue, key_queries: list[str]) -> None:
    queue = archived_queue
    job = queue.submit("demo", PAYLOAD, key="new-1").job
    assert len(key_queries) == 1  # the submission's look for an archived duplicate
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job.id
    done = queue.complete(lease, {"text": "new"})
    assert done.state == State.SUCCEEDED
    assert len(key_queries) == 1
    stored = queue.results.get("new-1")
    assert stored is not None and stored["result"] == {"text": "new"} and stored["job_id"] == job.id


def test_a_result_the_journal_carries_for_the_key_is_still_found(archived_queue: Queue) -> None:
    queue = archived_queue
    queue.submit("demo", PAYLOAD, key="k")
    lease = queue.lease("w")
    assert lease is not None
    first = {"key": "k", "job_id": "other", "epoch": 99, "result": {"text": "first"}, "format": "x"}
    queue.store._carried["k"] = (queue.store._gen, first)  # type: ignore[attr-defined]
    job = queue.complete(lease, {"text": "second"})
    assert queue.results.get("k") == first  # the first result stays: never produced twice
    assert "not produced again" in job.events[-1].detail.get("reason", "")


def test_a_lease_whose_job_does_not_hold_the_key_asks_the_archive(
    archived_queue: Queue, key_queries: list[str]
) -> None:
    queue = archived_queue
    queue.submit("demo", PAYLOAD, key="new-2")
    lease = queue.lease("w")
    assert lease is not None
    key_queries.clear()
    stray = dataclasses.replace(lease, job_id="someone-else")
    with pytest.raises(StaleLease):
        queue.complete(stray, {"text": "late"})
    assert key_queries  # the job does not hold the key: the archive is asked
