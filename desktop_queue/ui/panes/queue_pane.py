"""The queue pane: every job, newest first, with its filters."""

from __future__ import annotations

import functools
import math
import time

from PySide6.QtCore import (
    Qt,
    Signal,
)
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.model import State
from desktop_queue.ui.columns import ColumnFitter, install_column_chooser
from desktop_queue.ui.first_run import FirstRunPanel
from desktop_queue.ui.icons import state_icon
from desktop_queue.ui.models.columns import JobRole
from desktop_queue.ui.models.filter_proxy import JobFilterProxy
from desktop_queue.ui.models.job_table import JobTableModel
from desktop_queue.ui.panes.common import (
    ARCHIVE_SEARCH_DELAY_MS,
    LIVE_REPAINT_S,
    STATE_ORDER,
    EmptyState,
    _clear_on_escape,
    _job_table,
    _search_box,
    reset_header,
    scrolled_down,
    select_job,
    selected_ids,
    selected_jobs,
)


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
        model.pinned = functools.partial(selected_ids, self.view)  # (rows the model keeps)
        model.in_use = functools.partial(scrolled_down, self.view)
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
        # give way first (Next run elides; its tooltip has the whole phrase), then Title to
        # ~20 if that lets the table fit, and only then does the table scroll. Created widens
        # for older days ("2026-11-30 16:24").
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
            # the widest value each holds: a priority ("background" is wider than "interactive"
            # in proportional fonts), a wait ("3 min" up to "119 min", then "2.0 h")
            texts={"priority": "background", "wait": "119 min"},
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
        self.state_filter.setItemText(0, f"All states ({total:,})")
        for i, state in enumerate(STATE_ORDER, start=1):
            n = counts.get(state, 0)
            if state == State.DEAD:
                n += counts.get("resolved", 0)  # this pane lists resolved dead letters among the dead
            self.state_filter.setItemText(i, f"{state.capitalize()} ({n:,})")

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
