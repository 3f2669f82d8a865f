"""Several real processes on one data dir (shared/DESIGN.md section 4): no lost update, one reconciler.

The children are plain ``python -c`` subprocesses; they wait on their stdin for a
"go" line, so the test synchronises them without sleeping.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from desktop_queue.core import Queue, State, SystemClock

OpenQueue = Callable[..., Queue]
REPO = Path(__file__).resolve().parents[2]
N_PER_PROCESS = 300

_WORKER = r"""
import sys, orjson
from desktop_queue.core import Queue, RetryPolicy
data_dir, tag, n, rotate, keep = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
q = Queue.open(data_dir, policy=RetryPolicy(lease_s=3600), rotate_bytes=rotate, keep_finished=keep)
print("ready", flush=True)
sys.stdin.readline()
submitted, leases = [], []

def run_one():
    lease = q.lease(tag)
    if lease is None:
        return False
    leases.append([lease.job_id, lease.epoch])
    q.complete(lease, {"by": tag, "epoch": lease.epoch})
    return True

for i in range(n):
    res = q.submit("demo", {"process": tag, "i": i}, title=f"{tag} {i}")
    assert not res.duplicate
    submitted.append(res.job.id)
    run_one()
while run_one():
    pass
q.close()
print(orjson.dumps({"submitted": submitted, "leases": leases}).decode(), flush=True)
"""

_HOLDER = r"""
import sys, orjson
from desktop_queue.core import Queue
q = Queue.open(sys.argv[1])
lease = q.lease("holder", lease_s=3600)
print(orjson.dumps({"job_id": lease.job_id, "token": lease.token, "first": q.report.first}).decode(), flush=True)
sys.stdin.readline()  # hold the store open until killed or told
"""

_CRASHER = r"""
import sys
from desktop_queue.core import Queue, RetryPolicy
q = Queue.open(sys.argv[1], policy=RetryPolicy(lease_s=3600), rotate_bytes=16 * 1024)
i = 0
while True:
    job = q.submit("demo", {"i": i, "prompt": "crash test " * 5}).job
    print("acked", job.id, flush=True)
    if i % 2 == 0:
        lease = q.lease("crasher")
        if lease is not None and i % 4 == 0:
            q.complete(lease, {"i": i})
    i += 1
