"""The windowed metrics of a PostgreSQL queue: folded from the jobs of the horizon only.

On the data dir a rebuild folds the hot set and the archived jobs changed within the
horizon (seven days and a margin). On PostgreSQL every job stays in its table: a
rebuild folded all of them, a statement per job (the Metrics pane never finished at a
million jobs). These tests hold it to the same figures as a recount of every job's
timeline (tests/core/test_windowed_metrics.py's reference), with jobs on both sides of
the horizon and a dead letter that waits past it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Outcome, Queue
from desktop_queue.core.model import events_of
from desktop_queue.core.windowed import WindowedMetrics, jobs_of


def _run(queue: Queue, clock: FakeClock, i: int) -> str:
    """One job to its end: every fourth dead, every fifth retried once first, the rest succeed."""
    job_id = queue.submit("demo" if i % 3 else "lab.chat", {"n": i}, max_attempts=2).job.id
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job_id
    clock.advance(0.5 + i % 7)
    if i % 4 == 0:
        queue.fail(lease, Outcome.failure("fatal", f"bad request {i}"))
    elif i % 5 == 0:
        queue.fail(lease, Outcome.failure("retryable", "reset", retry_after=1.0))
        clock.advance(2.0)
        again = queue.lease("w")
        assert again is not None and again.job_id == job_id
        queue.complete(again, {"text": "ok"})
    else:
        queue.complete(lease, {"text": "ok"})
    return job_id


def test_a_rebuild_folds_the_horizon_and_counts_the_older_dead_letters(
    open_pg: Callable[..., Queue], clock: FakeClock, monkeypatch: pytest.MonkeyPatch, core_tests: Callable[[str], Any]
) -> None:
    queue = open_pg()
    old = [_run(queue, clock, i) for i in range(12)]  # three dead letters among them
    queue.resolve(old[4])
    clock.advance(20 * 86_400.0)  # past the horizon: they are history
    recent = [_run(queue, clock, i) for i in range(12, 40)]
    queue.submit("demo", {"waiting": True})
    lease = queue.lease("w")  # a running one, and a queued one behind it
    assert lease is not None
    queue.submit("demo", {"later": True})
    clock.advance(30.0)

    ref = core_tests("test_windowed_metrics.py")  # (its recount is the reference)
    folded: list[str] = []
    metrics = WindowedMetrics(queue)
    fold = metrics._fold_ids
    monkeypatch.setattr(metrics, "_fold_ids", lambda ids: (folded.extend(ids), fold(ids))[1])
    now = clock.now()
    every = queue.store.read(lambda st: [dict(j, events=list(events_of(j))) for j in jobs_of(st)])
    for window in ref.WINDOWS:
        ref.assert_equal(metrics.figures(window, now), ref.recount(every, window, now))
    assert metrics.rebuilds == 1
    # what the rebuild read: the horizon's jobs, not the history before it
    assert set(folded) == set(recent) | {lease.job_id} | {j["id"] for j in every if j["state"] == "queued"}
    figures = metrics.figures("1h", now)
    assert figures.depth["dead"][-1] == sum(1 for j in every if j["state"] == "dead" and not j.get("resolved_at"))

    # later changes are folded from the change feed, as on the data dir
    clock.advance(5.0)
    queue.complete(lease, {"text": "late"})
    later = queue.lease("w")  # the queued one
    assert later is not None
    clock.advance(1.0)
    queue.fail(later, Outcome.failure("fatal", "bad request late"))
    now = clock.now()
    every = queue.store.read(lambda st: [dict(j, events=list(events_of(j))) for j in jobs_of(st)])
    for window in ref.WINDOWS:
        ref.assert_equal(metrics.figures(window, now), ref.recount(every, window, now))
    assert metrics.rebuilds == 1
    # a dead letter from before the horizon that is retried is folded from then on
    queue.retry(old[8])
    now = clock.now()
    every = queue.store.read(lambda st: [dict(j, events=list(events_of(j))) for j in jobs_of(st)])
    ref.assert_equal(metrics.figures("1h", now), ref.recount(every, "1h", now))
