"""A crash drill that really crashes: headless workers killed with SIGKILL at random moments.

Between kills the store is reopened in this process (the first opener, so start-up
reconciliation runs) and the invariants of shared/DESIGN.md section 6 are checked.
At the end one worker runs everything to completion, and every job must have
succeeded, with exactly one result per key and a timeline that explains each attempt.
"""

from __future__ import annotations

import os
import random
import re
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import Job, Queue, State
from desktop_queue.core.store.fileio import TEMP_MARK
from desktop_queue.providers import discover

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL"),
]

SEED = 20240611
INITIAL_JOBS = 40
ROUNDS = 30
STARTUP_KILL_EVERY = 4
#: Room for the attempts that kills interrupt (an unknown outcome spends one), so that every
#: job can still succeed at the end; the budget itself is checked after every kill.
MAX_ATTEMPTS = 12

#: Events that close (explain) a leased attempt of the same epoch.
CLOSERS = {
    "succeeded",
    "retry_scheduled",
    "lease_expired",
    "reconciled",
    "released",
    "dead_lettered",
    "stale_result",
    "throttled",
    "cancelled",
}
LIVE_OR_DONE = {State.QUEUED, State.RUNNING, State.SUCCEEDED}


def worker_command(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "work", *args]


def new_payload(rng: random.Random, n: int, fails: bool) -> dict[str, Any]:
    payload: dict[str, Any] = {"prompt": f"crash drill job {n}", "duration_s": round(rng.uniform(0.02, 0.2), 3)}
    if fails:
        payload.update(fail_times=1, fail_with="retryable")
    return payload


def closing_events(job: Job) -> dict[int, str]:
    """epoch -> the event that explains how that attempt ended; fails on an unexplained attempt."""
    closed: dict[int, str] = {}
    open_epoch: int | None = None
    last_epoch = 0
    for ev in job.events:
        if ev.type == "leased":
            assert open_epoch is None, f"job {job.id}: epoch {ev.epoch} leased while epoch {open_epoch} was unexplained"
            assert ev.epoch > last_epoch, f"job {job.id}: lease epochs do not increase ({last_epoch} -> {ev.epoch})"
            open_epoch = last_epoch = ev.epoch
        elif ev.type in CLOSERS and open_epoch is not None and ev.epoch == open_epoch:
            closed[open_epoch] = ev.type
            open_epoch = None
    assert open_epoch is None, (
        f"job {job.id}: attempt of epoch {open_epoch} has no outcome: {[e.type for e in job.events]}"
    )
    return closed


def check_invariants(queue: Queue, acknowledged: dict[str, str], data_dir: Path) -> list[Job]:
    """shared/DESIGN.md section 6, after a crash and a reconciling reopen."""
    jobs = queue.list(with_events=True)
    by_id = {job.id: job for job in jobs}
    # 1. every acknowledged submission exists
    missing = sorted(set(acknowledged) - set(by_id))
    assert not missing, f"acknowledged jobs lost: {missing}"
    for job_id, key in acknowledged.items():
        assert by_id[job_id].idempotency_key == key
    # reconciliation left nothing running: the process that ran it is dead
    assert queue.counts()[State.RUNNING] == 0, [j.id for j in jobs if j.state == State.RUNNING]
    # 4. attempts within the budget, and every attempt recorded as a lease
    for job in jobs:
        assert 0 <= job.attempts <= job.max_attempts, (job.id, job.attempts, job.max_attempts)
        leased = sum(1 for e in job.events if e.type == "leased")
        assert leased == job.total_attempts, (job.id, leased, job.total_attempts)
        closing_events(job)
    # 2. one live (or succeeded) job per key, and a succeeded job has its result
    holders = Counter(job.idempotency_key for job in jobs if job.state in LIVE_OR_DONE)
    assert max(holders.values(), default=0) <= 1, [k for k, n in holders.items() if n > 1]
    for job in jobs:
        if job.state == State.SUCCEEDED:
            assert queue.results.get(job.idempotency_key) is not None, f"job {job.id} succeeded without a result"
    # 6. the store opened; a SIGKILL can tear a last record, never damage an acknowledged one
    quarantined = [p.name for p in data_dir.rglob("*.corrupt-*")]
    assert not quarantined, (quarantined, queue.report.notices)
    return jobs


def wait_until_working(worker: subprocess.Popen[bytes], timeout_s: float = 30.0) -> bool:
    """Reads the worker's stderr until it says it is working (False: it died or took too long)."""
    assert worker.stderr is not None
    fd = worker.stderr.fileno()
    seen = b""
    deadline = time.monotonic() + timeout_s
    while b"working on" not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                return False
            seen += chunk
    return True


