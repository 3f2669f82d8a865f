"""The window's timeline of a succeeded job whose result file was deleted or damaged (issue 10).

The event that names the result says what happened ("result file missing",
"result damaged, moved aside to …") instead of a path that is not there, in the
view, its tooltip, the copied text and the heading.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.model import Job
from desktop_queue.core.present import short_ref
from desktop_queue.providers import discover
from desktop_queue.ui.models import TimelineRole
from desktop_queue.ui.panes import TimelinePane
from desktop_queue.ui.timeline import LiveTimelineModel


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Queue]:
    q = Queue.open(tmp_path / "data", discover(), clock=FakeClock(), background_compaction=False)
    yield q
    q.close()


def succeeded(queue: Queue, compacted: bool = True, prompt: str = "a result to lose") -> Job:
    """A succeeded job; ``compacted``: its result lives only in its file, not in the journal."""
    queue.submit("demo", {"prompt": prompt})
    lease = queue.lease("w")
    assert lease is not None
    queue.complete(lease, {"text": "gone soon"})
    if compacted:
        queue.store.compact_now()
        assert queue.store.carried_result(lease.job.idempotency_key) is None
    return queue.get(lease.job_id)


def result_row_texts(model: LiveTimelineModel, role: int) -> list[str]:
    return [
        str(model.index(r).data(role))
        for r in range(model.event_count())
        if "result_ref" in model.index(r).data(TimelineRole.EVENT).detail
    ]


def test_a_deleted_result_file_is_said_missing(qtmodeltester: Any, queue: Queue) -> None:
    job = succeeded(queue)
    assert job.result_ref is not None
    (queue.data_dir / job.result_ref).unlink()
    model = LiveTimelineModel(results=queue.results)
    model.show_job(job)
    qtmodeltester.check(model)

    for role in (Qt.ItemDataRole.DisplayRole, TimelineRole.DETAIL, Qt.ItemDataRole.ToolTipRole):
        texts = result_row_texts(model, role)
        assert texts and all(
            "result file missing" in t and f"result ref: {short_ref(job.result_ref)}" not in t for t in texts
        )
    assert model.result_note is not None and "result file missing" in model.as_text()


def test_a_damaged_result_file_names_where_it_was_moved(qtbot: Any, queue: Queue) -> None:
    job = succeeded(queue)
    assert job.result_ref is not None
    path = queue.data_dir / job.result_ref
    path.write_bytes(b"\x00not json")
    model = LiveTimelineModel(results=queue.results)
    pane = TimelinePane(model)
    qtbot.addWidget(pane)
    model.show_job(job)

    (moved,) = path.parent.glob(path.name + ".corrupt-*")
    [detail] = result_row_texts(model, TimelineRole.DETAIL)
    assert f"result damaged, moved aside to {moved}" in detail
    assert f"result damaged, moved aside to {moved}" in pane.heading.text()


def test_a_healthy_or_journal_held_result_shows_its_ref(queue: Queue) -> None:
    in_file = succeeded(queue)
    in_journal = succeeded(queue, compacted=False, prompt="still in the journal")
    model = LiveTimelineModel(results=queue.results)
    for job in (in_file, in_journal):
        model.show_job(job)
        assert model.result_note is None
        texts = result_row_texts(model, TimelineRole.DETAIL)
        assert texts and all(f"result ref: {short_ref(job.result_ref)}" in t for t in texts)


def test_the_window_timeline_checks_its_queues_results(session: Any) -> None:
    model = session.window.timeline_model
    assert isinstance(model, LiveTimelineModel)
    assert model._results is session.window.controller.queue.results
