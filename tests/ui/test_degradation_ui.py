"""The window's side of degradation: the "Pause background work" toggle and what the status bar says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from desktop_queue.core import FakeClock, Outcome
from desktop_queue.core.flow import FlowControl, ProfileLimits
from desktop_queue.core.pause import BackgroundSwitch
from desktop_queue.ui.main_window import MainWindow

WAIT_MS = 5000
FAILING = "background jobs paused: openai is failing"


def background_text(window: MainWindow) -> str | None:
    """The status bar's word on background work (None while it is hidden)."""
    status = window.status
    return status.background_label.text() if status.background_item.isVisibleTo(window) else None


def next_run(window: MainWindow, job_id: str) -> str:
    model = window.controller.queue_model
    row = model.row_of(job_id)
    if row is None:
        return ""
    column = [c.key for c in model.columns].index("next")
    return str(model.index(row, column).data(Qt.ItemDataRole.DisplayRole))


# ---------------------------------------------------------------------- the switch


def test_the_toggle_pauses_background_work_for_the_data_dir_and_interactive_jobs_still_run(
    qtbot: Any, session: Any, data_dir: Path
) -> None:
    window: MainWindow = session.window
    controller = window.controller
    toggle = window.action("pause_background")
    assert toggle.isCheckable() and not toggle.isChecked()
    assert toggle in window.menus["queue"].actions()
    assert background_text(window) is None

    toggle.trigger()
    assert toggle.isChecked()
    stored = BackgroundSwitch(data_dir).state()  # in the data dir, for every process and the next start
    assert stored.paused and stored.by == "user" and stored.at is not None
    qtbot.waitUntil(lambda: (background_text(window) or "").startswith("Background work paused (by user, "))

    later = controller.submit(
        "demo", {"prompt": "a summary", "duration_s": 0.01}, title="bg", priority="background", max_attempts=None
    )
    now = controller.submit(
        "demo", {"prompt": "a question", "duration_s": 0.01}, title="fg", priority="interactive", max_attempts=None
    )
    qtbot.waitUntil(lambda: controller.queue.get(now.job.id).state == "succeeded", timeout=WAIT_MS)
    for _ in range(3):
        controller.driver.tick()
    held = controller.queue.get(later.job.id)
    assert held.state == "queued" and held.total_attempts == 0  # not leased, nothing spent
    qtbot.waitUntil(lambda: next_run(window, later.job.id) == "background jobs paused (by user)", timeout=WAIT_MS)

    toggle.trigger()  # resume
    assert not toggle.isChecked() and not BackgroundSwitch(data_dir).paused
    qtbot.waitUntil(lambda: controller.queue.get(later.job.id).state == "succeeded", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: background_text(window) is None, timeout=WAIT_MS)


def test_a_switch_flipped_elsewhere_shows_in_the_toggle_and_the_status_bar(
    qtbot: Any, session: Any, data_dir: Path
) -> None:
    window: MainWindow = session.window
    elsewhere = BackgroundSwitch(data_dir)  # what `desktop-queue pause-background` does
    elsewhere.set(True, "cli", reason="nightly batch off")
    toggle = window.action("pause_background")
    qtbot.waitUntil(toggle.isChecked, timeout=WAIT_MS)
    text = background_text(window) or ""
    assert text.startswith("Background work paused (by cli, ") and text.endswith(": nightly batch off")
    assert "interactive jobs still run" in window.status.background_item.toolTip()
    elsewhere.set(True, "cli", reason="a long reason " * 12)  # elides: it never widens the window
    qtbot.waitUntil(lambda: window.status.background_label.text().endswith("a long reason"), timeout=WAIT_MS)
    window.resize(800, 500)
    QApplication.processEvents()
    assert window.size().toTuple() == (800, 500)
    item = window.status.background_item
    assert item.isVisibleTo(window) and item.geometry().right() <= window.status.width()
    elsewhere.set(False, "cli")
    qtbot.waitUntil(lambda: not toggle.isChecked() and background_text(window) is None, timeout=WAIT_MS)


# ---------------------------------------------------------------------- a degraded profile


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def attempt(flow: FlowControl, job_id: str, outcome: Outcome) -> None:
    job = {"id": job_id, "kind": "openai.chat", "input": {"prompt": "p"}, "state": "queued", "priority": "interactive"}
    assert flow.accept(job)
    flow.on_start(job)
    flow.on_outcome(job, outcome)


def test_a_failing_profile_pauses_its_background_jobs_in_the_status_bar_and_their_reasons(
    qtbot: Any, flow_window: Any, clock: FakeClock
) -> None:
    window, flow = flow_window(ProfileLimits(breaker_threshold=2, breaker_cooldown_s=10, concurrency=2))
    queue = window.controller.queue
    summary = queue.submit("openai.chat", {"prompt": "summarise"}, title="bg").job.id
    question = queue.submit("openai.chat", {"prompt": "answer"}, title="fg", priority="interactive").job.id
    for n in range(2):
        attempt(flow, f"down-{n}", Outcome.failure("retryable", "HTTP 503"))
    qtbot.waitUntil(lambda: background_text(window) == FAILING, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: next_run(window, summary) == FAILING, timeout=WAIT_MS)
    assert next_run(window, question) == "waiting: provider unavailable"  # its own reason: it goes first

    clock.advance(10)
    attempt(flow, "probe", Outcome.success({"text": "back"}))  # the profile answers again: a slow start
    resuming = "background jobs resuming: openai recovered, 1 at a time for now"
    qtbot.waitUntil(lambda: background_text(window) == resuming, timeout=WAIT_MS)
    clock.advance(5)  # the ramp reaches the profile's 2 at once: background work runs freely
    qtbot.waitUntil(lambda: background_text(window) is None, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: next_run(window, summary) == "ready", timeout=WAIT_MS)


def test_the_switch_and_a_degraded_profile_are_both_said(qtbot: Any, flow_window: Any, data_dir: Path) -> None:
    window, flow = flow_window(ProfileLimits(breaker_threshold=1))
    BackgroundSwitch(data_dir).set(True, "cli")
    attempt(flow, "down", Outcome.failure("retryable", "HTTP 503"))
    qtbot.waitUntil(
        lambda: (
            (background_text(window) or "").startswith("Background work paused (by cli, ")
            and (background_text(window) or "").endswith(f"; {FAILING}")
        ),
        timeout=WAIT_MS,
    )
