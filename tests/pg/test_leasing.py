"""Leasing on PostgreSQL: ``FOR UPDATE SKIP LOCKED`` hands each job to one worker, and none waits."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import orjson
import psycopg

from desktop_queue.core import FakeClock, Queue, State, SystemClock
from desktop_queue.core.pg.view import PgView

REPO = Path(__file__).resolve().parents[2]


def test_a_job_locked_by_one_transaction_is_passed_over_not_waited_for(
    open_pg: Callable[..., Queue], pg_dsn: str, clock: FakeClock
) -> None:
    queue = open_pg()
    first = queue.submit("demo", {"n": 1}).job
    second = queue.submit("demo", {"n": 2}).job
    with psycopg.connect(pg_dsn) as conn:
        # another worker's lease transaction, still open, holding the first job
        held = PgView(conn, write=True).runnable("background", clock.now())
        assert held is not None and held["id"] == first.id
        lease = queue.lease("w2")  # would block until the other commits without SKIP LOCKED
        assert lease is not None and lease.job_id == second.id
        assert queue.lease("w3") is None  # the only other job is locked: none, at once
        conn.rollback()
    again = queue.lease("w3")
    assert again is not None and again.job_id == first.id


def test_two_threads_lease_every_job_exactly_once(open_pg: Callable[..., Queue]) -> None:
    n = 120
    submitter = open_pg()
    ids = {r.job.id for r in submitter.submit_many("demo", [{"i": i} for i in range(n)])}
    workers = [open_pg() for _ in range(2)]  # two pools: two connections, as two processes would have
    got: list[list[str]] = [[], []]
    epochs: list[int] = []
    barrier = threading.Barrier(2)
    lock = threading.Lock()

    def work(slot: int) -> None:
        barrier.wait()
        queue = workers[slot]
        while (lease := queue.lease(f"w{slot}")) is not None:
            got[slot].append(lease.job_id)
            with lock:
                epochs.append(lease.epoch)
            queue.complete(lease, {"by": slot})

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert sorted(got[0] + got[1]) == sorted(ids)  # every job, none twice
    assert not set(got[0]) & set(got[1])
    assert len(set(epochs)) == n  # every lease its own epoch
    assert submitter.counts()[State.SUCCEEDED] == n
    for job_id in ids:
        job = submitter.get(job_id)
        assert job.attempts == 1
        assert [e.type for e in job.events].count("leased") == 1


_WORKER = r"""
import sys, orjson
from desktop_queue.core import Queue, RetryPolicy
from desktop_queue.core.pg import PgBackend
dsn, data_dir, tag = sys.argv[1], sys.argv[2], sys.argv[3]
backend = PgBackend(dsn)
q = Queue.open(data_dir, policy=RetryPolicy(lease_s=3600), backend=backend, clock=backend.clock)
print("ready", flush=True)
sys.stdin.readline()
leased = []
while (lease := q.lease(tag)) is not None:
    leased.append(lease.job_id)
    q.complete(lease, {"by": tag})
q.close()
print(orjson.dumps(leased).decode(), flush=True)
"""


def test_two_processes_run_every_job_exactly_once(open_pg: Callable[..., Queue], pg_dsn: str, tmp_path: Path) -> None:
    n = 150
    queue = open_pg(clock=SystemClock())  # (the workers' clock is the server's: real time)
    ids = {r.job.id for r in queue.submit_many("demo", [{"i": i} for i in range(n)])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, pg_dsn, str(tmp_path / f"data{i}"), f"p{i}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for i in range(2)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:  # both start together: they race for every job
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        runs = [orjson.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs)
    assert sorted(runs[0] + runs[1]) == sorted(ids)
    assert queue.counts()[State.SUCCEEDED] == n


def test_an_expired_lease_is_reaped_by_another_worker(open_pg: Callable[..., Queue], clock: FakeClock) -> None:
    queue, other = open_pg(), open_pg()
    job = queue.submit("demo", {"n": 1}, max_attempts=3).job
    lost = queue.lease("dies", lease_s=30)
    assert lost is not None
    clock.advance(31)
    assert other.reap() == [job.id]
    taken = other.lease("lives")
    assert taken is not None and taken.job_id == job.id and taken.epoch > lost.epoch
    events = [e.type for e in other.get(job.id).events]
    assert events[-2:] == ["lease_expired", "leased"]


def _row(pg_dsn: str, job_id: str) -> tuple[dict[str, object], list[dict[str, object]]]:
    """The job's document and its events, as the database holds them."""
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT doc::text, events::text FROM dq_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return orjson.loads(row[0]), orjson.loads(row[1])


def _lease_of(before: dict[str, object], after: dict[str, object]) -> dict[str, object]:
    """What a lease changed in a job's document, its token and epoch (unique to each lease) aside."""
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    assert changed.pop("lease_token") and changed.pop("lease_epoch")
    return changed


