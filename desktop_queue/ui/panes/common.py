"""What the window's panes share: search boxes, the empty state, job tables and their selection."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import (
    QByteArray,
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    Qt,
)
from PySide6.QtGui import (
    QFocusEvent,
    QFontMetrics,
    QKeySequence,
    QPalette,
    QShortcut,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QLineEdit,
    QTableView,
    QWidget,
)

from desktop_queue.core.model import State
from desktop_queue.ui.columns import ColumnFitter
from desktop_queue.ui.delegates import JobCellDelegate
from desktop_queue.ui.models.filter_proxy import JobFilterProxy
from desktop_queue.ui.models.job_table import JobTableModel

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


def scrolled_down(view: QTableView) -> bool:
    """Whether ``view`` shows rows below its top (what its model's ``in_use`` asks)."""
    return view.verticalScrollBar().value() > 0


def selected_ids(view: QTableView) -> list[str]:
    """The ids of the jobs selected in ``view`` (what its model's ``pinned`` asks for)."""
    return [job["id"] for job in selected_jobs(view)]


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
