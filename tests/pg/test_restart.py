"""A server restart mid-run (``pg_ctl restart -m fast``): no acknowledged job is lost, the pool reconnects."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from desktop_queue.core import FakeClock, Queue, RetryPolicy, State
from desktop_queue.core.errors import StoreError
from desktop_queue.core.pg import PgBackend


@pytest.fixture
def restart_queue(own_server: Any, tmp_path: Path, clock: FakeClock) -> Iterator[Queue]:
    queue = Queue.open(
        tmp_path / "data",
        backend=PgBackend(own_server.dsn, retry_s=60),
        clock=clock,
        policy=RetryPolicy(lease_s=60),
        rng=random.Random(1),
    )
    try:
        yield queue
    finally:
        queue.close()


def test_a_restart_mid_run_loses_no_acknowledged_job(restart_queue: Queue, own_server: Any, clock: FakeClock) -> None:
    queue = restart_queue
    acked = [r.job.id for r in queue.submit_many("demo", [{"before": i} for i in range(30)])]
    refused: list[str] = []  # submissions told "failed": they need not exist
    worker_errors: list[str] = []
    halfway = threading.Event()
    restarted = threading.Event()
    submitting_done = threading.Event()
    done: list[str] = []

    def submitter() -> None:
        halfway.wait(60)
        for i in range(60):
            if i == 10:
                restarted.wait(60)  # some submissions before the restart returns, some after
            try:
                acked.append(queue.submit("demo", {"during": i}).job.id)
            except StoreError as exc:
                refused.append(str(exc))
        submitting_done.set()

    def worker() -> None:
        while True:
            try:
                lease = queue.lease("w")
                if lease is None:
                    if submitting_done.is_set():
                        return
                    continue
                queue.complete(lease, {"ok": lease.job_id})
                done.append(lease.job_id)
            except StoreError as exc:  # a commit cut by the restart: said, never silent
                worker_errors.append(str(exc))
            if len(done) == 10:
                halfway.set()

    threads = [threading.Thread(target=submitter), threading.Thread(target=worker)]
    for t in threads:
        t.start()
    assert halfway.wait(60)
    own_server.restart()  # every session cut; the server comes back
    restarted.set()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)

    # a lease whose commit the restart cut is lost with its holder: it expires, and runs again
    clock.advance(61)
    queue.reap()
    while (lease := queue.lease("after")) is not None:
        queue.complete(lease, {"ok": lease.job_id})

    assert len(acked) + len(refused) == 90
    assert len(acked) >= 80  # the pool reconnected: nearly every submission went through
    for job_id in acked:
        assert queue.get(job_id).state == State.SUCCEEDED
    with psycopg.connect(own_server.dsn) as conn:
        row = conn.execute("SELECT count(*) FROM dq_results").fetchone()
    assert row is not None and row[0] >= len(acked)
    assert all("PostgreSQL" in e for e in worker_errors + refused)


class _Retrying(logging.Handler):
    """Sets ``seen`` once the backend says it is retrying (the server is down, the verb waits)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("retrying"):
            self.seen.set()


def test_a_verb_waits_out_a_short_outage(restart_queue: Queue, own_server: Any) -> None:
    job = restart_queue.submit("demo", {"n": 1}).job
    own_server.stop(remove=False)
    watch = _Retrying()
    logger = logging.getLogger("desktop_queue.core.pg.backend")
    logger.addHandler(watch)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    answers: list[str] = []
    reader = threading.Thread(target=lambda: answers.append(restart_queue.get(job.id).state))
    try:
        reader.start()
        assert watch.seen.wait(30)  # the server is down and the verb keeps trying...
        own_server.start()  # ...until it is back
        reader.join(60)
    finally:
        logger.removeHandler(watch)
        logger.setLevel(level)
    assert answers == [State.QUEUED]
    assert restart_queue.submit("demo", {"n": 2}).duplicate is False


def test_after_a_restart_a_new_opener_is_not_taken_for_the_first(own_server: Any, tmp_path: Path) -> None:
    """The open lock dies with the server's sessions; a running queue takes it back, so a
    process opening later does not reconcile (requeue) the jobs that queue still runs."""
    backend = PgBackend(own_server.dsn)
    queue = Queue.open(tmp_path / "a", backend=backend, clock=backend.clock)
    try:
        assert queue.report.first
        own_server.restart()
        queue.submit("demo", {"n": 1})  # its commit finds the server gone, and retries
        queue.submit("demo", {"n": 2})  # (its clock reading takes the session back)
        later = PgBackend(own_server.dsn)
        try:
            assert later.open().first is False
        finally:
            later.close()
    finally:
        queue.close()


def test_opening_while_the_server_restarts_waits_for_it(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a worker started as the server restarts (pg_ctl restart) is told "the database system
    # is shutting down", then finds no server, then one starting up: it waits, as a verb does
    real = psycopg.connect
    said = [
        'connection to server at "10.9.0.1", port 5432 failed: FATAL:  the database system is shutting down',
        'connection to server at "10.9.0.1", port 5432 failed: Connection refused',
        'connection to server at "10.9.0.1", port 5432 failed: FATAL:  the database system is starting up',
    ]
    tries: list[str] = []

    def connect(*args: Any, **kwargs: Any) -> Any:
        tries.append("try")
        if said:
            raise psycopg.OperationalError(f"connection failed: {said.pop(0)}")
        return real(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(psycopg, "connect", connect)
        queue = Queue.open(tmp_path / "data", backend=PgBackend(pg_dsn, retry_s=10))
    try:
        assert len(tries) == 4
        assert queue.submit("demo", {"n": 1}).job.state == State.QUEUED
    finally:
        queue.close()


def test_opening_with_no_server_there_says_so_at_once(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no sign of a restart: a wrong address or a server that is down is told without waiting
    tries: list[str] = []

    def connect(*args: Any, **kwargs: Any) -> Any:
        tries.append("try")
        raise psycopg.OperationalError(
            'connection failed: connection to server at "10.9.0.1" failed: Connection refused'
        )

    with monkeypatch.context() as patched, pytest.raises(StoreError, match="cannot connect to the PostgreSQL queue"):
        patched.setattr(psycopg, "connect", connect)
        Queue.open(tmp_path / "data", backend=PgBackend(pg_dsn, retry_s=10))
    assert tries == ["try"]