def test_sigkill_drill(data_dir: Path, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    audit = tmp_path / "audit.log"
    env = {**os.environ, "DESKTOP_QUEUE_DEMO_AUDIT": str(audit)}
    acknowledged: dict[str, str] = {}  # job id -> key, for every submission that returned

    def submit(queue: Queue, n: int) -> None:
        result = queue.submit(
            "demo", new_payload(rng, n, fails=n % 4 == 0), title=f"drill {n}", max_attempts=MAX_ATTEMPTS
        )
        assert not result.duplicate
        acknowledged[result.job.id] = result.job.idempotency_key

    with Queue.open(data_dir, discover()) as queue:
        for n in range(INITIAL_JOBS):
            submit(queue, n)

    reconciled: Counter[str] = Counter()
    for round_no in range(ROUNDS):
        worker = subprocess.Popen(
            worker_command(data_dir, "--concurrency", "4", "--max-seconds", "30"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            # most kills land while the worker is working; every STARTUP_KILL_EVERY-th one
            # lands at a random moment of its start-up (opening, reconciling, importing)
            if round_no % STARTUP_KILL_EVERY != 0:
                assert wait_until_working(worker), f"round {round_no}: the worker never started working"
            worker.wait(timeout=rng.uniform(0.05, 0.6))
        except subprocess.TimeoutExpired:
            pass
        else:
            pytest.fail(f"round {round_no}: the worker exited by itself with {worker.returncode}")
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.communicate(timeout=30)
        assert worker.returncode == -signal.SIGKILL

        with Queue.open(data_dir, discover()) as queue:
            assert queue.report.first, "the killed worker still held the store"
            reconciled.update(r.decision for r in queue.reconciled)
            check_invariants(queue, acknowledged, data_dir)
            submit(queue, INITIAL_JOBS + round_no)  # acknowledged between two crashes

    # the kills must really have hit running attempts, or this drill proves nothing
    assert sum(reconciled.values()) >= 3, reconciled
    assert set(reconciled) <= {"succeeded", "requeued"}, reconciled

    final = subprocess.run(
        worker_command(data_dir, "--concurrency", "4", "--until-idle", "--max-seconds", "60"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert final.returncode == 0, final.stderr.decode()

    with Queue.open(data_dir, discover()) as queue:
        jobs = check_invariants(queue, acknowledged, data_dir)
        assert len(jobs) == len(acknowledged) == INITIAL_JOBS + ROUNDS
        not_done = {j.id: j.state for j in jobs if j.state != State.SUCCEEDED}
        assert not not_done, not_done
        results_root = queue.results.root
        for job in jobs:  # results live in the journal until compaction writes their files
            queue.results.materialize(job.idempotency_key)
        files = [
            p for p in results_root.rglob("*") if p.is_file() and TEMP_MARK not in p.name and p.parent.name != "pending"
        ]
        assert len(files) == len(jobs) == queue.results.count()
        productions = Counter(line for line in audit.read_text(encoding="utf-8").splitlines() if line)
        for job in jobs:
            key = job.idempotency_key
            # exactly one result file for the key, written by one of this job's attempts
            own = [p for p in files if p.name == queue.results.path_for(key).name]
            assert own == [queue.results.path_for(key)], (job.id, own)
            doc = queue.results.get(key)
            assert doc is not None and doc["job_id"] == job.id
            closed = closing_events(job)
            assert doc["epoch"] in closed, (job.id, doc["epoch"], closed)
            assert job.result_ref == queue.results.ref_for(key)
            # every attempt leased and explained; the last one is how it succeeded
            assert list(closed.values())[-1] in {"succeeded", "reconciled"}, (job.id, closed)
            # a result is produced again only by an attempt that a kill interrupted
            interrupted = sum(1 for how in closed.values() if how in {"reconciled", "lease_expired", "released"})
            assert productions[key] in range(1, 2 + interrupted), (job.id, productions[key], closed)
            # the demo fails only the first attempt ever made (fail_times 1): that one, unless
            # a kill cut it short, ends in a retry; no other attempt does
            retries = [epoch for epoch, how in closed.items() if how == "retry_scheduled"]
            if job.input.get("fail_times"):
                assert list(closed.values())[0] in {"retry_scheduled", "reconciled"}, (job.id, closed)
                assert retries in ([], [min(closed)]), (job.id, closed)
            else:
                assert retries == [], (job.id, closed)
        unknown = set(productions) - {j.idempotency_key for j in jobs}
        assert not unknown, f"results produced for keys no job has: {len(unknown)}"

    # leftovers of writes a kill interrupted are not results; count them for the report
    leftovers = [p.name for p in results_root.rglob("*") if TEMP_MARK in p.name]
    assert all(re.match(r"^\..+\.json\.tmp-", name) for name in leftovers), leftovers
    extra = sum(n - 1 for n in productions.values())
    print(
        f"drill: {ROUNDS} kills, reconciliation decisions {dict(reconciled)}, "
        f"{extra} result(s) produced again after a kill, {len(leftovers)} unfinished result write(s) left behind"
    )
