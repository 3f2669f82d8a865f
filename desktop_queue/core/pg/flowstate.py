"""Flow control shared by every machine on a PostgreSQL queue.

:class:`~desktop_queue.core.flow.FlowControl` keeps its shared state (rate windows,
in-flight attempts, breakers, slow-down, pauses, degradation) in one JSON document that
a :class:`~desktop_queue.core.flow.SharedState` holds for each session. On the JSON
store that is ``<data dir>/flow/state.json`` under an OS lock, which only the processes
of one machine see. Here it is the row ``dq_flow('flow')``: a session is one
transaction that locks it ``FOR UPDATE``, reads it, lets the session work, writes it
and commits, so the semantics are those of the file, across machines. The spend
entries the budgets are measured against (:class:`~.ledger.PgSpendStore`) go over the
same connection, inside that transaction when a session records them: an attempt
leaves the in-flight list and enters the ledger in one commit.

Times in the document are on the server's timeline: the flow control of a PostgreSQL
queue reads the backend's :class:`~.backend.ServerClock` (see :func:`flow_storage`), so
one machine's fast clock cannot empty another's rate window.

A connection lost between sessions (a server restart) is made again at the next one,
for up to ``retry_s``; a session whose write or commit fails keeps its state in memory
and writes it at the next session, as the JSON path does after a failed write.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg.pq import TransactionStatus

from desktop_queue.core.errors import StoreError
from desktop_queue.core.flow import decode_flow_doc
from desktop_queue.core.pg.schema import migrate

log = logging.getLogger(__name__)

T = TypeVar("T")

#: a process stopped (SIGSTOP, a lost network) inside a session holds the row lock at
#: most this long: the server then ends its transaction, and the others go on
IDLE_IN_TRANSACTION_MS = 30_000
_ROW = "flow"


class FlowLink:
    """The one connection of a process's flow control to the queue's database.

    Thread-safe: one thread at a time uses it (an ``RLock``, so the spend store can join
    the transaction a session of the same thread holds open).

    Args:
        dsn: the queue's connection string (its schema first on the search path).
        retry_s: how long a session keeps trying to reach the server.
    """

    def __init__(self, dsn: str, *, retry_s: float = 30.0) -> None:
        self.dsn = dsn
        self.retry_s = retry_s
        self.lock = threading.RLock()
        self._conn: Any = None
        self.in_transaction = False
        #: called after each commit (True) or failed transaction (False) of a session
        self.on_end: list[Callable[[bool], None]] = []

    def _connect(self) -> Any:
        conn = psycopg.connect(self.dsn, autocommit=False)
        try:
            migrate(conn)  # (whoever comes first makes the tables; a newer schema is refused)
            conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def drop(self) -> None:
        """Forgets the connection (broken, or in a state not worth repairing)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def run(self, first: Callable[[Any], T]) -> T:
        """Begins a transaction with ``first(conn)``, reconnecting while the server is away.

        The statement that starts the transaction is where a connection broken since its
        last use shows it; before it nothing was done, so running it again is safe.

        Raises:
            StoreError: the server did not answer within ``retry_s``, or refused.
        """
        deadline = time.monotonic() + self.retry_s
        delay = 0.05
        while True:
            try:
                if self._conn is None:
                    self._conn = self._connect()
                return first(self._conn)
            except psycopg.OperationalError as exc:
                self.drop()
                if time.monotonic() > deadline:
                    raise StoreError(f"the PostgreSQL queue's flow state did not answer: {_reason(exc)}") from None
                log.debug("reconnecting the flow state: %s", exc)
            except StoreError:
                self.drop()
                raise
            except psycopg.Error as exc:
                self.drop()
                raise StoreError(f"the PostgreSQL queue refused its flow state: {_reason(exc)}") from None
            time.sleep(delay)  # (the server is restarting: give it a moment)
            delay = min(delay * 2, 0.5)

    @property
    def conn(self) -> Any:
        """The connection of the transaction under way (after :meth:`run`)."""
        assert self._conn is not None
        return self._conn

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """A statement in the transaction under way (after :meth:`run`)."""
        assert self._conn is not None
        return self._conn.execute(sql, params)

    def commit(self) -> bool:
        """Ends the transaction under way; False (the connection dropped) if it failed."""
        try:
            if self._conn is None:
                return False
            if self._conn.info.transaction_status == TransactionStatus.INERROR:
                self.rollback()  # (a statement failed: COMMIT would roll back without saying so)
                return False
            self._conn.commit()
            return True
        except psycopg.Error as exc:
            log.warning("the flow state's transaction did not commit: %s", _reason(exc))
            self.drop()
            return False

    def rollback(self) -> None:
        try:
            if self._conn is not None:
                self._conn.rollback()
        except psycopg.Error:
            self.drop()

    def close(self) -> None:
        with self.lock:
            self.drop()


