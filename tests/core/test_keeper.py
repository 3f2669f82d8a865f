"""Leases live as long as their holder: the keeper, holder liveness and suspension detection."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue, RetryPolicy, StaleLease, State, reconcile
from desktop_queue.core.errors import StoreError
from desktop_queue.core.keeper import LeaseKeeper
from desktop_queue.core.liveness import SuspendDetector, _start_time, _stat, holder_alive, this_process
from desktop_queue.providers.demo import DemoProvider


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(tmp_path: Path, clock: FakeClock) -> Queue:
    q = Queue.open(tmp_path / "data", {"demo": DemoProvider()}, clock=clock, policy=RetryPolicy(lease_s=3))
    yield q
    q.close()


class Mono:
    """An in-process clock the test moves."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def worker_script(data: Path, *lines: str, lease_s: float | None = None) -> str:
    """A ``python -c`` program that opens ``data`` as ``q`` (demo provider), then runs ``lines``."""
    policy = f", policy=RetryPolicy(lease_s={lease_s})" if lease_s is not None else ""
    return (
        "import os, sys, time\n"
        "from desktop_queue.core import Queue, RetryPolicy\n"
        "from desktop_queue.providers.demo import DemoProvider\n"
        f"q = Queue.open({str(data)!r}, {{'demo': DemoProvider()}}{policy})\n" + "".join(lines)
    )


# ---------------------------------------------------------------------- holders


def test_this_process_is_alive_and_a_finished_one_is_not() -> None:
    assert holder_alive(this_process()) is True
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    pid = int(done.stdout)
    host, _pid, start = this_process().split("/")
    assert holder_alive(f"{host}/{pid}/{start}") is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process states are read from /proc")
