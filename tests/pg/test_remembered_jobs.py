"""A writing verb reads a job this process committed from its own image, not the row: never a stale decision.

:class:`PgBackend` keeps the jobs as its last commit of each left them, with their rev; a
verb that reads one by id takes that instead of a locked read, and its update (or, for a
job it only read, a check before its COMMIT) proves the rev still current. Another process
changing the job in between makes the verb run again on the row: these tests change jobs
behind one process's back and check that every answer is what a fresh read gives.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from desktop_queue.core import Queue, State
from desktop_queue.core.errors import StaleLease


def test_a_complete_after_another_process_cancelled_is_stale(open_pg: Callable[..., Queue]) -> None:
    mine, other = open_pg(), open_pg()
    job = mine.submit("demo", {"n": 1}).job
    lease = mine.lease("w")
    assert lease is not None and lease.job_id == job.id
    other.cancel(job.id)  # (mine's image still says running, with its token)
    with pytest.raises(StaleLease):
        mine.complete(lease, {"late": True})
    assert mine.get(job.id).state == State.CANCELLED
    assert other.get(job.id).state == State.CANCELLED


def test_a_duplicate_is_answered_as_the_job_now_is(open_pg: Callable[..., Queue]) -> None:
    mine, other = open_pg(), open_pg()
    job = mine.submit("demo", {"n": 1}, key="k").job  # (mine's image: queued)
    lease = other.lease("w")
    assert lease is not None and lease.job_id == job.id
    other.complete(lease, {"answer": 42})
    again = mine.submit("demo", {"n": 1}, key="k")
    assert again.duplicate and again.job.state == State.SUCCEEDED
    assert again.result is not None and again.result["result"] == {"answer": 42}


def test_a_verb_refused_on_an_old_image_runs_again_on_the_row(open_pg: Callable[..., Queue]) -> None:
    mine, other = open_pg(), open_pg()
    job = mine.submit("demo", {"n": 1}).job  # (mine's image: queued, which retry refuses)
    other.cancel(job.id)
    assert mine.retry(job.id).state == State.QUEUED  # (cancelled: retry is allowed)
    lease = mine.lease("w")
    assert lease is not None and lease.job_id == job.id
    assert mine.complete(lease, {"ok": True}).state == State.SUCCEEDED