def test_a_plain_lease_in_one_statement_writes_what_the_scanning_lease_writes(
    open_pg: Callable[..., Queue], pg_dsn: str, clock: FakeClock
) -> None:
    # a plain lease (no filter) is one statement that fills in the job's counts itself
    # (PgView.lease_next); a filtered one scans and writes the record the verb made. A job
    # that has had an attempt already shows that the counts are the job's, plus one
    queue = open_pg()
    a = queue.submit("demo", {"n": 1}, max_attempts=5).job
    b = queue.submit("demo", {"n": 2}, max_attempts=5).job
    for _ in (a, b):  # an attempt each, lost: both queued again with one attempt counted
        assert queue.lease("dies", lease_s=30, accept=lambda j: True) is not None
    clock.advance(31)
    assert sorted(queue.reap()) == sorted([a.id, b.id])
    before = {j: _row(pg_dsn, j) for j in (a.id, b.id)}

    plain = queue.lease("w", lease_s=60)  # one statement
    scanned = queue.lease("w", lease_s=60, accept=lambda j: True)  # the scan, then the record
    assert plain is not None and scanned is not None
    assert {plain.job_id, scanned.job_id} == {a.id, b.id}
    assert plain.epoch < scanned.epoch and plain.attempt == scanned.attempt == 2
    made = {}
    for lease in (plain, scanned):
        doc, events = _row(pg_dsn, lease.job_id)
        old_doc, old_events = before[lease.job_id]
        assert doc["lease_token"] == lease.token and doc["lease_epoch"] == lease.epoch
        assert doc["attempts"] == 2 and doc["total_attempts"] == 2
        assert events[: len(old_events)] == old_events
        (leased,) = events[len(old_events) :]
        assert leased["epoch"] == lease.epoch and leased["attempt"] == 2
        made[lease.job_id] = (_lease_of(old_doc, doc), {k: v for k, v in leased.items() if k != "epoch"})
        # what the verb answers is the job as the database now holds it
        assert queue.get(lease.job_id) == lease.job
        assert [e.type for e in lease.job.events][-1] == "leased"
    assert made[plain.job_id] == made[scanned.job_id]


def test_a_plain_lease_reaps_an_expired_lease_before_it_takes_a_job(
    open_pg: Callable[..., Queue], clock: FakeClock
) -> None:
    # the statement of a plain lease writes nothing while a lease has expired: the verb then
    # leases the usual way, which reaps it in its commit
    queue = open_pg()
    job = queue.submit("demo", {"n": 1}, max_attempts=3).job
    lost = queue.lease("dies", lease_s=30)
    assert lost is not None
    clock.advance(31)
    other = queue.submit("demo", {"n": 2}).job
    taken = queue.lease("lives", lease_s=30)
    assert taken is not None and taken.job_id == other.id  # (the reaped job is not leased in its own reap)
    assert [e.type for e in queue.get(job.id).events][-1] == "lease_expired"
    assert queue.get(job.id).state == State.QUEUED
    again = queue.lease("lives", lease_s=30)
    assert again is not None and again.job_id == job.id and again.attempt == 2
    assert queue.lease("lives") is None


def test_a_kept_plain_lease_is_never_reaped_by_its_own_process(open_pg: Callable[..., Queue], clock: FakeClock) -> None:
    queue = open_pg()
    job = queue.submit("demo", {"n": 1}).job
    kept = queue.lease("w", lease_s=30, kept=True)
    assert kept is not None and kept.job_id == job.id
    clock.advance(31)
    assert queue.lease("w") is None  # (expired, but this process renews it: not lost)
    assert queue.get(job.id).state == State.RUNNING
    queue.unkeep(kept)


def test_the_expired_lease_check_skips_finished_jobs_once_it_has_seen_them(
    open_pg: Callable[..., Queue], pg_dsn: str, clock: FakeClock
) -> None:
    # Between two runs of autovacuum the partial index on running jobs' expiries still
    # holds the old version of every job leased and finished since, with its past expiry.
    # Every lease asks that index whether a lease has expired: the check must mark what
    # it finds dead, so that the next lease passes over it without reading the heap
    # again. (A bitmap scan marks nothing: each lease read every such job's page again,
    # and a worker slowed down as its queue's history grew: 500 leases/s down to 200
    # within three minutes on a new server whose autovacuum had not come round yet.)
    from desktop_queue.core.pg import view

    queue = open_pg()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE dq_jobs SET (autovacuum_enabled = false)")
    finished = 600
    for i in range(finished):
        queue.submit("demo", {"i": i})
        lease = queue.lease("w", lease_s=30)
        assert lease is not None
        queue.complete(lease, {"i": i})
    clock.advance(3600)  # every old version's expiry is now in the past
    now = repr(float(clock.now()))
    statement = view._EXPIRED.replace("%s", "$1")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for mode in ("force_custom_plan", "force_generic_plan"):  # (psycopg prepares after 5 uses)
            conn.execute(f"SET plan_cache_mode = {mode}")
            conn.execute("DEALLOCATE ALL")
            conn.execute(f"PREPARE expired(float8) AS {statement}")
            blocks = []
            for _ in range(3):
                plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE expired({now})").fetchone()
                assert plan is not None
                blocks.append(plan[0][0]["Plan"]["Shared Hit Blocks"] + plan[0][0]["Plan"]["Shared Read Blocks"])
            assert conn.execute(f"EXECUTE expired({now})").fetchone() == ([],)
            # a heap page holds a few jobs: reading them again would be well over a hundred
            assert max(blocks[1:]) <= finished // 40, (mode, blocks)
