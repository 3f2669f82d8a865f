"""Per-worker recovery on PostgreSQL: a worker's leases are recovered when its heartbeat row expires.

Workers are real processes (another "host" is a process whose row names another host);
the live ones are queues of this test process with short heartbeats. Leases here last
ten minutes, so only the worker rows can explain a job coming back.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from desktop_queue.core import Queue, RetryPolicy, State, SystemClock
from desktop_queue.core.pg import PgBackend
from desktop_queue.core.reconcile import reconcile_jobs

REPO = Path(__file__).resolve().parents[2]
HEARTBEAT_S = 0.2
TTL_S = 1.5
LEASE_S = 600.0

# a worker: leases N jobs, says so, then obeys its stdin
_WORKER = r"""
import sys
from desktop_queue.core import Queue, RetryPolicy, StaleLease
from desktop_queue.core.pg import PgBackend
dsn, data, host, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
backend = PgBackend(dsn, host=host, heartbeat_s=float(sys.argv[5]), worker_ttl_s=float(sys.argv[6]))
queue = Queue.open(data, backend=backend, clock=backend.clock, policy=RetryPolicy(lease_s=float(sys.argv[7])))
leases = [queue.lease(host) for _ in range(count)]
print("leased", backend.worker.id, *[lease.job_id for lease in leases], flush=True)
for line in sys.stdin:
    command = line.strip()
    if command == "resume":
        # as the runtime does after a suspension: renew before anything else; only a
        # renewed lease goes on to the (paid) call and its result
        beats = backend.heartbeat.beats
        backend.heartbeat.wait_beats(beats + 2, 30)  # (its row is back before it answers)
        for lease in leases:
            try:
                queue.heartbeat(lease)
            except StaleLease:
                print("stale", lease.job_id, flush=True)
                try:
                    queue.complete(lease, {"by": host, "late": True})
                    print("late-result-taken", lease.job_id, flush=True)
                except StaleLease:
                    print("late-result-refused", lease.job_id, flush=True)
                continue
            print("paid", lease.job_id, flush=True)
            queue.complete(lease, {"by": host})
    elif command == "complete":
        for lease in leases:
            queue.complete(lease, {"by": host})
            print("completed", lease.job_id, flush=True)
    print("done", flush=True)
queue.close()
"""


class Worker:
    """A worker process on ``host`` holding ``count`` leases."""

    def __init__(self, dsn: str, data: Path, host: str, count: int) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WORKER,
                dsn,
                str(data),
                host,
                str(count),
                str(HEARTBEAT_S),
                str(TTL_S),
                str(LEASE_S),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self._buf = b""
        words = self.line()
        assert words[0] == "leased", words
        self.id = words[1]
        self.jobs = words[2:]

    def line(self, timeout_s: float = 60.0) -> list[str]:
        """The next line it prints, split ([] once it ended)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "the worker said nothing in time"
            chunk = os.read(fd, 4096)
            if not chunk:
                return []
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode().split()

    def say(self, command: str) -> list[list[str]]:
        """Sends ``command``; the lines it answers, up to ``done``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        lines = []
        while (words := self.line()) != ["done"]:
            assert words, "the worker ended"
            lines.append(words)
        return lines

    def end(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


@pytest.fixture
def spawn(pg_dsn: str, tmp_path: Path) -> Iterator[Callable[[str, int], Worker]]:
    started: list[Worker] = []

    def _spawn(host: str, count: int) -> Worker:
        worker = Worker(pg_dsn, tmp_path / host, host, count)
        started.append(worker)
        return worker

    yield _spawn
    for worker in started:
        if worker.proc.poll() is None:
            os.kill(worker.proc.pid, signal.SIGCONT)  # (a test that failed while it was stopped)
        worker.end()


class Live:
    """A live worker of this process: a queue whose recoveries are counted."""

    def __init__(self, queue: Queue, done: threading.Event | None = None) -> None:
        self.queue = queue
        self.backend: PgBackend = queue.store  # type: ignore[assignment]
        self.recovered: list[str] = []
        self.done = done or threading.Event()
        self.backend.on_orphans(self._recover)

    def _recover(self, jobs: list[tuple[str, int]]) -> None:
        reconcile_jobs(self.queue, jobs)
        self.recovered.extend(job_id for job_id, _ in jobs)
        self.done.set()


@pytest.fixture
def live(open_pg: Callable[..., Queue], pg_dsn: str) -> Callable[..., Live]:
    def _live(host: str, done: threading.Event | None = None) -> Live:
        backend = PgBackend(pg_dsn, host=host, heartbeat_s=HEARTBEAT_S, worker_ttl_s=TTL_S)
        return Live(open_pg(backend=backend, clock=backend.clock, policy=RetryPolicy(lease_s=LEASE_S)), done)

    return _live


def _rows(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        return {r[0]: r[1] for r in conn.execute("SELECT id, host FROM dq_workers").fetchall()}


def _row_after_recovery(dsn: str, worker_id: str) -> bool:
    """Whether the row of ``worker_id`` is there, once a recovery holding it has committed (it waits for it)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT 1 FROM dq_workers WHERE id = %s FOR UPDATE", (worker_id,)).fetchone() is not None


