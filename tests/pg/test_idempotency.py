"""At most one live job per idempotency key on PostgreSQL, however many submit it at once (invariant 2)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest

from desktop_queue.core import Queue
from desktop_queue.core.errors import DuplicateKeyConflict


def _live(dsn: str, key: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM dq_jobs WHERE key = %s AND state IN ('queued', 'running', 'succeeded')", (key,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_racing_submissions_of_one_key_make_one_job(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    n = 6
    queues = [open_pg() for _ in range(n)]  # one pool each: n connections racing
    barrier = threading.Barrier(n)
    answers: list[tuple[str, bool]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def submit(queue: Queue) -> None:
        barrier.wait()
        try:
            res = queue.submit("demo", {"prompt": "same"}, key="one-key")
        except BaseException as exc:  # (reported below)
            with lock:
                errors.append(exc)
            return
        with lock:
            answers.append((res.job.id, res.duplicate))

    threads = [threading.Thread(target=submit, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len({job_id for job_id, _ in answers}) == 1  # everyone got the same job
    assert sorted(dup for _, dup in answers) == [False] + [True] * (n - 1)
    assert _live(pg_dsn, "one-key") == 1


def test_the_unique_index_refuses_a_second_live_job_for_a_key(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    """Below the verbs: even a writer that skipped the look-up cannot make a second live job."""
    queue = open_pg()
    job = queue.submit("demo", {"n": 1}, key="k").job
    with psycopg.connect(pg_dsn) as conn, pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            "INSERT INTO dq_jobs (id, seq, kind, priority, key, state, doc) VALUES ('x', 99, 'demo', 'background', 'k', 'queued', '{}')"
        )
    queue.cancel(job.id)  # no longer live: the key is free
    again = queue.submit("demo", {"n": 1}, key="k")
    assert not again.duplicate and again.job.id != job.id
    assert _live(pg_dsn, "k") == 1


def test_the_same_key_with_another_input_is_refused(open_pg: Callable[..., Queue]) -> None:
    queue = open_pg()
    queue.submit("demo", {"n": 1}, key="k")
    with pytest.raises(DuplicateKeyConflict):
        open_pg().submit("demo", {"n": 2}, key="k")
