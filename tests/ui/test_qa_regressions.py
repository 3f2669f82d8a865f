"""Regressions found by playing the issue's "Done when" scenario in a real window.

One test (or a few) per bug: Enter cancelled the submit dialog, a void Qt call leaked
``None`` until the window aborted, "Cancel jobs" / "Cancel" buttons side by side, and
the smaller rough edges (sorting, timeline wording, replayed dead letters, icons on
the selection colour, a cramped Preferences dialog).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QPalette
from PySide6.QtWidgets import QMessageBox, QStyleOptionViewItem

from desktop_queue.core import Outcome, Queue
from desktop_queue.core.model import Event, EventType, State
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui import dialogs
from desktop_queue.ui.icons import state_icon
from desktop_queue.ui.models import (
    DEAD_COLUMNS,
    DeadLetterModel,
    JobFilterProxy,
    JobRole,
    QueueModel,
    TimelineRole,
    event_detail,
    event_headline,
)
from desktop_queue.ui.settings import Preferences

ROOT = Path(__file__).resolve().parents[2]


def dead_job(queue: Queue, prompt: str = "fails") -> str:
    job_id = queue.submit("demo", {"prompt": prompt, "fail_times": 1, "fail_with": "fatal"}, title=prompt).job.id
    lease = queue.lease("w1")
    assert lease is not None and lease.job_id == job_id
    queue.fail(lease, Outcome.failure("fatal", "demo: simulated invalid request (400)", status=400))
    return job_id


# --------------------------------------------------------------------------- the submit and replay dialogs


def test_enter_submits_the_new_job_dialog_instead_of_cancelling_it(qtbot: Any, session: Any) -> None:
    """Enter in the title field threw the input away: Qt had made Cancel the default button."""
    dialog = session.window.new_job()
    assert dialog.submit_button.isDefault()
    assert not dialog.buttons.button(dialog.buttons.StandardButton.Cancel).isDefault()
    dialog.form.editor("prompt").setPlainText("typed, then Enter")
    dialog.title.setText("Enter submits")
    with qtbot.waitSignal(dialog.submitted, timeout=3000) as blocker:
        qtbot.keyClick(dialog.title, Qt.Key.Key_Return)
    assert blocker.args[0].job.title == "Enter submits"
    assert session.queue.get(blocker.args[0].job.id).title == "Enter submits"


def test_replay_dialog_defaults_to_replay_and_starts_in_the_editor(qtbot: Any, session: Any) -> None:
    job = session.queue.get(dead_job(session.queue))
    dialog = dialogs.ReplayDialog(session.controller, job, session.window)
    qtbot.addWidget(dialog)
    dialog.open()
    assert dialog.replay_button.isDefault()
    assert not dialog.buttons.button(dialog.buttons.StandardButton.Cancel).isDefault()
    # the input's editor: the form's prompt field (the JSON tab when the kind has no form)
    assert dialog.form is not None and dialog.focusWidget() is dialog.form.editor("prompt")
    dialog.reject()


def test_a_fresh_submit_dialog_focuses_the_prompt_and_shows_no_error_yet(session: Any) -> None:
    dialog = session.window.new_job()
    assert dialog.focusWidget() is dialog.form.editor("prompt")
    assert not dialog.message.ok
    assert dialog.message.text.text().startswith("To submit:")
    assert "Error" not in dialog.message.accessibleDescription()
    dialog.form.editor("prompt").setPlainText("x")
    dialog.form.editor("prompt").clear()  # now the user emptied it: that is an error
    assert dialog.message.accessibleDescription().startswith("Error:")
    assert not dialog.try_submit()
    assert sum(session.queue.counts().values()) == 0
    dialog.reject()


def test_choosing_fail_with_shows_the_one_failing_attempt_it_implies(session: Any) -> None:
    """The form said "Fail the first: 0 attempts" while the JSON said fail_times 1."""
    dialog = session.window.new_job()
    dialog.form.editor("prompt").setPlainText("x")
    dialog.form.editor("fail_with").setCurrentIndex(dialog.form.editor("fail_with").findData("fatal"))
    assert dialog.form.editor("fail_times").value() == 1
    assert dialog.form.payload()["fail_times"] == 1
    dialog.form.editor("fail_times").setValue(3)
    dialog.form.editor("fail_with").setCurrentIndex(dialog.form.editor("fail_with").findData("retryable"))
    assert dialog.form.editor("fail_times").value() == 3  # a number the user chose is kept
    dialog.reject()


def test_a_job_without_a_title_is_listed_by_its_prompt(qtbot: Any, session: Any) -> None:
    """Every job submitted from the dialog without a title was listed as "demo job"."""
    dialog = session.window.new_job()
    dialog.form.editor("prompt").setPlainText("  A haiku about queues\nsecond line")
    with qtbot.waitSignal(dialog.submitted, timeout=3000) as blocker:
        dialog.submit_button.click()
    assert session.queue.get(blocker.args[0].job.id).title == "A haiku about queues"
    assert dialogs.default_title({"prompt": "x" * 100}) == "x" * 59 + "…"
    assert dialogs.default_title({"prompt": "   "}) is None
    assert dialogs.default_title(["not", "a", "dict"]) is None


def test_fail_the_first_one_attempt_is_singular(session: Any) -> None:
    dialog = session.window.new_job()
    dialog.form.editor("fail_times").setValue(1)
    assert dialog.form.editor("fail_times").text() == "1 attempt"
    dialog.form.editor("fail_times").setValue(2)
    assert dialog.form.editor("fail_times").text() == "2 attempts"
    dialog.reject()


# --------------------------------------------------------------------------- confirmations


@pytest.mark.parametrize(
    ("ok_text", "expected_no"),
    [("Cancel jobs", "Keep running"), ("Cancel job", "Keep running"), ("Quit", "Cancel"), ("Retry 3", "Cancel")],
)
def test_the_no_button_is_never_called_cancel_next_to_cancel_jobs(qtbot: Any, ok_text: str, expected_no: str) -> None:
    box, ok = dialogs.make_confirm_box(None, "Cancel running jobs?", "1 job is running now.", ok_text)
    qtbot.addWidget(box)
    texts = sorted(b.text() for b in box.buttons())
    assert texts == sorted([ok_text, expected_no])
    default = box.defaultButton()
    assert default is not None and default.text() == expected_no  # the safe answer
    assert box.escapeButton() is default
    assert ok.text() == ok_text
    assert box.buttonRole(ok) == QMessageBox.ButtonRole.AcceptRole


def test_confirm_returns_true_only_for_the_agreeing_button(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    clicked: dict[str, str] = {}

    def fake_exec(box: QMessageBox) -> int:
        target = next(b for b in box.buttons() if b.text() == clicked["text"])
        target.click()
        return 0

    monkeypatch.setattr(QMessageBox, "exec", fake_exec)
    clicked["text"] = "Cancel jobs"
    assert dialogs.confirm(None, "t", "x", "Cancel jobs") is True
    clicked["text"] = "Keep running"
    assert dialogs.confirm(None, "t", "x", "Cancel jobs") is False


# --------------------------------------------------------------------------- preferences


def test_preferences_are_wide_enough_for_their_hints(qtbot: Any) -> None:
    dialog = dialogs.PreferencesDialog(Preferences(), new_profile=True)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.tabs.setCurrentWidget(dialog.profiles_page)
    qtbot.waitUntil(dialog.providers_page.isVisible, timeout=2000)
    assert dialog.width() >= 560
    page = dialog.providers_page
    for field in (page.base_url, page.api_key):
        hint = field.placeholderText()
        assert hint
        assert QFontMetrics(field.font()).horizontalAdvance(hint) <= field.width(), hint
    dialog.reject()


def test_the_provider_editor_is_not_cut_off_on_the_right(qtbot: Any) -> None:
    """The dialog set its own minimum width before its pages were laid out; shown, the editor
    needed 36 px more, and the fields and the scroll bar ran past the dialog's right edge."""
    dialog = dialogs.PreferencesDialog(Preferences(), new_profile=True)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(dialog.providers_page.isVisible, timeout=2000)
    page = dialog.profiles_page
    scroll = page.editor_scroll

    def right() -> int:
        return scroll.mapTo(dialog, scroll.rect().topRight()).x()

    # (the layout settles in the event loop, before the dialog is painted)
    qtbot.waitUntil(lambda: right() < dialog.width(), timeout=2000)
    for field in (dialog.providers_page.base_url, dialog.providers_page.api_key):
        edge = field.mapTo(dialog, field.rect().topRight()).x()
        assert edge < dialog.width(), (field.objectName(), edge, dialog.width())
    assert page.stack.width() <= scroll.viewport().width()  # nothing to scroll sideways to
    dialog.reject()