def _event_types(queue: Queue, job_id: str) -> list[str]:
    return [e.type for e in queue.get(job_id).events]


def test_a_live_worker_on_another_host_keeps_its_jobs_when_a_process_opens(
    open_pg: Callable[..., Queue], live: Callable[..., Live], spawn: Callable[[str, int], Worker], pg_dsn: str
) -> None:
    submitter = open_pg(clock=SystemClock())  # (the workers run on the server's clock: real time)
    ids = [submitter.submit("demo", {"n": i}).job.id for i in range(2)]
    other = spawn("otherhost", 2)
    assert sorted(other.jobs) == sorted(ids)
    epochs = {i: submitter.get(i).lease_epoch for i in ids}

    newcomer = live("here")
    assert not newcomer.queue.report.first  # another worker is alive: no one is "first"
    # many heartbeat windows later (the newcomer looked for dead workers at each beat) ...
    assert newcomer.backend.heartbeat is not None
    assert newcomer.backend.heartbeat.wait_beats(int(3 * TTL_S / HEARTBEAT_S), 60)
    # ... the other host's jobs are still its own, under the leases it took
    assert newcomer.recovered == [] and newcomer.queue.reconciled == []
    for job_id in ids:
        job = newcomer.queue.get(job_id)
        assert job.state == State.RUNNING and job.lease_epoch == epochs[job_id]
    assert _rows(pg_dsn)[other.id] == "otherhost"
    # and they are still good: its results are taken
    assert sorted(w[1] for w in other.say("complete")) == sorted(ids)
    assert all(newcomer.queue.get(i).state == State.SUCCEEDED for i in ids)


