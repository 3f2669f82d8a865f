"""Live changes on PostgreSQL: commits ``NOTIFY`` the queue's channel, and a listener wakes whoever waits.

Every commit that changes jobs is told on the queue's channel (one per schema:
:func:`channel_of`), after it committed, so a notification is delivered only once its
change is visible. :class:`Notifier` paces them: a commit after a quiet spell notifies in
its own round trip, the commits of a burst share one notification per 200 ms. The
payload is the changed job ids, comma-separated, or ``*`` (a purge, or more ids than fit
the server's 8000-byte payload limit): a hint for whoever wants it, never the record of
what changed (``changed_since`` still reads that from the table).

:class:`ChangeFeed` holds one ``LISTEN`` connection per process on a thread of its own.
Each notification, and each time the connection is lost or made again (notifications
sent meanwhile are lost), moves its :meth:`~ChangeFeed.mark` on: a reader that took
the mark *before* reading the table knows, while the mark has not moved, that nothing
was committed since its read, and need not ask the server again.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

#: the server refuses longer payloads (8000 bytes); this leaves room
PAYLOAD_MAX = 7900
#: what a payload says when it cannot list the ids: every job may have changed
EVERYTHING = "*"
#: the least time between two notifications of one busy process (:class:`Notifier`).
#: Every notification wakes every listener on the queue (each window, each idle worker),
#: and costs its sender a statement and the server a transaction: the queue sends one
#: per linger per busy process, so it must be long beside a commit, however many workers
#: there are. A burst's later commits are told at most this late (its last ones at most
#: twice this), well within the second a window on another machine has to show a change
#: in; the first commit after a quiet spell is told at once.
LINGER_S = 0.2


def channel_of(conn: Any) -> str:
    """The notification channel of the queue in ``conn``'s current schema (at most 63 bytes)."""
    row = conn.execute("SELECT 'dq_changes_' || substr(md5(current_schema()), 1, 16)").fetchone()
    return str(row[0]) if row else "dq_changes"


def payload_of(ids: set[str] | None) -> str:
    """The payload naming ``ids`` (None: everything), within the server's limit."""
    if ids is None:
        return EVERYTHING
    text = ",".join(sorted(ids))
    return text if len(text.encode()) <= PAYLOAD_MAX else EVERYTHING


#: a notification alone in its transaction (as every caller sends it: after the commit of
#: the change it tells of, or from the notifier's autocommit connection): that transaction
#: changes no data, yet NOTIFY gives it a transaction id, so it writes a commit record, and
#: with ``synchronous_commit`` on it would wait for a WAL flush while holding the server's
#: notify lock, one notifying transaction after another. Its commit is made asynchronous
#: (``set_config(..., true)``: that transaction only, the session keeps ``on``): a
#: notification is not durable anyway (a server restart drops the queue of them), and
#: the change it tells of was flushed by its own commit before this one began.
_NOTIFY = "SELECT set_config('synchronous_commit', 'off', true), pg_notify(%s, %s)"


# the same, sent only if the job ``id`` exists once the change committed (a submission whose
# insert may have found its key held and inserted nothing: it tells no one then)
_NOTIFY_IF_NEW = _NOTIFY + " FROM dq_jobs WHERE id = %s"


def send(conn: Any, channel: str, ids: set[str] | None, *, if_new: str | None = None) -> None:
    """Notifies ``channel`` of ``ids`` in a transaction of its own on ``conn`` (delivered when it commits).

    ``conn`` is in autocommit mode, and this is the first statement after the sync that
    ended the change's transaction (its own implicit one, ended by the next sync): the transaction
    commits without waiting for the WAL flush (see :data:`_NOTIFY`). ``if_new``: the id
    of a job the change may not have inserted; nothing is sent if it did not.
    """
    if if_new is None:
        conn.execute(_NOTIFY, (channel, payload_of(ids)))
    else:
        conn.execute(_NOTIFY_IF_NEW, (channel, payload_of(ids), if_new))


