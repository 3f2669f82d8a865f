"""The Alerts pane's model, and the window's watch over the alerts and the notification outbox.

:class:`AlertsModel` lists the active alerts on top, then the history newest first,
updated in place (rows inserted and removed by key, never a reset) when the history grows.

:class:`AlertWatch` adapts the core for the window: it builds the
:class:`~desktop_queue.core.repair.Upkeep` the lease driver ticks (repair scan, outbox,
alerts), hands the outbox's notices to the window through a signal, and reads the
alert history that any process on the data dir appended, so that the window announces
each transition once, whichever process recorded it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt, QTimer, Signal

from desktop_queue.core.alerts import FIRED, AlertBook, HistoryTail, Rule, Transition, load_rules
from desktop_queue.core.model import iso
from desktop_queue.core.outbox import Notice, Outbox
from desktop_queue.core.present import table_time
from desktop_queue.core.repair import RepairScan, Upkeep
from desktop_queue.ui.icons import icon

ACTIVE = "active"
HISTORY = "history"
#: history rows the pane shows (the command line shows every one)
MAX_HISTORY = 500
#: how often the window looks at the history file for other processes' transitions
WATCH_MS = 2000
#: finished jobs are announced this long after a change (a burst of them: one notice)
DELIVER_MS = 1000

Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class AlertRow:
    """One row: an active alert, or one transition of the history."""

    section: str
    transition: Transition

    @property
    def key(self) -> tuple[str, str, int]:
        # an active alert is one row per (rule, subject); a history row is one transition
        if self.section == ACTIVE:
            return (ACTIVE, self.transition.key, 0)
        return (HISTORY, "", self.transition.id)


COLUMNS = ("When", "Status", "Alert", "About", "What")


class AlertsModel(QAbstractTableModel):
    """Active alerts on top, then the history, newest first.

    Roles: ``UserRole`` gives the :class:`AlertRow`; ``ToolTipRole`` the full text.
    """

    ROW_ROLE = Qt.ItemDataRole.UserRole

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.rows: list[AlertRow] = []

    # ------------------------------------------------------------------ Qt API

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008, N802 - Qt API
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008, N802 - Qt API
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if (
            orientation == Qt.Orientation.Horizontal
            and role == Qt.ItemDataRole.DisplayRole
            and 0 <= section < len(COLUMNS)
        ):
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.rows):
            return None
        row = self.rows[index.row()]
        t = row.transition
        col = index.column()
        if role == self.ROW_ROLE:
            return row
        if role == Qt.ItemDataRole.ToolTipRole:
            return iso(t.at) if col == 0 else t.describe()  # (the date and zone in full)
        if role == Qt.ItemDataRole.DecorationRole and col == 1:
            if row.section == ACTIVE:
                return icon("provider-down")
            return icon("state-dead" if t.kind == FIRED else "state-succeeded")
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if col == 0:
            return table_time(t.at)  # as the job tables read (the whole time in the tooltip)
        if col == 1:
            if row.section == ACTIVE:
                return "Active"
            return "Fired" if t.kind == FIRED else "Cleared"
        if col == 2:
            return t.rule.replace("_", " ")
        if col == 3:
            return t.subject or "queue"
        if col == 4:
            return t.text
        return None

    # ------------------------------------------------------------------ updates

    def set_alerts(self, active: list[Transition], history: list[Transition]) -> None:
        """Shows ``active`` (newest first) on top of ``history`` (newest first), changing rows in place."""
        new = [AlertRow(ACTIVE, t) for t in active] + [AlertRow(HISTORY, t) for t in history[:MAX_HISTORY]]
        keys = {r.key for r in new}
        # rows that went (bottom up, so the indexes above stay right)
        for i in range(len(self.rows) - 1, -1, -1):
            if self.rows[i].key not in keys:
                self.beginRemoveRows(QModelIndex(), i, i)
                del self.rows[i]
                self.endRemoveRows()
        # the rows kept are in the same order in ``new``: insert the others between them
        for i, row in enumerate(new):
            if i < len(self.rows) and self.rows[i].key == row.key:
                if self.rows[i] != row:
                    self.rows[i] = row
                    self.dataChanged.emit(self.index(i, 0), self.index(i, len(COLUMNS) - 1))
                continue
            self.beginInsertRows(QModelIndex(), i, i)
            self.rows.insert(i, row)
            self.endInsertRows()

    def active_count(self) -> int:
        return sum(1 for r in self.rows if r.section == ACTIVE)


class AlertWatch(QObject):
    """The window's side of alerts and notifications.

    Args:
        queue: the opened queue.
        providers: kind -> provider this window runs.
        flow: flow control (breakers, budgets), read only.
        budgets: profile -> budget, asked on every scan.
        capacity_free: whether the window's worker could take another job now.
        rules: the alert rules, asked on every scan (default: the config dir's).
        watch_ms: how often the history is looked at (0: only when :meth:`poll` is called).
        parent: the Qt parent.

    Signals:
        transitions(list): alert transitions new to this window (from any process),
            oldest first: announce each once.
        notices(list): notifications of finished jobs this window delivers (each
            :class:`~desktop_queue.core.outbox.Notice` once, across processes), soon
            after they finish (see :meth:`deliver_soon`).
        changed(): the model was updated.
    """

    transitions = Signal(list)
    notices = Signal(list)
    changed = Signal()

    def __init__(
        self,
        queue: Any,
        *,
        providers: Mapping[str, Any] | None = None,
        flow: Any = None,
        budgets: Callable[[], Mapping[str, Any]] | None = None,
        capacity_free: Callable[[], bool] | None = None,
        rules: Callable[[], list[Rule]] | None = None,
        watch_ms: int = WATCH_MS,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        data_dir = Path(queue.data_dir)
        self.book = AlertBook(data_dir)
        self.outbox = Outbox(data_dir, queue.clock.now)
        self.outbox.start(queue)  # jobs that end while the window is open are announced
        try:
            self.outbox.hold_window()  # workers on this data dir leave the notices to this window
        except OSError:
            pass  # (a data dir that takes no lock: workers then log the notices themselves)
        self.model = AlertsModel(self)
        self._rules = rules or (lambda: list(load_rules().values()))
        self.upkeep = Upkeep(
            RepairScan(queue, outbox=self.outbox, providers=providers, flow=flow, capacity_free=capacity_free),
            book=self.book,
            rules=self._rules,
            flow=flow,
            budgets=budgets,
            deliver=self._deliver,
            on_transitions=self._recorded,
        )
        self.tail = HistoryTail(self.book)
        self._timer = QTimer(self)
        self._timer.setObjectName("alertWatch")
        self._timer.setInterval(max(1, watch_ms))
        self._timer.timeout.connect(self.poll)
        if watch_ms > 0:
            self._timer.start()
        self._soon = QTimer(self)
        self._soon.setObjectName("noticeDelivery")
        self._soon.setSingleShot(True)
        self._soon.setInterval(DELIVER_MS)
        self._soon.timeout.connect(self.deliver_now)
        self.reload()

    def _recorded(self, _transitions: list[Transition]) -> None:
        # announced through the tail, as other processes' are: each once, in one place
        self.poll()

    def _deliver(self, notices: list[Notice]) -> None:
        self.notices.emit(notices)

    def rules(self) -> list[Rule]:
        return list(self._rules())

    def reload(self) -> None:
        """Reads the active alerts and the history into the model."""
        try:
            history = self.book.history()
            active = self.book.active()
        except OSError:
            return  # the data dir is unreadable: the store's own banner says so
        self.model.set_alerts(active, list(reversed(history.transitions)))
        self.changed.emit()

    def poll(self) -> list[Transition]:
        """Announces the transitions appended since the last look (any process's); returns them."""
        try:
            new = self.tail.new()
        except OSError:
            return []
        if new:
            self.reload()
            self.transitions.emit(new)
        return new

    def deliver_soon(self) -> None:
        """Jobs changed: deliver the notices of those that finished, once a burst settles."""
        if not self._soon.isActive():
            self._soon.start()

    def deliver_now(self) -> list[Notice]:
        """Feeds the outbox from the store's changes and delivers what is pending (once)."""
        return self.upkeep.flush()

    def stop(self) -> None:
        self._timer.stop()
        self._soon.stop()
        self.outbox.release_window()


__all__ = ["AlertRow", "AlertWatch", "AlertsModel"]
