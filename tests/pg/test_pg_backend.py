"""What the PostgreSQL backend adds under the verbs: change feeds, the server clock, one transaction per change."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

from desktop_queue.core import FakeClock, Queue, State
from desktop_queue.core.pg import PgBackend, ServerClock
from desktop_queue.core.pg.view import Conflict, PgView
from desktop_queue.core.records import UpdateRecord


def test_changes_made_by_another_process_are_seen(open_pg: Callable[..., Queue]) -> None:
    window, worker = open_pg(), open_pg()
    version = window.refresh()
    job = worker.submit("demo", {"n": 1}).job
    version, ids = window.changed_since(version)
    assert ids is not None and job.id in ids
    lease = worker.lease("w")
    assert lease is not None
    version, ids = window.changed_since(version)
    assert ids is not None and job.id in ids
    worker.complete(lease, {"ok": True})
    version, ids = window.changed_since(version)
    assert ids is not None and job.id in ids
    assert worker.purge_jobs([job.id]) == 1
    _, ids = window.changed_since(version)
    assert ids is None  # (a purge: reload everything)
    assert window.list() == []


def test_a_commit_applies_all_its_records_or_none(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    """A result and its job's success are one transaction: a failure later in it leaves neither."""
    queue = open_pg()
    first, second = (queue.submit("demo", {"n": i}).job for i in (1, 2))
    with psycopg.connect(pg_dsn) as conn:
        view = PgView(conn, write=True)
        view.hot_jobs()[second.id]  # read without a lock...
        with psycopg.connect(pg_dsn) as other:  # ...and changed by someone else meanwhile
            other.execute("UPDATE dq_jobs SET rev = rev + 1 WHERE id = %s", (second.id,))
        done: UpdateRecord = {
            "op": "upd",
            "id": first.id,
            "set": {"state": State.SUCCEEDED, "result_ref": "r"},
            "ev": [{"type": "succeeded", "at": 1.0}],
            "res": {"key": first.idempotency_key, "result": "x"},
        }
        stale: UpdateRecord = {"op": "upd", "id": second.id, "set": {"state": State.CANCELLED}, "ev": []}
        with pytest.raises(Conflict):
            view.apply([done, stale])
        conn.rollback()
    assert queue.get(first.id).state == State.QUEUED
    assert queue.store.carried_result(first.idempotency_key) is None
    assert [e.type for e in queue.get(first.id).events] == ["submitted"]


def test_a_success_stores_its_result_in_the_database(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    queue = open_pg()
    job = queue.submit("demo", {"n": 1}).job
    lease = queue.lease("w")
    assert lease is not None
    queue.complete(lease, {"answer": 42})
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT doc->'result' FROM dq_results WHERE key = %s", (job.idempotency_key,)).fetchone()
    assert row == ({"answer": 42},)
    again = open_pg().submit("demo", {"n": 1})  # another process: the result, not a new run
    assert again.duplicate and again.result is not None and again.result["result"] == {"answer": 42}


def test_the_server_clock_is_local_time_plus_the_measured_offset() -> None:
    offsets = [120.0]
    clock = ServerClock(lambda: offsets[-1], refresh_s=3600)
    before = time.time()
    assert before + 119 < clock.now() < time.time() + 121
    offsets.append(-5.0)
    assert clock.now() > before + 119  # (measured again only after refresh_s)
    clock.sync()
    assert clock.now() < time.time()


def test_the_backend_clock_follows_the_server(pg_dsn: str) -> None:
    backend = PgBackend(pg_dsn)
    backend.open()
    try:
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        assert abs(backend.clock.now() - row[0]) < 1.0
    finally:
        backend.close()


def test_lease_epochs_keep_rising_across_processes(open_pg: Callable[..., Queue], clock: FakeClock) -> None:
    a, b = open_pg(), open_pg()
    for i in range(4):
        a.submit("demo", {"i": i})
    epochs = []
    for queue in (a, b, a, b):
        lease = queue.lease("w")
        assert lease is not None
        epochs.append(lease.epoch)
    assert epochs == sorted(epochs) and len(set(epochs)) == 4
