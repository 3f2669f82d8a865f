"""The window's panes: the queue table, the dead letters, and the event timeline."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from PySide6.QtCore import (
    QByteArray,
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPointF,
    QRect,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import (
    QColor,
    QFocusEvent,
    QFont,
    QFontMetrics,
    QKeySequence,
    QPainter,
    QPalette,
    QPen,
    QShortcut,
    QTextLayout,
    QTextOption,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QSplitter,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.model import State
from desktop_queue.ui.columns import ColumnFitter, install_column_chooser
from desktop_queue.ui.delegates import JobCellDelegate
from desktop_queue.ui.elided import ElidedLabel
from desktop_queue.ui.first_run import FirstRunPanel
from desktop_queue.ui.flow_layout import FlowLayout
from desktop_queue.ui.icons import icon, state_icon
from desktop_queue.ui.models.columns import JobRole
from desktop_queue.ui.models.dead_groups import DeadGroupModel
from desktop_queue.ui.models.filter_proxy import JobFilterProxy
from desktop_queue.ui.models.job_table import JobTableModel
from desktop_queue.ui.models.timeline_model import TimelineModel, TimelineRole
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
#: the queue pane repaints its time-dependent cells at most this often (seconds; they show whole seconds)
LIVE_REPAINT_S = 1.0

STATE_ORDER = (State.QUEUED, State.RUNNING, State.SUCCEEDED, State.DEAD, State.CANCELLED)


#: what the search boxes understand, for their tooltips
SEARCH_HELP = (
    "Words are looked for in the id, title, kind, state, error and prompt.\n"
    "Narrow with kind:openai.chat  profile:openai  state:dead  after:2026-11-01  before:2026-11-30.\n"
    "Esc clears the filter."
)


def _search_box(name: str, placeholder: str) -> QLineEdit:
    box = QLineEdit()
    box.setObjectName(name)
    box.setPlaceholderText(placeholder)
    box.setClearButtonEnabled(True)
    box.setToolTip(SEARCH_HELP)
    return box


class EmptyState(QLabel):
    """ "No jobs match …" over a table's viewport, shown while a filter leaves no row.

    Args:
        view: the table it sits on.
        proxy: the table's filter.
        noun: what the rows are ("jobs", "dead letters").
        search: the search box (its text is quoted).
    """

    def __init__(self, view: QTableView, proxy: JobFilterProxy, noun: str, search: QLineEdit) -> None:
        super().__init__(view.viewport())
        self.setObjectName("emptyState")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.WindowText, palette.color(QPalette.ColorRole.PlaceholderText))
        self.setPalette(palette)
        self._view, self._proxy, self._noun, self._search = view, proxy, noun, search
        view.viewport().installEventFilter(self)
        for signal in (proxy.rowsInserted, proxy.rowsRemoved, proxy.modelReset, proxy.layoutChanged):
            signal.connect(self.update_state)
        proxy.filter_changed.connect(self.update_state)
        source = proxy.sourceModel()
        if isinstance(source, JobTableModel):  # the archive's answer may be "nothing more"
            source.archive_fetched.connect(self.update_state)
        self.hide()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.Resize:
            self.setGeometry(self._view.viewport().rect().adjusted(24, 24, -24, -24))
        return False

    def update_state(self, *_: object) -> None:
        proxy = self._proxy
        source = proxy.sourceModel()
        empty = proxy.rowCount() == 0 and not (source is not None and source.canFetchMore(QModelIndex()))
        if not empty:
            self.hide()
            return
        typed = self._search.text().strip()
        if proxy.query_error:
            text = f"{proxy.query_error}\n(Esc clears the filter)"
        elif typed or (proxy.filtering and not proxy.hide_resolved) or proxy.signature is not None:
            what = f" match “{typed}”" if typed else " match this filter"
            text = f"No {self._noun}{what}.\nPress Esc to clear the filter."
        else:
            text = f"No {self._noun}."
        self.setText(text)
        self.setGeometry(self._view.viewport().rect().adjusted(24, 24, -24, -24))
        self.show()
        self.raise_()


def _clear_on_escape(pane: QWidget, clear: Callable[[], None]) -> QShortcut:
    """Esc anywhere in the pane (search box or table) clears its filter."""
    shortcut = QShortcut(QKeySequence(Qt.Key.Key_Escape), pane)
    shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
    shortcut.activated.connect(clear)
    return shortcut


#: how focus reaches a table from the keyboard (Tab, Shift+Tab, a shortcut or mnemonic)
_KEYBOARD_FOCUS = frozenset(
    {Qt.FocusReason.TabFocusReason, Qt.FocusReason.BacktabFocusReason, Qt.FocusReason.ShortcutFocusReason}
)


class SelectOnKeyboardFocus(QObject):
    """Selects a row when the keyboard brings focus into a table with nothing selected.

    Tabbing into the queue should show a timeline, not an invisible current cell: the
    current row if there is one, else the first. A click selects what it clicks, so
    focus by mouse is left alone.
    """

    def __init__(self, view: QTableView) -> None:
        super().__init__(view)
        self.view = view
        view.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if watched is self.view and event.type() == QEvent.Type.FocusIn:
            assert isinstance(event, QFocusEvent)
            if event.reason() in _KEYBOARD_FOCUS:
                self.select_a_row()
        return False

    def select_a_row(self) -> None:
        """Selects the current row, or the first, if nothing is selected and there are rows."""
        view, selection = self.view, self.view.selectionModel()
        model = view.model()
        if model is None or selection is None or selection.hasSelection() or model.rowCount() == 0:
            return
        current = selection.currentIndex()
        index = current if current.isValid() else model.index(0, 0)
        selection.setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
        )
        view.scrollTo(index, QAbstractItemView.ScrollHint.EnsureVisible)


def _job_table(model: JobFilterProxy, name: str) -> QTableView:
    view = QTableView()
    view.setObjectName(name)
    view.setModel(model)
    configure_job_table(view)
    view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
    # one JobRole.LOOK per painted cell instead of Qt asking Python for ~8 roles one by one
    view.setItemDelegate(JobCellDelegate(view))
    SelectOnKeyboardFocus(view)
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


def reset_header(view: QTableView, state: QByteArray, fitter: ColumnFitter) -> None:
    """A table's columns back to ``state`` (order, visibility, sort), at their default widths."""
    header = view.horizontalHeader()
    header.restoreState(state)
    view.sortByColumn(header.sortIndicatorSection(), header.sortIndicatorOrder())
    fitter.reset_widths()


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
        self.search = _search_box(
            "queueSearch", "Filter by title, prompt, id, kind or error; kind: state: after:  (Ctrl+F)"
        )
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
        self.empty_state = EmptyState(self.view, self.proxy, "jobs", self.search)
        self.escape = _clear_on_escape(self, self.clear_filter)
        self._live_painted = -math.inf
        # Title takes what is left, but never less than ~28 characters: the other columns
        # give way first (Next run elides; its tooltip has the whole phrase), and only then
        # does the table scroll. Created widens for older days ("2026-11-30 16:24").
        self.columns = ColumnFitter(
            self.view,
            [c.key for c in model.columns],
            "title",
            {
                "state": 96,
                "kind": 56,
                "priority": 80,
                "attempts": 58,
                "next": 150,
                "created": 62,
                "wait": 48,
                "run": 56,
                "error": 76,
            },
            content_keys=("kind", "created"),
            samples={"state": "succeeded"},
        )
        self.default_header = self.view.horizontalHeader().saveState()
        install_column_chooser(self.view, [c.header for c in model.columns], self.columns.main, self.reset_columns)

    def reset_columns(self) -> None:
        """Every column shown again, in its first order and width."""
        reset_header(self.view, self.default_header, self.columns)

    def repaint_live(self) -> None:
        """Repaints the visible rows after a clock tick, if their time-dependent cells may read differently.

        A finished job's cells do not move with the clock, and the live ones change
        about once a second ("retrying in 12 s", "paused", a run time): a screen of
        finished jobs is not repainted at all, one with waiting or running jobs at
        most once per :data:`LIVE_REPAINT_S`. Changed jobs repaint through the model.
        """
        now = time.monotonic()
        if now - self._live_painted < LIVE_REPAINT_S or not self.view.isVisible():
            return
        if not self.live_rows_visible():
            return
        self._live_painted = now
        self.view.viewport().update()

    def live_rows_visible(self) -> bool:
        """Whether a queued or running job is among the rows on screen."""
        view = self.view
        first = view.rowAt(0)
        if first < 0:
            return False
        last = view.rowAt(view.viewport().height() - 1)
        last = self.proxy.rowCount() - 1 if last < 0 else last
        return any(
            self.proxy.index(row, 0).data(JobRole.STATE) in (State.QUEUED, State.RUNNING)
            for row in range(first, last + 1)
        )

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
            n = counts.get(state, 0)
            if state == State.DEAD:
                n += counts.get("resolved", 0)  # this pane lists resolved dead letters among the dead
            self.state_filter.setItemText(i, f"{state.capitalize()} ({n})")

    def selected(self) -> list[dict]:
        return selected_jobs(self.view)

    def clear_filter(self) -> None:
        """Shows every job again (Esc)."""
        self.search.clear()
        self.state_filter.setCurrentIndex(0)
        self.proxy.filter_archive()

    def select(self, job_id: str) -> bool:
        """Selects a job, clearing the filters if they hide it."""
        if select_job(self.view, job_id):
            return True
        self.search.clear()
        self.state_filter.setCurrentIndex(0)
        return select_job(self.view, job_id)


