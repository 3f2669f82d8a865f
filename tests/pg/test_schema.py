"""The PostgreSQL schema: created on first open, left alone on the next, a newer one refused."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import psycopg
import pytest

from desktop_queue.core import Queue
from desktop_queue.core.errors import StoreError
from desktop_queue.core.pg import SCHEMA_VERSION, PgBackend


def _versions(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM dq_schema ORDER BY version").fetchall()]


def test_first_open_creates_the_schema_and_says_so(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    queue = open_pg()
    assert queue.report.first
    assert queue.report.notices == [f"created the PostgreSQL queue (schema version {SCHEMA_VERSION})"]
    assert _versions(pg_dsn) == list(range(1, SCHEMA_VERSION + 1))
    job = queue.submit("demo", {"n": 1}).job
    queue.close()

    again = open_pg()
    assert again.report.notices == []  # nothing to migrate: nothing said
    assert again.get(job.id).state == "queued"
    assert _versions(pg_dsn) == list(range(1, SCHEMA_VERSION + 1))


def test_a_newer_schema_is_refused_and_left_as_it_is(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    queue = open_pg()
    job = queue.submit("demo", {"n": 1}).job
    queue.close()
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("INSERT INTO dq_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))

    backend = PgBackend(pg_dsn)
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than"):
        backend.open()
    assert backend.closed
    assert _versions(pg_dsn)[-1] == SCHEMA_VERSION + 1
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT state FROM dq_jobs WHERE id = %s", (job.id,)).fetchone()
    assert row == ("queued",)


def test_concurrent_first_opens_migrate_once(pg_dsn: str) -> None:
    """Two openers at once: one creates the schema, the other waits and finds it made."""
    import threading

    backends = [PgBackend(pg_dsn) for _ in range(2)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def open_one(backend: PgBackend) -> None:
        barrier.wait()
        try:
            backend.open()
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(b,)) for b in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert errors == []
        assert _versions(pg_dsn) == list(range(1, SCHEMA_VERSION + 1))
        assert sorted(b.report.first for b in backends) == [False, True]
    finally:
        for b in backends:
            b.close()


def test_an_unreachable_server_is_one_clear_error(tmp_path: object) -> None:
    backend = PgBackend(f"postgresql://postgres@/postgres?host={tmp_path}&port=1&connect_timeout=2")
    with pytest.raises(StoreError, match="cannot connect to the PostgreSQL queue"):
        backend.open()


def test_a_version_3_queue_is_brought_to_version_4_with_its_jobs(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    """Version 4 adds the index the reaper asks (and the check of pipelined writes) to a queue in use."""
    from desktop_queue.core.pg.schema import MIGRATIONS

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # a queue as version 3 made it
        conn.execute(
            "CREATE TABLE dq_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version in (1, 2, 3):
            conn.execute(MIGRATIONS[version])
            conn.execute("INSERT INTO dq_schema (version) VALUES (%s)", (version,))
    queue = open_pg()
    assert queue.report.notices == [f"brought the PostgreSQL queue's schema from version 3 to {SCHEMA_VERSION}"]
    assert _versions(pg_dsn) == list(range(1, SCHEMA_VERSION + 1))
    with psycopg.connect(pg_dsn) as conn:
        index = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'dq_jobs_lease_expiry'"
        ).fetchone()
    assert index is not None and "WHERE (state = 'running'::text)" in index[0]
    job = queue.submit("demo", {"n": 1}).job
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job.id
    assert queue.complete(lease, {"ok": True}).state == "succeeded"


def test_a_version_4_queue_loses_the_submission_number_index(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    """Version 5 drops the submission-number index (and the per-event key check, since gone with its table)."""
    from desktop_queue.core.pg.schema import MIGRATIONS

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # a queue as version 4 made it
        conn.execute(
            "CREATE TABLE dq_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version in (1, 2, 3, 4):
            conn.execute(MIGRATIONS[version])
            conn.execute("INSERT INTO dq_schema (version) VALUES (%s)", (version,))
    queue = open_pg()
    assert queue.report.notices == [f"brought the PostgreSQL queue's schema from version 4 to {SCHEMA_VERSION}"]
    with psycopg.connect(pg_dsn) as conn:
        seq_index = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'dq_jobs_seq'"
        ).fetchone()
    assert seq_index == (0,)
    done, kept = (queue.submit("demo", {"n": i}).job for i in (1, 2))
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == done.id
    queue.complete(lease, {"ok": True})
    assert [e.type for e in queue.get(done.id).events] == ["submitted", "leased", "succeeded"]
    assert {j.id for j in queue.list()} == {done.id, kept.id}


def test_a_version_6_queue_moves_its_timelines_into_their_jobs(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    """Version 7 keeps each job's events in its row: the old event rows move there, in order, and the table goes."""
    from desktop_queue.core.pg.schema import MIGRATIONS

    first = open_pg()  # (real jobs, as this version writes them: a finished one, a queued one)
    done, kept = (first.submit("demo", {"n": i}).job for i in (1, 2))
    lease = first.lease("w")
    assert lease is not None and lease.job_id == done.id
    first.complete(lease, {"ok": True})
    timelines = {j: first.get(j).events for j in (done.id, kept.id)}
    first.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the same queue as version 6 kept it
        rows = conn.execute(
            "SELECT id, seq, kind, priority, key, state, run_after, lease_expires_at, doc::text, events FROM dq_jobs"
        ).fetchall()
        results = conn.execute("SELECT key, doc::text FROM dq_results").fetchall()
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
        conn.execute("DROP FUNCTION dq_expect_one(bigint)")
        for (table,) in tables:
            conn.execute(f"DROP TABLE {table} CASCADE")
        conn.execute("DROP SEQUENCE IF EXISTS dq_job_seq, dq_lease_epoch")
        conn.execute(
            "CREATE TABLE dq_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version in range(1, 7):
            conn.execute(MIGRATIONS[version])
            conn.execute("INSERT INTO dq_schema (version) VALUES (%s)", (version,))
        for *columns, events in rows:
            conn.execute(
                "INSERT INTO dq_jobs (id, seq, kind, priority, key, state, run_after, lease_expires_at, doc)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb)",
                columns,
            )
            for n, event in reversed(list(enumerate(events))):  # (the order is the numbers', not the rows')
                conn.execute(
                    "INSERT INTO dq_events (job_id, n, doc) VALUES (%s, %s, %s::jsonb)",
                    (columns[0], 10 + n, orjson.dumps(event).decode()),
                )
        for key, doc in results:
            conn.execute("INSERT INTO dq_results (key, doc) VALUES (%s, %s::jsonb)", (key, doc))
        conn.execute("SELECT setval('dq_job_seq', 2)")

    queue = open_pg()
    assert queue.report.notices == [f"brought the PostgreSQL queue's schema from version 6 to {SCHEMA_VERSION}"]
    with psycopg.connect(pg_dsn) as conn:
        gone = conn.execute("SELECT to_regclass('dq_events')").fetchone()
    assert gone == (None,)
    assert {j: queue.get(j).events for j in (done.id, kept.id)} == timelines
    assert queue.get(done.id).state == "succeeded"
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == kept.id
    assert queue.complete(lease, {"ok": 2}).state == "succeeded"
    assert [e.type for e in queue.get(kept.id).events] == ["submitted", "leased", "succeeded"]

    assert queue.purge_jobs([done.id]) == 1
    assert [j.id for j in queue.list()] == [kept.id]
