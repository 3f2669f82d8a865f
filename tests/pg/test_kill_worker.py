"""A worker process killed with SIGKILL mid-run on PostgreSQL loses nothing (invariants 1 and 4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from desktop_queue.core import FakeClock, Queue, State, SystemClock

REPO = Path(__file__).resolve().parents[2]

# leases a job, then submits jobs as fast as it can, printing each one once acknowledged
_DOOMED = r"""
import sys
from desktop_queue.core import Queue, RetryPolicy
from desktop_queue.core.pg import PgBackend
backend = PgBackend(sys.argv[1])
q = Queue.open(sys.argv[2], backend=backend, clock=backend.clock, policy=RetryPolicy(lease_s=60))
lease = q.lease("doomed")
print("leased", lease.job_id, lease.epoch, flush=True)
i = 0
while True:
    job = q.submit("demo", {"prompt": f"from the doomed worker {i}"}).job
    print("acked", job.id, flush=True)
    i += 1
"""


def test_a_killed_worker_loses_no_acknowledged_job_and_its_lease_comes_back(
    open_pg: Callable[..., Queue], pg_dsn: str, tmp_path: Path
) -> None:
    queue = open_pg(clock=SystemClock())  # (the worker's clock is the server's: real time)
    job = queue.submit("demo", {"prompt": "the one it holds"}).job
    proc = subprocess.Popen(
        [sys.executable, "-c", _DOOMED, pg_dsn, str(tmp_path / "doomed")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    acked: list[str] = []
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first[:2] == ["leased", job.id]
        while len(acked) < 25:
            line = proc.stdout.readline().split()
            assert line and line[0] == "acked"
            acked.append(line[1])
        os.kill(proc.pid, signal.SIGKILL)  # mid-run: most likely inside a submission
        proc.wait(30)
        acked.extend(parts[1] for parts in (ln.split() for ln in proc.stdout.read().splitlines()) if parts)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)

    for job_id in acked:  # 1. every acknowledged submission exists
        assert queue.get(job_id).state == State.QUEUED
    assert queue.get(job.id).state == State.RUNNING  # still held by the dead worker's lease

    # once its lease expires (an hour later, on a clock we move), another worker takes it back
    later = open_pg(clock=FakeClock(start=time.time() + 3600))
    assert later.reap() == [job.id]
    reaped = later.get(job.id)
    assert reaped.state == State.QUEUED and [e.type for e in reaped.events][-1] == "lease_expired"
    lease = later.lease("survivor", accept=lambda j: j["id"] == job.id)
    assert lease is not None and lease.job_id == job.id and lease.attempt == 2
    later.complete(lease, {"ok": True})
    done = later.get(job.id)
    assert done.state == State.SUCCEEDED
    assert [e.type for e in done.events] == ["submitted", "leased", "lease_expired", "leased", "succeeded"]
