"""Every paid call exactly once, on the real workload: slow answers, several worker
processes on one data dir, a worker stopped longer than its lease, shared limits,
429 storms and budgets.

Every worker is a real ``python -m desktop_queue work`` subprocess against the fake
OpenAI server on 127.0.0.1, which counts what really went over the wire.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402
from workerproc import (  # noqa: E402
    finish,
    jobs,
    server,  # noqa: F401  (a fixture)
    start_worker,
    submit,
    wait_for,
)

from desktop_queue.core import Queue, State  # noqa: E402
from desktop_queue.providers import discover  # noqa: E402

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------- slow answers


def test_a_40_s_answer_with_a_3_s_lease_is_paid_once(server: FakeOpenAI, data_dir: Path) -> None:
    """Two workers, a 3 s lease, an answer that takes 40 s: one request, one attempt."""
    server.default_delay_s = 40.0
    [job_id] = submit(data_dir, 1)
    workers = [
        start_worker(data_dir, server, "--lease-s", "3", "--until-idle", "--max-seconds", "90") for _ in range(2)
    ]
    summaries = [finish(w, 120) for w in workers]

    assert server.count("chat") == 1, "the slow answer was asked for once"
    [job] = jobs(data_dir)
    assert job.id == job_id and job.state == State.SUCCEEDED
    assert job.total_attempts == 1
    # ("resumed" would only say that a loaded machine starved the worker for seconds)
    assert [e.type for e in job.events if e.type != "resumed"] == ["submitted", "leased", "succeeded"]
    assert sum(s["finished"].get("succeeded", 0) for s in summaries) == 1


def test_a_worker_stopped_longer_than_its_lease_spends_nothing(server: FakeOpenAI, data_dir: Path) -> None:
    """SIGSTOP mid-call for lease + 10 s, then SIGCONT: the same call answers, no attempt spent.

    A second worker runs all along: it must not take the stopped worker's job.
    """
    server.default_delay_s = 4.0
    [job_id] = submit(data_dir, 1)
    sleeper = start_worker(data_dir, server, "--lease-s", "3", "--until-idle", "--max-seconds", "90")
    wait_for(lambda: server.count("chat") == 1, 30, "the first request")
    other = start_worker(data_dir, server, "--lease-s", "3", "--until-idle", "--max-seconds", "90")
    os.kill(sleeper.pid, signal.SIGSTOP)
    try:
        stopped_at = time.monotonic()
        wait_for(lambda: time.monotonic() - stopped_at >= 13.0, 20, "lease + 10 s to pass")
        with Queue.open(data_dir, discover()) as queue:
            held = queue.get(job_id)
            assert held.state == State.RUNNING  # nobody reaped a stopped, living holder
            assert held.lease_expires_at is not None and held.lease_expires_at < time.time() - 9
    finally:
        os.kill(sleeper.pid, signal.SIGCONT)
    finish(sleeper, 60)
    finish(other, 60)

    assert server.count("chat") == 1, "no second request"
    [job] = jobs(data_dir)
    assert job.state == State.SUCCEEDED and job.total_attempts == 1 and job.attempts == 1
    types = [e.type for e in job.events]
    assert "lease_expired" not in types
    assert "resumed" in types  # the timeline says the worker stood still, and that it cost nothing


# ---------------------------------------------------------------------- one set of limits


@pytest.mark.parametrize(
    ("flags", "limits"),
    [
        pytest.param(["--rpm", "2"], {"rpm": 2}, id="rpm"),
        # each job is estimated at 12 tokens and uses 12: 30 TPM fits two in the minute
        pytest.param(["--tpm", "30"], {"tpm": 30}, id="tpm"),
    ],
)
def test_the_window_and_two_workers_share_one_rate_budget(
    qtbot: Any, server: FakeOpenAI, data_dir: Path, flags: list[str], limits: dict[str, float]
) -> None:
    """The window's driver (in this process, built as the app builds it) and two ``work``
    processes with the same per-minute budget: the server sees what fits in one minute."""
    from desktop_queue.providers.setup import ProfileConfig, build
    from desktop_queue.runtime import LeaseDriver

    server.usage_tokens = 12
    submit(data_dir, 6)
    providers, flow = build(
        [ProfileConfig(base_url=server.url, require_key=False, **limits)], plugins=False, data_dir=data_dir
    )
    queue = Queue.open(data_dir, providers)
    window = LeaseDriver(queue, providers, flow=flow, tick_ms=50, worker_id="window")
    workers = [start_worker(data_dir, server, *flags, "--max-seconds", "8") for _ in range(2)]
    window.start()
    try:
        qtbot.waitUntil(lambda: all(w.poll() is not None for w in workers), timeout=30_000)
    finally:
        window.shutdown(timeout_ms=5000)
        queue.close()
    for worker in workers:
        finish(worker, 30)
    assert server.count("chat") == 2


def test_two_workers_share_one_provider_concurrency(server: FakeOpenAI, data_dir: Path) -> None:
    server.default_delay_s = 1.0
    submit(data_dir, 4)
    workers = [
        start_worker(data_dir, server, "--provider-concurrency", "1", "--until-idle", "--max-seconds", "60")
        for _ in range(2)
    ]
    for worker in workers:
        finish(worker, 90)
    assert server.count("chat") == 4
    assert server.max_in_flight == 1


def test_a_breaker_opened_by_one_worker_holds_the_other(server: FakeOpenAI, data_dir: Path) -> None:
    """A server down for everyone: five failures open the shared breaker, then only probes go."""
    server.outage = (time.monotonic() + 3600, 500)
    submit(data_dir, 10)
    workers = [start_worker(data_dir, server, "--concurrency", "1", "--max-seconds", "8") for _ in range(2)]
    for worker in workers:
        finish(worker, 30)
    # 5 open it (one of them may be in flight in the other worker as it opens); the cool-down
    # is 30 s, so no probe within the 8 s
    assert 5 <= server.count("chat") <= 6


# ---------------------------------------------------------------------- 429 storms


def test_a_429_storm_without_retry_after_draws_a_handful_of_requests(server: FakeOpenAI, data_dir: Path) -> None:
    """60 s of 429 to everything, no Retry-After: the profile's pause doubles (full jitter, cap
    60 s). Expected about 8 requests in the storm; the bound is 15 (more needs eight pauses at
    the cap to total under a minute: odds of about 1 in 40,000). Then the job succeeds with
    no attempt spent."""
    storm_s = 60.0
    server.outage = (time.monotonic() + storm_s, 429)
    [job_id] = submit(data_dir, 1)
    worker = start_worker(data_dir, server, "--until-idle", "--max-seconds", "200")
    finish(worker, 240)

    storm = [r for r in server.of("chat") if r.at < server.outage[0]]
    assert storm and len(storm) <= 15, len(storm)
    [job] = jobs(data_dir)
    assert job.id == job_id and job.state == State.SUCCEEDED
    assert job.attempts == 1  # every throttled attempt was given back
    assert server.count("chat") == len(storm) + 1


# ---------------------------------------------------------------------- budgets


def test_a_budget_holds_in_every_process_and_work_resumes_when_raised(server: FakeOpenAI, data_dir: Path) -> None:
    """Each job is estimated at 12 tokens and reports 12; a 36-token daily budget fits 3 jobs:
    the 4th waits, in both workers, with the budget's reason, and runs once it is raised."""
    server.usage_tokens = 12  # 4 of prompt ("paid question N") + max_tokens 8, as estimated
    ids = submit(data_dir, 4)
    workers = [start_worker(data_dir, server, "--budget-tokens-per-day", "36", "--max-seconds", "8") for _ in range(2)]
    for worker in workers:
        finish(worker, 30)
    assert server.count("chat") == 3
    with Queue.open(data_dir, discover()) as queue:
        waiting = [queue.get(i) for i in ids if queue.get(i).state == State.QUEUED]
        assert len(waiting) == 1 and waiting[0].attempts == 0
    from desktop_queue.providers.setup import ProfileConfig, build

    _providers, flow = build([ProfileConfig(budget_tokens_per_day=36)], data_dir=data_dir)
    reason = flow.waiting_reason(
        {"id": waiting[0].id, "kind": "openai.chat", "state": "queued", "input": waiting[0].input}
    )
    assert reason is not None and reason.startswith("waiting: budget of profile openai reached")
    assert "36 of 36 tokens today" in reason, reason

    raised = start_worker(data_dir, server, "--budget-tokens-per-day", "200", "--until-idle", "--max-seconds", "30")
    finish(raised, 60)
    assert server.count("chat") == 4
    assert all(j.state == State.SUCCEEDED for j in jobs(data_dir))
