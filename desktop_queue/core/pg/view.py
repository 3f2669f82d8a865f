"""What a verb reads on PostgreSQL (:class:`PgView`), and writing the records it returns.

A :class:`PgView` lives for one transaction. Its reads are SQL: a job by id, the job
holding a key, the next runnable job of a lane (``FOR UPDATE SKIP LOCKED``: two workers
never get the same job, and neither waits for the other), counts by state. In a writing
transaction a job read by id is locked (``FOR UPDATE``), so two verbs on one job take
turns; a job read in bulk is not locked, and the update of it checks that its ``rev`` is
still the one read (else :class:`Conflict`, and the backend runs the verb again).

:meth:`PgView.apply` turns the records into ``INSERT`` and ``UPDATE`` statements of the
same transaction: a job's events are appended and a success's result document stored
with the state they belong to.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence, ValuesView
from typing import Any, cast

import orjson

from desktop_queue.core.model import State
from desktop_queue.core.records import BatchRecord, JobDict, NewRecord, PurgeRecord, Record, UpdateRecord
from desktop_queue.core.store.archive import PurgeFilter

LIVE_OR_DONE = (str(State.QUEUED), str(State.RUNNING), str(State.SUCCEEDED))

#: what a lease renewal changes (see :meth:`PgView.apply`: no notification for it alone)
_RENEWAL = frozenset({"lease_expires_at", "heartbeat_at"})

#: the job fields that also have a column of their own (indexed, or compared in SQL)
_COLUMNS = ("state", "run_after", "lease_expires_at")

# the job and its timeline (as JSON text, parsed only if someone reads it: model.events_of)
_SELECT = (
    "SELECT j.doc::text, j.rev,"
    " (SELECT coalesce(json_agg(e.doc ORDER BY e.n), '[]'::json)::text FROM dq_events e WHERE e.job_id = j.id),"
    " j.id"
    " FROM dq_jobs j"
)


class Conflict(Exception):
    """A job changed after this transaction read it without a lock: run the verb again."""


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


class PgJobs(Mapping[str, JobDict]):
    """Every job, by id, read through the view (``View.hot_jobs``: on PostgreSQL every job is hot)."""

    def __init__(self, view: PgView) -> None:
        self._view = view

    def __getitem__(self, job_id: str) -> JobDict:
        job = self._view.read_job(job_id, lock=False)
        if job is None:
            raise KeyError(job_id)
        return job

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and self._view.exists(job_id)

    def __iter__(self) -> Iterator[str]:
        rows = self._view.conn.execute("SELECT id FROM dq_jobs ORDER BY seq").fetchall()
        return iter([r[0] for r in rows])

    def __len__(self) -> int:
        row = self._view.conn.execute("SELECT count(*) FROM dq_jobs").fetchone()
        return int(row[0]) if row else 0

    def values(self) -> ValuesView[JobDict]:
        return cast(ValuesView[JobDict], self._view.all_jobs())

    def items(self) -> Any:
        return [(j["id"], j) for j in self._view.all_jobs()]


class PgView:
    """A :class:`~desktop_queue.core.backend.View` over one transaction of ``conn``.

    Args:
        conn: a psycopg connection inside a transaction.
        write: the transaction will write (reads by id lock their rows; the lease scan
            locks the job it takes).
        worker: the ``dq_workers`` row of this process: a lease written here names it.
    """

    archive = None  # (every job stays in the table: there is no separate archive to ask)

    def __init__(self, conn: Any, *, write: bool, worker: str | None = None) -> None:
        self.conn = conn
        self.write = write
        self.worker = worker
        #: ids of the jobs :meth:`apply` changed (None: a purge, "everything"), renewals of a
        #: lease aside: what the commit notifies
        self.changed: set[str] | None = set()
        #: id -> (job, rev) of every job read here; a locked id is also in ``_locked``
        self._seen: dict[str, tuple[JobDict, int]] = {}
        self._locked: set[str] = set()
        self._version: int | None = None

    # ------------------------------------------------------------------ reading jobs

    def _job_of(self, row: Sequence[Any]) -> JobDict:
        job = cast(JobDict, orjson.loads(row[0]))
        job["events"] = row[2]
        self._seen[job["id"]] = (job, int(row[1]))
        return job

    def read_job(self, job_id: str, *, lock: bool) -> JobDict | None:
        """The job ``job_id`` (locked for this transaction when ``lock`` and writing)."""
        lock = lock and self.write
        seen = self._seen.get(job_id)
        if seen is not None and (not lock or job_id in self._locked):
            return seen[0]
        sql = _SELECT + " WHERE j.id = %s" + (" FOR UPDATE OF j" if lock else "")
        row = self.conn.execute(sql, (job_id,)).fetchone()
        if row is None:
            return None
        if lock:
            self._locked.add(job_id)
        return self._job_of(row)

    def all_jobs(self) -> list[JobDict]:
        rows = self.conn.execute(_SELECT + " ORDER BY j.seq").fetchall()
        return [self._seen[r[3]][0] if r[3] in self._locked else self._job_of(r) for r in rows]

    # ------------------------------------------------------------------ backend.View

    @property
    def version(self) -> int:
        """A transaction id no job change unseen here is older than (``changed_since`` finds those).

        The oldest transaction still running when this view's snapshot was taken would
        do: every change older than it is visible here. But transactions that change no
        job (heartbeats of the worker rows, notifications) move that on too, and a version
        should move only with the jobs; so it is the lesser of that and one past the last
        job change (or purge) seen here: no job change lies between the two.
        """
        if self._version is None:
            row = self.conn.execute(
                "SELECT least(pg_snapshot_xmin(pg_current_snapshot())::text::bigint, 1 + greatest(0,"
                " (SELECT txid FROM dq_jobs ORDER BY txid DESC LIMIT 1)::text::bigint,"
                " (SELECT txid FROM dq_purges ORDER BY txid DESC LIMIT 1)::text::bigint))"
            ).fetchone()
            self._version = int(row[0]) if row else 0
        return self._version

    @property
    def seq(self) -> int:
        """The highest submission number given out (a new job's own is taken when it is inserted)."""
        row = self.conn.execute("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM dq_job_seq").fetchone()
        return int(row[0]) if row else 0

    @property
    def epoch(self) -> int:
        """One less than a lease epoch no one else has: each read reserves a new one.

        The lease verb reads ``epoch + 1`` as its new lease's epoch; a sequence makes
        that strictly increasing and unique across every concurrent transaction.
        """
        row = self.conn.execute("SELECT nextval('dq_lease_epoch') - 1").fetchone()
        return int(row[0]) if row else 0

    def job(self, job_id: str) -> JobDict | None:
        return self.read_job(job_id, lock=True)

    def hot(self, job_id: str) -> JobDict | None:
        return self.read_job(job_id, lock=True)

    def holder(self, key: str) -> JobDict | None:
        while True:
            held = self.holder_id(key)
            if held is None:
                return None
            job = self.read_job(held, lock=True)
            # (the lock may have waited for a transaction that cancelled or purged it: look again)
            if job is not None and job["key"] == key and job["state"] in LIVE_OR_DONE:
                return job

    def holder_id(self, key: str) -> str | None:
        row = self.conn.execute(
            "SELECT id FROM dq_jobs WHERE key = %s AND state = ANY(%s) LIMIT 1", (key, list(LIVE_OR_DONE))
        ).fetchone()
        return None if row is None else str(row[0])

    def exists(self, job_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM dq_jobs WHERE id = %s", (job_id,)).fetchone() is not None

    def hot_jobs(self) -> PgJobs:
        return PgJobs(self)

    def ids_in(self, state: str) -> Collection[str]:
        if state == State.RUNNING:
            # the running jobs are few (one per busy worker slot), and every lease reads each
            # of them to reap expired ones: read them whole, in one statement
            rows = self.conn.execute(_SELECT + " WHERE j.state = 'running' ORDER BY j.id").fetchall()
            return [r[3] if r[3] in self._locked else self._job_of(r)["id"] for r in rows]
        rows = self.conn.execute("SELECT id FROM dq_jobs WHERE state = %s ORDER BY id", (str(state),)).fetchall()
        return [r[0] for r in rows]

    def purged(self, job: JobDict) -> bool:
        return False  # (a purge deletes the rows it matches in its own transaction)

    def queued_in_lane(self, lane: str) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM dq_jobs WHERE state = 'queued' AND priority = %s", (str(lane),)
        ).fetchone()
        return int(row[0]) if row else 0

    def queued_of_kinds(self, kinds: Iterable[str]) -> bool:
        row = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM dq_jobs WHERE state = 'queued' AND kind = ANY(%s))", (list(kinds),)
        ).fetchone()
        return bool(row and row[0])

    def runnable(self, lane: str, now: float, skip: Callable[[JobDict], bool] | None = None) -> JobDict | None:
        """The next queued job of ``lane`` due at ``now``, locked, skipping jobs other transactions hold.

        A writing view takes it with ``FOR UPDATE SKIP LOCKED``: a concurrent lease
        passes over it instead of waiting, and takes the next one.
        """
        passed: list[str] = []
        # a writing scan locks every row it returns: one at a time, or it would hold (and
        # hide from other workers) a page of jobs it does not take
        page = 1 if self.write else 16
        while True:
            sql = (
                _SELECT + " WHERE j.state = 'queued' AND j.priority = %s AND j.run_after <= %s AND NOT (j.id = ANY(%s))"
                " ORDER BY j.run_after, j.seq LIMIT %s" + (" FOR UPDATE OF j SKIP LOCKED" if self.write else "")
            )
            rows = self.conn.execute(sql, (str(lane), now, passed, page)).fetchall()
            for row in rows:
                job = self._job_of(row)
                if self.write:
                    self._locked.add(job["id"])
                if skip is not None and skip(job):
                    passed.append(job["id"])
                    continue
                return job
            if len(rows) < page:
                return None

    def next_wake(self) -> float | None:
        row = self.conn.execute("SELECT min(run_after) FROM dq_jobs WHERE state = 'queued'").fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def changed_since(self, version: int) -> tuple[int, set[str] | None]:
        """Ids of the jobs written by transactions not yet finished at ``version`` (and since).

        A few of them may have been seen already; none is missed. A purge since then
        answers None (the caller reloads).
        """
        now = self.version
        since = max(version, 0)
        purged = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM dq_purges WHERE txid >= %s::text::xid8)", (str(since),)
        ).fetchone()
        if purged and purged[0]:
            return now, None
        rows = self.conn.execute("SELECT id FROM dq_jobs WHERE txid >= %s::text::xid8", (str(since),)).fetchall()
        return now, {r[0] for r in rows}

    # ------------------------------------------------------------------ writing records

    def apply(self, records: Sequence[Record]) -> None:
        """Writes ``records`` in this transaction.

        Raises:
            Conflict: a job read without a lock was changed by another transaction since.
            psycopg.errors.UniqueViolation: a new live job's key is held (a concurrent
                submission won): the backend runs the verb again, and it finds that job.
        """
        for record in records:
            op = record.get("op")
            if op == "new":
                self._insert(cast(NewRecord, record))
            elif op == "batch":
                for sub in cast(BatchRecord, record)["new"]:
                    self._insert(sub)
            elif op == "upd":
                self._update(cast(UpdateRecord, record))
            elif op == "purge":
                self._purge(cast(PurgeRecord, record))

    def _insert(self, record: NewRecord) -> None:
        job: dict[str, Any] = dict(record["job"])
        job.pop("events", None)
        row = self.conn.execute("SELECT nextval('dq_job_seq')").fetchone()
        # the submission number comes from the sequence, not from what the verb read: two
        # concurrent submissions must not share one
        job["seq"] = int(row[0]) if row else job["seq"]
        self.conn.execute(
            "INSERT INTO dq_jobs (id, seq, kind, priority, key, state, run_after, lease_expires_at, doc)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb)",
            (
                job["id"],
                job["seq"],
                job["kind"],
                job["priority"],
                job["key"],
                job.get("state", State.QUEUED),
                job.get("run_after") or 0.0,
                job.get("lease_expires_at"),
                _dumps(job),
            ),
        )
        self._events(job["id"], record.get("ev") or ())
        self._changed(job["id"])

    def _changed(self, job_id: str | None) -> None:
        if job_id is None:
            self.changed = None
        elif self.changed is not None:
            self.changed.add(job_id)

    def _update(self, record: UpdateRecord) -> None:
        job_id = record["id"]
        changes: dict[str, Any] = dict(record.get("set") or {})
        assignments = ["doc = doc || %s::jsonb", "rev = rev + 1", "txid = pg_current_xact_id()"]
        params: list[Any] = [_dumps(changes)]
        for column in _COLUMNS:
            if column in changes:
                value = changes[column]
                assignments.append(f"{column} = %s")
                params.append(value or 0.0 if column == "run_after" else value)
        if "lease_token" in changes:
            # a new lease belongs to this process's worker row; a cleared one to no one
            assignments.append("worker_id = %s")
            params.append(self.worker if changes["lease_token"] else None)
        sql = f"UPDATE dq_jobs SET {', '.join(assignments)} WHERE id = %s"
        params.append(job_id)
        seen = self._seen.get(job_id)
        if seen is not None and job_id not in self._locked:
            sql += " AND rev = %s"
            params.append(seen[1])
        done = self.conn.execute(sql, params)
        if done.rowcount != 1:
            raise Conflict(f"job {job_id} changed meanwhile (or is gone)")
        if seen is not None:
            self._seen[job_id] = (seen[0], seen[1] + 1)
        events = record.get("ev") or ()
        self._events(job_id, events)
        if events or not changes.keys() <= _RENEWAL:
            self._changed(job_id)  # (a lease renewal alone wakes no one: nothing a reader shows moved)
        doc = record.get("res")
        if isinstance(doc, dict) and isinstance(doc.get("key"), str):
            self.conn.execute(
                "INSERT INTO dq_results (key, doc) VALUES (%s, %s::jsonb)"
                " ON CONFLICT (key) DO UPDATE SET doc = EXCLUDED.doc",
                (doc["key"], _dumps(doc)),
            )

    def _events(self, job_id: str, events: Iterable[Any]) -> None:
        rows = [(job_id, _dumps(ev)) for ev in events]
        if rows:
            with self.conn.cursor() as cur:
                cur.executemany("INSERT INTO dq_events (job_id, doc) VALUES (%s, %s::jsonb)", rows)

    def _purge(self, record: PurgeRecord) -> None:
        purge = PurgeFilter.from_json(record["filter"])
        finished = [str(State.SUCCEEDED), str(State.DEAD), str(State.CANCELLED)]
        rows = self.conn.execute(_SELECT + " WHERE j.state = ANY(%s)", (finished,)).fetchall()
        gone = [job for job in (self._job_of(r) for r in rows) if purge.matches(job)]
        if gone:
            ids = [j["id"] for j in gone]
            keys = [j["key"] for j in gone]
            self.conn.execute("DELETE FROM dq_jobs WHERE id = ANY(%s)", (ids,))
            # a key's result goes with its job, unless a job still here holds the key
            self.conn.execute(
                "DELETE FROM dq_results r WHERE r.key = ANY(%s)"
                " AND NOT EXISTS (SELECT 1 FROM dq_jobs j WHERE j.key = r.key AND j.state = 'succeeded')",
                (keys,),
            )
        self._changed(None)
        self.conn.execute(
            "INSERT INTO dq_purges (at, filter) VALUES (%s, %s::jsonb)", (record.get("at"), _dumps(record["filter"]))
        )
