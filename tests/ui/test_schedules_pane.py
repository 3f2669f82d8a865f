"""The Schedules pane and the New dialog's Run control, on a real window."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.schedules import ScheduleBook, Scheduler, new_schedule, result_preview
from desktop_queue.ui.models.schedules_model import COLUMNS, NOT_CURRENT, SchedulesModel
from desktop_queue.ui.panes.schedules_pane import ScheduleDialog, SchedulesPane

OK_INPUT = {"prompt": "the morning news", "duration_s": 0}
BAD_INPUT = {"prompt": "the morning news", "duration_s": 0, "fail_times": 9, "fail_with": "fatal"}
COL = {key: n for n, (_h, key) in enumerate(COLUMNS)}


def cell(model: SchedulesModel, row: int, key: str) -> str:
    return str(model.index(row, COL[key]).data(Qt.ItemDataRole.DisplayRole))


@pytest.fixture
def pane(session: Any, qtbot: Any) -> SchedulesPane:
    window = session.window
    window.tabs.setCurrentWidget(window.schedules_pane)
    qtbot.waitUntil(window.schedules_pane.isVisible, timeout=3000)
    pane: SchedulesPane = window.schedules_pane
    return pane


def add_via_dialog(pane: SchedulesPane, name: str, payload: dict[str, Any], cron: str = "0 * * * *") -> None:
    dialog = pane.add()
    dialog.name.setText(name)
    dialog.cron.setText(cron)
    dialog.tz.setCurrentText("Europe/Berlin")
    dialog.kind.setCurrentIndex(dialog.kind.findData("demo"))
    dialog.input.setPlainText(json.dumps(payload))
    assert "Next run:" in dialog.next_label.text()
    if cron == "0 * * * *":
        assert dialog.next_label.text().startswith("Every hour. Next run: ")
    assert dialog.try_accept()


def test_the_model_passes_the_model_tester(qtmodeltester: Any, tmp_path: Path) -> None:
    clock = FakeClock(start=1_800_000_000.0)
    queue = Queue.open(tmp_path / "data", clock=clock, background_compaction=False)
    try:
        scheduler = Scheduler(queue)
        for name in ("a", "b"):
            scheduler.book.add(new_schedule(name, "0 * * * *", "demo", {"prompt": name}, now=clock.now(), tz="UTC"))
        scheduler.run_now("a")
        model = SchedulesModel(scheduler, clock.now)
        model.refresh()
        assert model.rowCount() == 2 and cell(model, 0, "last") == "queued" and cell(model, 1, "last") == "never ran"
        qtmodeltester.check(model)
        scheduler.book.remove("a")
        scheduler.book.add(new_schedule("c", "5 * * * *", "demo", {}, now=clock.now(), tz="UTC"))
        model.refresh(force=True)
        assert [cell(model, r, "name") for r in range(model.rowCount())] == ["b", "c"]
        qtmodeltester.check(model)
        scheduler.close()
    finally:
        queue.close()


def test_add_run_now_and_see_the_result(pane: SchedulesPane, session: Any, qtbot: Any) -> None:
    add_via_dialog(pane, "news", OK_INPUT)
    model = pane.model
    assert model.rowCount() == 1 and cell(model, 0, "name") == "news"
    assert cell(model, 0, "cron") == "Every hour (Europe/Berlin)"  # in words; the expression in the tooltip
    assert model.index(0, COL["cron"]).data(Qt.ItemDataRole.ToolTipRole) == "cron 0 * * * *, read in Europe/Berlin"
    assert ":" in cell(model, 0, "next")  # a local time
    assert pane.select("news") and pane.run_button.isEnabled()
    job_id = pane.run_now()
    assert job_id is not None
    qtbot.waitUntil(lambda: session.queue.get(job_id).state == "succeeded", timeout=10_000)
    pane.refresh()
    assert cell(model, 0, "last") == "succeeded"
    preview = result_preview(session.queue, job_id)
    assert preview and cell(model, 0, "result") == preview
    assert NOT_CURRENT not in cell(model, 0, "result")


def test_a_failed_run_shows_the_last_good_result_marked_not_current(
    pane: SchedulesPane, session: Any, qtbot: Any
) -> None:
    add_via_dialog(pane, "news", OK_INPUT)
    pane.select("news")
    good = pane.run_now()
    assert good is not None
    qtbot.waitUntil(lambda: session.queue.get(good).state == "succeeded", timeout=10_000)
    dialog = pane.edit()
    assert dialog is not None and dialog.name.text() == "news"
    dialog.input.setPlainText(json.dumps(BAD_INPUT))
    assert dialog.try_accept()
    pane.select("news")
    bad = pane.run_now()
    assert bad is not None
    qtbot.waitUntil(lambda: session.queue.get(bad).state == "dead", timeout=10_000)
    session.controller.scheduler.tick()  # note how the runs ended (the driver does it every few seconds)
    pane.refresh()
    model = pane.model
    assert cell(model, 0, "last") == "dead"
    assert cell(model, 0, "result").startswith(f"{NOT_CURRENT} (")
    preview = result_preview(session.queue, good)
    assert preview and cell(model, 0, "result").endswith(preview)
    pane.select("news")
    assert "Last good result (not current)" in pane.detail.text()


def test_disable_enable_and_remove(pane: SchedulesPane, session: Any, prompts: Any) -> None:
    add_via_dialog(pane, "news", OK_INPUT)
    pane.select("news")
    assert pane.toggle_button.text() == "Disa&ble"
    pane.toggle()
    model = pane.model
    assert cell(model, 0, "next") == "paused" and pane.toggle_button.text() == "Ena&ble"
    assert "paused by a person" in pane.detail.text()
    pane.toggle()
    assert cell(model, 0, "next") != "paused"
    prompts.answer = False
    pane.remove()
    assert model.rowCount() == 1
    prompts.answer = True
    pane.remove()
    assert model.rowCount() == 0 and pane.empty.isVisibleTo(pane)
    # the empty pane names the button as it reads ("Add…" stood beside a "New…" button)
    assert pane.empty.text().startswith("No schedules yet: New… makes a job run") and pane.add_button.text() == "Ne&w…"
    assert "Remove the schedule news?" in prompts.confirms[-1]


def test_the_dialog_refuses_bad_values_and_stays_open(pane: SchedulesPane) -> None:
    dialog = pane.add()
    dialog.name.setText("x")
    dialog.cron.setText("every hour")
    assert "not a cron expression" in dialog.next_label.text()
    assert not dialog.try_accept() and "not a cron expression" in dialog.message.text()
    dialog.cron.setText("0 * * * *")
    dialog.input.setPlainText("{oops")
    assert not dialog.try_accept() and "not valid JSON" in dialog.message.text()
    dialog.reject()
    assert pane.model.rowCount() == 0


def test_the_window_s_driver_makes_the_job_of_a_due_window(session: Any, qtbot: Any, data_dir: Path) -> None:
    book = ScheduleBook(data_dir, time.time)
    # created a minute ago, every minute: the latest window is due and on time
    schedule = new_schedule("minutely", "* * * * *", "demo", OK_INPUT, now=time.time() - 61, tz="UTC")
    book.add(dataclasses.replace(schedule))
    book.close()
    session.controller.scheduler.min_interval_s = 0  # look on the next tick
    qtbot.waitUntil(lambda: any(j.title == "minutely" for j in session.queue.list()), timeout=10_000)
    keys = [j.idempotency_key for j in session.queue.list() if j.title == "minutely"]
    assert len(keys) == 1 and keys[0].startswith(f"schedule:{schedule.id}:")


def test_the_new_dialog_runs_a_job_later(session: Any, qtbot: Any) -> None:
    window = session.window
    dialog = window.new_job()
    dialog.tabs.setCurrentIndex(dialog.JSON_TAB)
    dialog.editor.setPlainText(json.dumps({"prompt": "later please", "duration_s": 0}))
    dialog.run_when.set_mode("after")
    dialog.run_when.after.setText("2x")
    assert not dialog.try_submit() and "not a duration" in dialog.message.text.text()
    dialog.run_when.after.setText("1h")
    before = time.time()
    assert dialog.try_submit()
    result = dialog.submit_result
    assert result is not None
    job = session.queue.get(result.job.id)
    assert job.state == "queued" and before + 3599 <= job.run_after <= time.time() + 3601
    window.refresh()
    model = session.controller.queue_model
    qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=3000)
    texts = [str(model.index(0, c).data()) for c in range(model.columnCount())]
    assert any(t.startswith("scheduled for ") for t in texts), texts


def test_the_new_dialog_at_a_time(session: Any) -> None:
    dialog = session.window.new_job()
    dialog.tabs.setCurrentIndex(dialog.JSON_TAB)
    dialog.editor.setPlainText(json.dumps({"prompt": "at a time", "duration_s": 0}))
    dialog.run_when.set_mode("at")
    assert dialog.run_when.at.isVisibleTo(dialog) and not dialog.run_when.after.isVisibleTo(dialog)
    when = dialog.run_when.at.dateTime().toSecsSinceEpoch()
    assert dialog.try_submit() and dialog.submit_result is not None
    assert session.queue.get(dialog.submit_result.job.id).run_after == when


def test_schedule_dialog_edits_keep_the_schedule(pane: SchedulesPane) -> None:
    add_via_dialog(pane, "news", OK_INPUT)
    entry = pane.model.entry(0)
    assert entry is not None
    dialog = ScheduleDialog(["demo"], time.time(), entry, pane)
    assert dialog.cron.text() == "0 * * * *" and dialog.tz.currentText() == "Europe/Berlin"
    assert json.loads(dialog.input.toPlainText()) == OK_INPUT
    dialog.deleteLater()


class _Broken:
    """A scheduler whose every look fails (a newer schedules file, say)."""

    def __init__(self) -> None:
        self.looks = 0

    def maybe_tick(self) -> None:
        self.looks += 1
        raise RuntimeError("schedules.json was written by a newer Desktop Queue")


def test_a_failing_scheduler_is_said_once_and_jobs_still_run(session: Any, qtbot: Any) -> None:
    driver = session.controller.driver
    broken = _Broken()
    errors: list[str] = []
    driver.error.connect(errors.append)
    driver.scheduler = broken
    job_id = session.queue.submit("demo", {"prompt": "still runs", "duration_s": 0}).job.id
    qtbot.waitUntil(lambda: session.queue.get(job_id).state == "succeeded", timeout=10_000)
    qtbot.waitUntil(lambda: broken.looks >= 3, timeout=5000)
    assert errors == ["schedules: schedules.json was written by a newer Desktop Queue"]


# ---------------------------------------------------------------------- from New job


def test_a_job_written_in_new_job_becomes_a_schedule_without_being_submitted(
    session: Any, qtbot: Any, prompts: Any
) -> None:
    """A schedule's job was raw JSON only; the New job dialog's form can now write it."""
    window = session.window
    dialog = window.new_job()  # (deleted when it closes)
    dialog.kind.setCurrentIndex(dialog.kind.findData("demo"))
    assert dialog.form is not None
    dialog.form.set_value("prompt", "Summarise the overnight logs")
    dialog.title.setText("Overnight: log summary!")
    dialog._touch()  # (as typing does: closing it now would ask before the prompt is lost)
    assert dialog.has_typed_input()
    dialog.priority.setCurrentIndex(dialog.priority.findData("interactive"))
    payload = dialog.payloads()[0]

    assert dialog.schedule_button.isVisible()
    dialog.schedule_button.click()

    assert session.queue.list() == []  # nothing was submitted
    assert not dialog.isVisible()  # (kept until the schedule is saved: a Cancel there brings it back)
    pane: SchedulesPane = window.schedules_pane
    assert window.tabs.currentWidget() is pane
    schedule = pane.dialog
    assert schedule is not None and schedule.isVisible() and schedule.entry is None
    assert schedule.name.text() == "Overnight log summary"  # (a name's letters)
    assert schedule.kind.currentData() == "demo"
    assert json.loads(schedule.input.toPlainText()) == payload
    assert schedule.title.text() == "Overnight: log summary!"
    assert schedule.priority.currentData() == "interactive"
    schedule.cron.setText("30 6 * * *")
    closed: list[int] = []
    dialog.finished.connect(closed.append)
    assert schedule.try_accept()
    assert closed == [0] and prompts.confirms == []  # closed without "Discard this prompt?"
    qtbot.waitUntil(lambda: pane.model.rowCount() == 1, timeout=3000)
    entry = pane.selected()
    assert entry is not None
    assert (entry.schedule.name, entry.schedule.cron, entry.schedule.input) == (
        "Overnight log summary",
        "30 6 * * *",
        payload,
    )


@pytest.mark.parametrize("how", ["batch", "later"])
def test_new_job_says_why_a_batch_or_a_start_time_cannot_be_scheduled(session: Any, how: str) -> None:
    window = session.window
    dialog = window.new_job()
    dialog.kind.setCurrentIndex(dialog.kind.findData("demo"))
    assert dialog.form is not None
    dialog.form.set_value("prompt", "one")
    if how == "batch":
        dialog.tabs.setCurrentIndex(dialog.BATCH_TAB)
    else:
        dialog.run_when.set_mode("after")
    assert not dialog.schedule_this()
    assert "schedule" in dialog.message.text.text()
    assert window.schedules_pane.dialog is None and dialog.isVisible()
    dialog.reject()


def schedule_from_new_job(window: Any, prompt: str) -> tuple[Any, ScheduleDialog]:
    """New job on a demo job with ``prompt``, then its Schedule…: (the New job dialog, the schedule's)."""
    dialog = window.new_job()
    dialog.kind.setCurrentIndex(dialog.kind.findData("demo"))
    assert dialog.form is not None
    dialog.form.set_value("prompt", prompt)
    dialog.schedule_button.click()
    schedule = window.schedules_pane.dialog
    assert schedule is not None and not dialog.isVisible()
    return dialog, schedule


def test_a_schedule_cancelled_brings_the_new_job_dialog_back_with_what_was_typed(session: Any) -> None:
    window = session.window
    dialog, schedule = schedule_from_new_job(window, "a prompt worth keeping")

    schedule.reject()

    assert dialog.isVisible() and dialog.payloads()[0]["prompt"] == "a prompt worth keeping"
    assert window.schedules_pane.model.rowCount() == 0 and session.queue.list() == []
    dialog.done(0)


def test_the_schedule_table_shows_names_and_times_whole(pane: SchedulesPane, qtbot: Any) -> None:
    """Under Xvfb the columns were 100 px each ("Summarise t…", "*/30 * * * * (E…") beside an
    empty Last good result column that took the rest."""
    from PySide6.QtGui import QFontMetrics

    add_via_dialog(pane, "Summarise the overnight logs", OK_INPUT, cron="*/30 * * * *")
    metrics = QFontMetrics(pane.view.font())
    header = pane.view.horizontalHeader()
    for key in ("name", "cron"):
        text = cell(pane.model, 0, key)
        qtbot.waitUntil(lambda k=key, t=text: header.sectionSize(COL[k]) >= metrics.horizontalAdvance(t), timeout=3000)


def test_a_new_schedule_starts_from_its_kind_s_input_until_it_is_edited(qtbot: Any) -> None:
    """It always started from {"prompt": ""}: a speech job's field is "input"."""
    fresh = {"demo": {"prompt": ""}, "openai.speech": {"input": "", "voice": "alloy"}}
    dialog = ScheduleDialog(["demo", "openai.speech"], time.time(), input_for=fresh.get)
    qtbot.addWidget(dialog)
    assert json.loads(dialog.input.toPlainText()) == {"prompt": ""}

    dialog.kind.setCurrentIndex(dialog.kind.findData("openai.speech"))
    assert json.loads(dialog.input.toPlainText()) == {"input": "", "voice": "alloy"}

    dialog.input.setPlainText('{"input": "the morning news", "voice": "alloy"}')
    dialog.kind.setCurrentIndex(dialog.kind.findData("demo"))
    assert json.loads(dialog.input.toPlainText()) == {"input": "the morning news", "voice": "alloy"}  # kept


def test_a_schedule_the_book_refuses_keeps_its_dialog_and_the_new_job_behind_it(session: Any, prompts: Any) -> None:
    """A name taken meanwhile was refused after the dialog had closed: the schedule and the
    prompt written in New job were both gone, with an error in the status bar."""
    window = session.window
    add_via_dialog(window.schedules_pane, "news", OK_INPUT)
    dialog, schedule = schedule_from_new_job(window, "a prompt worth keeping")
    schedule.name.setText("news")

    assert not schedule.try_accept()

    assert schedule.isVisible() and "already exists" in schedule.message.text()
    assert not dialog.isVisible() and window.schedules_pane.model.rowCount() == 1
    schedule.name.setText("news at noon")
    assert schedule.try_accept()
    assert window.schedules_pane.model.rowCount() == 2 and not dialog.isVisible()
    assert [e.schedule.input for e in session.controller.schedules_model.scheduler.book.load()][1]["prompt"] == (
        "a prompt worth keeping"
    )