class Notifier:
    """Paces this process's change notifications: a commit tells at once, a burst a few times a second.

    A commit sends its notification in its own round trip (see :func:`send`), and only
    if it is *due*: :attr:`linger_s` has passed since this process last sent one. Then
    it names the ids of the commits since (:meth:`claim`); a commit that is not due
    hands its ids over instead (:meth:`hold`), for the next due commit to carry. So a
    commit after a quiet spell is told without delay, and a busy process sends one
    notification per linger instead of a statement and a server transaction per commit.

    The ids of a burst's last commits have no next commit to carry them: a thread of
    the notifier's own sends them, on a connection of its own, once a second linger
    has passed without a due commit. In a busy process the commits carry everything
    and the thread only wakes now and then to find nothing left to send. Closing sends
    what is left at once. If this process dies before what it held back is sent, that
    wake-up is lost (readers that must not wait for the next one wait with a timeout).

    Args:
        dsn: the server (the same as the backend's).
        channel: the queue's channel (:func:`channel_of`).
        linger_s: the least time between two notifications of this process while it is busy.
        reconnect_s: the pause after a failed send before trying again.
    """

    def __init__(self, dsn: str, channel: str, *, linger_s: float = LINGER_S, reconnect_s: float = 0.5) -> None:
        self.dsn = dsn
        self.channel = channel
        self.linger_s = linger_s
        self.reconnect_s = reconnect_s
        self._cond = threading.Condition()
        self._pending: set[str] | None = set()
        self._waiting = False  # something is pending (an empty set of ids may not say so)
        self._sending = False
        self._parked = False  # the thread waits with no deadline: only a hold wakes it
        self._last = float("-inf")  # (monotonic) when this process last sent a notification
        self._stop = False
        self._conn: Any = None
        self._thread: threading.Thread | None = None

    def claim(self, ids: set[str] | None) -> tuple[set[str] | None, set[str] | None] | None:
        """Whether a commit that changed ``ids`` notifies now (None: not due; it hands them to :meth:`hold`).

        When due, what it sends (its ids and every held-back one) and the held-back part
        alone (for :meth:`hold` if the send fails), counted as sent now.
        """
        with self._cond:
            now = time.monotonic()
            if now - self._last < self.linger_s and not self._stop:
                return None
            held = self._pending if self._waiting else set()
            self._pending, self._waiting = set(), False
            self._last = now
            if ids is None or held is None:
                return None, held
            return ids | held, held

    def hold(self, ids: set[str] | None) -> None:
        """Holds ``ids`` back (None: everything) for the next due commit, or the thread.

        Those of a commit that was not due, or of a notification that was not sent. No
        ids at all hold nothing back.
        """
        if ids is not None and not ids:
            return
        with self._cond:
            if ids is None or self._pending is None:
                self._pending = None
            else:
                self._pending |= ids
            idle = not self._waiting
            self._waiting = True
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._run, name="dq-pg-notify", daemon=True)
                self._thread.start()
            elif idle and self._parked:
                # (the thread waits for something held back; one that waits out a linger
                # looks again at its deadline anyway, and is left alone: a busy process
                # holds back ids at nearly every commit)
                self._cond.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Waits until everything held back so far was sent (False: not within ``timeout_s``)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._waiting and not self._sending, timeout_s)

    def stop(self) -> None:
        """Sends what is held back, then stops."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(10)
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass

    def _take(self) -> tuple[bool, set[str] | None]:
        """Waits for held-back ids that no due commit carried within a second linger (False: stopped, none left)."""
        with self._cond:
            while True:
                if self._stop and not self._waiting:
                    return False, None
                if not self._waiting:
                    self._parked = True
                    self._cond.wait()
                    self._parked = False
                    continue
                left = self._last + 2 * self.linger_s - time.monotonic()
                if left > 0 and not self._stop:
                    self._cond.wait(left)
                    continue
                ids, self._pending, self._waiting = self._pending, set(), False
                self._sending = True
                self._last = time.monotonic()
                return True, ids

    def _run(self) -> None:
        while True:
            taken, ids = self._take()
            if not taken:
                return
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.dsn, autocommit=True)
                send(self._conn, self.channel, ids)
            except psycopg.OperationalError as exc:
                # (its connection went with a server restart, say: the ids are held again,
                # to be sent on a new one; a listener that reconnected before the commit
                # must still be told)
                log.debug("a change notification was not sent yet: %s", type(exc).__name__)
                self._conn = None
                with self._cond:
                    self._sending = False
                    stopping = self._stop
                if stopping:
                    return
                self.hold(ids)
                with self._cond:
                    self._cond.wait(self.reconnect_s)
                continue
            except psycopg.Error as exc:  # (refused by the server: sending it again would not help)
                log.warning("a change notification was not sent: %s", type(exc).__name__)
            with self._cond:
                self._sending = False
                self._cond.notify_all()


class ChangeFeed:
    """One ``LISTEN`` connection, made again whenever it is lost, and a mark that moves on each change.

    Args:
        dsn: the server (the same as the backend's, search path included).
        channel: what to listen to (:func:`channel_of`).
        reconnect_s: the pause between two failed attempts to connect.
        check_s: after this long without a notification the connection is checked with a
            query (a server gone without closing the connection is noticed then).
    """

    def __init__(self, dsn: str, channel: str, *, reconnect_s: float = 0.5, check_s: float = 30.0) -> None:
        self.dsn = dsn
        self.channel = channel
        self.reconnect_s = reconnect_s
        self.check_s = check_s
        # stop() writes here: the thread waits on the connection's socket and this pipe
        self._wake_r, self._wake_w = os.pipe()
        self._cond = threading.Condition()
        self._mark = 0
        self._connected = False
        self._connects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dq-pg-listen", daemon=True)

    # ------------------------------------------------------------------ for readers

    @property
    def connected(self) -> bool:
        """Whether the listener is listening now (else the mark says nothing: poll)."""
        with self._cond:
            return self._connected

    @property
    def connects(self) -> int:
        """How many times the listener connected (1 after the start; more after restarts)."""
        with self._cond:
            return self._connects

    def mark(self) -> int | None:
        """Where the feed is; None while it is not listening (nothing can be told from it)."""
        with self._cond:
            return self._mark if self._connected else None

    def wait(self, mark: int | None, timeout_s: float, stop: Callable[[], bool] | None = None) -> bool:
        """Waits until the mark moves past ``mark`` (True) or ``timeout_s`` passes (False).

        With ``mark`` None, waits until the feed listens (a reconnection), at most ``timeout_s``.
        ``stop`` (asked under the feed's lock) ends the wait early, once :meth:`interrupt`
        wakes it (False: nothing was told).
        """
        halt = stop or (lambda: False)
        with self._cond:
            if mark is None:
                return self._cond.wait_for(lambda: self._connected or halt(), timeout_s) and not halt()
            moved = self._cond.wait_for(lambda: not self._connected or self._mark != mark or halt(), timeout_s)
            return moved and (not self._connected or self._mark != mark)

    def interrupt(self) -> None:
        """Wakes every :meth:`wait`, to ask its ``stop`` again (a watcher that stops)."""
        with self._cond:
            self._cond.notify_all()

    def wait_connected(self, connects: int, timeout_s: float) -> bool:
        """Waits until the listener has connected ``connects`` times and listens."""
        with self._cond:
            return self._cond.wait_for(lambda: self._connected and self._connects >= connects, timeout_s)

    # ------------------------------------------------------------------ the thread

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(10)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _moved(self, *, connected: bool | None = None) -> None:
        with self._cond:
            self._mark += 1
            if connected is not None:
                self._connected = connected
                self._connects += 1 if connected else 0
            self._cond.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    # (anything sent while no one listened is lost: readers look again)
                    self._moved(connected=True)
                    while not self._stop.is_set():
                        ready, _, _ = select.select([conn.fileno(), self._wake_r], [], [], self.check_s)
                        if self._wake_r in ready:
                            break
                        if not ready:
                            conn.execute("SELECT 1")  # (quiet for long: is the server still there?)
                            continue
                        # (what arrived, without waiting; a lost connection raises here)
                        if list(conn.notifies(timeout=0)):  # (all of them: a burst moves the mark once)
                            self._moved()
            except psycopg.Error as exc:
                log.debug("the change listener lost the server: %s", type(exc).__name__)
            finally:
                with self._cond:
                    if self._connected:
                        self._connected = False
                        self._mark += 1
                        self._cond.notify_all()
            self._stop.wait(self.reconnect_s)
