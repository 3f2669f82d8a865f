"""A cancelled attempt's end reads as the cancel's consequence, not as a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_queue.core import FakeClock, Queue, StaleLease
from desktop_queue.core.queue import Lease
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.models import TimelineModel, TimelineRole


def _after_the_lease_was_lost(queue: Queue, job_id: str, lease: Lease) -> TimelineModel:
    """The old holder renews, then hands in its result (both refused); the job's timeline."""
    with pytest.raises(StaleLease):
        queue.heartbeat(lease)
    with pytest.raises(StaleLease):
        queue.complete(lease, {"text": "too late"})
    model = TimelineModel()
    model.show_job(queue.get(job_id))
    return model


def _stale_rows(model: TimelineModel) -> list[tuple[str, str]]:
    out = []
    for row in range(model.rowCount()):
        index = model.index(row)
        if index.data(TimelineRole.EVENT).type == "stale_result":
            out.append((index.data(TimelineRole.HEADLINE), index.data(TimelineRole.CATEGORY)))
    return out


def test_a_cancelled_attempts_renewal_and_late_result_are_said_as_its_end(tmp_path: Path) -> None:
    """After a person cancelled a running chat job, its timeline ended in two orange
    warnings, one of them a refused renewal called "Late result rejected"."""
    with Queue.open(tmp_path / "data", {"demo": DemoProvider()}) as queue:
        job = queue.submit("demo", {"prompt": "x"}, title="slow").job
        lease = queue.lease("render-box:4123")
        assert lease is not None
        queue.cancel(job.id)
        model = _after_the_lease_was_lost(queue, job.id, lease)
    rows = _stale_rows(model)
    assert [category for _h, category in rows] == ["cancel", "cancel"]
    assert "Attempt told to stop after the cancel" in rows[0][0]
    assert "Result arrived after the cancel: not kept" in rows[1][0]
    assert "Result arrived after the cancel" in model.as_text()


def test_a_result_after_a_lost_lease_is_still_a_warning(tmp_path: Path) -> None:
    clock = FakeClock(1_000_000.0)
    with Queue.open(tmp_path / "data", {"demo": DemoProvider()}, clock=clock) as queue:
        job = queue.submit("demo", {"prompt": "x"}, title="slow").job
        lease = queue.lease("render-box:4123", lease_s=5)
        assert lease is not None
        clock.advance(10)
        assert queue.reap() == [job.id]  # expired
        clock.advance(120)
        assert queue.lease("other:1", lease_s=30) is not None  # and leased again
        model = _after_the_lease_was_lost(queue, job.id, lease)
    rows = _stale_rows(model)
    assert [category for _h, category in rows] == ["expiry", "expiry"]
    assert "Lease renewal refused (stale lease)" in rows[0][0]
    assert "Late result rejected (stale lease)" in rows[1][0]
