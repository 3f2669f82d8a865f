"""The item models: Qt's model tester, incremental updates, filters, and 10,000 jobs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from desktop_queue.core import Outcome, Queue
from desktop_queue.core.model import EventType, State
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.models import (
    DeadLetterModel,
    JobFilterProxy,
    JobRole,
    QueueModel,
    RefreshCoordinator,
    TimelineModel,
    TimelineRole,
)


@pytest.fixture
def queue(data_dir: Path) -> Any:
    """A queue with a job in every state (and a replay)."""
    q = Queue.open(data_dir, {"demo": DemoProvider()})
    ids = {}
    for name in ("queued", "running", "succeeded", "dead", "cancelled"):
        ids[name] = q.submit("demo", {"prompt": name}, title=f"{name} job").job.id
    q.cancel(ids["cancelled"])
    for name, outcome in (
        ("succeeded", Outcome.success({"text": "ok"})),
        ("dead", Outcome.failure("fatal", "demo: simulated invalid request (400)", status=400)),
        ("running", None),
    ):
        while True:
            lease = q.lease("w1")
            assert lease is not None
            if lease.job_id == ids[name]:
                break
            q.release(lease)
        if outcome is None:
            continue
        if outcome.ok:
            q.complete(lease, outcome.result)
        else:
            q.fail(lease, outcome)
    ids["replay"] = q.replay(ids["succeeded"]).id
    q.ids = ids  # type: ignore[attr-defined]
    yield q
    q.close()


def test_queue_model_passes_the_model_tester(qtmodeltester: Any, queue: Any) -> None:
    model = QueueModel()
    model.reset_jobs(queue.raw_jobs())
    assert model.rowCount() == 6
    qtmodeltester.check(model)
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    proxy.sort(0, Qt.SortOrder.AscendingOrder)
    qtmodeltester.check(proxy)


def test_dead_letter_model_passes_the_model_tester_and_holds_only_dead_jobs(qtmodeltester: Any, queue: Any) -> None:
    model = DeadLetterModel()
    model.reset_jobs(queue.raw_jobs())
    assert [model.job_at(r)["id"] for r in range(model.rowCount())] == [queue.ids["dead"]]
    qtmodeltester.check(model)
    index = model.index(0, 3)
    assert "HTTP 400" in index.data(Qt.ItemDataRole.ToolTipRole)


def test_timeline_model_passes_the_model_tester(qtmodeltester: Any, queue: Any) -> None:
    model = TimelineModel()
    model.show_job(queue.get(queue.ids["dead"]))
    qtmodeltester.check(model)
    categories = [model.index(r).data(TimelineRole.CATEGORY) for r in range(model.rowCount())]
    assert categories[-1] == "failure"


def test_state_column_is_icon_and_text(queue: Any) -> None:
    model = QueueModel()
    model.reset_jobs(queue.raw_jobs())
    row = model.row_of(queue.ids["dead"])
    index = model.index(row, 0)
    assert index.data() == "dead"
    assert index.data(Qt.ItemDataRole.DecorationRole) is not None


def test_updates_are_incremental_never_a_reset(qtbot: Any, queue: Any) -> None:
    queue_model, dead_model = QueueModel(), DeadLetterModel()
    refresher = RefreshCoordinator(queue, [queue_model, dead_model], interval_ms=300)
    refresher.refresh()
    assert queue_model.rowCount() == 6 and dead_model.rowCount() == 1
    with qtbot.assertNotEmitted(queue_model.modelReset), qtbot.assertNotEmitted(dead_model.modelReset):
        with qtbot.waitSignal(queue_model.rowsInserted, timeout=1000) as inserted:
            new_id = queue.submit("demo", {"prompt": "new"}).job.id
            refresher.refresh()
        assert inserted.args[1:] == [6, 6]
        with qtbot.waitSignal(queue_model.dataChanged, timeout=1000) as changed:
            queue.cancel(new_id)
            refresher.refresh()
        assert changed.args[0].row() == queue_model.row_of(new_id)
        with qtbot.waitSignal(dead_model.rowsRemoved, timeout=1000):
            queue.retry(queue.ids["dead"])
            refresher.refresh()
    assert dead_model.rowCount() == 0
    assert queue_model.job_at(queue_model.row_of(new_id))["state"] == State.CANCELLED
    assert refresher.timer.objectName() == "refreshTimer"
    assert 250 <= refresher.timer.interval() <= 500


def test_timeline_grows_by_ranged_inserts(qtbot: Any, queue: Any) -> None:
    model = TimelineModel()
    job_id = queue.ids["cancelled"]
    model.show_job(queue.get(job_id))
    before = model.rowCount()
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.rowsInserted, timeout=1000) as blocker:
        queue.retry(job_id)
        model.update_job(queue.get(job_id))
    assert blocker.args[1:] == [before, before]
    assert model.index(before).data(TimelineRole.EVENT).type == EventType.RETRIED


def test_replay_events_link_both_ways(queue: Any) -> None:
    model = TimelineModel()
    model.show_job(queue.get(queue.ids["replay"]))
    assert model.index(0).data(TimelineRole.LINK) == queue.ids["succeeded"]
    model.show_job(queue.get(queue.ids["succeeded"]))
    links = [model.index(r).data(TimelineRole.LINK) for r in range(model.rowCount())]
    assert queue.ids["replay"] in links
    assert "replayed as" in model.as_text().lower()


def test_proxy_filters_by_text_and_state(queue: Any) -> None:
    model = QueueModel()
    model.reset_jobs(queue.raw_jobs())
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    proxy.set_state("dead")
    assert proxy.job_ids() == [queue.ids["dead"]]
    proxy.set_state(None)
    proxy.set_text("CANCELLED job")
    assert proxy.job_ids() == [queue.ids["cancelled"]]
    proxy.set_text("http 400")
    assert proxy.job_ids() == [queue.ids["dead"]]


def test_ten_thousand_jobs_load_into_the_queue_model(qtbot: Any, queue: Any) -> None:
    template = next(j for j in queue.raw_jobs() if j["state"] == State.QUEUED)
    jobs = [{**template, "id": f"{i:010x}", "seq": i, "title": f"job {i}"} for i in range(10_000)]
    model = QueueModel()
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    started = time.perf_counter()
    model.reset_jobs(jobs)
    proxy.sort(6, Qt.SortOrder.DescendingOrder)
    loaded = time.perf_counter() - started
    assert proxy.rowCount() == 10_000
    started = time.perf_counter()
    with qtbot.assertNotEmitted(model.modelReset):
        model.apply([{**j, "state": "cancelled"} for j in jobs[::100]])
        model.tick()
    updated = time.perf_counter() - started
    print(f"\n10,000 jobs: load+sort {loaded * 1000:.0f} ms, 100 scattered updates + clock tick {updated * 1000:.0f} ms")
    assert proxy.index(0, 0).data(JobRole.ID) == f"{9999:010x}"
