"""The window's layout holds: long titles, the column chooser, Reset layout, small screens, big fonts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication, QWidget

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.model import iso
from desktop_queue.core.outcome import Outcome
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.columns import column_menu

#: 60 characters, one word: nothing to wrap at (the worst case for a heading)
LONG_TITLE = "Summarise_the_quarterly_report_for_the_board_meeting_Lisbon_"
#: 60 characters in words
LONG_WORDS = "A sixty-character job title that says what the job will do.."


def _column(window: Any, key: str) -> int:
    return [c.key for c in window.controller.queue_model.columns].index(key)


def _open(open_session: Any, data_dir: Path, prompts: Any = None) -> Any:
    session = open_session(data_dir, lease=False)
    assert not isinstance(session, int), prompts.errors if prompts else session
    if not session.queue.counts().get("queued"):
        session.queue.submit("demo", {"prompt": "so the table shows, not the first-run panel"}, title="one")
        session.window.refresh()
    session.window.show()
    return session


def _settle(qtbot: Any, window: Any) -> None:
    view = window.queue_pane.view
    qtbot.waitUntil(lambda: view.isVisible() and view.viewport().width() > 0, timeout=3000)
    QApplication.processEvents()


@pytest.mark.parametrize("title", [LONG_TITLE, LONG_WORDS])
def test_selecting_a_job_with_a_long_title_keeps_the_title_column(
    qtbot: Any, open_session: Any, data_dir: Path, title: str
) -> None:
    """The QA finding: select a job with a 60-character title and Title collapsed to "…"."""
    assert len(title) == 60
    session = _open(open_session, data_dir)
    window = session.window
    assert window.size().toTuple() == (1200, 720)  # the default size
    job_id = session.queue.submit("demo", {"prompt": "x"}, title=title).job.id
    session.queue.submit("demo", {"prompt": "y"}, title="short")
    window.refresh()
    _settle(qtbot, window)
    header = window.queue_pane.view.horizontalHeader()
    title_col = _column(window, "title")
    before, split_before = header.sectionSize(title_col), window.splitter.sizes()
    assert before >= window.queue_pane.columns.main_min
    assert window.show_job(job_id)
    qtbot.waitUntil(lambda: title in window.timeline_pane.heading.text(), timeout=3000)
    for tab in range(window.job_tabs.count()):  # Timeline, Result, Details: none may push
        window.job_tabs.setCurrentIndex(tab)
        QApplication.processEvents()
        assert window.splitter.sizes() == split_before, window.job_tabs.tabText(tab)
        assert header.sectionSize(title_col) == before
    heading = window.timeline_pane.heading
    assert heading.elided and heading.toolTip() == heading.text()  # the heading gives way, not the tables
    # and what is saved is the layout that held
    session.close()
    again = _open(open_session, data_dir)
    _settle(qtbot, again.window)
    assert again.window.splitter.sizes() == split_before
    assert again.window.queue_pane.view.horizontalHeader().sectionSize(title_col) == before


def test_the_other_columns_give_way_before_title(qtbot: Any, session: Any) -> None:
    window = session.window
    session.queue.submit("demo", {"prompt": "x"}, title=LONG_WORDS)
    window.refresh()
    _settle(qtbot, window)
    header = window.queue_pane.view.horizontalHeader()
    fitter = window.queue_pane.columns
    next_col = _column(window, "next")
    wide = header.sectionSize(next_col)
    window.splitter.setSizes([560, 640])  # a narrow table side
    QApplication.processEvents()
    assert header.sectionSize(_column(window, "title")) >= fitter.main_min
    assert header.sectionSize(next_col) < wide  # gave way ...
    assert header.sectionSize(next_col) >= fitter.minimum(next_col)  # ... down to its heading, no further


def _hide_from_menu(window: Any, key: str) -> None:
    view = window.queue_pane.view
    headings = [c.header for c in window.controller.queue_model.columns]
    menu = column_menu(view, headings, window.queue_pane.columns.main, window.queue_pane.reset_columns, window)
    action = menu.actions()[_column(window, key)]
    assert action.isCheckable() and action.isChecked()
    action.trigger()


def test_the_column_chooser_hides_a_column_and_it_stays_hidden(qtbot: Any, open_session: Any, data_dir: Path) -> None:
    session = _open(open_session, data_dir)
    window = session.window
    view = window.queue_pane.view
    headings = [c.header for c in window.controller.queue_model.columns]
    menu = column_menu(view, headings, window.queue_pane.columns.main, window.queue_pane.reset_columns, window)
    title_action = menu.actions()[_column(window, "title")]
    assert not title_action.isEnabled()  # Title always shows
    _hide_from_menu(window, "priority")
    assert view.isColumnHidden(_column(window, "priority"))
    session.close()
    again = _open(open_session, data_dir)
    _settle(qtbot, again.window)
    assert again.window.queue_pane.view.isColumnHidden(_column(again.window, "priority"))
    assert not again.window.queue_pane.view.isColumnHidden(_column(again.window, "kind"))


def test_the_header_context_menu_is_the_column_chooser(qtbot: Any, session: Any) -> None:
    header = session.window.queue_pane.view.horizontalHeader()
    assert header.contextMenuPolicy() == Qt.ContextMenuPolicy.CustomContextMenu
    assert header.receivers("2customContextMenuRequested(QPoint)") > 0


def test_reset_layout_restores_splitter_columns_and_size(qtbot: Any, open_session: Any, data_dir: Path) -> None:
    session = _open(open_session, data_dir)
    window = session.window
    _settle(qtbot, window)
    header = window.queue_pane.view.horizontalHeader()
    first_split = window.splitter.sizes()
    first_widths = [header.sectionSize(i) for i in range(header.count())]
    _hide_from_menu(window, "kind")
    header.moveSection(header.visualIndex(_column(window, "error")), 0)
    header.resizeSection(_column(window, "next"), 300)
    window.splitter.setSizes([400, 800])
    window.resize(900, 600)
    session.close()  # saved so
    session = _open(open_session, data_dir)
    window = session.window
    _settle(qtbot, window)
    assert window.size().toTuple() == (900, 600)
    window.action("reset_layout").trigger()
    QApplication.processEvents()
    header = window.queue_pane.view.horizontalHeader()
    assert window.size().toTuple() == (1200, 720)
    assert not window.queue_pane.view.isColumnHidden(_column(window, "kind"))
    assert header.visualIndex(_column(window, "error")) == _column(window, "error")
    assert window.splitter.sizes() == first_split
    assert [header.sectionSize(i) for i in range(header.count())] == first_widths
    assert window.action("job_side").isChecked()


def test_the_job_side_collapses_and_comes_back(qtbot: Any, session: Any) -> None:
    window = session.window
    session.queue.submit("demo", {"prompt": "x"})
    window.refresh()
    _settle(qtbot, window)
    action = window.action("job_side")
    assert action.isChecked() and window.splitter.sizes()[1] > 0
    action.trigger()
    assert not action.isChecked() and window.splitter.sizes()[1] == 0
    action.trigger()
    assert action.isChecked() and window.splitter.sizes()[1] >= 240


def test_a_window_saved_on_a_bigger_screen_fits_this_one(qtbot: Any, open_session: Any, data_dir: Path) -> None:
    session = _open(open_session, data_dir)
    window = session.window
    window.resize(2400, 1500)  # as on a big monitor
    window.move(900, 500)
    session.close()
    again = _open(open_session, data_dir)
    area = again.window.screen().availableGeometry()
    qtbot.waitUntil(lambda: area.contains(again.window.frameGeometry()), timeout=3000)


@pytest.mark.parametrize(("days", "width_of"), [(3, "Fri 16:24"), (10, "2026-11-27")])
def test_older_times_are_short_and_whole_in_the_tooltip(
    qtbot: Any, open_session: Any, data_dir: Path, prompts: Any, days: int, width_of: str
) -> None:
    """A job from three days ago reads "Fri 16:24", from ten "2026-11-27": never "2026-1…",
    and the tooltip gives the whole time."""
    old = Queue.open(data_dir, {"demo": DemoProvider()}, clock=FakeClock(time.time() - days * 86400))
    job = old.submit("demo", {"prompt": "from days ago"}, title="old").job
    old.close()
    session = _open(open_session, data_dir, prompts)
    window = session.window
    _settle(qtbot, window)
    view = window.queue_pane.view
    created = _column(window, "created")
    cell = view.model().index(0, created)
    text = cell.data()
    assert len(text) == len(width_of), text
    assert cell.data(Qt.ItemDataRole.ToolTipRole) == iso(job.created_at)
    qtbot.waitUntil(
        lambda: view.horizontalHeader().sectionSize(created) >= QFontMetrics(view.font()).horizontalAdvance(text),
        timeout=3000,
    )


@pytest.fixture
def big_font() -> Iterator[None]:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    font = app.font()
    bigger = app.font()
    bigger.setPointSizeF(font.pointSizeF() * 1.5)
    app.setFont(bigger)
    yield
    app.setFont(font)


def test_no_heading_is_cut_at_a_larger_font(qtbot: Any, big_font: None, session: Any) -> None:
    window = session.window
    session.queue.submit("demo", {"prompt": "x"}, title=LONG_WORDS)
    window.refresh()
    _settle(qtbot, window)
    view = window.queue_pane.view
    header = view.horizontalHeader()
    metrics = QFontMetrics(header.font())
    for i, column in enumerate(window.controller.queue_model.columns):
        assert header.sectionSize(i) >= metrics.horizontalAdvance(column.header), column.key
    assert header.sectionSize(_column(window, "title")) >= window.queue_pane.columns.main_min


def test_usable_at_800_by_500(qtbot: Any, session: Any) -> None:
    """Nothing keeps the window wider than a small screen, and nothing is cut at its edges."""
    window = session.window
    session.queue.submit("demo", {"prompt": "x"}, title=LONG_WORDS)
    window.refresh()
    _settle(qtbot, window)
    window.resize(800, 500)
    window.tabs.setCurrentWidget(window.dead_pane)
    QApplication.processEvents()
    assert window.size().toTuple() == (800, 500)
    assert window.minimumSizeHint().width() <= 800
    pane = window.dead_pane
    for button in (pane.retry_button, pane.replay_button, pane.resolve_button, pane.retry_all_button):
        top_left = button.mapTo(pane, button.rect().topLeft())
        assert pane.rect().contains(top_left) and pane.rect().contains(top_left + button.rect().bottomRight())
    assert pane.search.width() >= 160
    status = window.status
    for item in status.findChildren(QWidget):
        if item.isVisibleTo(status) and item.parentWidget() is status:
            assert item.geometry().right() <= status.width(), item.objectName()


@pytest.mark.parametrize("width", [800, 1000, 1200, 1600])
def test_the_dead_letter_buttons_stay_inside_their_pane(qtbot: Any, session: Any, width: int) -> None:
    """Each button of the dead letters' row, the "Matching" menu included, is whole at any window width
    (the row wraps under the search box rather than running past the pane's edge)."""
    window = session.window
    session.queue.submit("demo", {"prompt": "x"}, title="so the table shows")
    window.refresh()
    _settle(qtbot, window)
    window.resize(width, 600)
    window.tabs.setCurrentWidget(window.dead_pane)
    QApplication.processEvents()
    pane = window.dead_pane
    buttons = (pane.retry_button, pane.replay_button, pane.resolve_button, pane.retry_all_button, pane.more_button)
    for button in buttons:
        assert button.isVisible(), button.text()
        top_left = button.mapTo(pane, button.rect().topLeft())
        bottom_right = button.mapTo(pane, button.rect().bottomRight())
        assert pane.rect().contains(top_left) and pane.rect().contains(bottom_right), (button.text(), width)
    assert {b.height() for b in buttons} == {pane.retry_all_button.height()}  # (one row of one height)
    search = pane.search.geometry()
    for button in buttons:  # (and none lies over the search box)
        assert not pane.search.geometry().intersects(QRect(button.mapTo(pane, QPoint(0, 0)), button.size())), search


def test_a_hidden_pane_is_fitted_without_measuring_its_rows_and_shows_dates_whole(
    qtbot: Any, open_session: Any, data_dir: Path, prompts: Any
) -> None:
    """Qt sizes a hidden view's column over every row (up to its resizeContentsPrecision),
    not the visible ones: the Dead letters pane, not shown at start, is measured once shown."""
    old = Queue.open(data_dir, {"demo": DemoProvider()}, clock=FakeClock(time.time() - 3 * 86400))
    for i in range(3):
        old.submit("demo", {"prompt": f"dies {i}", "fail_with": "fatal", "duration_s": 0}, title=f"dies {i}")
        lease = old.lease("w")
        assert lease is not None
        old.fail(lease, Outcome.failure("fatal", "refused", status=400))
    old.close()
    session = _open(open_session, data_dir, prompts)
    window = session.window
    _settle(qtbot, window)
    pane = window.dead_pane
    view = pane.view
    measured: list[int] = []
    real = view.sizeHintForColumn

    def counting(column: int) -> int:
        measured.append(column)
        return real(column)

    view.sizeHintForColumn = counting  # (the fitter calls it from Python)
    assert not view.isVisible()
    pane.columns.fit()
    assert measured == []  # hidden: its cells are not measured
    window.tabs.setCurrentWidget(pane)
    qtbot.waitUntil(lambda: view.isVisible() and view.viewport().width() > 0, timeout=3000)
    QApplication.processEvents()
    assert measured  # shown: fitted again, to its visible cells
    died = pane.columns.keys.index("died")
    text = view.model().index(0, died).data()
    assert len(text) == len("Fri 16:24")  # a weekday and a time
    assert view.horizontalHeader().sectionSize(died) >= QFontMetrics(view.font()).horizontalAdvance(text)


def test_priority_and_wait_show_their_values_whole(qtbot: Any, open_session: Any, data_dir: Path, prompts: Any) -> None:
    """At the window's first size the Priority cells read "backgrou…" and a Wait "109…"."""
    session = _open(open_session, data_dir, prompts)
    window = session.window
    _settle(qtbot, window)
    view = window.queue_pane.view
    metrics = QFontMetrics(view.font())
    for key, widest in (("priority", "background"), ("priority", "interactive"), ("wait", "119 min")):
        qtbot.waitUntil(
            lambda key=key, widest=widest: (
                view.horizontalHeader().sectionSize(_column(window, key)) > metrics.horizontalAdvance(widest)
            ),
            timeout=3000,
        )
    assert view.horizontalScrollBar().maximum() == 0  # and the table still fits its pane


def test_a_wide_kind_leaves_every_column_in_view_at_the_first_size(
    qtbot: Any, open_session: Any, data_dir: Path
) -> None:
    """A chat job at the window's first size put Last error behind a horizontal scroll bar:
    Kind widened to "openai.responses" and Title, at its 28 characters, gave nothing."""
    demo = DemoProvider()
    session = open_session(data_dir, lease=False, providers={"demo": demo, "openai.responses": demo})
    assert not isinstance(session, int)
    window = session.window
    window.show()
    session.queue.submit("openai.responses", {"prompt": "How many ships passed the lighthouse last night?"})
    window.refresh()
    _settle(qtbot, window)
    view = window.queue_pane.view
    header = view.horizontalHeader()
    fitter = window.queue_pane.columns
    kind = _column(window, "kind")
    qtbot.waitUntil(lambda: header.sectionSize(kind) >= view.sizeHintForColumn(kind), timeout=3000)
    qtbot.waitUntil(lambda: view.horizontalScrollBar().maximum() == 0, timeout=3000)
    for i, column in enumerate(window.controller.queue_model.columns):
        right = header.sectionViewportPosition(i) + header.sectionSize(i)
        assert right <= view.viewport().width(), f"{column.key} is behind horizontal scrolling"
    title = header.sectionSize(_column(window, "title"))
    assert fitter.main_floor <= title < fitter.main_min  # Title gave a little, no more


def test_a_status_message_is_shown_whole_and_the_counts_come_back(qtbot: Any, session: Any) -> None:
    """At the first size the counts left a message about 150 pixels: "Background work pause"."""
    window = session.window
    status = window.status
    qtbot.waitUntil(lambda: status.isVisible() and status.width() > 0, timeout=3000)
    items = [w for w in status.findChildren(QWidget) if w.parent() is status and not w.isHidden()]
    assert len(items) >= 7  # every count, the slots, the throughput, the dead letters
    message = "Background work paused for every process on this data dir; interactive jobs still run."
    session.controller.message.emit(message)
    QApplication.processEvents()
    assert status.currentMessage() == message
    shown = [w for w in items if not w.isHidden()]
    assert status.dead_button in shown and len(shown) < len(items)  # the least needed made room
    first = min(w.geometry().left() for w in shown)
    assert first >= status.fontMetrics().horizontalAdvance(message)  # the message reads whole
    status.clearMessage()
    QApplication.processEvents()
    assert all(not w.isHidden() for w in items)  # and they are back once it goes


def test_the_counts_hide_rather_than_squeeze_beside_a_long_provider_state(qtbot: Any, session: Any) -> None:
    """A rate-limited provider and paused background work squeezed the counts to "3 queu", "0 runn"."""
    from desktop_queue.core.profile_state import ProfileState, ProfileStateKind

    window = session.window
    status = window.status
    qtbot.waitUntil(lambda: status.isVisible() and status.width() > 0, timeout=3000)
    status.update_providers(
        [
            ProfileState(
                "litellm",
                ProfileStateKind.RATE_LIMITED,
                "litellm: rate limited (7 in a row), resuming in about 30 s",
                "detail",
            )
        ]
    )
    status.show_background("background jobs paused: litellm is rate-limited (7 in a row), resuming in about 30 s")
    status.show_counts({"queued": 3, "running": 0, "succeeded": 0, "cancelled": 0})
    QApplication.processEvents()
    items = [w for w in status._optional if not w.isHidden()]
    assert items  # the most needed still show
    for item in [*items, status.dead_button]:
        assert item.width() >= item.sizeHint().width(), item.findChildren(QWidget)[-1].property("text")
    right = max(w.geometry().right() for w in (*items, status.dead_button))
    assert right <= status.width()


def test_the_dead_letters_show_their_kind_whole(qtbot: Any, open_session: Any, data_dir: Path) -> None:
    """A chat job's dead letter read "openai.c…": which of chat, image or speech died?"""
    demo = DemoProvider()
    with Queue.open(data_dir, {"demo": demo, "openai.chat": demo}) as queue:
        queue.submit("openai.chat", {"prompt": "Summarise the harbour log"}, title="Summarise the harbour log")
        lease = queue.lease("w")
        assert lease is not None
        queue.fail(lease, Outcome.failure("fatal", "openai.chat: HTTP 400: invalid model", status=400))
    session = open_session(data_dir, lease=False, providers={"demo": demo, "openai.chat": demo})
    assert not isinstance(session, int)
    window = session.window
    window.show()
    pane = window.dead_pane
    window.tabs.setCurrentWidget(pane)
    view = pane.view
    qtbot.waitUntil(lambda: view.isVisible() and view.model().rowCount() == 1, timeout=3000)
    kind = pane.columns.keys.index("kind")
    needed = QFontMetrics(view.font()).horizontalAdvance("openai.chat")
    qtbot.waitUntil(lambda: view.horizontalHeader().sectionSize(kind) > needed, timeout=3000)
    assert view.horizontalScrollBar().maximum() == 0  # and the table still fits its pane
