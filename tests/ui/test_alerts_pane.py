"""The Alerts pane and its model; banners and notices once per transition; the rules dialog."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from desktop_queue.core.alerts import (
    CLEARED,
    DEFAULTS,
    FIRED,
    JOBS_STUCK,
    THROTTLE_SPIKE,
    AlertBook,
    Rule,
    Signals,
    Transition,
    load_rules,
)
from desktop_queue.ui.models.alerts_model import ACTIVE, HISTORY, AlertsModel
from desktop_queue.ui.panes.alerts_pane import AlertRulesDialog, AlertsPane

T0 = 1_800_000_000.0
SPIKE = Rule(THROTTLE_SPIKE, threshold=10, clear_s=0)


def t(n: int, kind: str, rule: str = THROTTLE_SPIKE, subject: str = "") -> Transition:
    return Transition(n, rule, subject, kind, T0 + n, f"text {n}", 1.0)


def test_model_passes_the_model_tester_and_updates_in_place(qtmodeltester: Any, qtbot: Any) -> None:
    model = AlertsModel()
    qtmodeltester.check(model)
    model.set_alerts([t(1, FIRED)], [t(1, FIRED)])
    qtmodeltester.check(model)
    assert [(r.section, r.transition.id) for r in model.rows] == [(ACTIVE, 1), (HISTORY, 1)]
    # the alert clears and another fires: rows go and come, the others stay put (no reset)
    with qtbot.assertNotEmitted(model.modelReset):
        model.set_alerts(
            [t(3, FIRED, "breaker_open", "openai")], [t(3, FIRED, "breaker_open", "openai"), t(2, CLEARED), t(1, FIRED)]
        )
    qtmodeltester.check(model)
    assert [(r.section, r.transition.id) for r in model.rows] == [(ACTIVE, 3), (HISTORY, 3), (HISTORY, 2), (HISTORY, 1)]
    assert model.active_count() == 1
    top = model.index(0, 1)
    assert model.data(top) == "Active" and model.data(model.index(0, 3)) == "openai"
    assert model.data(model.index(2, 1)) == "Cleared" and model.data(model.index(3, 3)) == "queue"
    assert model.data(model.index(0, 4), Qt.ItemDataRole.ToolTipRole) == "Alert: text 3"


def test_when_reads_as_the_job_tables_read_with_the_full_time_on_hover() -> None:
    import time

    from desktop_queue.core.model import iso

    model = AlertsModel()
    now = time.time()
    model.set_alerts([], [Transition(2, THROTTLE_SPIKE, "", FIRED, now, "t", 1.0), t(1, FIRED)])
    today, older = model.index(0, 0), model.index(1, 0)
    assert model.data(today) == time.strftime("%H:%M:%S", time.localtime(now))  # not 2026-12-06T14:18:58+00:00
    assert model.data(older) == time.strftime("%Y-%m-%d", time.localtime(T0 + 1))  # (a time in the tooltip)
    assert model.data(older, Qt.ItemDataRole.ToolTipRole) == iso(T0 + 1)


def test_the_pane_lists_active_alerts_on_top_with_a_heading(qtbot: Any) -> None:
    model = AlertsModel()
    pane = AlertsPane(model)
    qtbot.addWidget(pane)
    assert "No alert has fired" in pane.heading.text()
    model.set_alerts([t(2, FIRED)], [t(2, FIRED), t(1, CLEARED)])
    assert pane.heading.text().startswith("1 active alert;")
    model.set_alerts([], [t(3, CLEARED), t(2, FIRED), t(1, CLEARED)])
    assert pane.heading.text().startswith("No active alert.")
    with qtbot.waitSignal(pane.rules_requested, timeout=1000):
        pane.rules_button.click()


def test_rules_dialog_saves_only_what_changed(qtbot: Any, tmp_path: Path) -> None:
    dialog = AlertRulesDialog(DEFAULTS, config_dir=tmp_path)
    qtbot.addWidget(dialog)
    dialog.spins[(THROTTLE_SPIKE, "threshold")].setValue(30)
    dialog.enabled["budget_nearly_spent"].setChecked(False)
    dialog.save()
    assert dialog.result() == dialog.DialogCode.Accepted
    rules = load_rules(tmp_path)
    assert rules[THROTTLE_SPIKE].threshold == 30 and not rules["budget_nearly_spent"].enabled
    assert rules["queue_wait_p95"] == DEFAULTS["queue_wait_p95"]  # untouched rules stay the defaults
    again = AlertRulesDialog(rules, config_dir=tmp_path)
    qtbot.addWidget(again)
    again.restore_defaults()
    again.save()
    assert load_rules(tmp_path) == DEFAULTS


def test_a_transition_raises_one_banner_and_one_notice_whichever_process_recorded_it(
    session: Any, qtbot: Any, data_dir: Path
) -> None:
    window = session.window
    watch = session.controller.alerts
    sent_before = len(window.notifier.sent)
    # another process (here: another book on the same data dir) records the alert
    other = AlertBook(data_dir)
    other.update([SPIKE], Signals(at=T0, throttles=tuple(T0 - 1 for _ in range(12))))
    with qtbot.waitSignal(watch.transitions, timeout=5000) as blocker:
        pass
    assert [x.kind for x in blocker.args[0]] == [FIRED]
    assert window.banner.isVisible() and "Alert: 12 rate-limit (429)" in window.banner.text.text()
    assert len(window.notifier.sent) == sent_before + 1
    assert window.alerts_pane.model.active_count() == 1
    tab = window.tabs.indexOf(window.alerts_pane)
    assert window.tabs.tabText(tab) == "Alerts (1)" and not window.tabs.tabIcon(tab).isNull()
    # looking again announces nothing new
    assert watch.poll() == []
    assert len(window.notifier.sent) == sent_before + 1
    other.update([SPIKE], Signals(at=T0 + 60))
    qtbot.waitUntil(lambda: window.alerts_pane.model.active_count() == 0, timeout=5000)
    assert "Cleared:" in window.banner.text.text()
    assert window.tabs.tabText(tab) == "Alerts" and window.tabs.tabIcon(tab).isNull()
    assert len(window.notifier.sent) == sent_before + 2


def test_the_windows_upkeep_scans_and_raises_alerts(session: Any, qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver ticks the upkeep; a stuck job raises the stuck-jobs alert once (banner, history)."""
    controller = session.controller
    upkeep = controller.alerts.upkeep
    rule = dataclasses.replace(DEFAULTS[JOBS_STUCK], clear_s=0)
    upkeep.rules = lambda: [rule]
    upkeep.scan.stuck_after_s = 0.0
    upkeep.scan.capacity_free = lambda: True
    controller.driver.pause()  # nothing leases the job: it stays queued, past its run time
    session.queue.submit("demo", {"prompt": "x"}, title="waits")
    fired = upkeep.tick()
    assert [x.kind for x in fired] == [FIRED]
    assert upkeep.tick() == []  # still stuck: no second alert
    qtbot.waitUntil(lambda: session.window.alerts_pane.model.active_count() == 1, timeout=5000)
    assert "stuck" in session.window.banner.text.text()


