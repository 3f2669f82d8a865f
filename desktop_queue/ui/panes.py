"""The window's panes: the queue table, the dead letters, and the event timeline."""

from __future__ import annotations

import math

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPointF, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPalette, QPen, QTextLayout, QTextOption
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListView,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.model import State
from desktop_queue.ui.delegates import JobCellDelegate
from desktop_queue.ui.first_run import FirstRunPanel
from desktop_queue.ui.icons import icon, state_icon
from desktop_queue.ui.models import JobFilterProxy, JobTableModel, TimelineModel, TimelineRole
from desktop_queue.ui.timeline import LiveTimelineModel

#: category -> accent colour (mid tones: readable on light and dark palettes)
CATEGORY_COLOURS: dict[str, str] = {
    "retry": "#e08e0b",
    "throttle": "#c27c0e",
    "expiry": "#d35400",
    "reconcile": "#16a085",
    "link": "#8e44ad",
    "failure": "#d64545",
    "cancel": "#8e8e93",
    "success": "#27ae60",
}

#: a title search of the archive waits this long after the last keystroke (the hot rows filter at once)
ARCHIVE_SEARCH_DELAY_MS = 150

STATE_ORDER = (State.QUEUED, State.RUNNING, State.SUCCEEDED, State.DEAD, State.CANCELLED)


def _search_box(name: str, placeholder: str) -> QLineEdit:
    box = QLineEdit()
    box.setObjectName(name)
    box.setPlaceholderText(placeholder)
    box.setClearButtonEnabled(True)
    return box


def _job_table(model: JobFilterProxy, name: str) -> QTableView:
    view = QTableView()
    view.setObjectName(name)
    view.setModel(model)
    configure_job_table(view)
    view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
    # one JobRole.LOOK per painted cell instead of Qt asking Python for ~8 roles one by one
    view.setItemDelegate(JobCellDelegate(view))
    return view


def configure_job_table(view: QTableView) -> None:
    """The settings of a job table (also given to the reference view in ``benchmarks/ui.py``)."""
    view.setSortingEnabled(True)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
    view.setAlternatingRowColors(True)
    view.setShowGrid(False)
    view.setWordWrap(False)
    view.setTextElideMode(Qt.TextElideMode.ElideRight)
    view.verticalHeader().setVisible(False)
    # fixed row heights: no per-row measuring, so 10,000 rows scroll smoothly
    view.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    view.verticalHeader().setDefaultSectionSize(QFontMetrics(view.font()).height() + 10)
    header = view.horizontalHeader()
    header.setSectionsMovable(True)
    header.setHighlightSections(False)
    header.setStretchLastSection(True)


def selected_jobs(view: QTableView) -> list[dict]:
    """The job dicts selected in ``view`` (mapped to the source model)."""
    proxy = view.model()
    out = []
    for index in view.selectionModel().selectedRows(0):
        assert isinstance(proxy, JobFilterProxy)
        source = proxy.mapToSource(index)
        model = proxy.sourceModel()
        assert isinstance(model, JobTableModel)
        out.append(model.job_at(source.row()))
    return out


def select_job(view: QTableView, job_id: str) -> bool:
    """Selects and shows one job; False if the view's filter hides it (or it is unknown)."""
    proxy = view.model()
    assert isinstance(proxy, JobFilterProxy)
    model = proxy.sourceModel()
    assert isinstance(model, JobTableModel)
    row = model.row_of(job_id)
    if row is None:
        row = model.reveal(job_id)  # an archived job not loaded yet: load the pages down to it
    if row is None:
        return False
    index = proxy.mapFromSource(model.index(row, 0))
    if not index.isValid():
        return False
    view.selectionModel().setCurrentIndex(
        index,
        view.selectionModel().SelectionFlag.ClearAndSelect | view.selectionModel().SelectionFlag.Rows,
    )
    view.scrollTo(index, QAbstractItemView.ScrollHint.EnsureVisible)
    return True


