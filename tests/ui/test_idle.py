"""Idle means idle: the refresh follows the window's visibility, an idle tick reads nothing
it does not need, and the keyboard brings focus to a row."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from desktop_queue.core import QueueError
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
    assert window.status.state_labels["queued"].text() == "1 queued"
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
    assert calls["counts"] == 1 and window.status.state_labels["queued"].text() == "2 queued"


def test_done_in_the_last_minute_counts_from_the_changes(qtbot: Any, session: Any) -> None:
    job_id = session.controller.submit(
        "demo", {"prompt": "quick", "duration_s": 0.01}, title="quick", priority="interactive", max_attempts=1
    ).job.id
    qtbot.waitUntil(lambda: session.queue.get(job_id).state == "succeeded", timeout=5000)
    qtbot.waitUntil(lambda: session.window.status.throughput_label.text() == "1 done in the last minute", timeout=3000)


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


@pytest.mark.parametrize("seed", range(4))
def test_the_status_bar_kept_from_changes_equals_a_recount_after_random_changes(
    qtbot: Any, qtmodeltester: Any, session: Any, seed: int
) -> None:
    """Random verbs from "another process" (straight on the store), one refresh after each few."""
    from desktop_queue.core import Outcome
    from desktop_queue.core.present import recount

    rng = random.Random(seed)
    controller, window, queue = session.controller, session.window, session.queue
    controller.set_paused(True)  # the window's own worker stays out of it
    ids: list[str] = []
    for step in range(40):
        verb = rng.choice(["submit", "submit", "cancel", "retry", "run"])
        if verb == "submit" or not ids:
            priority = rng.choice(["interactive", "background"])
            try:
                ids.append(
                    queue.submit("demo", {"prompt": f"p{seed}-{step}"}, title=f"t{step}", priority=priority).job.id
                )
            except QueueError:  # the interactive lane is full: as a person would, submit it as background
                ids.append(queue.submit("demo", {"prompt": f"p{seed}-{step}"}, title=f"t{step}").job.id)
        elif verb == "cancel":
            with contextlib.suppress(QueueError):
                queue.cancel(rng.choice(ids))
        elif verb == "retry":
            with contextlib.suppress(QueueError):
                queue.retry(rng.choice(ids))
        else:
            lease = queue.lease("elsewhere")
            if lease is not None:
                if rng.random() < 0.5:
                    queue.complete(lease, {"text": "ok"})
                else:
                    queue.fail(lease, Outcome.failure("fatal", "demo: simulated invalid request (400)", status=400))
        if rng.random() < 0.4:
            controller.refresher.refresh()
    controller.refresher.refresh()
    now = controller.queue.clock.now()
    tally = controller.refresher.tally
    expected = recount(queue.raw_jobs(), now)
    assert tally.counts() == expected["counts"]
    assert tally.done_since(now - 60) == expected["done"]
    assert tally.interactive_ahead(now) == expected["interactive_ahead"]
    counts = queue.counts()
    for state, label in window.status.state_labels.items():
        assert label.text() == f"{counts.get(state, 0)} {state}"
    assert window.status.throughput_label.text() == f"{expected['done']} done in the last minute"
    qtmodeltester.check(controller.queue_model)


def test_a_screen_of_finished_jobs_is_not_repainted_on_ticks(
    qtbot: Any, session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from desktop_queue.ui.panes import queue_pane as panes

    monkeypatch.setattr(panes, "LIVE_REPAINT_S", 0.0)  # no wait between two live repaints
    controller, window = session.controller, session.window
    controller.set_paused(True)
    job_id = submit(session, "finished soon")
    controller.refresher.refresh()
    view = window.queue_pane.view
    QApplication.processEvents()
    updates: list[int] = []
    real_update = view.viewport().update
    monkeypatch.setattr(view.viewport(), "update", lambda *a: updates.append(1) or real_update(*a))
    controller.refresher.refresh()
    assert updates, "a waiting job's clock cells were not repainted"
    session.queue.cancel(job_id)
    controller.refresher.refresh()
    updates.clear()
    for _ in range(3):
        controller.refresher.refresh()
    assert not updates
