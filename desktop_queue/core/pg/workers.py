"""Worker rows: each process with the PostgreSQL queue open says it lives, and the live ones recover the dead.

A process registers a row in ``dq_workers`` when it opens the backend (its host, pid,
start) and renews the row's ``heartbeat_at`` every few seconds from a thread of its own
(:class:`Heartbeat`); each lease it takes names the row (``dq_jobs.worker_id``). Both
times are the server's ``now()``, so machines whose clocks disagree agree on who is late.

A row not renewed for its ``ttl_s`` (each worker's own, in its row) belongs to a process that died, was stopped (``SIGSTOP``,
a laptop lid) or lost the server: whichever live worker notices first takes the row with
``FOR UPDATE SKIP LOCKED`` (a second one passes over it rather than waiting), recovers the
jobs it still holds through the queue's reconciliation, and deletes the row in the same
transaction, so each dead worker is recovered once. A worker that comes back finds its
row gone, registers again, and its old leases are refused by their tokens. A live
worker's jobs, on whatever host, are never touched: only the age of its row counts, not
whether another machine can see its process.

procrastinate's ``procrastinate_workers`` table is the model of the idea.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from desktop_queue.core.backend import Orphans

log = logging.getLogger(__name__)

#: how often a worker renews its row, by default (seconds)
HEARTBEAT_S = 5.0
#: how old a row may get before its worker counts as dead, by default (seconds): several
#: heartbeats, so a busy server or a short stall costs no one its jobs
WORKER_TTL_S = 30.0

# A row is dead once it went ttl_s unrenewed *while the server was up*: a worker cannot
# renew while the server restarts, so the time before the server's start does not count
# (after a long outage every live worker gets ttl_s to beat again before anyone judges
# it). A row a closing worker expired on purpose ('-infinity') is dead at once.
_DEAD = (
    "(heartbeat_at = '-infinity'"
    " OR greatest(heartbeat_at, pg_postmaster_start_time()) < now() - make_interval(secs => ttl_s))"
)


@dataclass(frozen=True)
class WorkerId:
    """Who a worker row names: ``id`` is unique per open, ``host`` and ``pid`` are for people."""

    host: str
    pid: int
    id: str = field(default="")
    #: how long its row may go unrenewed before it counts as dead (seconds)
    ttl_s: float = WORKER_TTL_S

    @classmethod
    def here(cls, host: str | None = None, ttl_s: float = WORKER_TTL_S) -> WorkerId:
        the_host = host or socket.gethostname().split(".")[0]
        pid = os.getpid()
        return cls(the_host, pid, f"{the_host}/{pid}/{secrets.token_hex(4)}", ttl_s)


def register(conn: Any, worker: WorkerId) -> None:
    """Inserts (or, after its recovery, inserts again) the row of ``worker``; ``conn`` commits."""
    conn.execute(
        "INSERT INTO dq_workers (id, host, pid, ttl_s) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()",
        (worker.id, worker.host, worker.pid, worker.ttl_s),
    )


def beat(conn: Any, worker: WorkerId) -> bool:
    """Renews the row of ``worker``; False when it was gone (recovered as dead: register again)."""
    done = conn.execute("UPDATE dq_workers SET heartbeat_at = now() WHERE id = %s", (worker.id,))
    return bool(done.rowcount == 1)


def retire(conn: Any, worker: WorkerId) -> None:
    """The worker closes: its row goes, or, while it still holds leases, expires at once.

    A lease left running by a closing process (a script that stopped mid-job) is then
    recovered by the next live worker, as the first opener of the JSON store would.
    """
    held = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM dq_jobs WHERE worker_id = %s AND state = 'running')", (worker.id,)
    ).fetchone()
    if held and held[0]:
        conn.execute("UPDATE dq_workers SET heartbeat_at = '-infinity' WHERE id = %s", (worker.id,))
    else:
        conn.execute("DELETE FROM dq_workers WHERE id = %s", (worker.id,))


def others_alive(conn: Any, worker: WorkerId) -> bool:
    """Whether another worker's row is fresh (``OpenReport.first`` is the opposite)."""
    row = conn.execute(
        f"SELECT EXISTS (SELECT 1 FROM dq_workers WHERE id <> %s AND NOT {_DEAD})",
        (worker.id,),
    ).fetchone()
    return bool(row and row[0])


def recover_dead(conn: Any, recover: Orphans | None) -> list[str]:
    """Takes the expired worker rows no one else is taking, recovers their jobs, deletes them.

    ``conn`` is a connection of its own, not in a transaction: the rows stay locked (and
    other workers pass over them) while ``recover`` commits each job on other
    connections; the deletion commits only once that returned. If ``recover`` raises,
    nothing is deleted and the rows are taken again later (each job's reconciliation
    changes it only while the lease it saw is still current, so nothing is done twice).

    Returns:
        The ids of the worker rows recovered.
    """
    with conn.transaction():
        rows = conn.execute(f"SELECT id FROM dq_workers WHERE {_DEAD} ORDER BY id FOR UPDATE SKIP LOCKED").fetchall()
        dead = [str(r[0]) for r in rows]
        if not dead:
            return []
        jobs = conn.execute(
            "SELECT id, coalesce((doc->>'lease_epoch')::bigint, 0) FROM dq_jobs"
            " WHERE state = 'running' AND worker_id = ANY(%s) ORDER BY seq",
            (dead,),
        ).fetchall()
        if jobs:
            log.info("recovering %d job(s) of %d worker(s) whose heartbeat stopped", len(jobs), len(dead))
            if recover is not None:
                recover([(str(j[0]), int(j[1])) for j in jobs])
        conn.execute("DELETE FROM dq_workers WHERE id = ANY(%s)", (dead,))
    return dead


class Heartbeat:
    """The thread that renews this worker's row and looks for dead workers, every ``interval_s``.

    Recovery runs on a thread of its own (a provider's lookup may take a while, and the
    heartbeat must not wait for it), one pass at a time.

    Args:
        beat: renews the row (raises what the server does; the next beat tries again).
        scan: one recovery pass.
        interval_s: seconds between beats.
    """

    def __init__(self, beat: Callable[[], None], scan: Callable[[], object], interval_s: float) -> None:
        self._beat = beat
        self._scan = scan
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._beats = 0
        self._scanning: threading.Thread | None = None
        self._thread = threading.Thread(target=self._run, name="dq-pg-heartbeat", daemon=True)

    @property
    def beats(self) -> int:
        """How many beats went through since the start."""
        with self._cond:
            return self._beats

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops beating; waits for the thread, and for a recovery pass under way."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        scanning = self._scanning
        if scanning is not None:
            scanning.join(60)

    def wait_beats(self, count: int, timeout_s: float) -> bool:
        """Waits until ``count`` beats went through (False: not within ``timeout_s``)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._beats >= count, timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._beat()
            except Exception as exc:  # (the server is away: the next beat tries again)
                log.debug("worker heartbeat failed: %s", type(exc).__name__)
                continue
            with self._cond:
                self._beats += 1
                self._cond.notify_all()
            if self._scanning is None or not self._scanning.is_alive():
                self._scanning = threading.Thread(target=self._scan_once, name="dq-pg-recover", daemon=True)
                self._scanning.start()

    def _scan_once(self) -> None:
        if self._stop.is_set():
            return
        try:
            self._scan()
        except Exception as exc:  # (the rows stay; the next pass takes them)
            log.warning("recovering dead workers failed: %s", type(exc).__name__)