def test_a_holder_that_ended_is_not_alive_before_its_parent_collects_it() -> None:
    """A zombie: the process ended, and its pid stays until its parent waits for it."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    holder = f"{this_process().split('/')[0]}/{child.pid}/{_start_time(child.pid)}"
    assert holder_alive(holder) is True
    assert child.stdin is not None
    child.stdin.close()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # it ended; its exit status is left uncollected
    assert (_stat(child.pid) or [b""])[0] == b"Z"
    assert holder_alive(holder) is False
    child.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process start times are read from /proc")
def test_a_reused_pid_is_not_the_holder() -> None:
    """Same pid, another start time: the holder ended and a new process took its number."""
    host, pid, start = this_process().split("/")
    assert holder_alive(f"{host}/{pid}/{int(start) + 1}") is False


def test_a_holder_on_another_host_cannot_be_told() -> None:
    assert holder_alive("elsewhere/123/456") is None
    assert holder_alive(None) is None
    assert holder_alive("garbled") is None


# ---------------------------------------------------------------------- reaping


def test_a_kept_lease_is_never_reaped_however_late(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"prompt": "slow"}).job
    lease = queue.lease("w", kept=True)
    assert lease is not None and lease.job_id == job.id
    clock.advance(3600 * 5)  # a sleep far longer than any lease
    assert queue.reap() == []
    assert queue.get(job.id).state == State.RUNNING
    queue.heartbeat(lease)  # the holder's next renewal finds it as it left it
    queue.unkeep(lease)
    clock.advance(4)
    assert queue.reap() == [job.id]  # no longer renewed by anyone: lost, as before


def test_a_plain_lease_expires_as_before(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"prompt": "script"}).job
    assert queue.lease("w") is not None
    clock.advance(4)
    assert queue.reap() == [job.id]
    [expired] = [e for e in queue.get(job.id).events if e.type == "lease_expired"]
    assert expired.detail["reason"] == "no heartbeat before the lease expired"


def test_a_live_holder_in_another_process_is_not_reaped(tmp_path: Path) -> None:
    """A process that leases (kept) and stays alive: a second process past the expiry leaves it."""
    data = tmp_path / "data"
    script = worker_script(
        data,
        "print(q.lease('holder', kept=True).job_id, flush=True)\nsys.stdin.read()\n",
        lease_s=1,
    )
    with Queue.open(data, {"demo": DemoProvider()}) as queue:
        job = queue.submit("demo", {"prompt": "held"}).job
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().decode().strip() == job.id
        later = FakeClock(start=queue.clock.now() + 600)
        with Queue.open(data, {"demo": DemoProvider()}, clock=later) as other:
            assert other.reap() == []  # expired ten minutes ago, but its holder lives
            assert other.lease("other") is None
            assert not other.reconciled  # and no opener takes it for an orphan
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    with Queue.open(data, {"demo": DemoProvider()}, clock=later) as other:
        # its holder ended: the first opener now finds a true orphan
        assert [(r.job_id, r.decision) for r in other.reconciled] == [(job.id, "requeued")]
        assert other.get(job.id).state == State.QUEUED


# ---------------------------------------------------------------------- the keeper


def test_the_keeper_renews_every_third_of_a_lease(queue: Queue, clock: FakeClock) -> None:
    queue.submit("demo", {"prompt": "kept"})
    lease = queue.lease("w", kept=True)
    assert lease is not None
    mono = Mono()
    gap = {"s": 0.0}
    keeper = LeaseKeeper(queue, monotonic=mono, detector=SuspendDetector(1.0, gap=lambda: gap["s"], monotonic=mono))
    keeper.add(lease, 3.0)
    assert keeper.run_once() == 0  # just renewed
    mono.t += 1.0
    clock.advance(1.0)
    assert keeper.run_once() == 1
    assert queue.get(lease.job_id).lease_expires_at == pytest.approx(clock.now() + 3.0)


def test_renewals_a_full_disk_refuses_are_logged_once_and_their_return_once(
    queue: Queue, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    queue.submit("demo", {"prompt": "kept"})
    lease = queue.lease("w", kept=True)
    assert lease is not None
    full = {"on": True}

    class FullDiskQueue:
        """The queue, whose heartbeats the store refuses while the disk is full."""

        def __getattr__(self, name: str) -> Any:
            return getattr(queue, name)

        def heartbeat(self, *args: Any) -> Any:
            if full["on"]:
                raise StoreError("could not write to the task store: No space left on device; the change was not made")
            return queue.heartbeat(*args)

    mono = Mono()
    keeper = LeaseKeeper(
        FullDiskQueue(), monotonic=mono, detector=SuspendDetector(1.0, gap=lambda: 0.0, monotonic=mono)
    )
    keeper.add(lease, 3.0)
    caplog.set_level(logging.INFO, logger="desktop_queue.core.keeper")
    for _ in range(30):  # thirty renewals due and refused, as in half a minute of a full disk
        mono.t += 1.0
        assert keeper.run_once() == 0
    full["on"] = False
    mono.t += 1.0
    assert keeper.run_once() == 1

    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "desktop_queue.core.keeper"]
    assert said == [
        (
            logging.WARNING,
            "could not renew a lease: could not write to the task store: No space left on device; "
            f"the change was not made (job {lease.job_id})",
        ),
        (logging.INFO, "renewed leases again (it had failed 30 times in a row)"),
    ]


def test_after_a_suspension_every_lease_is_renewed_at_once(queue: Queue, clock: FakeClock) -> None:
    for n in range(2):
        queue.submit("demo", {"prompt": f"kept {n}"})
    leases = [queue.lease("w", kept=True) for _ in range(2)]
    mono = Mono()
    gap = {"s": 0.0}
    keeper = LeaseKeeper(queue, monotonic=mono, detector=SuspendDetector(1.0, gap=lambda: gap["s"], monotonic=mono))
    for lease in leases:
        assert lease is not None
        keeper.add(lease, 30.0)
    found = []
    keeper.on_suspend = found.append
    gap["s"] += 120.0  # the machine slept two minutes: CLOCK_BOOTTIME ran on, monotonic did not
    clock.advance(120.0)
    assert keeper.run_once() == 2
    assert [s.machine for s in found] == [True] and found[0].seconds == pytest.approx(120.0)
    assert keeper.suspended_since(mono.t - 1) == pytest.approx(120.0)
    assert keeper.suspended_since(mono.t + 1) == 0.0
    for lease in leases:
        assert lease is not None
        job = queue.get(lease.job_id)
        assert job.state == State.RUNNING and job.lease_expires_at == pytest.approx(clock.now() + 30.0)
        [resumed] = [e for e in job.events if e.type == "resumed"]
        assert resumed.detail == {
            "reason": "the machine was suspended for 120 s; the lease is renewed and the attempt goes on",
            "delay_s": 120.0,
        }


def test_a_stopped_process_counts_as_suspended() -> None:
    """SIGSTOP: both clocks run on; the gap between two looks gives it away."""
    mono = Mono()
    detector = SuspendDetector(1.0, gap=lambda: 0.0, monotonic=mono)
    mono.t += 1.5
    assert detector.check() is None  # a little late is not a suspension
    mono.t += 37.0
    found = detector.check()
    assert found is not None and not found.machine and found.seconds == pytest.approx(36.0)
    assert detector.total_s == pytest.approx(36.0)


def test_the_keeper_drops_a_lease_the_store_no_longer_honours(queue: Queue) -> None:
    job = queue.submit("demo", {"prompt": "cancelled"}).job
    lease = queue.lease("w", kept=True)
    assert lease is not None
    mono = Mono()
    lost = []
    keeper = LeaseKeeper(
        queue, on_lost=lost.append, monotonic=mono, detector=SuspendDetector(1.0, gap=lambda: 0.0, monotonic=mono)
    )
    keeper.add(lease, 3.0)
    queue.cancel(job.id)
    mono.t += 1.0
    assert keeper.run_once() == 0
    assert lost == [lease] and keeper.kept() == []
    with pytest.raises(StaleLease):
        queue.heartbeat(lease)
    reasons = [e.detail["reason"] for e in queue.get(job.id).events if e.type == "stale_result"]
    assert reasons == ["heartbeat of a lost lease rejected", "heartbeat of a lost lease rejected"]


# ---------------------------------------------------------------------- pending results


def test_a_stale_holders_result_is_never_the_jobs_result(queue: Queue, clock: FakeClock) -> None:
    """The old holder keeps its answer (pending) after it lost the lease: nobody takes it."""
    job = queue.submit("demo", {"prompt": "contested"}).job
    old = queue.lease("old")
    assert old is not None
    clock.advance(4)
    assert queue.reap() == [job.id]
    new = queue.lease("new")
    assert new is not None and new.epoch > old.epoch
    queue.results.put_pending(
        job.idempotency_key, {"text": "stale"}, job_id=job.id, epoch=old.epoch, produced_at=clock.now()
    )
    assert queue.results.get(job.idempotency_key) is None
    with pytest.raises(StaleLease):
        queue.complete(old, {"text": "stale"})
    done = queue.complete(new, {"text": "current"})
    assert done.state == State.SUCCEEDED
    doc = queue.results.get(job.idempotency_key)
    assert doc is not None and doc["result"] == {"text": "current"} and doc["epoch"] == new.epoch


def test_a_cancelled_jobs_late_answer_is_not_reused_by_an_identical_submit(queue: Queue, clock: FakeClock) -> None:
    first = queue.submit("demo", {"prompt": "same"}).job
    lease = queue.lease("w")
    assert lease is not None
    queue.cancel(first.id)
    # the worker's answer arrives after the cancel: kept pending, then refused
    queue.results.put_pending(
        first.idempotency_key, {"text": "late"}, job_id=first.id, epoch=lease.epoch, produced_at=clock.now()
    )
    with pytest.raises(StaleLease):
        queue.complete(lease, {"text": "late"})
    again = queue.submit("demo", {"prompt": "same"})
    assert not again.duplicate and again.result is None
    assert queue.results.get(again.job.idempotency_key) is None  # it will be produced afresh


def test_the_dead_holders_pending_answer_is_reconciled(tmp_path: Path) -> None:
    """A worker that died between the provider's answer and its commit: the answer is not lost."""
    data = tmp_path / "data"
    script = worker_script(
        data,
        "l = q.lease('doomed', kept=True)\n"
        "q.sync()\n"
        "q.results.put_pending(l.job.idempotency_key, {'text': 'paid for'}, job_id=l.job_id, epoch=l.epoch,"
        " produced_at=time.time())\n"
        "os._exit(0)\n",
    )
    with Queue.open(data, {"demo": DemoProvider()}) as queue:
        job = queue.submit("demo", {"prompt": "answered"}).job
    subprocess.run([sys.executable, "-c", script], check=True)
    with Queue.open(data, {"demo": DemoProvider()}) as queue:
        assert [r.decision for r in queue.reconciled] == ["succeeded"]
        done = queue.get(job.id)
        assert done.state == State.SUCCEEDED
        doc = queue.results.get(job.idempotency_key)
        assert doc is not None and doc["result"] == {"text": "paid for"}