# --------------------------------------------------------------------------- models


def test_text_columns_sort_without_regard_to_case(qtbot: Any, data_dir: Path) -> None:
    with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
        for name in ("banana", "Cherry", "apple", "Apple pie"):
            queue.submit("demo", {"prompt": name}, title=name)
        jobs = queue.raw_jobs()
    model = QueueModel()
    model.reset_jobs(jobs)
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    title = next(i for i, c in enumerate(model.columns) if c.key == "title")
    proxy.sort(title, Qt.SortOrder.AscendingOrder)
    titles = [proxy.index(r, title).data() for r in range(proxy.rowCount())]
    assert titles == ["apple", "Apple pie", "banana", "Cherry"]


def _event(kind: str, **detail: Any) -> Event:
    return Event(type=kind, at=1_700_000_000.0, attempt=1, epoch=1, worker=None, actor="user", detail=detail)


@pytest.mark.parametrize("kind", [EventType.RETRIED, EventType.REPLAYED_AS])
def test_user_verbs_do_not_claim_the_previous_attempt(kind: str) -> None:
    """ "Retried by hand · attempt 1 · epoch 1" read as if attempt 1 were being retried."""
    headline = event_headline(_event(kind, replayed_as="abc", run=2), now=1_700_000_000.0)
    assert "attempt" not in headline and "epoch" not in headline