class PgSharedState:
    """:class:`~desktop_queue.core.flow.SharedState` in the row ``dq_flow('flow')``.

    Args:
        link: the process's connection to the queue's database.
    """

    def __init__(self, link: FlowLink) -> None:
        self.link = link
        self._version: int | None = None  # the version this process last read or wrote
        self.raw: bytes = b""
        self._pending: tuple[int, bytes] | None = None  # written, not yet committed

    def _select(self, conn: Any) -> tuple[int, str | None] | None:
        row = conn.execute(
            "SELECT version, CASE WHEN version = %s THEN NULL ELSE doc END FROM dq_flow WHERE name = %s FOR UPDATE",
            (self._version if self._version is not None else -1, _ROW),
        ).fetchone()
        if row is None:  # (the row was deleted by hand: made again, empty)
            conn.execute("INSERT INTO dq_flow (name) VALUES (%s) ON CONFLICT DO NOTHING", (_ROW,))
            row = conn.execute("SELECT version, doc FROM dq_flow WHERE name = %s FOR UPDATE", (_ROW,)).fetchone()
        return (int(row[0]), row[1]) if row is not None else None

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any] | None]:
        """One transaction: the row locked and read, the block, the commit (see the protocol)."""
        with self.link.lock:
            row = self.link.run(self._select)
            self.link.in_transaction = True
            try:
                yield self._decode(row)
            finally:
                self.link.in_transaction = False
                # (a session that raised wrote its state first, as the file's does: keep it)
                committed = self.link.commit()
                if committed and self._pending is not None:
                    self._version, self.raw = self._pending
                self._pending = None
                for hook in list(self.link.on_end):
                    hook(committed)

    def _decode(self, row: tuple[int, str | None] | None) -> dict[str, Any] | None:
        if row is None:
            return {}
        version, text = row
        if version == self._version:
            return None  # unchanged since this process read or wrote it: its memory is current
        self._version = version
        if text is None:
            self.raw = b""
            return {}
        raw = text.encode()
        self.raw = raw
        return decode_flow_doc(raw, "dq_flow")

    def write(self, doc: dict[str, Any]) -> None:
        """Replaces the document in the session's transaction (nothing if it did not change)."""
        raw = orjson.dumps(doc)
        if raw == self.raw:
            return
        try:
            row = self.link.execute(
                "UPDATE dq_flow SET version = version + 1, doc = %s WHERE name = %s RETURNING version",
                (raw.decode(), _ROW),
            ).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"could not write the flow state: {_reason(exc)}") from None
        if row is not None:
            # taken as this process's view only once committed: if the commit fails, the
            # stored version stays the one it read, and its memory (this state) wins next time
            self._pending = (int(row[0]), raw)

    def ended_attempts(self, job_ids: list[str]) -> set[str]:
        """Of these jobs, those not ``running`` under a lease that is live by the server's clock (inside :meth:`locked`).

        An attempt admitted by a process on another machine is over when its job is:
        finished, queued again, or still ``running`` on a lease that ran out (its holder
        stopped renewing: it died, or lost the network). What cannot be asked counts as
        running (a slot held a little longer, never one freed too soon).
        """
        if not self.link.in_transaction or not job_ids:
            return set()
        try:
            with self.link.conn.transaction():  # (a savepoint: a failure here spoils nothing else)
                rows = self.link.execute(
                    "SELECT id FROM dq_jobs WHERE id = ANY(%s) AND state = 'running'"
                    " AND lease_expires_at > extract(epoch FROM clock_timestamp())",
                    (job_ids,),
                ).fetchall()
        except psycopg.Error as exc:
            log.warning("could not ask which attempts still run: %s", _reason(exc))
            return set()
        return set(job_ids) - {str(r[0]) for r in rows}

    def close(self) -> None:
        self.link.close()


def flow_storage(backend: Any) -> tuple[PgSharedState, Any, Any] | None:
    """The flow state, spend store and clock for the queue ``backend`` keeps, if it is a PostgreSQL one.

    Returns:
        ``(shared, spend, clock)`` for :class:`~desktop_queue.core.flow.FlowControl`
        (``shared=``, ``clock=``) and :class:`~desktop_queue.core.ledger.SpendLedger`
        (``store=``); None for any other backend (the data dir's files are used).
    """
    from desktop_queue.core.pg.backend import PgBackend
    from desktop_queue.core.pg.ledger import PgSpendStore

    if not isinstance(backend, PgBackend):
        return None
    link = FlowLink(backend.dsn, retry_s=backend.retry_s)
    return PgSharedState(link), PgSpendStore(link), backend.clock


def _reason(exc: BaseException) -> str:
    """One line saying what went wrong (never the DSN: it may hold a password)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


__all__ = ["FlowLink", "PgSharedState", "flow_storage"]
