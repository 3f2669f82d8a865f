"""Queue.lease_many and Queue.complete_many: several leases or successes in one commit.

Each keeps every guarantee of its one-at-a-time verb (DESIGN.md section 1): its own
unpredictable token, strictly increasing epochs, attempts counted, only the current
token completes, the result carried by the success's own record.
"""

from __future__ import annotations

from typing import Any

import pytest

from desktop_queue.core import Queue, StaleLease, State
from desktop_queue.core.errors import QueueError


def submit(queue: Queue, n: int, priority: str = "background") -> list[str]:
    return [queue.submit("demo", {"prompt": f"p{i}", "p": priority}, priority=priority).job.id for i in range(n)]


def document(queue: Queue, lease: Any, text: str) -> dict[str, Any]:
    key = lease.job.idempotency_key
    return queue.results.attempt_document(key, {"text": text}, job_id=lease.job_id, epoch=lease.epoch, produced_at=1.0)


def test_lease_many_takes_what_leases_one_by_one_would_in_one_commit(any_queue: Queue) -> None:
    queue = any_queue
    background = submit(queue, 2)
    interactive = submit(queue, 3, "interactive")

    leases = queue.lease_many("w", 4)

    # the interactive lane first, then submission order
    assert [lease.job_id for lease in leases] == interactive + background[:1]
    assert len({lease.token for lease in leases}) == 4
    epochs = [lease.epoch for lease in leases]
    assert epochs == sorted(epochs) and len(set(epochs)) == 4
    for lease in leases:
        job = queue.get(lease.job_id)
        assert job.state == State.RUNNING and queue.lease_token(lease.job_id) == lease.token
        assert (job.attempts, job.total_attempts, lease.attempt) == (1, 1, 1)
        assert [e.type for e in job.events] == ["submitted", "leased"]
    # the next lease continues after them, with a later epoch
    nxt = queue.lease("w")
    assert nxt is not None and nxt.job_id == background[1] and nxt.epoch > max(epochs)
    assert queue.lease_many("w", 3) == []


def test_lease_many_asks_accept_in_order_and_writes_nothing_when_it_raises(any_queue: Queue) -> None:
    queue = any_queue
    ids = submit(queue, 4)
    asked: list[str] = []

    def refuse_second(job: Any) -> bool:
        asked.append(job["id"])
        return job["id"] != ids[1]

    leases = queue.lease_many("w", 2, accept=refuse_second)
    assert [lease.job_id for lease in leases] == [ids[0], ids[2]]
    assert asked[:3] == ids[:3]
    assert queue.get(ids[1]).state == State.QUEUED

    def explode(job: Any) -> bool:
        if job["id"] == ids[3]:
            raise RuntimeError("needs the shared state")
        return True

    queue.fail(leases[0], _retryable())  # back to queued, later (backoff): not runnable now
    with pytest.raises(RuntimeError):
        queue.lease_many("w", 2, accept=explode)
    assert queue.get(ids[1]).state == State.QUEUED and queue.get(ids[3]).state == State.QUEUED


def _retryable() -> Any:
    from desktop_queue.core import Outcome

    return Outcome.failure("retryable", "try again")


def test_complete_many_commits_the_current_and_turns_away_the_stale(any_queue: Queue) -> None:
    queue = any_queue
    ids = submit(queue, 3)
    leases = queue.lease_many("w", 3)
    queue.cancel(ids[1])  # its lease is revoked: a late result must not change the state

    answers = queue.complete_many(
        [(lease, {"text": f"t{i}"}, document(queue, lease, f"t{i}")) for i, lease in enumerate(leases)]
    )

    assert [type(a).__name__ for a in answers] == ["Job", "StaleLease", "Job"]
    assert isinstance(answers[1], StaleLease)
    for i in (0, 2):
        job = queue.get(ids[i])
        assert job.state == State.SUCCEEDED and job.result_ref == queue.results.ref_for(job.idempotency_key)
        assert [e.type for e in job.events] == ["submitted", "leased", "succeeded"]
        stored = queue.results.get(job.idempotency_key)
        assert stored is not None and stored["result"] == {"text": f"t{i}"} and stored["epoch"] == leases[i].epoch
    cancelled = queue.get(ids[1])
    assert cancelled.state == State.CANCELLED
    assert "stale_result" in [e.type for e in cancelled.events]
    assert queue.results.get(cancelled.idempotency_key) is None


def test_complete_many_without_a_document_goes_through_complete(any_queue: Queue) -> None:
    queue = any_queue
    [job_id] = submit(queue, 1)
    [lease] = queue.lease_many("w", 2)

    [answer] = queue.complete_many([(lease, {"text": "looked up"}, None)], durable=False)
    queue.sync()

    assert not isinstance(answer, QueueError)
    assert answer.state == State.SUCCEEDED and answer.id == job_id
    stored = queue.results.get(lease.job.idempotency_key)
    assert stored is not None and stored["result"] == {"text": "looked up"}
    # a second commit with the same lease is stale: only the current token completes
    [again] = queue.complete_many([(lease, {"text": "twice"}, document(queue, lease, "twice"))])
    assert isinstance(again, StaleLease)
    assert queue.results.get(lease.job.idempotency_key)["result"] == {"text": "looked up"}


def test_complete_and_lease_settles_and_refills_in_one_commit_never_reaping_what_it_settles(
    any_queue: Queue, clock: Any
) -> None:
    queue = any_queue
    ids = submit(queue, 3)
    leases = queue.lease_many("w", 2)
    # both leases expired (a plain lease is lost when it expires): a lease scan would reap
    # them, but this commit settles them, so they are neither reaped nor leased again
    clock.advance(queue.policy.lease_s + 1)

    answers, more = queue.complete_and_lease(
        [(lease, {"text": "done"}, document(queue, lease, "done")) for lease in leases], 5, worker="w"
    )

    assert [a.state for a in answers if not isinstance(a, QueueError)] == [State.SUCCEEDED] * 2
    assert [lease.job_id for lease in more] == [ids[2]]
    assert more[0].epoch > max(lease.epoch for lease in leases)
    for job_id in ids[:2]:
        assert [e.type for e in queue.get(job_id).events] == ["submitted", "leased", "succeeded"]
    assert queue.get(ids[2]).state == State.RUNNING