def test_lease_events_keep_their_attempt() -> None:
    assert "attempt 1 · epoch 1" in event_headline(_event(EventType.LEASED), now=1_700_000_000.0)


def test_timeline_details_say_yes_and_no_not_python_booleans() -> None:
    detail = event_detail(_event(EventType.REPLAYED_AS, replayed_as="abc", edited=True, reused=False))
    assert "edited: yes" in detail and "reused: no" in detail
    assert "True" not in detail and "False" not in detail


def test_a_replayed_dead_letter_says_so(qtmodeltester: Any, data_dir: Path) -> None:
    """A dead job stays dead after a replay; the pane showed no sign anyone had dealt with it."""
    with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
        replayed = dead_job(queue, "replayed")
        untouched = dead_job(queue, "untouched")
        new_id = queue.replay(replayed, {"prompt": "fixed"}).id
        jobs = queue.raw_jobs()
    model = DeadLetterModel()
    model.reset_jobs(jobs)
    qtmodeltester.check(model)
    column = next(i for i, c in enumerate(DEAD_COLUMNS) if c.key == "replayed")
    title = next(i for i, c in enumerate(DEAD_COLUMNS) if c.key == "title")
    assert model.headerData(column, Qt.Orientation.Horizontal) == "Replayed as"
    row = model.row_of(replayed)
    assert row is not None
    assert model.index(row, column).data() == new_id
    assert model.index(row, title).data(Qt.ItemDataRole.DecorationRole) is not None
    assert f"replayed as job {new_id}" in model.index(row, title).data(Qt.ItemDataRole.ToolTipRole)
    other = model.row_of(untouched)
    assert other is not None
    assert model.index(other, column).data() == ""
    assert model.index(other, title).data(Qt.ItemDataRole.DecorationRole) is None
    assert model.index(other, 0).data(JobRole.STATE) == State.DEAD


# --------------------------------------------------------------------------- icons