def test_a_killed_workers_jobs_are_recovered_once_by_one_of_two_racing_workers(
    open_pg: Callable[..., Queue], live: Callable[..., Live], spawn: Callable[[str, int], Worker], pg_dsn: str
) -> None:
    submitter = open_pg(clock=SystemClock())  # (the workers run on the server's clock: real time)
    ids = [submitter.submit("demo", {"n": i}).job.id for i in range(3)]
    recovered = threading.Event()  # (set by whichever of the two recovers)
    first, second = live("alpha", recovered), live("beta", recovered)
    doomed = spawn("doomed", 3)
    os.kill(doomed.proc.pid, signal.SIGKILL)
    doomed.proc.wait(30)
    killed_at = time.monotonic()

    # both live workers look at every beat; one of them takes the dead row
    assert recovered.wait(30), "the killed worker's jobs were not recovered"
    # (not before its row expired: it was last renewed at most one beat before the kill)
    assert time.monotonic() - killed_at >= TTL_S - 2 * HEARTBEAT_S
    # two more passes, racing on purpose: nothing is left to take
    answers: list[list[str]] = []
    racers = [threading.Thread(target=lambda w=w: answers.append(w.backend.recover_dead())) for w in (first, second)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(30)
    assert answers == [[], []]

    assert sorted(first.recovered + second.recovered) == sorted(ids)  # each job by one worker, once
    assert not _row_after_recovery(pg_dsn, doomed.id)
    for job_id in ids:
        assert _event_types(submitter, job_id) == ["submitted", "leased", "reconciled"]
        job = submitter.get(job_id)
        assert job.state == State.QUEUED and job.attempts == 1
    # the jobs run again, under new leases
    lease = first.queue.lease("alpha", accept=lambda j: j["id"] == ids[0])
    assert lease is not None and lease.attempt == 2


def test_a_stopped_worker_loses_its_jobs_and_its_late_commits_are_refused(
    open_pg: Callable[..., Queue], live: Callable[..., Live], spawn: Callable[[str, int], Worker], pg_dsn: str
) -> None:
    submitter = open_pg(clock=SystemClock())  # (the workers run on the server's clock: real time)
    job_id = submitter.submit("demo", {"prompt": "one paid call"}).job.id
    sleepy = spawn("sleepy", 1)
    keeper = live("keeper")
    os.kill(sleepy.proc.pid, signal.SIGSTOP)
    try:
        assert keeper.done.wait(30), "the stopped worker's jobs were not recovered"
        assert keeper.recovered == [job_id]
        assert not _row_after_recovery(pg_dsn, sleepy.id)  # (gone, while it still sleeps)

        # the job runs on a live worker: its one paid call
        lease = keeper.queue.lease("keeper", accept=lambda j: j["id"] == job_id)
        assert lease is not None and lease.attempt == 2
        keeper.queue.complete(lease, {"by": "keeper"})
    finally:
        os.kill(sleepy.proc.pid, signal.SIGCONT)

    # the stopped worker runs again: it renews first, finds its lease gone, pays nothing
    answer = sleepy.say("resume")
    assert answer == [["stale", job_id], ["late-result-refused", job_id]]
    assert _rows(pg_dsn).get(sleepy.id) == "sleepy"  # (it registered again: alive, with nothing held)

    done = submitter.get(job_id)
    assert done.state == State.SUCCEEDED
    types = _event_types(submitter, job_id)
    assert types.count("succeeded") == 1 and types.count("reconciled") == 1
    assert types[:4] == ["submitted", "leased", "reconciled", "leased"]
    assert types.count("stale_result") == 2  # its renewal and its late result, each turned away and recorded
    stored: Any = submitter.store.carried_result(done.idempotency_key)
    assert stored is not None and stored.get("result") == {"by": "keeper"}


def test_a_server_restart_does_not_make_the_workers_that_could_not_beat_look_dead(
    own_server: Any, tmp_path: Path
) -> None:
    backend = PgBackend(own_server.dsn, heartbeat_s=HEARTBEAT_S, worker_ttl_s=TTL_S, retry_s=60)
    queue = Queue.open(tmp_path / "live", backend=backend, clock=backend.clock)
    ghost_ttl_s = 5.0
    try:
        heartbeat = backend.heartbeat
        assert heartbeat is not None
        # a worker last heard of an hour ago, as if the server had been down all that time
        with psycopg.connect(own_server.dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO dq_workers (id, host, pid, ttl_s, heartbeat_at)"
                " VALUES ('far/1/x', 'far', 1, %s, now() - interval '1 hour')",
                (ghost_ttl_s,),
            )
        own_server.restart()
        beats = heartbeat.beats
        assert heartbeat.wait_beats(beats + 2, 30)  # (beating again, and looking for the dead)
        assert _row_after_recovery(own_server.dsn, "far/1/x")  # its time of the outage does not count
        # once its own ttl has passed with the server up, and it still did not beat, it is dead
        assert heartbeat.wait_beats(beats + 2 + int(ghost_ttl_s / HEARTBEAT_S) + 5, 60)
        backend.recover_dead()
        assert not _row_after_recovery(own_server.dsn, "far/1/x")
    finally:
        queue.close()
