"""A job's timeline names the machine and process that ran each attempt (issue 13: shared queues).

On a queue several machines share, "by system on hostc:4123" did not say which part was
the machine; the timeline, its heading and ``desktop-queue show`` now say
``leased by hostc (pid 4123)``, ``completed by hostc (pid 4123)``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from desktop_queue.core import FakeClock, Outcome, Queue, RetryPolicy
from desktop_queue.core.model import Event, EventType
from desktop_queue.core.present import event_who, ran_on_text, worker_name
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.models.timeline_model import TimelineModel, TimelineRole, event_detail
from desktop_queue.ui.panes.timeline_pane import TimelinePane

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("worker", "named"),
    [
        ("render-box:4123", "render-box (pid 4123)"),
        ("gpu.lan:1:77", "gpu.lan:1 (pid 77)"),  # (the pid is what follows the last colon)
        ("nightly-runner", "nightly-runner"),  # a name a caller chose: as it is
        ("host:abc", "host:abc"),
        (None, None),
        ("", None),
    ],
)
def test_a_worker_id_reads_as_its_machine_and_process(worker: str | None, named: str | None) -> None:
    assert worker_name(worker) == named


@pytest.mark.parametrize(
    ("kind", "actor", "worker", "said"),
    [
        (EventType.LEASED, "system", "render-box:4123", "leased by render-box (pid 4123)"),
        (EventType.SUCCEEDED, "system", "render-box:4123", "completed by render-box (pid 4123)"),
        (EventType.RETRY_SCHEDULED, "system", "hostb:77", "failed on hostb (pid 77)"),
        (EventType.DEAD_LETTERED, "system", "hostb:77", "failed on hostb (pid 77)"),
        (EventType.LEASE_EXPIRED, "system", "hostc:9", "the lease of hostc (pid 9)"),
        (EventType.RESUMED, "system", "hostc:9", "renewed by hostc (pid 9)"),
        (EventType.SUBMITTED, "cli", None, "by cli"),
        (EventType.CANCELLED, "user", None, "by user"),
        (EventType.CANCELLED, "user", "hostc:9", "by user, on hostc (pid 9)"),
    ],
)
def test_each_event_says_who_in_words(kind: str, actor: str, worker: str | None, said: str) -> None:
    assert event_who(kind, actor, worker) == said
    event = Event(type=kind, at=1_700_000_000.0, attempt=1, epoch=1, worker=worker, actor=actor)
    assert event_detail(event).split(" · ")[0] == said


@pytest.fixture
def ran_twice(tmp_path: Path) -> Queue:
    """A job whose first attempt failed on hostb and whose second succeeded on render-box."""
    queue = Queue.open(tmp_path / "data", {"demo": DemoProvider()}, clock=FakeClock(), policy=RetryPolicy())
    job = queue.submit("demo", {"prompt": "p", "duration_s": 0}, actor="cli").job
    first = queue.lease("hostb:77")
    assert first is not None and first.job_id == job.id
    queue.fail(first, Outcome(ok=False, error_class="retryable", message="timed out"))  # type: ignore[arg-type]
    queue.clock.advance(120)  # type: ignore[attr-defined]
    second = queue.lease("render-box:4123")
    assert second is not None and second.job_id == job.id
    queue.complete(second, {"text": "done"})
    return queue


def test_the_timeline_names_the_machine_of_each_attempt(ran_twice: Queue, qtbot: Any) -> None:
    (job,) = ran_twice.list()
    job = ran_twice.get(job.id)
    model = TimelineModel()
    model.show_job(job)
    details = [model.data(model.index(row, 0), TimelineRole.DETAIL) for row in range(model.rowCount())]
    whos = [d.split(" · ")[0] for d in details]
    assert whos == [
        f"by cli on {socket.gethostname().split('.')[0]}",  # (where it was submitted)
        "leased by hostb (pid 77)",
        "failed on hostb (pid 77)",
        "leased by render-box (pid 4123)",
        "completed by render-box (pid 4123)",
    ]
    assert ran_on_text(job.events) == "attempt 1 on hostb (pid 77), attempt 2 on render-box (pid 4123)"
    pane = TimelinePane(model)
    qtbot.addWidget(pane)
    pane.refresh_heading()
    assert "attempt 2 on render-box (pid 4123)" in pane.heading.text()
    assert pane.heading.text().split("  ·  ")[-1] == "succeeded"  # (last: the middle elides, not the state)


def test_show_prints_where_each_attempt_ran(ran_twice: Queue) -> None:
    (job,) = ran_twice.list()
    data_dir = ran_twice.data_dir
    ran_twice.close()
    env = {k: v for k, v in os.environ.items() if k != "DESKTOP_QUEUE_STORE"}
    shown = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "show", job.id],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "ran on    attempt 1 on hostb (pid 77), attempt 2 on render-box (pid 4123)\n" in out
    lines = out.split("timeline\n", 1)[1].splitlines()
    assert "leased by hostb (pid 77)" in lines[1] and "failed on hostb (pid 77)" in lines[2]
    assert "leased by render-box (pid 4123)" in lines[3] and "completed by render-box (pid 4123)" in lines[4]
    assert "by cli" in lines[0]


def test_a_submission_names_the_machine_it_was_made_on(tmp_path: Path) -> None:
    """Several machines may share a store: the timeline says where a job was asked for."""
    queue = Queue.open(tmp_path / "data", {"demo": DemoProvider()}, clock=FakeClock(), policy=RetryPolicy())
    try:
        job = queue.submit("demo", {"prompt": "p", "duration_s": 0}, actor="user").job
        submitted = queue.get(job.id).events[0]
    finally:
        queue.close()
    host = socket.gethostname().split(".")[0]
    assert submitted.detail["host"] == host
    assert event_detail(submitted).split(" · ")[0] == f"by user on {host}"
    assert f"host: {host}" not in event_detail(submitted)  # said once, in the words
    assert event_who(EventType.SUBMITTED, "cli", None, "studio") == "by cli on studio"


def test_a_narrow_heading_leaves_out_the_machine_then_the_id_before_the_title(ran_twice: Queue, qtbot: Any) -> None:
    """Elided in the middle, "Lighthouse study 999  ·  job 07db…  ·  succeeded" read
    "Lighthouse study…7)  ·  succeeded": the title's end, what tells one job from the next, was gone."""
    (job,) = ran_twice.list()
    job = ran_twice.get(job.id)
    model = TimelineModel()
    model.show_job(job)
    pane = TimelinePane(model)
    qtbot.addWidget(pane)
    pane.refresh_heading()
    heading = pane.heading
    full = heading.text()
    metrics = heading.fontMetrics()
    title = job.title
    without_host = f"{title}  ·  job {job.id}  ·  succeeded"
    shortest = f"{title}  ·  succeeded"
    margins = heading.width() - heading.contentsRect().width()
    for width, shown in (
        (metrics.horizontalAdvance(full) + 2, full),
        (metrics.horizontalAdvance(without_host) + 2, without_host),
        (metrics.horizontalAdvance(shortest) + 2, shortest),
    ):
        heading.resize(width + margins, heading.height())
        assert heading.shown_text() == shown
    heading.resize(metrics.horizontalAdvance(shortest) // 2 + margins, heading.height())
    assert heading.shown_text() == metrics.elidedText(
        shortest, Qt.TextElideMode.ElideMiddle, heading.contentsRect().width()
    )
    assert heading.elided and heading.toolTip() == full  # the whole text on hover
    heading.setText("Select a job to see its timeline")  # a plain text forgets the shorter forms
    heading.resize(metrics.horizontalAdvance(heading.text()) + 2 + margins, heading.height())
    assert heading.shown_text() == "Select a job to see its timeline"


def test_an_attempt_leased_again_and_again_by_one_worker_is_said_once_with_a_count() -> None:
    """A job throttled three times said "attempt 1 on vm (pid 8811)" three times over in `show`."""

    def leased(attempt: int, worker: str) -> dict[str, Any]:
        return {"type": "leased", "attempt": attempt, "worker": worker}

    events = [leased(1, "vm:8811"), leased(1, "vm:8811"), leased(1, "vm:8811"), leased(2, "box:5")]
    assert ran_on_text(events) == "attempt 1 on vm (pid 8811) (3 leases), attempt 2 on box (pid 5)"