class QueuePane(QWidget):
    """The queue table with a text filter (Ctrl+F) and a state filter with live counts.

    Signals:
        selection_changed(): the selected jobs changed.
    """

    selection_changed = Signal()

    def __init__(self, model: JobTableModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.proxy = JobFilterProxy(self, archive_delay_ms=ARCHIVE_SEARCH_DELAY_MS)
        self.proxy.setSourceModel(model)
        self.search = _search_box("queueSearch", "Filter by title, id, kind or error  (Ctrl+F)")
        self.search.setToolTip("Jobs in memory match on title, id, kind, state or error; archived jobs on their title")
        self.state_filter = QComboBox()
        self.state_filter.setObjectName("stateFilter")
        self.state_filter.setToolTip("Show only jobs in one state")
        self.state_filter.addItem("All states", None)
        for state in STATE_ORDER:
            self.state_filter.addItem(state_icon(state), state.capitalize(), str(state))
        self.state_filter.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.view = _job_table(self.proxy, "queueView")
        self.first_run = FirstRunPanel()  # shown instead of the table while the store holds no job
        self.first_run.hide()
        self.bar = QWidget()
        bar = QHBoxLayout(self.bar)
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.search, 1)
        bar.addWidget(self.state_filter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.bar)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.first_run, 1)
        self.search.textChanged.connect(self.proxy.set_text)
        self.state_filter.currentIndexChanged.connect(lambda _i: self.proxy.set_state(self.state_filter.currentData()))
        self.view.selectionModel().selectionChanged.connect(lambda *_: self.selection_changed.emit())
        self.view.sortByColumn(6, Qt.SortOrder.DescendingOrder)  # newest first
        # Title takes what is left, so that Wait, Run time and Last error stay in sight
        # at the default window size (1200×720) instead of behind horizontal scrolling.
        # Next run is wide enough for "waiting: a free slot (4 of 4 running)": why a job
        # waits is what a reader of this pane looks for (longer reasons: the tooltip).
        widths = {
            "state": 96,
            "title": 160,
            "kind": 56,
            "priority": 80,
            "attempts": 58,
            "next": 220,
            "created": 62,
            "wait": 48,
            "run": 56,
            "error": 76,
        }
        header = self.view.horizontalHeader()
        header.setStretchLastSection(False)
        for i, column in enumerate(model.columns):
            if column.key in widths:
                self.view.setColumnWidth(i, widths[column.key])
            if column.key == "title":
                header.setSectionResizeMode(i, QHeaderView.ResizeMode.Stretch)

    def repaint_live(self) -> None:
        """Repaints the visible rows after a clock tick (time-dependent cells)."""
        self.view.viewport().update()

    def set_first_run(self, first: bool) -> None:
        """Shows the first-run state (what to do) instead of an empty table, or the table again."""
        if self.first_run.isHidden() != first:
            return  # already so
        self.first_run.setVisible(first)
        self.view.setVisible(not first)
        self.bar.setVisible(not first)

    def set_counts(self, counts: dict[str, int]) -> None:
        """Shows the live count of every state in the state filter (and the first-run state when empty)."""
        total = sum(counts.values())
        self.set_first_run(total == 0)
        self.state_filter.setItemText(0, f"All states ({total})")
        for i, state in enumerate(STATE_ORDER, start=1):
            self.state_filter.setItemText(i, f"{state.capitalize()} ({counts.get(state, 0)})")

    def selected(self) -> list[dict]:
        return selected_jobs(self.view)

    def select(self, job_id: str) -> bool:
        """Selects a job, clearing the filters if they hide it."""
        if select_job(self.view, job_id):
            return True
        self.search.clear()
        self.state_filter.setCurrentIndex(0)
        return select_job(self.view, job_id)


