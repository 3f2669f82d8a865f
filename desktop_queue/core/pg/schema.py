"""The PostgreSQL schema of the queue, and its migrations, applied when the backend opens.

The applied versions are rows of ``dq_schema``. Opening brings an older schema forward
one step at a time, each step in the transaction that records it; a schema newer than
this code knows is refused (as the JSON store refuses a newer snapshot,
:mod:`desktop_queue.core.store.migrations`), never used as if it were this one.

Every table lives in the connection's current schema (the first of ``search_path``), so
one database can hold several queues (the tests give each test its own schema).
"""

from __future__ import annotations

from typing import Any

from desktop_queue.core.errors import StoreError

#: the schema version this code writes
SCHEMA_VERSION = 9

_V1 = """
CREATE TABLE dq_jobs (
    id text PRIMARY KEY,
    seq bigint NOT NULL,
    kind text NOT NULL,
    priority text NOT NULL,
    key text NOT NULL,
    state text NOT NULL,
    run_after double precision NOT NULL DEFAULT 0,
    lease_expires_at double precision,
    -- bumped by every update: a transaction that read the job without a row lock writes
    -- only if no one changed it since (see view.PgView.apply)
    rev bigint NOT NULL DEFAULT 0,
    -- the transaction that last wrote the row: what changed_since asks for
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    -- the whole job (records.JobDict) without its events
    doc jsonb NOT NULL
);
-- invariant 2: at most one live (or succeeded) job per idempotency key
CREATE UNIQUE INDEX dq_jobs_live_key ON dq_jobs (key) WHERE state IN ('queued', 'running', 'succeeded');
-- lease: the next runnable job of a lane, in run_after then submission order
CREATE INDEX dq_jobs_runnable ON dq_jobs (priority, run_after, seq) WHERE state = 'queued';
CREATE INDEX dq_jobs_state ON dq_jobs (state);
CREATE INDEX dq_jobs_seq ON dq_jobs (seq);
CREATE INDEX dq_jobs_txid ON dq_jobs (txid);
CREATE TABLE dq_events (
    job_id text NOT NULL REFERENCES dq_jobs (id) ON DELETE CASCADE,
    n bigserial NOT NULL,
    doc jsonb NOT NULL,
    PRIMARY KEY (job_id, n)
);
-- result documents, written in the transaction that marks their job succeeded
CREATE TABLE dq_results (key text PRIMARY KEY, doc jsonb NOT NULL);
-- purges carried out (changed_since answers "everything" across one)
CREATE TABLE dq_purges (txid xid8 NOT NULL DEFAULT pg_current_xact_id(), at double precision, filter jsonb NOT NULL);
CREATE SEQUENCE dq_job_seq;
CREATE SEQUENCE dq_lease_epoch;
"""

# Flow control shared by every machine on the queue (core/pg/flowstate.py): the flow
# state document of core/flow.py in one row, locked FOR UPDATE for a session as the JSON
# path locks flow/state.json; and the spend ledger the budgets are measured against.
_V2_FLOW = """
CREATE TABLE dq_flow (
    name text PRIMARY KEY,
    -- bumped by every write: a process whose last read or write is the current version
    -- keeps what it holds in memory (the JSON path compares the file's stat)
    version bigint NOT NULL DEFAULT 0,
    -- the document's exact bytes (orjson), as the JSON path writes them to the file
    doc text
);
INSERT INTO dq_flow (name) VALUES ('flow');
CREATE TABLE dq_spend (
    -- chosen by the writer: an entry whose commit went unanswered is written again, once
    id text PRIMARY KEY,
    n bigserial NOT NULL,
    at double precision NOT NULL,
    profile text NOT NULL,
    model text NOT NULL,
    kind text NOT NULL,
    tokens_in bigint NOT NULL DEFAULT 0,
    tokens_out bigint NOT NULL DEFAULT 0,
    images bigint NOT NULL DEFAULT 0,
    speech_chars bigint NOT NULL DEFAULT 0,
    speech_seconds double precision NOT NULL DEFAULT 0,
    usd double precision,
    job_id text NOT NULL,
    attempt integer NOT NULL
);
-- a budget's question: what one profile spent between two instants (a local day or month)
CREATE INDEX dq_spend_profile_at ON dq_spend (profile, at);
CREATE INDEX dq_spend_at ON dq_spend (at);
"""