"""


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@contextmanager
def children(*procs: subprocess.Popen[str]) -> Iterator[None]:
    """Kills whatever is still running when the test ends (each child by its own pid)."""
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        err = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"child exited with {proc.returncode}: {err}")
    return line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("n_procs", "rotate_bytes", "keep"),
    [(2, 64 * 1024, 200), (3, 4096, 200), (3, 8192, 3)],
    ids=["two-processes", "three-processes-rotating-every-few-commits", "three-processes-archiving-as-they-go"],
)
def test_processes_lose_no_update(
    data_dir: Path, open_queue: OpenQueue, n_procs: int, rotate_bytes: int, keep: int
) -> None:
    """With 4 KiB segments every few commits rotate (a seal), and compactions run all along;
    with a hot set of 3, every compaction archives what others still hold in memory."""
    open_queue().close()  # create the store first, so no child has to
    tags = [f"p{k + 1}" for k in range(n_procs)]
    procs = [_spawn(_WORKER, str(data_dir), tag, str(N_PER_PROCESS), str(rotate_bytes), str(keep)) for tag in tags]
    with children(*procs):
        for proc in procs:
            assert _line(proc).strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = [orjson.loads(_line(proc)) for proc in procs]
        for proc in procs:
            assert proc.wait(timeout=120) == 0

    queue = open_queue()
    if rotate_bytes < 64 * 1024:
        assert queue.store.segment > 10  # the seals were followed, many times over
    jobs = {j.id: j for j in queue.list(with_events=True)}
    total = n_procs * N_PER_PROCESS
    submitted = [job_id for report in reports for job_id in report["submitted"]]
    assert len(submitted) == len(set(submitted)) == total
    assert set(jobs) == set(submitted)
    assert sorted(j.seq for j in jobs.values()) == list(range(1, total + 1))

    # every job leased once and succeeded exactly once, whoever ran it
    leases: list[tuple[str, int]] = [tuple(x) for r in reports for x in r["leases"]]
    assert sorted(job_id for job_id, _ in leases) == sorted(submitted)
    for job in jobs.values():
        assert job.state == State.SUCCEEDED
        assert [e.type for e in job.events] == ["submitted", "leased", "succeeded"]
        assert (job.attempts, job.total_attempts) == (1, 1)
    # lease epochs: unique across processes, strictly increasing within each
    epochs = [epoch for _, epoch in leases]
    assert sorted(epochs) == list(range(1, total + 1))
    for report in reports:
        mine = [epoch for _, epoch in report["leases"]]
        assert all(a < b for a, b in zip(mine, mine[1:], strict=False))
    epoch_of = dict(leases)
    for job in jobs.values():
        assert job.lease_epoch == epoch_of[job.id]
        assert job.events[1].epoch == job.events[2].epoch == job.lease_epoch
        doc = queue.results.get(job.idempotency_key)
        assert doc is not None and doc["job_id"] == job.id and doc["epoch"] == job.lease_epoch
        assert doc["result"]["epoch"] == job.lease_epoch
    assert queue.results.count() == total
    assert queue.report.notices == []
    assert queue.counts()["succeeded"] == total == queue.stats().jobs
    if keep < 10:
        assert queue.store.archive.count() > total // 2  # the archive took most of them


def test_only_the_first_opener_reconciles(data_dir: Path, open_queue: OpenQueue) -> None:
    # the child runs on the real clock, so this test does too
    setup = open_queue(clock=SystemClock())
    job = setup.submit("demo", {"prompt": "held by another process"}).job
    other = setup.submit("demo", {"prompt": "waiting"}).job
    setup.close()

    holder = _spawn(_HOLDER, str(data_dir))
    with children(holder):
        held: dict[str, Any] = orjson.loads(_line(holder))
        assert held["job_id"] == job.id and held["first"] is True
        # a second open while the holder lives: its running job is not an orphan
        second = open_queue(clock=SystemClock())
        assert second.report.first is False
        assert second.reconciled == []
        seen = second.get(job.id)
        assert seen.state == State.RUNNING
        assert second.lease_token(job.id) == held["token"]
        assert [e.type for e in seen.events] == ["submitted", "leased"]
        assert second.get(other.id).state == State.QUEUED
        second.close()
        # the holder dies for real
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=30) == -signal.SIGKILL

    third = open_queue(clock=SystemClock())
    assert third.report.first is True
    after = third.get(job.id)
    assert after.state == State.QUEUED
    assert after.events[-1].type == "reconciled"
    assert [(r.job_id, r.decision) for r in third.reconciled] == [(job.id, "requeued")]
    assert third.lease_token(job.id) is None


@pytest.mark.slow
def test_sigkill_mid_stream_loses_no_acknowledged_job(data_dir: Path, open_queue: OpenQueue) -> None:
    crasher = _spawn(_CRASHER, str(data_dir))
    acked: list[str] = []
    with children(crasher):
        while len(acked) < 150:
            word, job_id = _line(crasher).split()
            assert word == "acked"
            acked.append(job_id)
        crasher.send_signal(signal.SIGKILL)
        assert crasher.wait(timeout=30) == -signal.SIGKILL

    queue = open_queue()
    assert queue.report.first
    jobs = {j.id: j for j in queue.list(with_events=True)}
    assert set(acked) <= set(jobs)  # invariant 1
    assert queue.counts()["running"] == 0  # orphans were reconciled
    for decision in queue.reconciled:
        assert decision.decision in ("requeued", "succeeded")
        assert jobs[decision.job_id].events[-1].type == "reconciled"
    for job in jobs.values():
        assert job.attempts <= job.max_attempts
        assert job.state in (State.QUEUED, State.SUCCEEDED)
    # and it is a healthy store: it takes commits and reopens identically
    queue.submit("demo", {"prompt": "after the crash"})
    before = {j.id: j.to_json() for j in queue.list(with_events=True)}
    queue.close()
    assert {j.id: j.to_json() for j in open_queue().list(with_events=True)} == before
