"""Live changes on PostgreSQL: a commit in one process wakes another's change feed, across a server restart.

The waiting side asks the server nothing while it waits (:meth:`Queue.wait_changes`
blocks on the listener's notifications); these tests count its queries to prove it.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from desktop_queue.core import Queue
from desktop_queue.core.pg import PgBackend
from desktop_queue.core.pg.notify import EVERYTHING, PAYLOAD_MAX, payload_of

REPO = Path(__file__).resolve().parents[2]

_SUBMIT = r"""
import sys
import time
from desktop_queue.core import Queue
from desktop_queue.core.pg import PgBackend
backend = PgBackend(sys.argv[1])
queue = Queue.open(sys.argv[2], backend=backend, clock=backend.clock)
job = queue.submit("demo", {"prompt": "from another process"}).job
print(job.id, time.time(), flush=True)  # (acknowledged: the commit returned)
queue.close()
"""


def _submit_elsewhere(dsn: str, data: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _SUBMIT, dsn, str(data)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[0]


class CountingReads:
    """Counts the reads a backend makes (each is a round trip to the server)."""

    def __init__(self, backend: PgBackend) -> None:
        self.count = 0
        self._read = backend.read

        def read(fn: Any) -> Any:
            self.count += 1
            return self._read(fn)

        backend.read = read  # type: ignore[method-assign]


def _watch(queue: Queue) -> tuple[int, CountingReads]:
    version, _ = queue.changed_since(0)
    return version, CountingReads(queue.store)  # type: ignore[arg-type]


def test_a_job_submitted_by_another_process_wakes_the_feed_within_a_second(
    pg_dsn: str, tmp_path: Path, opened_queues: list[Queue]
) -> None:
    backend = PgBackend(pg_dsn)
    window = Queue.open(tmp_path / "window", backend=backend, clock=backend.clock)
    opened_queues.append(window)
    version, reads = _watch(window)
    assert not window.wait_changes(version, 0)  # nothing notified yet: no need to ask the server

    other = subprocess.Popen(
        [sys.executable, "-c", _SUBMIT, pg_dsn, str(tmp_path / "other")], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert window.wait_changes(version, 60)  # (blocks until the other process's commit is notified)
        woke_at = time.time()
        assert reads.count == 0  # it waited without asking the server
        out, _ = other.communicate(timeout=60)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(30)
    job_id, acked_at = out.split()
    # the same machine's clock in both processes: from the acknowledgement to the wake-up
    assert woke_at - float(acked_at) < 1.0
    _, ids = window.changed_since(version)
    assert ids is not None and job_id in ids


def test_notifications_resume_after_a_server_restart(own_server: Any, tmp_path: Path) -> None:
    backend = PgBackend(own_server.dsn, retry_s=60)
    window = Queue.open(tmp_path / "window", backend=backend, clock=backend.clock)
    try:
        feed = backend.feed
        assert feed is not None and feed.wait_connected(1, 10)
        own_server.restart()  # pg_ctl restart -m fast: the listener's connection is cut
        assert feed.wait_connected(2, 30), "the listener did not reconnect"
        version, reads = _watch(window)
        assert not window.wait_changes(version, 0)
        job_id = _submit_elsewhere(own_server.dsn, tmp_path / "other")
        assert window.wait_changes(version, 10)
        assert reads.count == 0
        _, ids = window.changed_since(version)
        assert ids is not None and job_id in ids
    finally:
        window.close()


def test_a_payload_names_the_changed_jobs_within_the_server_limit(pg_dsn: str) -> None:
    assert payload_of({"b", "a"}) == "a,b"
    assert payload_of(None) == EVERYTHING
    many = {f"job-{i:06d}" for i in range(2000)}  # far beyond 8000 bytes
    assert payload_of(many) == EVERYTHING
    assert len(payload_of({f"j{i}" for i in range(100)})) <= PAYLOAD_MAX
    # and the server takes the longest we send
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_notify('dq_test', %s)", ("x" * PAYLOAD_MAX,))
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SELECT pg_notify('dq_test', %s)", ("x" * 8000,))


def _told(listener: Any, timeout_s: float) -> list[str]:
    """The payloads ``listener`` received, until none came for ``timeout_s``."""
    return [n.payload for n in listener.notifies(timeout=timeout_s)]


def _next(listener: Any, timeout_s: float) -> list[str]:
    """The payload of the next notification ``listener`` receives within ``timeout_s`` (none: [])."""
    return [n.payload for n in listener.notifies(timeout=timeout_s, stop_after=1)]


def _named(payloads: list[str]) -> set[str]:
    return {job_id for payload in payloads for job_id in payload.split(",")}


@contextlib.contextmanager
def _paced(open_pg: Any, pg_dsn: str, linger_s: float) -> Iterator[tuple[Queue, Any, Any]]:
    """A queue whose notifier lingers ``linger_s``, and a connection listening to its channel."""
    queue = open_pg()
    backend = queue.store
    backend.notifier.linger_s = linger_s
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {backend._channel}")
        yield queue, backend.notifier, listener


def test_a_burst_of_commits_is_told_in_a_few_notifications_that_name_every_change(open_pg: Any, pg_dsn: str) -> None:
    """A commit after a quiet spell notifies at once; a burst at most once per linger, no change left out."""
    with _paced(open_pg, pg_dsn, 0.2) as (queue, notifier, listener):
        started = time.monotonic()
        first = queue.submit("demo", {"n": 0}).job
        assert _next(listener, 5) == [first.id]  # (its own, at once)
        changed = {first.id}
        commits = 1
        for n in range(1, 30):
            changed.add(queue.submit("demo", {"n": n}).job.id)
            lease = queue.lease("w")
            assert lease is not None
            queue.complete(lease, {"n": n})
            commits += 3
        assert notifier.flush(10)
        span = time.monotonic() - started
        told = [first.id, *_told(listener, 0.5)]
    assert _named(told) >= changed
    # (pacing: two notifications are at least a linger apart, however the burst was timed)
    assert len(told) <= span / notifier.linger_s + 1 < commits, (len(told), span)


def test_what_a_burst_held_back_is_told_when_no_commit_follows(open_pg: Any, pg_dsn: str) -> None:
    """The last commits of a burst have no later commit to carry their ids: the notifier's thread sends them."""
    with _paced(open_pg, pg_dsn, 0.3) as (queue, _notifier, listener):
        first = queue.submit("demo", {"n": 1}).job
        second = queue.submit("demo", {"n": 2}).job  # (within the linger: held back)
        assert _next(listener, 5) == [first.id]
        assert _next(listener, 10) == [second.id]


