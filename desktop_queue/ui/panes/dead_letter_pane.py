"""The dead-letter pane: jobs that need a person, grouped by error, with bulk actions."""

from __future__ import annotations

import functools

from PySide6.QtCore import (
    QItemSelectionModel,
    QModelIndex,
    Qt,
    Signal,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QListView,
    QMenu,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.wording import counted
from desktop_queue.ui.columns import ColumnFitter, install_column_chooser
from desktop_queue.ui.flow_layout import FlowLayout
from desktop_queue.ui.icons import icon
from desktop_queue.ui.models.dead_groups import DeadGroupModel
from desktop_queue.ui.models.filter_proxy import JobFilterProxy
from desktop_queue.ui.models.job_table import JobTableModel
from desktop_queue.ui.panes.common import (
    ARCHIVE_SEARCH_DELAY_MS,
    EmptyState,
    _clear_on_escape,
    _job_table,
    _search_box,
    reset_header,
    scrolled_down,
    selected_ids,
    selected_jobs,
)


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
        model.pinned = functools.partial(selected_ids, self.view)  # (rows the model keeps)
        model.in_use = functools.partial(scrolled_down, self.view)
        self.retry_button = QPushButton(icon("action-retry"), "&Retry")
        self.replay_button = QPushButton(icon("action-replay"), "Re&play…")
        self.resolve_button = QPushButton(icon("state-succeeded"), "Res&olve…")
        self.resolve_button.setObjectName("resolveButton")
        self.resolve_button.setToolTip("Close the selected dead letters without retrying them")
        self.retry_all_button = QPushButton(icon("action-retry"), "Retr&y all matching")
        self.retry_all_button.setObjectName("retryAllButton")
        # a push button with a menu, as its neighbours are push buttons: the style sizes it
        # to their height and leaves room for its arrow (a tool button here was shorter, its
        # arrow drawn over the last letter)
        self.more_button = QPushButton("Matchin&g")
        self.more_button.setObjectName("matchingMenuButton")
        self.more_button.setToolTip("Replay or resolve every dead letter the filter matches")
        menu = QMenu(self.more_button)
        self.replay_all_action = menu.addAction(icon("action-replay"), "Re&play all matching…")
        self.resolve_all_action = menu.addAction(icon("state-succeeded"), "Re&solve all matching…")
        self.more_button.setMenu(menu)
        # (no icon of its own: as tall as its neighbours with theirs)
        self.more_button.setMinimumHeight(self.retry_all_button.sizeHint().height())
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
        # Last error takes what is left (~28 characters, ~20 if that spares scrolling): the columns fit
        # the pane, no horizontal scrolling hides "Died at" at the default window size. Kind
        # widens to its kinds, as in the queue ("openai.c…" told neither chat nor image)
        self.columns = ColumnFitter(
            self.view,
            [c.key for c in model.columns],
            "error",
            {"title": 170, "kind": 70, "class": 80, "attempts": 90, "died": 70, "replayed": 90, "resolved": 70},
            content_keys=("kind", "died", "resolved"),
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
        self.group_heading.setText(f"Errors ({counted(len(groups), 'kind')}, {counted(total, 'dead letter')})")

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