def test_a_first_opener_leaves_a_living_holders_job_and_its_pending_answer(tmp_path: Path) -> None:
    """A holder that closed the store but still runs (its attempt goes on): the next opener is
    first, yet neither requeues the job nor sweeps the answer the holder keeps for it."""
    data = tmp_path / "data"
    script = worker_script(
        data,
        "l = q.lease('holder', kept=True)\n"
        "q.results.put_pending(l.job.idempotency_key, {'text': 'kept'}, job_id=l.job_id, epoch=l.epoch,"
        " produced_at=time.time())\n"
        "q.close()\n"
        "print(l.job_id, l.epoch, flush=True)\n"
        "sys.stdin.read()\n",
    )
    with Queue.open(data, {"demo": DemoProvider()}) as queue:
        job = queue.submit("demo", {"prompt": "held"}).job
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        job_id, epoch = holder.stdout.readline().decode().split()
        with Queue.open(data, {"demo": DemoProvider()}) as other:
            assert other.report.first
            assert not other.reconciled
            assert other.get(job_id).state == State.RUNNING
            doc = other.results.pending(job.idempotency_key, int(epoch))
            assert doc is not None and doc["result"] == {"text": "kept"}
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)


def test_an_orphan_that_cannot_be_reconciled_does_not_stop_the_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reconciling one orphan fails: the store still opens, says so, and the sweep that follows
    (which reads the jobs still running) copes with the job left running."""
    data = tmp_path / "data"
    script = worker_script(data, "q.lease('doomed', kept=True)\nq.sync()\nos._exit(0)\n")
    with Queue.open(data, {"demo": DemoProvider()}) as queue:
        job = queue.submit("demo", {"prompt": "orphan"}).job
    subprocess.run([sys.executable, "-c", script], check=True)

    def broken(queue: Queue, job_id: str) -> Any:
        raise RuntimeError("lookup service down")

    monkeypatch.setattr(reconcile, "reconcile_one", broken)
    with Queue.open(data, {"demo": DemoProvider()}) as queue:
        assert queue.get(job.id).state == State.RUNNING
        assert f"job {job.id} could not be reconciled: RuntimeError" in queue.report.notices


def test_on_windows_a_holder_is_judged_by_expiry_and_never_sent_a_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.kill(pid, 0)`` asks whether a process runs on POSIX, and terminates it on Windows."""
    from desktop_queue.core import liveness

    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        holder = f"{this_process().split('/')[0]}/{other.pid}/-"
        monkeypatch.setattr(liveness.sys, "platform", "win32")
        monkeypatch.setattr(liveness.os, "kill", lambda pid, sig: pytest.fail("a signal to another process"))
        assert holder_alive(holder) is None  # cannot be told: the lease's expiry decides
        assert holder_alive(this_process()) is True
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait()