def test_finished_jobs_are_announced_once_by_the_window(session: Any, qtbot: Any) -> None:
    """A job that ends is announced soon after (no upkeep tick needed), and never again."""
    controller = session.controller
    window = session.window
    job_id = session.queue.submit("demo", {"prompt": "x"}, title="a poem").job.id
    qtbot.waitUntil(lambda: session.queue.get(job_id).state == "succeeded", timeout=5000)
    qtbot.waitUntil(lambda: "“a poem” finished" in [text for _c, text in window.notifier.sent], timeout=5000)
    assert controller.alerts.outbox.view().delivered(f"{job_id}:1:succeeded")
    with qtbot.assertNotEmitted(controller.alerts.notices):
        controller.alerts.upkeep.tick()
        controller.alerts.deliver_now()
    assert [text for _c, text in window.notifier.sent].count("“a poem” finished") == 1


def test_a_dead_letter_is_announced_once_whichever_process_it_died_in(session: Any, qtbot: Any, data_dir: Path) -> None:
    """A job dead-lettered by another process on the data dir reaches this window's notices, once."""
    from desktop_queue.core import Queue
    from desktop_queue.core.model import ErrorClass
    from desktop_queue.core.outcome import Outcome

    session.controller.driver.pause()
    window = session.window
    with Queue.open(data_dir) as other:  # (this process, but another queue: as a worker would)
        job_id = other.submit("demo", {"prompt": "x"}, title="a sketch").job.id
        lease = other.lease("elsewhere")
        assert lease is not None and lease.job_id == job_id
        other.fail(lease, Outcome.failure(ErrorClass.FATAL, "HTTP 400"))
    expected = "“a sketch” dead-lettered; it waits for you in Dead letters"
    qtbot.waitUntil(lambda: expected in [text for _c, text in window.notifier.sent], timeout=5000)
    session.controller.alerts.deliver_now()
    assert [text for _c, text in window.notifier.sent].count(expected) == 1


def test_job_actions_do_not_reach_through_the_alerts_tab(session: Any, qtbot: Any) -> None:
    window = session.window
    session.controller.driver.pause()
    job_id = session.queue.submit("demo", {"prompt": "x"}, title="held").job.id
    window.refresh()
    qtbot.waitUntil(lambda: window.queue_pane.select(job_id), timeout=5000)
    assert [j["id"] for j in window.selection()] == [job_id]
    window.tabs.setCurrentWidget(window.alerts_pane)
    assert window.selection() == []


def test_a_status_that_changes_in_place_is_shown_whole(qtbot: Any) -> None:
    """An alert that cleared read "Cle…": its row changed from Active in place, and the
    columns had been fitted to "Active" and "Fired"."""
    from PySide6.QtGui import QFontMetrics
    from PySide6.QtWidgets import QApplication

    model = AlertsModel()
    pane = AlertsPane(model)
    qtbot.addWidget(pane)
    pane.resize(900, 400)
    pane.show()
    model.set_alerts([t(1, FIRED)], [t(1, FIRED)])
    QApplication.processEvents()
    model.set_alerts([], [t(2, CLEARED), t(1, FIRED)])
    header = pane.view.horizontalHeader()
    needed = QFontMetrics(pane.view.font()).horizontalAdvance("Cleared") + 16  # and its icon
    qtbot.waitUntil(lambda: header.sectionSize(1) >= needed, timeout=2000)
    # and What still reaches the pane's edge
    assert sum(header.sectionSize(i) for i in range(header.count())) == pane.view.viewport().width()
