"""The PostgreSQL backend: :class:`PgBackend` implements :class:`~desktop_queue.core.backend.Backend`.

Each commit is one database transaction over a pooled connection: the verb's function
reads a :class:`~.view.PgView` (SQL, with row locks), its records become that
transaction's statements, and the transaction commits with ``synchronous_commit`` on
(the server's default), so a verb returns only once its change is durable on the server.

A transaction that loses a race is run again from the start, verb function included
(the functions are pure decisions over what they read, :mod:`desktop_queue.core.decisions`):
a concurrent change to a job it read without a lock (:class:`~.view.Conflict`), a
concurrent submission of the same key (the unique index on live keys; the run again
finds that job and answers ``duplicate``), a deadlock or a lost connection before the
commit was sent. The pool replaces broken connections, so a server restart costs the
verbs running at that moment a retry, not an error. A connection lost *while* committing
is reported (:class:`~desktop_queue.core.errors.StoreError`), never retried blindly:
the commit may have happened.

Each open backend is a worker with a heartbeat row (:mod:`.workers`): its leases name the
row, and the leases of a worker whose row expired are recovered by a live one. A commit
that changes jobs is followed by a notification on the queue's channel, and :class:`~.notify.ChangeFeed` tells
readers of ``changed_since`` when asking the server again is worth it (:mod:`.notify`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from desktop_queue.core.backend import Change, OpenReport, Orphans, ResultStored, wait_out
from desktop_queue.core.errors import StoreError
from desktop_queue.core.pg import notify as notifying
from desktop_queue.core.pg import workers
from desktop_queue.core.pg.schema import migrate, opening_lock
from desktop_queue.core.pg.view import Conflict, PgView
from desktop_queue.core.pg.workers import Heartbeat, WorkerId
from desktop_queue.core.records import Record

log = logging.getLogger(__name__)

T = TypeVar("T")

#: errors after which the whole transaction is run again
_RACES = (Conflict, pg_errors.UniqueViolation, pg_errors.SerializationFailure, pg_errors.DeadlockDetected)
#: how many jobs' last committed images a process keeps (see PgBackend._remember)
_IMAGES_MAX = 4096
#: errors that mean the server (or the way to it) is gone for now
_GONE = (psycopg.OperationalError, PoolTimeout)
#: what a server starting up or shutting down says to a new connection (SQLSTATE 57P03,
#: "the database system is starting up", "... is shutting down", "... in recovery mode")
_RESTARTING = "the database system is "


class ServerClock:
    """Wall time on the database server's timeline: local time plus the measured offset to ``now()``.

    Lease expiry compares times that different machines wrote; measuring all of them
    against the server's clock keeps a machine whose clock is off from reaping live
    leases (or keeping dead ones). The offset is measured at open and again every
    ``refresh_s``, halfway through the round trip.
    """

    def __init__(self, measure: Callable[[], float], refresh_s: float = 30.0) -> None:
        self._measure = measure
        self._refresh_s = refresh_s
        self._offset = 0.0
        self._at = -float("inf")
        self._lock = threading.Lock()

    def sync(self) -> None:
        """Measures the offset now (raises what the server does)."""
        offset = self._measure()
        with self._lock:
            self._offset, self._at = offset, time.monotonic()

    def expire(self) -> None:
        """Measures again at the next :meth:`now` (the connection it was measured on may be gone)."""
        with self._lock:
            self._at = -float("inf")

    def now(self) -> float:
        if time.monotonic() - self._at > self._refresh_s:
            try:
                self.sync()
            except (psycopg.Error, StoreError) as exc:  # (the last offset stays good meanwhile)
                log.debug("could not measure the server clock: %s", exc)
        return time.time() + self._offset

    def monotonic(self) -> float:
        return time.monotonic()

    @property
    def offset(self) -> float:
        return self._offset


class PgBackend:
    """Jobs in PostgreSQL, shared by every process (and machine) using the same database and schema.

    Args:
        dsn: a libpq connection string or URI (``postgresql://user@host/db``).
        pool_size: connections kept at most (each thread of a worker may use one).
        retry_s: how long a verb keeps retrying while the server is unreachable.
        host: the machine named in this worker's row (default: this host's name).
        heartbeat_s: how often the worker row is renewed (and dead workers looked for).
        worker_ttl_s: how old a worker row may get before its worker counts as dead
            (by the server's clock) and its leases are recovered.
        notify: commits notify the queue's channel and a listener follows it (False: readers
            of ``changed_since`` ask the server every time, and no one is told).
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 8,
        retry_s: float = 30.0,
        host: str | None = None,
        heartbeat_s: float = workers.HEARTBEAT_S,
        worker_ttl_s: float = workers.WORKER_TTL_S,
        notify: bool = True,
    ) -> None:
        self.dsn = dsn
        self.report = OpenReport(first=False)
        self.retry_s = retry_s
        self.worker = WorkerId.here(host, worker_ttl_s)
        self.heartbeat_s = heartbeat_s
        self.worker_ttl_s = worker_ttl_s
        self._notify = notify
        self._channel: str | None = None
        self._feed: notifying.ChangeFeed | None = None
        self._feed_lock = threading.Lock()
        self._listening = False  # a feed may start (open, with notifications on)
        self.notifier: notifying.Notifier | None = None
        self.heartbeat: Heartbeat | None = None
        self._recover: Orphans | None = None
        self._answered: dict[int, int] = {}  # version handed out -> the feed's mark before its read
        self._answered_lock = threading.Lock()
        self._pool_size = pool_size
        self._pool: ConnectionPool[Any] | None = None
        self._session: Any = None  # autocommit connection: the clock
        self._session_lock = threading.Lock()
        self._session_suspect = False  # see _ensure_session
        self._local = threading.local()  # .conn: the transaction this thread is in, if any
        #: id -> (job, rev) as this process's last commit of it left it: what a writing
        #: view reads by id instead of the row, rev-checked (PgView.read_job); forgotten
        #: whole when a transaction loses a race or fails (one of them may be stale)
        self._images: dict[str, tuple[Any, int]] = {}
        self._images_lock = threading.Lock()
        self.clock = ServerClock(self._server_offset)
        #: ref -> bytes of an artifact in this machine's data dir (see read_artifacts_with)
        self._artifacts: Callable[[str], bytes | None] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def poisoned(self) -> str | None:
        return None  # (a failed commit is the server's to recover: nothing here to distrust)

    @property
    def closed(self) -> bool:
        return self._pool is None

    def open(self, on_first: Callable[[], None] | None = None) -> OpenReport:
        """Connects, migrates the schema, registers this worker, and recovers the dead ones' jobs.

        ``on_first`` is not run: on a queue shared by several machines "the first to
        open it" says nothing about who died. The jobs of workers whose heartbeat row
        expired are recovered (the function given to :meth:`on_orphans`) before this
        returns, and from then on by whichever live worker notices first.

        Raises:
            StoreError: the server cannot be reached, or its schema is newer than this code.
        """
        session = self._connect_opening()
        try:
            found, now = migrate(session)
            with session.transaction():
                # (two openers at once: one registers and looks before the other does, so
                # exactly one of them finds no one else alive)
                opening_lock(session)
                workers.register(session, self.worker)
                first = not workers.others_alive(session, self.worker)
            if self._notify:
                self._channel = notifying.channel_of(session)
        except psycopg.Error as exc:
            session.close()
            raise StoreError(f"cannot open the PostgreSQL queue: {_reason(exc)}") from None
        except BaseException:
            session.close()
            raise
        self._session = session
        pool: ConnectionPool[Any] = ConnectionPool(
            self.dsn,
            min_size=1,
            max_size=self._pool_size,
            open=False,
            # (no check before handing a connection out: after a failed check the pool waits
            # a second before the next; a dead one fails the verb's first statement instead,
            # which then runs again at once on another)
            configure=self._configure,
            # (autocommit: a verb's statements before the pipeline's sync are its transaction,
            # and a read says its own BEGIN; see PgBackend.commit and PgBackend.read)
            kwargs={"autocommit": True},
            name="desktop-queue",
        )
        try:
            pool.open(wait=True, timeout=10.0)
        except PoolTimeout:
            pool.close()
            with contextlib.suppress(psycopg.Error):
                workers.retire(session, self.worker)
            session.close()
            raise StoreError("cannot open connections to the PostgreSQL queue") from None
        self._pool = pool
        self.report = OpenReport(first=first)
        if found == 0:
            self.report.notices.append(f"created the PostgreSQL queue (schema version {now})")
        elif found < now:
            self.report.notices.append(f"brought the PostgreSQL queue's schema from version {found} to {now}")
        self.clock.sync()
        if self._channel is not None:
            # (commits notify on their own connection, see commit(); the notifier paces
            # them: a statement and a server transaction after each of a lifecycle's three
            # commits was a sixth of a busy worker's and server's time)
            self.notifier = notifying.Notifier(self.dsn, self._channel)
            with self._feed_lock:
                self._listening = True
        try:
            self.recover_dead()
        except StoreError as exc:  # (the heartbeat's passes try again)
            self.report.notices.append(f"could not recover the jobs of stopped workers yet: {exc}")
        self.heartbeat = Heartbeat(self._beat, self._scan, self.heartbeat_s)
        self.heartbeat.start()
        return self.report

    def on_orphans(self, recover: Orphans) -> None:
        """Sets what recovers the jobs of dead workers: called with (job id, lease epoch) of each."""
        self._recover = recover

    def recover_dead(self) -> list[str]:
        """One recovery pass now: the expired worker rows no other worker is taking, and their jobs.

        Returns:
            The ids of the worker rows recovered (and deleted).
        Raises:
            StoreError: the server refused or is away (the rows stay for a later pass).
        """
        try:
            with self._connection() as conn:
                return workers.recover_dead(conn, self._recover)
        except psycopg.Error as exc:
            self._suspect()
            raise StoreError(f"could not look for dead workers: {_reason(exc)}") from None

    def _scan(self) -> None:
        if self._pool is not None:
            self.recover_dead()

    def _beat(self) -> None:
        """Renews this worker's row; registers it again if a live worker took it for dead.

        On the session connection, not a pooled one: however busy the pool is, the beat
        does not wait for it (a worker whose threads all wait on the server is alive).
        """
        with self._session_lock:
            if self._pool is None:
                raise StoreError("the task store is closed")
            try:
                alive = workers.beat(self._session, self.worker)
            except psycopg.OperationalError:
                self._reconnect_session()  # (the server restarted, say)
                alive = workers.beat(self._session, self.worker)
            if not alive:
                # this process was stopped or cut off for longer than the row lives: its
                # leases were recovered and their tokens now refuse its late commits
                log.warning("this worker was taken for dead (its leases were recovered); it registers again")
                workers.register(self._session, self.worker)

    def close(self) -> None:
        heartbeat, self.heartbeat = self.heartbeat, None
        if heartbeat is not None:
            heartbeat.stop()
        notifier, self.notifier = self.notifier, None
        if notifier is not None:
            notifier.stop()  # (what this process committed last is still told)
        with self._feed_lock:
            feed, self._feed = self._feed, None
            self._listening = False  # (none starts after this)
        if feed is not None:
            feed.stop()
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(psycopg.Error, PoolTimeout), pool.connection(timeout=5.0) as conn:
                workers.retire(conn, self.worker)
            pool.close()
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(psycopg.Error):
                session.close()

    def _server_offset(self) -> float:
        """Server time minus local time, measured on the session connection (reconnected if lost)."""
        with self._session_lock:
            if self._pool is None:
                raise StoreError("the task store is closed")
            try:
                return self._measure()
            except psycopg.OperationalError:
                self._reconnect_session()  # (the server restarted, say: the session went with it)
                return self._measure()

    def _measure(self) -> float:
        before = time.time()
        row = self._session.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        after = time.time()
        return float(row[0]) - (before + after) / 2 if row else 0.0

    def _connect_opening(self) -> Any:
        """The session connection of :meth:`open`, waiting out a server restart (up to ``retry_s``).

        A server that says it is starting up or shutting down is restarting: a process
        opening the queue right then waits for it, as a verb does, instead of exiting.
        Any other failure (no server there, a wrong address, a refused login) is told at
        once: a mistyped ``--store`` must not hang for half a minute.

        Raises:
            StoreError: the server cannot be reached.
        """
        deadline = time.monotonic() + self.retry_s
        delay = 0.05
        restarting = False
        while True:
            try:
                return psycopg.connect(self.dsn, autocommit=True)
            except psycopg.Error as exc:
                # (no SQLSTATE comes with a failed connection: the server's FATAL message
                # says it; once seen, the refusals while it is down are the same restart)
                restarting = restarting or _RESTARTING in str(exc)
                if not restarting or time.monotonic() + delay > deadline:
                    raise StoreError(f"cannot connect to the PostgreSQL queue: {_reason(exc)}") from None
                log.info("the PostgreSQL server is restarting; connecting again in %.2f s", delay)
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _reconnect_session(self) -> None:
        """A new session (with the session lock held): the server restarted, say."""
        with contextlib.suppress(psycopg.Error):
            self._session.close()
        self._session = psycopg.connect(self.dsn, autocommit=True)

    def _ensure_session(self) -> None:
        """Takes the session back if a sign says the server may have restarted (see :meth:`_suspect`).

        Called with a working pooled connection in hand: the server is up.
        """
        if not self._session_suspect:
            return
        with self._session_lock:
            if not self._session_suspect or self._pool is None:
                return
            try:
                self._session.execute("SELECT 1")
            except psycopg.OperationalError:
                self._reconnect_session()
            self._session_suspect = False
        self.clock.expire()

    def _configure(self, conn: Any) -> None:
        """The pool made a connection: after the first ones, it replaces a lost one (or grows)."""
        if self._pool is not None:
            self._suspect()

    def _suspect(self) -> None:
        """The server may have restarted: check the session at the next verb."""
        self._session_suspect = True

    # ------------------------------------------------------------------ transactions

    def _open_pool(self) -> tuple[Any, float]:
        """The pool and how long a checkout may wait for a connection (StoreError once closed)."""
        if self._pool is None:
            raise StoreError("the task store is closed")
        return self._pool, min(5.0, self.retry_s)

    def _connection(self) -> Any:
        pool, timeout = self._open_pool()
        return pool.connection(timeout=timeout)

    def _outer(self) -> Any:
        """The connection of this thread's transaction, if it is in one, ready for a statement in it.

        A verb's transaction is in its pipeline only from its first read: a statement
        made in it from outside its view enters it first (and sends what it held).
        """
        view = getattr(self._local, "view", None)
        if view is not None:
            view.pipelined()
        return getattr(self._local, "conn", None)

    def _transaction(self) -> _Checkout:
        """A pooled connection for one transaction of this thread (see :class:`_Checkout`)."""
        return _Checkout(*self._open_pool(), self._local)

    def commit(self, fn: Callable[[PgView], Change[T]], *, durable: bool = True) -> T:
        """Runs ``fn`` in one transaction, writes its records, commits; returns its value.

        ``durable`` is accepted for the protocol: every commit here is durable (the
        server flushes its WAL before acknowledging), so :meth:`sync` has nothing to do.
        """
        self._local.after = None
        deadline = time.monotonic() + self.retry_s
        delay = 0.005
        images: Callable[[str], tuple[Any, int] | None] | None = self._image
        guess = True  # (see PgView.holder_id: until a guess is seen wrong or of no use)
        while True:
            committing = False
            view: PgView | None = None
            told: tuple[set[str] | None, set[str] | None] | None = None  # (what this commit notified)
            hold = False  # (not due: its ids go to the notifier once it committed)
            notifier = self.notifier
            try:
                with self._transaction() as conn:
                    self._ensure_session()
                    lazy = contextlib.ExitStack()  # (the pipeline, once the view enters it)
                    view = PgView(
                        conn,
                        write=True,
                        worker=self.worker.id,
                        images=images,
                        guess_keys=guess,
                        artifacts=self._artifacts,
                        pipeline=functools.partial(_enter_pipeline, lazy, conn),
                    )
                    self._local.view = view
                    try:
                        # (an autocommit connection: what runs before the pipeline's first sync
                        # is one implicit transaction, so no BEGIN is sent; see _end_writes.
                        # The view enters the pipeline at its first read; a verb that only
                        # writes one statement may never need it: see PgView.send_alone)
                        with lazy:
                            try:
                                change = fn(view)
                            except Exception:
                                # (a write it sent, say a lease, must not commit with the
                                # pipeline's closing sync: the verb made no change)
                                view.abandon()
                                if view.guessed:
                                    raise _Guessed from None  # (it may have raised on a guess)
                                if view.used_images:
                                    raise _Stale from None  # (it may have decided on an old image)
                                raise
                            guessed_id = _guessed_job(change.records, view.guessed)
                            if view.guessed and guessed_id is None:
                                raise _Guessed  # (nothing sent yet: only reads)
                            try:
                                view.apply(change.records)
                                view.validate()
                            except BaseException:
                                view.abandon()  # (writes already sent must not commit)
                                raise
                            if notifier is not None and view.changed != set():
                                told = notifier.claim(view.changed)
                                hold = told is None
                            single = told is None and not view.block and view.can_send_alone()
                            if not single:
                                try:
                                    view.pipelined()  # (the held writes: none commits before the sync)
                                except BaseException:
                                    view.abandon()
                                    raise
                            committing = True
                            if single:
                                view.send_alone()  # (its own transaction, answered: nothing left to send)
                            else:
                                # (sent with the writes; the end of the pipeline waits for all of
                                # them at once, and raises what any of them met: then none committed)
                                _end_writes(view, view.pipeline)
                                if told is not None and notifier is not None:
                                    # after the commit, in the same round trip: a transaction of
                                    # its own (implicit, ended by the pipeline's last sync), so
                                    # the listeners are told once the change is visible, and the
                                    # commit holds no notify lock while it is flushed (nor is
                                    # one sent if it failed). Only a notification of this
                                    # commit's ids alone may depend on its guessed insert.
                                    ids, held = told
                                    alone = held is not None and not held
                                    notifying.send(conn, notifier.channel, ids, if_new=guessed_id if alone else None)
                    except psycopg.Error as exc:
                        made = committing and view.wrote_all
                        if notifier is not None and told is not None:
                            # (what the notification carried is held again: all of it if
                            # this change is made, else only the other commits' ids)
                            notifier.hold(told[0] if made else told[1])
                        if not made:
                            raise
                        # the change is made: only its notification failed (the notifier's
                        # thread tries again; readers see the change at their next read)
                        log.warning("a change notification was not sent: %s", _reason(exc))
                    after = view.after_images()
                    if view.missed:
                        raise _Guessed  # (the key was held: the commit wrote nothing)
                    if view.changed_late and notifier is not None:
                        # (a job leased in one statement is known only now: the next due
                        # commit of this process tells it, or the notifier's thread soon)
                        notifier.hold(view.changed_late)
                    if hold and notifier is not None:
                        notifier.hold(view.changed)  # (within a burst: the next due commit tells)
                    self._local.after = after
                    self._remember(view.committed_images(), everything=view.changed is None)
                    return change.value
            except _Guessed:
                # the verb runs again at once, looking for the key's holder (a duplicate
                # submission, a batch, a verb that raised): what it answers then is the truth
                guess = False
                continue
            except _Stale:
                # the verb refused what this process's images said: it runs again reading
                # the rows (an answer no image ever gives, with no wait before it)
                self._forget()
                images = None
                continue
            except _RACES as exc:
                self._forget()
                if view is not None and view.checks_new_result:
                    # (a result stored for the key, or a race: either way the verb runs
                    # again, looking the result up, and that read decides)
                    raise ResultStored from None
                reason: BaseException = exc
            except _GONE as exc:
                self._forget()
                self._suspect()
                if committing:
                    raise StoreError(
                        f"the PostgreSQL server went away while committing ({_reason(exc)}); "
                        "the change may or may not have been made"
                    ) from None
                reason = exc
            except psycopg.Error as exc:
                self._forget()
                raise StoreError(f"the PostgreSQL queue refused a change: {_reason(exc)}") from None
            except BaseException:
                self._forget()  # (a verb that raised: what it read may have been stale)
                raise
            if time.monotonic() > deadline:
                raise StoreError(f"the PostgreSQL queue did not take a change in time: {_reason(reason)}")
            log.debug("retrying a transaction: %s", reason)
            time.sleep(delay)  # (a race or a restart: let the other side finish)
            delay = min(delay * 2, 0.5)

    def _image(self, job_id: str) -> tuple[Any, int] | None:
        with self._images_lock:
            return self._images.get(job_id)

    def _remember(self, images: dict[str, tuple[Any, int]], *, everything: bool) -> None:
        """Keeps the jobs a commit left (a purge: forgets every one first)."""
        with self._images_lock:
            if everything:
                self._images.clear()
            for job_id, (job, rev) in images.items():
                known = self._images.get(job_id)
                if known is None or known[1] < rev:  # (two threads' commits may end out of order)
                    self._images[job_id] = (job, rev)
            if len(self._images) > _IMAGES_MAX:
                for job_id in list(self._images)[: _IMAGES_MAX // 4]:
                    del self._images[job_id]

    def _forget(self) -> None:
        with self._images_lock:
            self._images.clear()

    def transact(self, fn: Callable[[PgView], Sequence[Record]], *, durable: bool = True) -> Sequence[Record]:
        def records(view: PgView) -> Change[Sequence[Record]]:
            made = fn(view)
            return Change(made, made)

        return self.commit(records, durable=durable)

    def read(self, fn: Callable[[PgView], T]) -> T:
        """Runs ``fn`` in a read-only, repeatable-read transaction (one consistent snapshot).

        Inside a transaction of this thread (a verb's function asking for a stored result,
        say), ``fn`` reads in that transaction instead: it sees what the verb sees, and a
        verb never holds one pooled connection while waiting for a second.
        """
        outer = self._outer()
        if outer is not None:
            return fn(PgView(outer, write=False))

        def attempt() -> T:
            with self._transaction() as conn:
                self._ensure_session()
                with conn.pipeline():
                    # (one snapshot for all of fn's statements; answered with its first read)
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    value = fn(PgView(conn, write=False))
                    conn.execute("COMMIT")  # (answered with the pipeline's end)
                return value

        return self._read_retrying(attempt)

    def _read_retrying(self, attempt: Callable[[], T]) -> T:
        """Runs a read ``attempt`` again after a lost connection, for up to ``retry_s``.

        Raises:
            StoreError: the server did not answer in time, or refused the read.
        """
        self._local.after = None
        deadline = time.monotonic() + self.retry_s
        delay = 0.005
        while True:
            try:
                return attempt()
            except _GONE as exc:
                self._suspect()
                if time.monotonic() > deadline:
                    raise StoreError(f"the PostgreSQL queue did not answer: {_reason(exc)}") from None
                log.debug("retrying a read: %s", exc)
            except psycopg.Error as exc:
                raise StoreError(f"the PostgreSQL queue refused a read: {_reason(exc)}") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def peek(self, fn: Callable[[PgView], T]) -> T:
        """:meth:`read`, or, right after a commit of this thread, what that commit left.

        A verb answers with the job it just changed (``Queue._view``): the commit's
        after-images (:meth:`PgView.after_images`) are those jobs as the database held
        them at the commit, so the first peek after it reads them instead of the server,
        provided it asks for nothing else. Anything later, or anything else, reads.
        """
        after = getattr(self._local, "after", None)
        self._local.after = None
        if after and getattr(self._local, "conn", None) is None:
            try:
                return fn(cast(PgView, _Committed(after)))
            except _NotKept:
                pass
        return self.read(fn)

    def sync(self) -> None:
        """Nothing to do: every commit was durable when it returned."""

    # ------------------------------------------------------------------ the change feed

    @property
    def feed(self) -> notifying.ChangeFeed | None:
        """The listener of the queue's channel, started the first time anyone asks for it.

        Only a reader of changes (the window, a watcher: :meth:`changes`,
        :meth:`wait_changes`) needs one: a process that only runs jobs never listens, so
        the server does not deliver it every other worker's notifications, nor does it
        wake for them. The listener connects before the first read that takes its mark,
        so that a reader's first version has one (a listener that cannot connect leaves
        readers polling until it can). None: notifications are off, or the backend is closed.
        """
        feed = self._feed
        if feed is not None or not self._listening:
            return feed
        with self._feed_lock:
            if self._feed is None and self._listening and self._channel is not None:
                feed = notifying.ChangeFeed(self.dsn, self._channel)
                feed.start()
                feed.wait_connected(1, 5.0)
                self._feed = feed
            return self._feed

    def changes(self, version: int) -> tuple[int, set[str] | None]:
        """``View.changed_since(version)``, read from the server (always: a notification may be on its way).

        The feed's mark is taken before the read and kept with the version answered, for
        :meth:`wait_changes`: a commit that read did not see notifies after it, and moves
        the mark.
        """
        feed = self.feed
        mark = feed.mark() if feed is not None else None
        now, ids = self.read(lambda view: view.changed_since(version))
        if mark is not None:
            with self._answered_lock:
                if len(self._answered) > 64:  # (a few readers at most: forget the oldest)
                    for old in sorted(self._answered)[:32]:
                        self._answered.pop(old, None)
                self._answered[now] = mark
        return now, ids

    #: (see Queue.has_change_feed: the listener's notifications end a wait)
    change_feed = True

    def wait_changes(self, version: int, timeout_s: float, stop: threading.Event | None = None) -> bool:
        """Waits until a commit may have changed jobs after ``version`` (True), or ``timeout_s`` (False).

        No query while it waits: the listener's notifications wake it. ``timeout_s`` 0
        asks without waiting (a refresher that skips the server while nothing was
        notified, at the cost of a notification's delay). When the feed cannot tell, it
        answers True: at once if ``version`` was not answered by :meth:`changes` here
        (one read makes it known); after waiting (at most ``timeout_s``) for the
        listener to connect again if it is not listening (notifications may have been
        missed meanwhile); after ``timeout_s`` without a feed (``notify=False``). ``stop``,
        once set and :meth:`interrupt_waits` called, ends the wait at once.
        """
        feed = self.feed
        if feed is None:
            return wait_out(timeout_s, stop)
        halt = stop.is_set if stop is not None else None
        with self._answered_lock:
            mark = self._answered.get(version)
        current = feed.mark()
        if current is None:
            feed.wait(None, timeout_s, halt)
            return True
        if mark is None or current != mark:
            return True
        return feed.wait(mark, timeout_s, halt)

    def interrupt_waits(self) -> None:
        """Wakes every :meth:`wait_changes` of this process, to look at its ``stop`` event."""
        feed = self.feed
        if feed is not None:
            feed.interrupt()

    def compact_now(self) -> None:
        """Nothing to fold: a purge deletes its jobs in its own transaction."""

    @contextlib.contextmanager
    def quiet(self) -> Iterator[bool]:
        yield True  # (no maintenance of ours writes files)

    # ------------------------------------------------------------------ results

    #: a success's result marked new for its key is inserted only if the key has none
    #: (PgView._update): the verb need not ask carried_result first, a round trip
    checks_new_results = True
    #: a plain lease (no filter, one lease length) is one statement (PgView.lease_next)
    leases_in_one_statement = True

    def carried_result(self, key: str) -> dict[str, Any] | None:
        """The result document stored with the success of the job holding ``key``."""

        row = self._select_one("SELECT doc::text FROM dq_results WHERE key = %s", (key,))
        if row is None:
            return None
        doc: dict[str, Any] = orjson.loads(row[0])
        return doc

    def _select_one(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        """One row of one statement, outside a transaction (one statement is its own snapshot).

        :meth:`read` for a single statement, without the round trips of a transaction
        around it: asked before every completion (:meth:`carried_result`).
        """
        outer = self._outer()
        if outer is not None:
            found: tuple[Any, ...] | None = outer.execute(sql, params).fetchone()
            return found

        def attempt() -> tuple[Any, ...] | None:
            with self._connection() as conn:
                self._ensure_session()
                row: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
                return row

        return self._read_retrying(attempt)

    def read_artifacts_with(self, reader: Callable[[str], bytes | None]) -> None:
        """Sets how a commit reads an artifact of this machine's data dir (``ref -> bytes``, None: missing).

        A success whose result refers to an artifact stores its bytes in ``dq_artifacts``
        in the same statement as the result (see Backend.carried_result).
        """
        self._artifacts = reader

    def fetch_artifact(self, ref: str) -> bytes | None:
        """The bytes of the artifact ``ref`` as the machine that made it stored them; None if not stored
        (or stored damaged: they no longer match the checksum they were stored with).

        Raises:
            StoreError: the server did not answer.
        """
        row = self._select_one("SELECT data, sha256 FROM dq_artifacts WHERE ref = %s", (ref,))
        if row is None:
            return None
        data = bytes(row[0])
        if hashlib.sha256(data).hexdigest() != row[1]:
            log.warning("the stored artifact %s does not match its checksum; not used", ref)
            return None
        return data

    def carried_keys(self) -> list[str]:
        return self.read(lambda view: [r[0] for r in view.conn.execute("SELECT key FROM dq_results").fetchall()])

    def archived_result(self, key: str) -> dict[str, Any] | None:
        return None  # (no archive: every result is in dq_results)


def _guessed_job(records: Sequence[Record], guessed: set[str]) -> str | None:
    """The id of the one new job holding the guessed key(s), whose insert checks the guess; else None.

    (None also when nothing was guessed: then nothing needs checking.)
    """
    if not guessed or len(records) != 1 or records[0].get("op") != "new":
        return None
    job = cast(Any, records[0])["job"]
    return str(job["id"]) if guessed == {job["key"]} else None


class _Guessed(Exception):
    """A verb that took a key look-up's guess (PgView.holder_id) must run again, looking."""


class _Stale(Exception):
    """A verb that read a job from this process's images raised: it runs again on the rows."""


class _NotKept(Exception):
    """A peek asked for something the last commit's after-images do not hold: it reads."""


class _Committed:
    """The view :meth:`PgBackend.peek` gives right after a commit: the jobs that commit left, nothing else."""

    archive = None  # (as PgView: every job stays in the table)

    def __init__(self, jobs: dict[str, Any]) -> None:
        self._jobs = jobs

    def job(self, job_id: str) -> Any:
        found = self._jobs.get(job_id)
        if found is None:
            raise _NotKept(job_id)
        return found

    hot = job

    def __getattr__(self, name: str) -> Any:
        raise _NotKept(name)


class _Checkout:
    """A connection from ``pool`` for one transaction, marked as this thread's (``local.conn``) while it runs.

    On the way out it leaves the connection outside any transaction (a verb or read that
    raised inside its BEGIN ... COMMIT: the pool would roll back, with a warning) and
    gives it back. ``pool.connection()`` does the checkout, and two context managers of
    ours the rest; this is all three in one, once per verb.
    """

    __slots__ = ("_conn", "_local", "_pool", "_timeout")

    def __init__(self, pool: Any, timeout: float, local: threading.local) -> None:
        self._pool = pool
        self._timeout = timeout
        self._local = local
        self._conn: Any = None

    def __enter__(self) -> Any:
        self._conn = conn = self._pool.getconn(timeout=self._timeout)
        self._local.conn = conn
        return conn

    def __exit__(self, *exc: object) -> None:
        conn = self._conn
        self._local.conn = None
        self._local.view = None  # (set by commit: its view, whose pipeline a nested read enters)
        try:
            if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
        finally:
            self._pool.putconn(conn)


def _enter_pipeline(stack: contextlib.ExitStack, conn: Any) -> Any:
    """Enters ``conn``'s pipeline for the rest of ``stack`` (a commit's: see PgView's ``pipeline``)."""
    return stack.enter_context(conn.pipeline())


def _end_writes(view: PgView, pipeline: Any) -> None:
    """Commits the pipeline's transaction without waiting for the answer (it comes with the pipeline's end).

    A verb's transaction is implicit (the statements before a sync, on an autocommit
    connection): a sync ends and commits it, one message where BEGIN and COMMIT were two
    statements. psycopg queues a sync without waiting for its answer only through its
    pipeline's ``_enqueue_sync``; without it, :meth:`~psycopg.Pipeline.sync` does the
    same and waits. A view whose statements made the transaction an explicit block
    (:attr:`PgView.block`) ends with ``COMMIT``.
    """
    if view.block:
        view.commit_block()
        return
    enqueue = getattr(pipeline, "_enqueue_sync", None)
    if enqueue is not None:
        enqueue()
    else:
        pipeline.sync()


def _reason(exc: BaseException) -> str:
    """One line saying what went wrong (never the DSN: it may hold a password)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