class DeadLetterPane(QWidget):
    """Dead jobs: error class, last error, attempts, died at; Retry, Replay, Retry all matching.

    Signals:
        selection_changed(): the selected jobs changed.
        retry_requested(): the Retry button was pressed.
        replay_requested(): the Replay button was pressed.
        retry_all_requested(): "Retry all matching" was pressed.
    """

    selection_changed = Signal()
    retry_requested = Signal()
    replay_requested = Signal()
    retry_all_requested = Signal()

    def __init__(self, model: JobTableModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.proxy = JobFilterProxy(self, archive_delay_ms=ARCHIVE_SEARCH_DELAY_MS)
        self.proxy.setSourceModel(model)
        self.search = _search_box("deadSearch", "Filter dead letters by title, id or error")
        self.search.setToolTip("Recent dead letters match on title, id or error; archived ones on their title")
        self.view = _job_table(self.proxy, "deadView")
        self.retry_button = QPushButton(icon("action-retry"), "&Retry")
        self.replay_button = QPushButton(icon("action-replay"), "Re&play…")
        self.retry_all_button = QPushButton(icon("action-retry"), "Retry &all matching")
        self.retry_all_button.setObjectName("retryAllButton")
        self._total: int | None = None
        self.progress = QLabel()
        self.progress.setObjectName("batchProgress")
        bar = QHBoxLayout()
        bar.addWidget(self.search, 1)
        bar.addWidget(self.retry_button)
        bar.addWidget(self.replay_button)
        bar.addWidget(self.retry_all_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.progress)
        self.progress.hide()
        self.search.textChanged.connect(self.proxy.set_text)
        self.search.textChanged.connect(lambda _t: self._update_retry_all())
        self.proxy.rowsInserted.connect(lambda *_: self._update_retry_all())
        self.proxy.rowsRemoved.connect(lambda *_: self._update_retry_all())
        self.proxy.modelReset.connect(self._update_retry_all)
        model.archive_fetched.connect(self._update_retry_all)
        self.view.selectionModel().selectionChanged.connect(lambda *_: self.selection_changed.emit())
        self.retry_button.clicked.connect(self.retry_requested)
        self.replay_button.clicked.connect(self.replay_requested)
        self.retry_all_button.clicked.connect(self.retry_all_requested)
        self.view.sortByColumn(5, Qt.SortOrder.DescendingOrder)  # most recent death first
        # Last error takes what is left: the columns fit the pane, no horizontal scrolling
        # hides "Died at" at the default window size
        header = self.view.horizontalHeader()
        header.setStretchLastSection(False)
        widths = {"title": 170, "kind": 70, "class": 80, "attempts": 90, "died": 70, "replayed": 90}
        for i, column in enumerate(model.columns):
            if column.key in widths:
                self.view.setColumnWidth(i, widths[column.key])
            if column.key == "error":
                header.setSectionResizeMode(i, QHeaderView.ResizeMode.Stretch)
        self._update_retry_all()

    def set_total(self, dead: int) -> None:
        """The number of dead letters, archived ones included (``Queue.counts``)."""
        if dead != self._total:
            self._total = dead
            self._update_retry_all()

    def _update_retry_all(self) -> None:
        n = self.proxy.rowCount()
        more = self.model.canFetchMore(QModelIndex())  # archived dead letters not loaded yet
        if more and not self.search.text().strip() and self._total is not None:
            count = str(max(n, self._total))  # unfiltered: every dead letter matches
        else:
            count = f"{n}+" if more else str(n)
        self.retry_all_button.setEnabled(n > 0 or more)
        self.retry_all_button.setText(f"Retry &all matching ({count})")

    def selected(self) -> list[dict]:
        return selected_jobs(self.view)

    def matching_ids(self) -> list[str]:
        """The ids of every dead job the filter matches: those shown, then the archived
        ones not loaded yet (from the archive's index)."""
        if self.proxy.archive_timer.isActive():
            self.proxy.filter_archive()  # the count confirmed must be the search typed
        shown = self.proxy.job_ids()
        seen = set(shown)
        return shown + [i for i in self.model.archived_ids() if i not in seen]

    def set_progress(self, done: int, total: int) -> None:
        self.progress.setVisible(done < total)
        self.progress.setText(f"Retrying dead letters: {done} of {total}…")


# --------------------------------------------------------------------------- timeline


def wrapped_text(text: str, font: QFont, width: int) -> tuple[QTextLayout, int]:
    """``text`` laid out in lines of at most ``width`` pixels, and its height.

    Lines break between words, or anywhere in a word too long for a line (ids, URLs).
    """
    layout = QTextLayout(text, font)
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
    layout.setTextOption(option)
    height = 0.0
    layout.beginLayout()
    while True:
        line = layout.createLine()
        if not line.isValid():
            break
        line.setLineWidth(max(1, width))
        line.setPosition(QPointF(0, height))
        height += line.height()
    layout.endLayout()
    return layout, math.ceil(height)


class TimelineDelegate(QStyledItemDelegate):
    """Paints an event as a node on a vertical line: icon, bold headline, quieter detail.

    Retries, throttling, lease expiries, reconciliation and replay links get a tinted
    card and their own icon (never colour alone); links are underlined. The headline
    and the detail wrap to the view's width, never cut with "…"; the row is as tall as
    its lines (the view lays its rows out again when its width changes).

    Args:
        view: the list view it paints for (its width decides where lines wrap).
    """

    GUTTER = 34
    PAD = 6
    #: card margins around the text: left, right (see :meth:`paint`)
    TEXT_INSET = GUTTER + (PAD + 2) + PAD + 4

    def __init__(self, view: QListView) -> None:
        super().__init__(view)
        self._view = view

    def _fonts(self, option: QStyleOptionViewItem) -> tuple[QFont, QFont]:
        headline = QFont(option.font)
        headline.setBold(True)
        return headline, QFont(option.font)

    def text_width(self) -> int:
        """Where lines wrap: the viewport's width less the card's margins.

        A vertical scroll bar is assumed even before it shows, so that the rows laid
        out without it still fit once it appears (no line goes missing).
        """
        width = self._view.viewport().width()
        if not self._view.verticalScrollBar().isVisible():
            width -= self._view.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self._view)
        return max(60, width - self.TEXT_INSET)

    def _texts(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex, width: int
    ) -> tuple[QTextLayout, int, QTextLayout, int]:
        headline, small = self._fonts(option)
        if index.data(TimelineRole.LINK):
            headline.setUnderline(True)
        head, head_height = wrapped_text(index.data(TimelineRole.HEADLINE) or "", headline, width)
        detail, detail_height = wrapped_text(index.data(TimelineRole.DETAIL) or "", small, width)
        return head, head_height, detail, detail_height

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        width = self.text_width()
        _head, head_height, _detail, detail_height = self._texts(option, index, width)
        return QSize(width + self.TEXT_INSET, head_height + detail_height + self.PAD // 2 + 3 * self.PAD)

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        painter.save()
        palette = option.palette
        rect: QRect = option.rect
        category = index.data(TimelineRole.CATEGORY) or "normal"
        accent = QColor(CATEGORY_COLOURS.get(category, palette.color(QPalette.ColorRole.Mid).name()))
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        card = rect.adjusted(self.GUTTER, 2, -4, -2)
        if selected:
            painter.fillRect(rect, palette.color(QPalette.ColorRole.Highlight))
        elif category not in ("normal",):
            tint = QColor(accent)
            tint.setAlpha(34)
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(tint)
            painter.drawRoundedRect(card, 5, 5)
        # the vertical line through every node
        line_x = rect.left() + self.GUTTER // 2
        pen = QPen(palette.color(QPalette.ColorRole.Mid))
        pen.setWidth(2)
        painter.setPen(pen)
        first = index.row() == 0
        last = index.row() == index.model().rowCount() - 1
        painter.drawLine(
            line_x,
            rect.top() if not first else rect.center().y(),
            line_x,
            rect.bottom() if not last else rect.center().y(),
        )
        # the node: the event's icon on a base-coloured disc
        node = QRect(0, 0, 20, 20)
        node.moveCenter(rect.center())
        node.moveLeft(line_x - 10)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(palette.color(QPalette.ColorRole.Base))
        painter.drawEllipse(node)
        decoration = index.data(Qt.ItemDataRole.DecorationRole)
        if decoration is not None and not decoration.isNull():
            decoration.paint(painter, node.adjusted(2, 2, -2, -2))
        else:
            painter.setBrush(accent)
            painter.drawEllipse(node.adjusted(5, 5, -5, -5))
        # text: the headline, then the detail, each wrapped to the card
        text_rect = card.adjusted(self.PAD + 2, self.PAD - 1, -self.PAD, -self.PAD)
        text_colour = palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        if index.data(TimelineRole.LINK) and not selected:
            text_colour = palette.color(QPalette.ColorRole.Link)
        head, head_height, detail, _detail_height = self._texts(
            option, index, min(text_rect.width(), self.text_width())
        )
        painter.setPen(text_colour)
        head.draw(painter, QPointF(text_rect.topLeft()))
        detail_colour = palette.color(
            QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.PlaceholderText
        )
        painter.setPen(detail_colour)
        detail.draw(painter, QPointF(text_rect.left(), text_rect.top() + head_height + self.PAD // 2))
        painter.restore()


class TimelinePane(QWidget):
    """The selected job's events as a vertical timeline; replay links jump to the other job.

    Signals:
        link_activated(str): a replay link was clicked (the id of the job to show).
        copy_requested(): the Copy button was pressed.
    """

    link_activated = Signal(str)
    copy_requested = Signal()

    def __init__(self, model: TimelineModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.heading = QLabel("Select a job to see its timeline")
        self.heading.setObjectName("timelineHeading")
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        font = self.heading.font()
        font.setBold(True)
        self.heading.setFont(font)
        # a long title wraps: it must not widen the timeline and squeeze the job tables
        self.heading.setWordWrap(True)
        self.copy_button = QPushButton(icon("action-copy"), "&Copy")
        self.copy_button.setToolTip("Copy this timeline to the clipboard as text")
        self.view = QListView()
        self.view.setObjectName("timelineView")
        self.view.setModel(model)
        self.view.setItemDelegate(TimelineDelegate(self.view))
        self.view.setWordWrap(True)
        self.view.setResizeMode(QListView.ResizeMode.Adjust)  # lines wrap again when the width changes
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.view.setMouseTracking(True)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        top = QHBoxLayout()
        top.addWidget(self.heading, 1)
        top.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)
        self.copy_button.clicked.connect(self.copy_requested)
        self.view.clicked.connect(self._clicked)
        self.view.activated.connect(self._clicked)
        self._stick_to_bottom = True
        model.rowsAboutToBeInserted.connect(self._remember_bottom)
        model.rowsInserted.connect(self._follow)
        model.modelReset.connect(self._on_reset)
        self.view.entered.connect(self._hover)

    def _hover(self, index: QModelIndex) -> None:
        cursor = Qt.CursorShape.PointingHandCursor if index.data(TimelineRole.LINK) else Qt.CursorShape.ArrowCursor
        self.view.viewport().setCursor(cursor)

    def at_bottom(self) -> bool:
        bar = self.view.verticalScrollBar()
        return bar.value() >= bar.maximum() - 2

    def _remember_bottom(self, *_: object) -> None:
        self._stick_to_bottom = self.at_bottom()

    def _follow(self, *_: object) -> None:
        if self._stick_to_bottom:
            self.view.scrollToBottom()

    def _on_reset(self) -> None:
        self.refresh_heading()
        self.view.scrollToBottom()

    def refresh_heading(self) -> None:
        """Shows the job's title, id and current state above its timeline."""
        job = self.model.job
        if job is None:
            self.heading.setText("Select a job to see its timeline")
        else:
            note = self.model.result_note if isinstance(self.model, LiveTimelineModel) else None
            self.heading.setText(f"{job.title}  ·  job {job.id}  ·  {job.state}" + (f"  ·  {note}" if note else ""))

    def _clicked(self, index: QModelIndex) -> None:
        link = index.data(TimelineRole.LINK)
        if link:
            self.link_activated.emit(str(link))