def test_a_due_commit_carries_what_earlier_commits_held_back(open_pg: Any, pg_dsn: str) -> None:
    """Held-back ids go with the next commit that is due, in its own round trip."""
    with _paced(open_pg, pg_dsn, 600) as (queue, notifier, listener):  # (the thread: after twice that)
        first = queue.submit("demo", {"n": 1}).job
        held = {queue.submit("demo", {"n": n}).job.id for n in (2, 3)}
        assert _told(listener, 0.5) == [first.id]
        notifier.linger_s = 0  # (the next commit is due)
        last = queue.submit("demo", {"n": 4}).job
        told = _next(listener, 5)
    assert told and set(told[0].split(",")) == held | {last.id}


def test_a_notification_lost_after_its_commit_is_sent_again(
    open_pg: Any, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit is made and answered; what its notification named is sent by the notifier instead."""
    from desktop_queue.core.pg import notify

    real_send = notify.send
    failures = [psycopg.OperationalError("the connection is lost")]

    def send(*args: Any, **kwargs: Any) -> None:
        if failures:
            raise failures.pop()
        real_send(*args, **kwargs)

    with _paced(open_pg, pg_dsn, 0.1) as (queue, _notifier, listener):
        monkeypatch.setattr(notify, "send", send)
        job = queue.submit("demo", {"n": 1}).job
        assert not failures  # (its own notification was the one lost)
        assert _next(listener, 10) == [job.id]


def test_closing_sends_what_a_burst_left_without_waiting_out_the_linger(open_pg: Any, pg_dsn: str) -> None:
    """What waits for the end of a spell is sent when the queue closes (the process is about to end)."""
    with _paced(open_pg, pg_dsn, 600) as (queue, _notifier, listener):
        first = queue.submit("demo", {"n": 1}).job
        second = queue.submit("demo", {"n": 2}).job  # (within the linger: held back)
        assert _told(listener, 0.5) == [first.id]
        started = time.monotonic()
        queue.close()
        assert time.monotonic() - started < 60
        assert _next(listener, 10) == [second.id]


def test_each_change_notifies_its_job_but_a_lease_renewal_alone_does_not(
    open_pg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from desktop_queue.core import SystemClock
    from desktop_queue.core.pg import notify

    sent: list[set[str] | None] = []
    real_send = notify.send

    def send(conn: Any, channel: str, ids: set[str] | None, *, if_new: str | None = None) -> None:
        sent.append(None if ids is None else set(ids))
        real_send(conn, channel, ids, if_new=if_new)

    monkeypatch.setattr(notify, "send", send)
    queue = open_pg(clock=SystemClock())
    notifier = queue.store.notifier
    job_id = queue.submit("demo", {"n": 1}).job.id
    assert notifier.flush(10)  # (else the notifier may coalesce two commits' ids into one)
    lease = queue.lease("w")
    assert lease is not None and notifier.flush(10)
    queue.heartbeat(lease)  # (renewals are many, and show nothing new)
    assert notifier.flush(10)
    queue.complete(lease, {"ok": True})
    assert notifier.flush(10)
    queue.purge_jobs([job_id])
    assert notifier.flush(10)
    assert sent == [{job_id}, {job_id}, {job_id}, None]  # submitted, leased, succeeded; a purge: everything


def test_a_watcher_hands_over_another_process_s_job_without_polling(
    pg_dsn: str, tmp_path: Path, opened_queues: list[Queue]
) -> None:
    import threading

    from desktop_queue.core.pg.watch import ChangeWatcher

    backend = PgBackend(pg_dsn)
    window = Queue.open(tmp_path / "window", backend=backend, clock=backend.clock)
    opened_queues.append(window)
    seen: list[set[str] | None] = []
    arrived = threading.Event()

    def on_change(ids: set[str] | None) -> None:
        seen.append(ids)
        arrived.set()

    watcher = ChangeWatcher(window, on_change, fallback_s=60.0)  # (no fallback read within the test)
    assert watcher.start()
    try:
        job_id = _submit_elsewhere(pg_dsn, tmp_path / "other")
        assert arrived.wait(10)
        assert watcher.reads == 1  # one read, after the notification
        assert seen[0] is not None and job_id in seen[0]
    finally:
        watcher.stop()


def test_stopping_a_watcher_interrupts_its_wait_on_the_feed(
    pg_dsn: str, tmp_path: Path, opened_queues: list[Queue]
) -> None:
    """stop() wakes a wait on the listener at once: a window closing or ``work`` ending
    does not wait out the rest of a wait that only a notification would end."""
    from desktop_queue.core.pg.watch import ChangeWatcher

    backend = PgBackend(pg_dsn)
    window = Queue.open(tmp_path / "window", backend=backend, clock=backend.clock)
    opened_queues.append(window)
    reads: list[set[str] | None] = []
    watcher = ChangeWatcher(window, reads.append, fallback_s=600.0)  # (its one wait lasts 10 minutes)
    assert watcher.start()
    before = watcher.reads
    assert watcher.stop(timeout_s=30), "the watcher still waits on the feed"
    assert watcher.reads == before and reads == []  # (ended, not woken to read)


def test_only_the_notification_commits_without_a_flush(open_pg: Any, pg_dsn: str) -> None:
    """The notification's transaction turns synchronous_commit off for itself: every change's commit keeps it on."""
    backend = PgBackend(pg_dsn, pool_size=1)
    queue = open_pg(backend=backend)
    for n in range(3):  # (each commit notifies, from the one pooled connection)
        queue.submit("demo", {"n": n})
        lease = queue.lease("w")
        assert lease is not None
        queue.complete(lease, {"n": n})
    pool = backend._pool
    assert pool is not None
    with pool.connection() as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        with conn.transaction():
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