@pytest.mark.parametrize("state", [State.QUEUED, State.RUNNING, State.SUCCEEDED, State.DEAD, State.CANCELLED])
def test_state_icons_stay_visible_on_the_selection_colour(qtbot: Any, state: str) -> None:
    """The running icon (blue strokes) vanished on a selected (blue) row."""
    highlight = QPalette().color(QPalette.ColorRole.Highlight)
    image = QImage(16, 16, QImage.Format.Format_ARGB32)
    image.fill(highlight)
    painter = QPainter(image)
    state_icon(state).paint(painter, 0, 0, 16, 16)
    painter.end()

    def distance(colour: QColor) -> int:
        return (
            abs(colour.red() - highlight.red())
            + abs(colour.green() - highlight.green())
            + abs(colour.blue() - highlight.blue())
        )

    visible = sum(1 for x in range(16) for y in range(16) if distance(image.pixelColor(x, y)) > 100)
    assert visible >= 60, f"{state}: only {visible} of 256 pixels stand out from the selection colour"


# --------------------------------------------------------------------------- the binding guard


def test_the_window_survives_a_binding_that_leaks_none(tmp_path: Path) -> None:
    """PySide6 6.12.0 + CPython 3.11 returned None from void methods without a reference:
    the window aborted with ``Fatal Python error: none_dealloc`` after ~2 minutes of use.
    A fresh process (the leak would poison this one) does far more void calls than None
    has references; it must exit normally, whatever the installed binding."""
    script = textwrap.dedent(
        """
        import sys
        from PySide6.QtWidgets import QApplication, QLabel
        from desktop_queue.runtime.qtcompat import binding_steals_none, install
        app = QApplication([])
        leaks = binding_steals_none()
        install()
        label = QLabel()
        for i in range(300_000):
            label.setText("x")
        print("leaks" if leaks else "sound", sys.getrefcount(None) > 0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    verdict, healthy = done.stdout.split()
    assert verdict in ("leaks", "sound") and healthy == "True"


# --------------------------------------------------------------------------- second QA round


def _queue_column(window: Any, key: str) -> int:
    return [c.key for c in window.controller.queue_model.columns].index(key)


def test_a_header_click_sorts_the_model_and_the_sort_is_restored(qtbot: Any, open_session: Any, data_dir: Path) -> None:
    from PySide6.QtCore import QPoint

    with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
        for name in ("banana", "Cherry", "apple"):
            queue.submit("demo", {"prompt": name}, title=name)
    first = open_session(data_dir, lease=False)
    window = first.window
    window.show()
    model, view = window.controller.queue_model, window.queue_pane.view
    header = view.horizontalHeader()
    title = _queue_column(window, "title")
    assert (model.sort_column, model.sort_order) == (_queue_column(window, "created"), Qt.SortOrder.DescendingOrder)
    x = header.sectionViewportPosition(title) + header.sectionSize(title) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2))
    assert model.sort_column == title and header.sortIndicatorSection() == title
    titles = [view.model().index(r, title).data() for r in range(3)]
    expected = ["apple", "banana", "Cherry"]
    assert titles == (expected if model.sort_order == Qt.SortOrder.AscendingOrder else expected[::-1])
    order = model.sort_order
    first.close()
    second = open_session(data_dir, lease=False)
    assert (second.controller.queue_model.sort_column, second.controller.queue_model.sort_order) == (title, order)
    assert second.window.queue_pane.view.horizontalHeader().sortIndicatorSection() == title


def test_a_header_state_saved_with_other_columns_is_not_restored(open_session: Any, data_dir: Path) -> None:
    from PySide6.QtCore import QSettings

    from desktop_queue.ui.settings import APPLICATION, ORGANIZATION

    first = open_session(data_dir, lease=False)
    first.window.queue_pane.view.sortByColumn(_queue_column(first.window, "title"), Qt.SortOrder.AscendingOrder)
    first.close()  # saves the header state and its column count
    settings = QSettings(ORGANIZATION, APPLICATION)
    assert int(settings.value("window/queue_header_columns")) == len(first.controller.queue_model.columns)
    settings.setValue("window/queue_header_columns", 7)  # as an older version with 7 columns saved it
    settings.sync()
    second = open_session(data_dir, lease=False)
    header = second.window.queue_pane.view.horizontalHeader()
    assert header.sortIndicatorSection() == _queue_column(second.window, "created")  # the defaults
    pane = second.window.queue_pane
    assert pane.columns.preferred == _default_widths(pane)  # the default widths, not the saved ones


def test_a_pane_never_shown_does_not_save_its_columns_squeezed(open_session: Any, data_dir: Path) -> None:
    """The Dead letters pane, never opened, was fitted to a viewport of a few pixels: its
    titles read "a short poem…" at every later start, as the saved widths came back as
    the preferred ones. What is saved now is what the columns want when there is room."""
    first = open_session(data_dir, lease=False)
    first.window.show()  # on the Queue tab: Dead letters is never shown
    first.close()
    second = open_session(data_dir, lease=False)
    pane = second.window.dead_pane
    assert pane.columns.preferred == _default_widths(pane)


def test_a_column_the_user_widened_keeps_its_width_at_the_next_start(
    qtbot: Any, open_session: Any, data_dir: Path
) -> None:
    first = open_session(data_dir, lease=False)
    first.window.show()
    first.window.tabs.setCurrentWidget(first.window.dead_pane)
    pane = first.window.dead_pane
    title = pane.columns.keys.index("title")
    pane.view.horizontalHeader().resizeSection(title, 260)  # as a drag does
    assert pane.columns.preferred[title] == 260
    first.close()
    second = open_session(data_dir, lease=False)
    assert second.window.dead_pane.columns.preferred[title] == 260


def _default_widths(pane: Any) -> dict[int, int]:
    fitter = pane.columns
    scale = fitter._scale()
    return {i: round(fitter.defaults[k] * scale) for i, k in enumerate(fitter.keys) if k in fitter.defaults}


def test_the_one_job_quit_question_is_singular(qtbot: Any, session: Any, prompts: Any, monkeypatch: Any) -> None:
    for running, expected in (
        (1, "1 job is running. Quit anyway? It is stopped"),
        (2, "2 jobs are running. Quit anyway? They are stopped"),
    ):
        monkeypatch.setattr(type(session.controller.driver), "running", property(lambda _self, n=running: n))
        prompts.answer = False
        session.window.close()
        assert expected in prompts.confirms[-1]


def test_preferences_has_a_shortcut_on_every_platform(session: Any) -> None:
    from PySide6.QtGui import QKeySequence

    from desktop_queue.ui.actions import shortcuts_for
    from desktop_queue.ui.commands import Command

    action = session.window.action(Command.PREFERENCES)
    assert not action.shortcut().isEmpty()
    native = QKeySequence.keyBindings(QKeySequence.StandardKey.Preferences)
    assert action.shortcuts() == (native or [QKeySequence("Ctrl+,")])
    assert shortcuts_for(QKeySequence.StandardKey.New) == QKeySequence.keyBindings(QKeySequence.StandardKey.New)
    assert shortcuts_for(QKeySequence.StandardKey.UnknownKey, QKeySequence("Ctrl+,")) == [QKeySequence("Ctrl+,")]


def test_copy_is_disabled_until_one_job_is_selected(qtbot: Any, session: Any) -> None:
    window = session.window
    button = window.timeline_pane.copy_button
    assert not button.isEnabled()
    job_id = session.queue.submit("demo", {"prompt": "x"}, title="copy me").job.id
    assert window.show_job(job_id)
    assert button.isEnabled()
    window.queue_pane.view.clearSelection()
    assert not button.isEnabled()


def test_every_queue_column_is_in_sight_at_the_default_size(qtbot: Any, session: Any) -> None:
    window = session.window
    assert window.size().toTuple() == (1200, 720)
    view = window.queue_pane.view
    header = view.horizontalHeader()
    session.queue.submit("demo", {"prompt": "one job, so the table shows (not the first-run state)"})
    window.refresh()
    qtbot.waitUntil(view.isVisible, timeout=2000)
    qtbot.waitUntil(lambda: view.viewport().width() > 0, timeout=2000)
    for i, column in enumerate(window.controller.queue_model.columns):
        right = header.sectionViewportPosition(i) + header.sectionSize(i)
        assert right <= view.viewport().width(), f"{column.key} is behind horizontal scrolling"
    # Title keeps a readable width (about 28 characters); Next run gives way first and
    # elides, its tooltip saying the whole phrase ("waiting: a free slot (4 of 4 running)")
    assert header.sectionSize(_queue_column(window, "title")) >= window.queue_pane.columns.main_min
    assert header.sectionSize(_queue_column(window, "title")) >= 24 * QFontMetrics(view.font()).averageCharWidth()
    assert header.sectionSize(_queue_column(window, "next")) <= 230
    cell = view.model().index(0, _queue_column(window, "next"))
    assert cell.data(Qt.ItemDataRole.ToolTipRole) == cell.data(Qt.ItemDataRole.DisplayRole)


def test_every_dead_letter_column_is_in_sight_at_the_default_size(qtbot: Any, session: Any) -> None:
    """ "Died at" sat behind horizontal scrolling in the dead-letter pane."""
    window = session.window
    window.tabs.setCurrentWidget(window.dead_pane)
    view = window.dead_pane.view
    header = view.horizontalHeader()
    qtbot.waitUntil(lambda: view.viewport().width() > 0, timeout=2000)
    for i, column in enumerate(window.controller.dead_model.columns):
        right = header.sectionViewportPosition(i) + header.sectionSize(i)
        assert right <= view.viewport().width(), f"{column.key} is behind horizontal scrolling"
    error = [c.key for c in window.controller.dead_model.columns].index("error")
    assert header.sectionSize(error) >= 200  # the column a dead letter is read for


def test_durations_in_event_details_carry_their_unit_once() -> None:
    """ "delay s: 0.9 s" and "lease s: 30 s" said the unit twice."""
    detail = event_detail(_event(EventType.RETRY_SCHEDULED, delay_s=0.9, run_after=1_700_000_000.0))
    assert "delay: 0.9 s" in detail and "delay s" not in detail
    assert "lease: 30 s" in event_detail(_event(EventType.LEASED, lease_s=30.0))


def test_timeline_lines_wrap_instead_of_being_cut(qtbot: Any, session: Any) -> None:
    from desktop_queue.ui.panes import wrapped_text

    window = session.window
    long_message = "a provider error that goes on " * 8
    job_id = session.queue.submit("demo", {"prompt": "x"}, title="wraps").job.id
    lease = session.queue.lease("w1")
    assert lease is not None and lease.job_id == job_id
    session.queue.fail(lease, Outcome.failure("fatal", long_message, status=400))
    assert window.show_job(job_id)
    view = window.timeline_pane.view
    qtbot.waitUntil(lambda: view.model().rowCount() >= 3, timeout=3000)
    delegate = view.itemDelegate()
    last = view.model().index(view.model().rowCount() - 1, 0)
    first = view.model().index(0, 0)
    detail = last.data(TimelineRole.DETAIL)
    assert long_message.strip() in detail
    width = delegate.text_width()
    layout, height = wrapped_text(detail, view.font(), width)
    assert layout.lineCount() > 1  # it does not fit on one line at this width ...
    assert all(layout.lineAt(i).naturalTextWidth() <= width for i in range(layout.lineCount()))
    option = QStyleOptionViewItem()
    option.initFrom(view)
    tall, short = delegate.sizeHint(option, last), delegate.sizeHint(option, first)
    _, short_height = wrapped_text(first.data(TimelineRole.DETAIL), view.font(), width)
    # ... and the row grew by what its detail is taller (a line's height of headline slack)
    assert tall.height() >= short.height() + height - short_height - QFontMetrics(view.font()).height()
    assert tall.width() <= view.viewport().width()
    assert view.visualRect(last).height() == tall.height()


def test_the_connection_test_closes_its_client_before_it_reports(qtbot: Any) -> None:
    from PySide6.QtCore import QThreadPool

    from desktop_queue.ui.provider_prefs import ConnectionTester, _TestConnection

    class Unreachable:
        closed = False

        def test_connection(self) -> list[str]:
            raise ConnectionError("connection refused")

        def close(self) -> None:
            self.closed = True

    provider = Unreachable()
    tester = ConnectionTester()
    closed_at_emit: list[bool] = []
    # direct: the slot runs in the worker at emit time, so it sees exactly what was done by then
    tester.failed.connect(lambda _m: closed_at_emit.append(provider.closed), Qt.ConnectionType.DirectConnection)
    pool = QThreadPool()
    with qtbot.waitSignal(tester.failed, timeout=3000) as blocker:
        pool.start(_TestConnection(provider, tester).run)
    assert pool.waitForDone(3000)
    assert blocker.args == ["connection refused"]
    assert closed_at_emit == [True]


def test_large_counts_read_with_thousands_separators(session: Any) -> None:
    """At a million jobs the status bar read "941000 succeeded" beside "1,000 jobs finished"."""
    window = session.window
    counts = {"queued": 1200, "running": 3, "succeeded": 941_000, "dead": 50_000, "cancelled": 10_000}
    window.status.show_counts(counts)
    window.status.show_throughput(1500)
    window.status.show_dead(50_000, 48_800)
    window.queue_pane.set_counts(counts)
    assert window.status.state_labels["succeeded"].text() == "941,000 succeeded"
    assert window.status.state_labels["queued"].text() == "1,200 queued"
    assert window.status.throughput_label.text() == "1,500 done in the last minute"
    assert window.status.dead_button.text() == "50,000 dead letters  (+1,200 new)"
    assert window.queue_pane.state_filter.itemText(0) == "All states (1,002,203)"
    assert "Succeeded (941,000)" in [window.queue_pane.state_filter.itemText(i) for i in range(6)]
    window.status.show_dead(1, 1)
    assert window.status.dead_button.text() == "1 dead letter"


def test_quit_asks_when_finished_jobs_wait_for_the_store_to_take_their_answers(
    qtbot: Any, session: Any, prompts: Any, monkeypatch: Any
) -> None:
    """A full disk holds two answers in memory: Quit says what becomes of them, and is asked."""
    driver = type(session.controller.driver)
    monkeypatch.setattr(driver, "held_ids", lambda _self: ["a1", "b2"])
    prompts.answer = False
    asked = len(prompts.confirms)
    session.window.close()
    assert len(prompts.confirms) == asked + 1  # asked, though no attempt runs
    question = prompts.confirms[-1].split("\n", 1)[1]
    assert question.startswith("2 finished jobs wait for the store to save their answers. Quit anyway?")
    assert "a paid call is paid again" in question

    monkeypatch.setattr(driver, "running", property(lambda _self: 1))
    monkeypatch.setattr(driver, "held_ids", lambda _self: ["a1"])
    session.window.close()
    question = prompts.confirms[-1].split("\n", 1)[1]
    assert question.startswith(
        "1 job is running. 1 finished job waits for the store to save its answer. Quit anyway? "
        "It is stopped and queued again; nothing is lost. An answer is kept on disk"
    )


def test_no_dead_letter_shows_no_red_warning(qtbot: Any, open_session: Any, data_dir: Path) -> None:
    """The Dead letters tab and "0 dead letters" in the status bar wore the red warning
    triangle on a store where nothing had failed; it is greyed until a job dies."""
    from desktop_queue.ui.icons import quiet_icon

    session = open_session(data_dir, lease=False)
    assert not isinstance(session, int)
    window = session.window
    window.refresh()
    quiet, red = quiet_icon("state-dead").cacheKey(), state_icon("dead").cacheKey()
    assert quiet != red
    qtbot.waitUntil(lambda: window.status.dead_button.icon().cacheKey() == quiet, timeout=3000)
    assert window.tabs.tabIcon(1).cacheKey() == quiet
    session.queue.submit("demo", {"prompt": "x"}, title="dies")
    lease = session.queue.lease("w")
    assert lease is not None
    session.queue.fail(lease, Outcome.failure("fatal", "demo: refused", status=400))
    window.refresh()
    qtbot.waitUntil(lambda: window.status.dead_button.icon().cacheKey() == red, timeout=3000)
    assert window.tabs.tabIcon(1).cacheKey() == red and window.tabs.tabText(1) == "&Dead letters (1)"


def test_the_result_tab_is_green_only_for_a_job_that_succeeded(qtbot: Any, open_session: Any, data_dir: Path) -> None:
    """A green check beside "Result" while the selected job was still running said there was
    a result to read; it is greyed until the job shown has one."""
    from desktop_queue.ui.icons import quiet_icon
    from desktop_queue.ui.job_tabs import RESULT_TAB

    session = open_session(data_dir, lease=False)
    assert not isinstance(session, int)
    tabs = session.window.job_tabs
    quiet, green = quiet_icon("state-succeeded").cacheKey(), state_icon("succeeded").cacheKey()
    assert tabs.tabIcon(RESULT_TAB).cacheKey() == quiet  # nothing selected
    queue = session.queue
    job = queue.submit("demo", {"prompt": "x"}, title="one").job
    lease = queue.lease("w")
    assert lease is not None
    tabs.show_job(queue.get(job.id))
    assert tabs.tabIcon(RESULT_TAB).cacheKey() == quiet  # running
    queue.complete(lease, {"text": "done"})
    tabs.update_job(queue.get(job.id))
    assert tabs.tabIcon(RESULT_TAB).cacheKey() == green
    tabs.show_job(None)
    assert tabs.tabIcon(RESULT_TAB).cacheKey() == quiet


def test_cancelling_one_running_job_names_it_and_where_it_runs(
    qtbot: Any, open_session: Any, data_dir: Path, prompts: Any
) -> None:
    """ "1 job is running now" with a "Cancel jobs" button, for the one job selected, which a
    `work` process elsewhere was running: the question now names the job and the machine."""
    from desktop_queue.ui.panes import select_job

    session = open_session(data_dir, lease=False)
    assert not isinstance(session, int)
    window = session.window
    queue = session.queue
    job = queue.submit("demo", {"prompt": "x"}, title="slow answer").job
    assert queue.lease("render-box:4123") is not None
    window.refresh()
    qtbot.waitUntil(lambda: select_job(window.queue_pane.view, job.id), timeout=3000)
    prompts.answer = False
    window.cancel_selected()
    [asked] = prompts.confirms
    assert asked.startswith("Cancel a running job?\n“slow answer” is running now on render-box (pid 4123).")
    assert queue.get(job.id).state == State.RUNNING  # kept running: the answer was no


def test_a_job_that_finished_while_cancel_was_asked_is_said_plainly(
    qtbot: Any, open_session: Any, data_dir: Path
) -> None:
    """The running job finished while "Cancel a running job?" was open; answering yes put
    "job 780d5efc57: cannot go from succeeded to cancelled" in a red banner."""
    session = open_session(data_dir, lease=False)
    assert not isinstance(session, int)
    controller, queue = session.controller, session.queue
    job = queue.submit("demo", {"prompt": "x"}, title="slow answer").job
    other = queue.submit("demo", {"prompt": "y"}, title="still queued").job
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job.id
    queue.complete(lease, {"text": "done"})
    failed: list[str] = []
    said: list[str] = []
    controller.failed.connect(failed.append)
    controller.message.connect(said.append)
    assert [j.id for j in controller.cancel([job.id, other.id])] == [other.id]
    assert failed == []
    assert said == ["Cancelled: 1 job. Nothing to cancel: “slow answer” had already succeeded"]
    controller.retry([other.id])
    controller.retry([other.id])  # (twice: as two windows might)
    assert failed == [] and said[-1] == "Nothing to retry: “still queued” is already queued"


def test_the_store_fields_note_sits_under_it(qtbot: Any) -> None:
    """Preferences → General left a blank band between the Store field and its note: an empty
    status row, and the note's text centred in a row sized for a narrower width."""
    dialog = dialogs.PreferencesDialog(Preferences())
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(dialog.store.isVisible, timeout=3000)
    line = dialog.store.fontMetrics().lineSpacing()
    assert not dialog.store_status.isVisible()
    gap = dialog.store_note.geometry().top() - dialog.store.geometry().bottom()
    assert gap < line, gap
    assert dialog.store_note.alignment() & Qt.AlignmentFlag.AlignTop
