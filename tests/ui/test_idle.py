"""Idle means idle: the refresh follows the window's visibility, an idle tick reads nothing
it does not need, and the keyboard brings focus to a row."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from desktop_queue.ui.models.refresh import HIDDEN_MS, UNFOCUSED_MS, Pace


def submit(session: Any, title: str) -> str:
    # straight into the store, as another process would: the window learns of it only by refreshing
    return session.queue.submit("demo", {"prompt": title, "duration_s": 5}, title=title, priority="background").job.id


def test_the_refresh_slows_down_behind_another_application_and_while_hidden(qtbot: Any, session: Any) -> None:
    refresher, window = session.controller.refresher, session.window
    focused = refresher.intervals[Pace.FOCUSED]
    assert refresher.timer.interval() == focused and refresher.pace == Pace.FOCUSED
    app = QApplication.instance()
    app.applicationStateChanged.emit(Qt.ApplicationState.ApplicationInactive)
    assert refresher.timer.interval() == UNFOCUSED_MS and refresher.timer.isActive()
    app.applicationStateChanged.emit(Qt.ApplicationState.ApplicationActive)
    assert refresher.timer.interval() == focused
    window.hide()
    assert refresher.pace == Pace.HIDDEN and refresher.timer.interval() == HIDDEN_MS
    assert refresher.timer.isActive()  # slowed, not stopped: the tray's notices still come
    window.show()
    assert refresher.timer.interval() == focused
    window.showMinimized()
    qtbot.waitUntil(lambda: refresher.pace == Pace.HIDDEN, timeout=2000)
    window.showNormal()
    qtbot.waitUntil(lambda: refresher.pace == Pace.FOCUSED, timeout=2000)


def test_a_change_made_while_hidden_shows_right_after_show(qtbot: Any, session: Any) -> None:
    window, model = session.window, session.controller.queue_model
    session.controller.set_paused(True)
    window.hide()
    job_id = submit(session, "made while hidden")
    QApplication.processEvents()
    assert model.row_of(job_id) is None  # the hidden window waits its 5 s
    window.show()
    QApplication.processEvents()  # the refresh queued by the show, nothing timed
    assert model.row_of(job_id) is not None


def test_an_idle_tick_neither_counts_the_store_nor_walks_the_jobs(
    qtbot: Any, session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller, window = session.controller, session.window
    controller.set_paused(True)
    job_id = submit(session, "waiting")
    controller.refresher.refresh()
    assert window.state_labels["queued"].text() == "1 queued"
    calls = {"counts": 0}
    real = controller.queue.counts

    def counts() -> dict[str, int]:
        calls["counts"] += 1
        return real()

    def no_walk() -> Any:
        raise AssertionError("an idle tick walked every job")

    monkeypatch.setattr(controller.queue, "counts", counts)
    monkeypatch.setattr(controller.queue_model, "jobs", no_walk)
    for _ in range(3):
        controller.refresher.refresh()
    assert calls["counts"] == 0
    # a background job's "next run" still says why it waits (the lane counted only when asked)
    assert controller.hold_reason(controller.queue_model.job_at(controller.queue_model.row_of(job_id))) == "paused"
    submit(session, "another")
    controller.refresher.refresh()
    assert calls["counts"] == 1 and window.state_labels["queued"].text() == "2 queued"


def test_done_in_the_last_minute_counts_from_the_changes(qtbot: Any, session: Any) -> None:
    job_id = session.controller.submit(
        "demo", {"prompt": "quick", "duration_s": 0.01}, title="quick", priority="interactive", max_attempts=1
    ).job.id
    qtbot.waitUntil(lambda: session.queue.get(job_id).state == "succeeded", timeout=5000)
    qtbot.waitUntil(lambda: session.window.throughput_label.text() == "1 done in the last minute", timeout=3000)


@pytest.mark.parametrize("reason", [Qt.FocusReason.TabFocusReason, Qt.FocusReason.BacktabFocusReason])
def test_tabbing_into_the_queue_selects_a_row_and_shows_its_timeline(qtbot: Any, session: Any, reason: Any) -> None:
    window = session.window
    session.controller.set_paused(True)
    ids = [submit(session, f"job {i}") for i in range(3)]
    session.controller.refresher.refresh()
    window.queue_pane.search.setFocus()
    view = window.queue_pane.view
    assert not view.selectionModel().hasSelection()
    view.setFocus(reason)
    qtbot.waitUntil(lambda: len(window.queue_pane.selected()) == 1, timeout=2000)
    assert window.queue_pane.selected()[0]["id"] == ids[-1]  # the first row: newest first
    assert window.timeline_model.job is not None and window.timeline_model.job.id == ids[-1]


def test_tab_keeps_a_selection_and_the_mouse_selects_what_it_clicks(qtbot: Any, session: Any) -> None:
    window = session.window
    session.controller.set_paused(True)
    ids = [submit(session, f"job {i}") for i in range(3)]
    session.controller.refresher.refresh()
    view = window.queue_pane.view
    window.queue_pane.search.setFocus()
    view.setFocus(Qt.FocusReason.MouseFocusReason)
    assert not view.selectionModel().hasSelection()
    window.queue_pane.search.setFocus()
    window.queue_pane.select(ids[0])
    window.queue_pane.search.setFocus()
    view.setFocus(Qt.FocusReason.TabFocusReason)
    assert [j["id"] for j in window.queue_pane.selected()] == [ids[0]]


def test_tabbing_into_the_dead_letters_selects_a_row(qtbot: Any, session: Any) -> None:
    window = session.window
    job_id = session.controller.submit(
        "demo",
        {"prompt": "doomed", "duration_s": 0.01, "fail_times": 1, "fail_with": "fatal"},
        title="doomed",
        priority="interactive",
        max_attempts=1,
    ).job.id
    qtbot.waitUntil(lambda: session.queue.get(job_id).state == "dead", timeout=5000)
    window.tabs.setCurrentWidget(window.dead_pane)
    qtbot.waitUntil(lambda: window.dead_pane.proxy.rowCount() == 1, timeout=3000)
    window.dead_pane.view.clearSelection()
    window.dead_pane.search.setFocus()
    window.dead_pane.view.setFocus(Qt.FocusReason.TabFocusReason)
    assert [j["id"] for j in window.dead_pane.selected()] == [job_id]