class DeadLetterPane(QWidget):
    """Dead jobs: error class, last error, attempts, died at; Retry, Replay, Resolve, and the
    same for every dead letter matching the filter or of one error group.

    Resolved dead letters are hidden unless "Show resolved" is on. "Group by error"
    shows a side list of the error signatures with their counts ("fatal 429 rate
    limited ×812"); selecting one shows only its dead letters, and its buttons act on
    all of them.

    Signals:
        selection_changed(): the selected jobs changed.
        retry_requested(): the Retry button was pressed.
        replay_requested(): the Replay button was pressed.
        resolve_requested(): the Resolve button was pressed.
        retry_all_requested(): "Retry all matching" was pressed.
        bulk_requested(str): an action on every matching dead letter (of the selected
            group, if any): ``retry``, ``replay`` or ``resolve``.
        groups_wanted(): the group list is shown and wants its groups (``set_groups``).
    """

    selection_changed = Signal()
    retry_requested = Signal()
    replay_requested = Signal()
    resolve_requested = Signal()
    retry_all_requested = Signal()
    bulk_requested = Signal(str)
    groups_wanted = Signal()

    def __init__(self, model: JobTableModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.proxy = JobFilterProxy(self, archive_delay_ms=ARCHIVE_SEARCH_DELAY_MS)
        self.proxy.setSourceModel(model)
        self.proxy.set_hide_resolved(True)
        self.search = _search_box("deadSearch", "Filter dead letters by title, prompt, id or error; kind: after:")
        self.view = _job_table(self.proxy, "deadView")
        self.retry_button = QPushButton(icon("action-retry"), "&Retry")
        self.replay_button = QPushButton(icon("action-replay"), "Re&play…")
        self.resolve_button = QPushButton(icon("state-succeeded"), "Res&olve…")
        self.resolve_button.setObjectName("resolveButton")
        self.resolve_button.setToolTip("Close the selected dead letters without retrying them")
        self.retry_all_button = QPushButton(icon("action-retry"), "Retr&y all matching")
        self.retry_all_button.setObjectName("retryAllButton")
        self.more_button = QToolButton()
        self.more_button.setObjectName("matchingMenuButton")
        self.more_button.setText("Matchin&g")
        self.more_button.setToolTip("Replay or resolve every dead letter the filter matches")
        self.more_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.more_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        menu = QMenu(self.more_button)
        self.replay_all_action = menu.addAction(icon("action-replay"), "Re&play all matching…")
        self.resolve_all_action = menu.addAction(icon("state-succeeded"), "Re&solve all matching…")
        self.more_button.setMenu(menu)
        self.show_resolved = QCheckBox("Show reso&lved")
        self.show_resolved.setObjectName("showResolved")
        self.show_resolved.setToolTip("Also list the dead letters a person closed without retrying")
        self.group_toggle = QCheckBox("Group &by error")
        self.group_toggle.setObjectName("groupByError")
        self.group_toggle.setToolTip("List the dead letters' error signatures with their counts")
        self._total: int | None = None
        self._resolved_total = 0
        self.progress = QLabel()
        self.progress.setObjectName("batchProgress")

        # the groups: a side list, hidden until asked for
        self.group_model = DeadGroupModel(self)
        self.group_view = QListView()
        self.group_view.setObjectName("deadGroups")
        self.group_view.setModel(self.group_model)
        self.group_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.group_view.setUniformItemSizes(True)
        self.group_view.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # the count at the end stays in sight
        self.group_view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.group_view.setWordWrap(False)
        self.group_heading = QLabel("Errors")
        self.group_heading.setObjectName("groupHeading")
        font = self.group_heading.font()
        font.setBold(True)
        self.group_heading.setFont(font)
        self.all_groups_button = QPushButton("Sho&w all")
        self.all_groups_button.setToolTip("Show the dead letters of every group")
        self.group_retry = QPushButton(icon("action-retry"), "Retry")
        self.group_replay = QPushButton(icon("action-replay"), "Replay")
        self.group_resolve = QPushButton(icon("state-succeeded"), "Resolve")
        for button, verb in (
            (self.group_retry, "retry"),
            (self.group_replay, "replay"),
            (self.group_resolve, "resolve"),
        ):
            button.setToolTip(f"{verb.capitalize()} every dead letter of the selected group")
            button.clicked.connect(lambda _c=False, v=verb: self.bulk_requested.emit(v))
        self.group_panel = QWidget()
        self.group_panel.setObjectName("groupPanel")
        # above the table, not beside it: the table keeps its width (the error column most of all)
        top = QVBoxLayout(self.group_panel)
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.group_heading)
        row = QHBoxLayout()
        row.addWidget(self.group_view, 1)
        buttons = QVBoxLayout()
        for button in (self.group_retry, self.group_replay, self.group_resolve, self.all_groups_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        row.addLayout(buttons)
        top.addLayout(row, 1)
        self.group_panel.hide()
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.setObjectName("deadSplitter")
        self.split.addWidget(self.group_panel)
        self.split.addWidget(self.view)
        self.split.setStretchFactor(0, 1)
        self.split.setStretchFactor(1, 4)
        self.split.setChildrenCollapsible(False)

        # the buttons wrap to a second row on a narrow pane (a small screen, a large
        # font) instead of being cut at its edge or keeping the window wide
        self.button_row = QWidget()
        self.button_row.setObjectName("deadButtons")
        flow = FlowLayout(self.button_row, one_row=True)
        flow.setContentsMargins(0, 0, 0, 0)
        in_row: list[QWidget] = [
            self.retry_button,
            self.replay_button,
            self.resolve_button,
            self.retry_all_button,
            self.more_button,
        ]
        for widget in in_row:
            flow.addWidget(widget)
        self.search.setMinimumWidth(160)  # the buttons wrap before the search box vanishes
        bar = QHBoxLayout()
        bar.addWidget(self.search, 1)
        bar.addWidget(self.button_row)
        toggles = QHBoxLayout()
        toggles.addWidget(self.group_toggle)
        toggles.addWidget(self.show_resolved)
        toggles.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addLayout(toggles)
        layout.addWidget(self.split, 1)
        layout.addWidget(self.progress)
        self.progress.hide()
        self.empty_state = EmptyState(self.view, self.proxy, "dead letters", self.search)
        self.escape = _clear_on_escape(self, self.clear_filter)
        self.replay_all_action.triggered.connect(lambda: self.bulk_requested.emit("replay"))
        self.resolve_all_action.triggered.connect(lambda: self.bulk_requested.emit("resolve"))
        self.resolve_button.clicked.connect(self.resolve_requested)
        self.show_resolved.toggled.connect(self._show_resolved)
        self.group_toggle.toggled.connect(self._toggle_groups)
        self.group_view.selectionModel().selectionChanged.connect(lambda *_: self._group_selected())
        self.group_model.modelReset.connect(self._reselect_group)
        self.all_groups_button.clicked.connect(self.group_view.clearSelection)
        self._group_signature: str | None = None
        self._split_sized = False
        self._update_group_buttons()
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
        # Last error takes what is left (never less than ~28 characters): the columns fit
        # the pane, no horizontal scrolling hides "Died at" at the default window size
        self.columns = ColumnFitter(
            self.view,
            [c.key for c in model.columns],
            "error",
            {"title": 170, "kind": 70, "class": 80, "attempts": 90, "died": 70, "replayed": 90, "resolved": 70},
            content_keys=("died", "resolved"),
            floors={"title": 14},
        )
        for i, column in enumerate(model.columns):
            if column.key == "resolved":
                self.view.setColumnHidden(i, True)  # shown with "Show resolved"
        self.default_header = self.view.horizontalHeader().saveState()
        install_column_chooser(self.view, [c.header for c in model.columns], self.columns.main, self.reset_columns)
        self._update_retry_all()

    def set_total(self, dead: int, resolved: int = 0) -> None:
        """The number of dead letters, archived ones included (``Queue.counts``), and of resolved ones."""
        if (dead, resolved) != (self._total, self._resolved_total):
            self._total, self._resolved_total = dead, resolved
            self._update_retry_all()

    def _update_retry_all(self) -> None:
        n = self.proxy.rowCount()
        more = self.model.canFetchMore(QModelIndex())  # archived dead letters not loaded yet
        unfiltered = not self.search.text().strip() and self.proxy.signature is None
        if more and unfiltered and self._total is not None:
            total = self._total + (self._resolved_total if not self.proxy.hide_resolved else 0)
            count = f"{max(n, total):,}"  # unfiltered: every dead letter matches
        else:
            count = f"{n:,}+" if more else f"{n:,}"
        self.retry_all_button.setEnabled(n > 0 or more)
        self.more_button.setEnabled(n > 0 or more)
        self.retry_all_button.setText(f"Retr&y all matching ({count})")

    def reset_columns(self) -> None:
        """Every column back to its first order and width (Resolved follows "Show resolved")."""
        reset_header(self.view, self.default_header, self.columns)
        self._show_resolved(self.show_resolved.isChecked())

    def clear_filter(self) -> None:
        """Shows every dead letter again (Esc): no search, no group."""
        self.search.clear()
        self.group_view.clearSelection()
        self.proxy.filter_archive()

    def _show_resolved(self, shown: bool) -> None:
        self.proxy.set_hide_resolved(not shown)
        column = next((i for i, c in enumerate(self.model.columns) if c.key == "resolved"), None)
        if column is not None:
            self.view.setColumnHidden(column, not shown)
        self._update_retry_all()
        if self.group_toggle.isChecked():
            self.groups_wanted.emit()

    @property
    def resolved_shown(self) -> bool:
        return self.show_resolved.isChecked()

    def _toggle_groups(self, on: bool) -> None:
        self.group_panel.setVisible(on)
        if on:
            if not self._split_sized:
                self._split_sized = True
                height = self.split.height()
                self.split.setSizes([min(180, height // 3), max(200, height - min(180, height // 3))])
            self.groups_wanted.emit()
        else:
            self.group_view.clearSelection()

    def set_groups(self, groups: list) -> None:
        """Shows the error groups (``Queue.dead_letter_groups``); the selected one stays selected
        (if it is gone, no group is: every dead letter shows again, none is picked for the user)."""
        if self._group_signature is not None and all(g.signature != self._group_signature for g in groups):
            self.group_view.clearSelection()
            self.group_view.setCurrentIndex(QModelIndex())
        self.group_model.set_groups(groups)
        self._reselect_group()
        total = sum(g.count for g in groups)
        self.group_heading.setText(f"Errors ({len(groups):,} kinds, {total:,} dead letters)")

    def _reselect_group(self) -> None:
        sig = self._group_signature
        if sig is None:
            return
        row = self.group_model.row_of(sig)
        if row is None:
            self.group_view.clearSelection()
            return
        index = self.group_model.index(row, 0)
        if not self.group_view.selectionModel().isSelected(index):
            self.group_view.selectionModel().select(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)

    def _group_selected(self) -> None:
        rows = self.group_view.selectionModel().selectedRows()
        sig = rows[0].data(DeadGroupModel.SIGNATURE) if rows else None
        self._group_signature = sig
        self.proxy.set_signature(sig)
        self._update_group_buttons()
        self._update_retry_all()

    def _update_group_buttons(self) -> None:
        chosen = self._group_signature is not None
        for button in (self.group_retry, self.group_replay, self.group_resolve, self.all_groups_button):
            button.setEnabled(chosen)

    @property
    def group_signature(self) -> str | None:
        """The error signature of the selected group (None: no group selected)."""
        return self._group_signature

    def select_group(self, signature: str) -> bool:
        row = self.group_model.row_of(signature)
        if row is None:
            return False
        self.group_view.setCurrentIndex(self.group_model.index(row, 0))
        return True

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
        self.progress.setText(f"Retrying dead letters: {done:,} of {total:,}…")


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
        # a long title elides (in the middle: the job's state stays in sight); it must
        # never widen the job side and squeeze the job tables. The tooltip has it all.
        self.heading = ElidedLabel("Select a job to see its timeline", Qt.TextElideMode.ElideMiddle)
        self.heading.setObjectName("timelineHeading")
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        font = self.heading.font()
        font.setBold(True)
        self.heading.setFont(font)
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
        self.heading.setToolTip(self.heading.text())

    def _clicked(self, index: QModelIndex) -> None:
        link = index.data(TimelineRole.LINK)
        if link:
            self.link_activated.emit(str(link))
