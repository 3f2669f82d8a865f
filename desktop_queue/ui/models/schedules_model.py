"""The Schedules pane's table: one row per schedule, with its next run, last run and result.

Adapts :mod:`desktop_queue.core.schedules` for Qt: rows come from the data dir's
``schedules.json`` (re-read only when the file changed, or every few seconds for the
runs' states), and the verbs (add, edit, pause, resume, remove, run now) go through
the same :class:`~desktop_queue.core.schedules.Scheduler` as the lease driver's, so
the window, ``work`` and the CLI see one another's changes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt, Signal

from desktop_queue.core import QueueError
from desktop_queue.core.present import scheduled_time
from desktop_queue.core.schedules import (
    Entry,
    LastRun,
    Schedule,
    Scheduler,
    describe_cron,
    last_run,
    result_preview,
)

Index = QModelIndex | QPersistentModelIndex


class ScheduleRole(enum.IntEnum):
    """Data roles beyond Qt's: the row's :class:`Entry`, and how its last run went."""

    ENTRY = Qt.ItemDataRole.UserRole
    LAST_RUN = Qt.ItemDataRole.UserRole + 1


#: (heading, what it shows)
COLUMNS = (
    ("Name", "name"),
    ("When", "cron"),
    ("Next run", "next"),
    ("Last run", "last"),
    ("Last good result", "result"),
)
NOT_CURRENT = "not current"


class SchedulesModel(QAbstractTableModel):
    """The schedules of a data dir as a table.

    Args:
        scheduler: the window's scheduler (its ``book`` is the schedules file).
        clock: ``() -> wall time``.
        parent: the Qt parent.

    Signals:
        failed(str): a verb was refused (message for people).
        message(str): a verb was done (status bar).
    """

    failed = Signal(str)
    message = Signal(str)

    def __init__(self, scheduler: Scheduler, clock: Callable[[], float], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.scheduler = scheduler
        self.clock = clock
        self._entries: list[Entry] = []
        self._runs: dict[str, LastRun] = {}
        #: last good job id -> its result preview (a result never changes once stored)
        self._previews: dict[str, str | None] = {}
        self._stamp: tuple[int, int] | None = None
        self.notices: list[str] = []

    # ------------------------------------------------------------------ Qt model

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008, N802 - Qt API
        return 0 if parent.isValid() else len(self._entries)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008, N802 - Qt API
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if (
            orientation == Qt.Orientation.Horizontal
            and role == Qt.ItemDataRole.DisplayRole
            and 0 <= section < len(COLUMNS)
        ):
            return COLUMNS[section][0]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._entries):
            return None
        entry = self._entries[index.row()]
        run = self._runs.get(entry.schedule.id)
        if role == ScheduleRole.ENTRY:
            return entry
        if role == ScheduleRole.LAST_RUN:
            return run
        column = COLUMNS[index.column()][1] if 0 <= index.column() < len(COLUMNS) else ""
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text(entry, run, column)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tip(entry, run, column)
        return None

    # ------------------------------------------------------------------ what cells say

    def _text(self, entry: Entry, run: LastRun | None, column: str) -> str:
        s, st, now = entry.schedule, entry.state, self.clock()
        if column == "name":
            return s.name
        if column == "cron":
            # in words ("Every 30 minutes"), the expression in the tooltip and the dialog
            return f"{describe_cron(s.cron) or s.cron} ({s.tz})"
        if column == "next":
            if st.paused:
                return "paused"
            nxt = entry.next_run(now)
            return scheduled_time(nxt, now) if nxt is not None else "—"
        if column == "last":
            if run is None or run.job_id is None:
                return "never ran"
            return run.state or "—"
        if column == "result":
            return self.result_text(entry, run)
        return ""

    def result_text(self, entry: Entry, run: LastRun | None) -> str:
        """The last good result's start; ``not current (12:00): …`` when the latest run failed."""
        if run is None or run.good_job_id is None:
            return "—"
        preview = self._previews.get(run.good_job_id) or "(no text)"
        if run.stale:
            when = scheduled_time(run.good_at, self.clock()) if run.good_at is not None else "earlier"
            return f"{NOT_CURRENT} ({when}): {preview}"
        return preview

    def _tip(self, entry: Entry, run: LastRun | None, column: str) -> str | None:
        st = entry.state
        if column == "cron":
            return f"cron {entry.schedule.cron}, read in {entry.schedule.tz}"
        if st.paused and st.paused_reason:
            return st.paused_reason
        if column == "last" and st.last_skipped:
            return st.last_skipped
        if column == "result" and run is not None and run.stale:
            return "The latest run failed: this is the last result that succeeded, not a current one."
        return None

    # ------------------------------------------------------------------ refresh

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.scheduler.book.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def refresh(self, force: bool = False) -> None:
        """Re-reads the schedules (when the file changed, or ``force``) and their runs' states."""
        stamp = self._file_stamp()
        entries = self._entries
        if force or stamp != self._stamp:
            try:
                entries = self.scheduler.book.load() if stamp is not None else []
            except QueueError as exc:
                self.failed.emit(str(exc))
                return
            self._stamp = stamp
            if self.scheduler.book.notices:
                self.notices.extend(self.scheduler.book.notices)
                for notice in self.scheduler.book.notices:
                    self.failed.emit(notice)
                self.scheduler.book.notices.clear()
        ids = {i for e in entries for i in (e.state.last_job_id, e.state.last_good_job_id) if i}
        try:
            jobs = self.scheduler.jobs(ids)
        except QueueError as exc:
            self.failed.emit(str(exc))
            return
        runs = {e.schedule.id: last_run(e, jobs) for e in entries}
        for run in runs.values():
            if run.good_job_id and run.good_job_id not in self._previews:
                self._previews[run.good_job_id] = result_preview(self.scheduler.queue, run.good_job_id)
        self._apply(entries, runs)

    def _apply(self, entries: list[Entry], runs: dict[str, LastRun]) -> None:
        """Rows removed, added and changed in place: the selection survives a refresh."""
        new_ids = [e.schedule.id for e in entries]
        for row in range(len(self._entries) - 1, -1, -1):
            if self._entries[row].schedule.id not in new_ids:
                self.beginRemoveRows(QModelIndex(), row, row)
                del self._entries[row]
                self.endRemoveRows()
        old_ids = [e.schedule.id for e in self._entries]
        kept = [i for i in new_ids if i in old_ids]
        if kept != old_ids:  # reordered (the file was replaced): rare, start over
            self.beginResetModel()
            self._entries = [e for e in entries if e.schedule.id in old_ids]
            self.endResetModel()
        by_id = {e.schedule.id: e for e in entries}
        last = len(COLUMNS) - 1
        for row, entry in enumerate(self._entries):
            fresh = by_id[entry.schedule.id]
            if fresh != entry or runs.get(fresh.schedule.id) != self._runs.get(fresh.schedule.id):
                self._entries[row] = fresh
                self._runs[fresh.schedule.id] = runs[fresh.schedule.id]
                self.dataChanged.emit(self.index(row, 0), self.index(row, last))
        added = [e for e in entries if e.schedule.id not in old_ids]
        if added:
            start = len(self._entries)
            self.beginInsertRows(QModelIndex(), start, start + len(added) - 1)
            self._entries.extend(added)
            self.endInsertRows()
        self._runs = runs
        if self._entries:  # "next run" moves with the clock
            self.dataChanged.emit(self.index(0, 2), self.index(len(self._entries) - 1, 2))

    def entry(self, row: int) -> Entry | None:
        return self._entries[row] if 0 <= row < len(self._entries) else None

    def row_of(self, name: str) -> int:
        return next((r for r, e in enumerate(self._entries) if e.schedule.name == name), -1)

    # ------------------------------------------------------------------ verbs

    def _do(self, done: str, fn: Callable[[], Any], *, report: bool = True) -> Any:
        """Runs a verb; a refusal is told through :attr:`failed` (None), or raised with ``report=False``."""
        try:
            out = fn()
        except QueueError as exc:
            if not report:
                raise
            self.failed.emit(str(exc))
            return None
        self.refresh(force=True)
        self.message.emit(done)
        return out if out is not None else True

    def add(self, schedule: Schedule, *, report: bool = True) -> Entry | None:
        result: Entry | None = self._do(
            f"Added schedule {schedule.name}", lambda: self.scheduler.book.add(schedule), report=report
        )
        return result

    def edit(self, name: str, *, report: bool = True, **changes: Any) -> Entry | None:
        result: Entry | None = self._do(
            f"Changed schedule {name}", lambda: self.scheduler.book.edit(name, **changes), report=report
        )
        return result

    def set_paused(self, name: str, paused: bool) -> bool:
        verb = "Paused" if paused else "Resumed"
        return self._do(f"{verb} schedule {name}", lambda: self.scheduler.book.set_paused(name, paused)) is not None

    def remove(self, name: str) -> bool:
        done = f"Removed schedule {name} (its jobs stay)"
        return self._do(done, lambda: self.scheduler.book.remove(name)) is not None

    def run_now(self, name: str) -> str | None:
        result: str | None = self._do(f"Submitted a run of {name}", lambda: self.scheduler.run_now(name))
        return result