# version 3: a row per process that has the queue open (:mod:`.workers`), and the worker
# holding each lease, so that the leases of a worker whose heartbeat stopped are recovered
# by one of the live ones instead of by "the first process to open the queue"
_V3_WORKERS = """
CREATE TABLE dq_workers (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    -- by the server's clock only: the machines' clocks need not agree
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    -- how long the row may go unrenewed before its worker counts as dead: its own word
    -- (a worker that beats every 5 s is not judged by another that beats every 0.2 s)
    ttl_s double precision NOT NULL
);
CREATE INDEX dq_workers_heartbeat ON dq_workers (heartbeat_at);
-- no foreign key: a worker's row goes when its leases are recovered, and a lease it took
-- is then known stale by its token; until then the row says whether its holder lives
ALTER TABLE dq_jobs ADD COLUMN worker_id text;
CREATE INDEX dq_jobs_worker ON dq_jobs (worker_id) WHERE state = 'running';
-- the last purge, for View.version
CREATE INDEX dq_purges_txid ON dq_purges (txid);
"""

# version 4: what a lease asks of the running jobs is only "whose lease has expired?": an
# index over the expiry of running jobs answers that without reading every running job
# (they are as many as busy workers, and each lease asked). The hot tables take an update
# (or a new row) per step of every job: vacuumed and analysed after a few percent changed
# rather than the default fifth, so that dead row versions and stale statistics do not
# pile up between two runs of autovacuum on a busy queue. dq_expect_one lets an update
# check in SQL that it changed its one row (a lost race otherwise), so that the
# transaction's writes can be sent with its COMMIT instead of waiting for each answer: a
# race aborts the transaction as a serialization failure, which the backend runs again.
_V4_EXPIRY = """
CREATE FUNCTION dq_expect_one(n bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    IF n <> 1 THEN
        RAISE EXCEPTION 'a job changed meanwhile (or is gone)' USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN n;
END
$$;
CREATE INDEX dq_jobs_lease_expiry ON dq_jobs (lease_expires_at) WHERE state = 'running';
-- every job's step moves its row out of and into indexes (state and txid change: no
-- update is a HOT one), so the hot table keeps only the indexes a step needs: the running
-- jobs, as few as busy workers, are found by worker through the expiry index; a state's
-- jobs through its partial index (queued: dq_jobs_runnable, running: the expiry index,
-- succeeded: most of the table, read whole), the dead and cancelled ones through this one
DROP INDEX dq_jobs_worker;
DROP INDEX dq_jobs_state;
CREATE INDEX dq_jobs_stopped ON dq_jobs (state) WHERE state IN ('dead', 'cancelled');
ALTER TABLE dq_jobs SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE dq_events SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE dq_results SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
"""

# version 5: less work per step of a job. The foreign key from an event to its job ran a
# check per event appended (three per lifecycle: a query locking the job's row FOR KEY
# SHARE, which on a row this transaction had just written is one more WAL record); every
# event is appended by the statement that inserts or updates its job (view.py's
# _EVENTS_OF reads the job id from that statement's own row), so the job exists and is
# locked by this transaction until it commits, and a purge deletes its jobs' events in
# its own transaction (PgView._purge): the key kept nothing those do not. The index on
# the submission number was written by every step (no update of a job is a HOT one) and
# read only to list every job in order, which reads the whole table anyway (a sort).
_V5_LEAN = """
ALTER TABLE dq_events DROP CONSTRAINT IF EXISTS dq_events_job_id_fkey;
DROP INDEX IF EXISTS dq_jobs_seq;
"""

# version 6: a result's artifact (an image, an audio file) is a file in the data dir of
# the machine that made it; a window on another machine sharing the queue found the file
# missing. The success that commits a result with an artifact stores the artifact's bytes
# in the same statement (PgView._update), so a succeeded job's artifact is in the
# database whenever its result is; a machine that lacks the file fetches it
# (PgBackend.fetch_artifact) into its own data dir. The bytes are stored uncompressed
# (EXTERNAL): images and audio come compressed already, and TOAST would try in vain.
_V6_ARTIFACTS = """
CREATE TABLE dq_artifacts (
    ref text PRIMARY KEY,
    key text NOT NULL,
    sha256 text NOT NULL,
    data bytea NOT NULL
);
ALTER TABLE dq_artifacts ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX dq_artifacts_key ON dq_artifacts (key);
"""

# version 7: a job's timeline in its own row. Events were rows of dq_events, one per step
# of a job: each step wrote its job's new row version and, beside it, an event row and its
# primary key entry (with a number drawn from a sequence), and each lease read the
# timeline back through that index. A job's events are only ever read with their job
# and appended by the statement that changes it, a handful per job: as a column they
# cost no row, index entry or look-up of their own (the job's row is written by every
# step anyway), and a purge's deleted jobs take their timelines with them.
_V7_TIMELINE = """
ALTER TABLE dq_jobs ADD COLUMN events jsonb NOT NULL DEFAULT '[]'::jsonb;
UPDATE dq_jobs j SET events = e.events
    FROM (SELECT job_id, jsonb_agg(doc ORDER BY n) AS events FROM dq_events GROUP BY job_id) e
    WHERE e.job_id = j.id;
DROP TABLE dq_events;
"""

# version 8: a long history read a page at a time. The window held every job, and the
# newest finished jobs were found by sorting the whole table: both read every job, which
# a long history makes slow. The window now holds the unfinished jobs and the newest
# finished ones and pages older ones newest first (PgView.history_rows), as on the data
# dir; this index serves both. A row version enters it only in a finished state: one
# entry per lifecycle (its last step), not one per step as the index on the submission
# number dropped in version 5 cost. The dead and cancelled ones are also found in
# submission order.
_V8_FINISHED = """
CREATE INDEX dq_jobs_finished_seq ON dq_jobs (seq) WHERE state IN ('succeeded', 'dead', 'cancelled');
DROP INDEX dq_jobs_stopped;
CREATE INDEX dq_jobs_stopped ON dq_jobs (state, seq) WHERE state IN ('dead', 'cancelled');
"""

# version 9: the finished jobs found by when they last changed. The metrics' rebuild folds
# the finished jobs changed within its horizon, and the window's status bar counts the
# jobs that succeeded in the last minute when it loads: both read every finished job
# without it. Like version 8's, a row version enters it only in a finished state. The
# expression is PgView's ``_UPDATED``, spelled the same so that the planner matches it.
# The planner knows nothing of an expression's values until the table is analyzed, and
# guesses that a third of the rows match: it reads the whole table instead (0.5 s at a
# million jobs) until autovacuum next analyzes it, which a long history puts off for
# days. So the step analyzes the table (about a second at a million jobs).
_V9_UPDATED = """
CREATE INDEX dq_jobs_finished_updated ON dq_jobs ((coalesce((doc->>'updated_at')::float8, 0)))
    WHERE state IN ('succeeded', 'dead', 'cancelled');
ANALYZE dq_jobs;
"""

#: version -> the SQL that lifts the schema from ``version - 1`` to it
MIGRATIONS: dict[int, str] = {
    1: _V1,
    2: _V2_FLOW,
    3: _V3_WORKERS,
    4: _V4_EXPIRY,
    5: _V5_LEAN,
    6: _V6_ARTIFACTS,
    7: _V7_TIMELINE,
    8: _V8_FINISHED,
    9: _V9_UPDATED,
}


def migrate(conn: Any) -> tuple[int, int]:
    """Creates or brings forward the schema on ``conn`` (a psycopg connection, not in a transaction).

    Concurrent openers are serialized by a transaction-level advisory lock, so one of
    them migrates and the others find it done.

    Returns:
        ``(found, now)``: the version found (0: none) and the version after.
    Raises:
        StoreError: the schema is newer than this code (it is left as it is).
    """
    with conn.transaction():
        opening_lock(conn)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS dq_schema ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT coalesce(max(version), 0) FROM dq_schema").fetchone()
        found = int(row[0]) if row else 0
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"the PostgreSQL queue has schema version {found}, newer than this version of "
                f"Desktop Queue knows ({SCHEMA_VERSION}); upgrade Desktop Queue (nothing was changed)"
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            conn.execute(MIGRATIONS[version])
            conn.execute("INSERT INTO dq_schema (version) VALUES (%s)", (version,))
    return found, SCHEMA_VERSION


def opening_lock(conn: Any) -> None:
    """Takes the queue's opening lock until ``conn``'s transaction ends (openers take turns)."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':desktop-queue:migrate'))")
