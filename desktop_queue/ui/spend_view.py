"""The Spend view: what the ledger says was spent, by day, profile or model, against each budget.

:class:`SpendModel` adapts ``SpendLedger.report`` (the query ``desktop-queue spend``
runs) to a table; :class:`SpendDialog` shows it beside a bar per budget
("$0.42 of $5.00 today"). Costs that come from built-in prices are marked as estimates.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt, QTimer, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.errors import StoreError
from desktop_queue.core.ledger import Budget, PriceTable, SpendLedger
from desktop_queue.core.spend import BudgetBar, budget_bars, cost_text, is_estimate, report_total
from desktop_queue.core.wording import counted, were

#: (key, heading, alignment right?)
COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("group", "Day", False),
    ("entries", "Calls", True),
    ("tokens_in", "Tokens in", True),
    ("tokens_out", "Tokens out", True),
    ("images", "Images", True),
    ("usd", "Cost", True),
)
GROUPINGS = (("day", "Day"), ("profile", "Profile"), ("model", "Model"))
#: (label, days back; None: everything)
PERIODS: tuple[tuple[str, int | None], ...] = (
    ("Last 7 days", 7),
    ("Last 30 days", 30),
    ("This month", -1),
    ("Everything", None),
)


def since_day(days: int | None, today: _dt.date | None = None) -> str | None:
    """The first local day (``YYYY-MM-DD``) of a period; -1 is the current month; None: no start."""
    today = today or _dt.date.today()
    if days is None:
        return None
    if days < 0:
        return today.replace(day=1).isoformat()
    return (today - _dt.timedelta(days=days - 1)).isoformat()


class SpendModel(QAbstractTableModel):
    """Ledger report rows (plus a total row) as a table.

    Args:
        prices: to mark the costs that are estimates (by model).
        parent: the Qt parent.
    """

    def __init__(self, prices: PriceTable | None = None, parent: Any = None) -> None:
        super().__init__(parent)
        self.prices = prices or PriceTable()
        self.by = "day"
        self.rows: list[dict[str, Any]] = []
        self.total: dict[str, Any] = report_total([])
        #: the models of the period whose cost comes from built-in prices
        self.estimated: set[str] = set()

    def set_rows(self, by: str, rows: Sequence[Mapping[str, Any]], models: Sequence[str] = ()) -> None:
        """Shows a new report (a reset: a new grouping changes every row).

        Args:
            by: the grouping (``day``, ``profile`` or ``model``).
            rows: ``SpendLedger.report(by)`` rows.
            models: the models used in the period (to mark estimated costs when not grouped by model).
        """
        self.beginResetModel()
        self.by = by
        self.rows = [dict(r) for r in rows]
        self.total = report_total(rows)
        listed = [str(r.get("model", "")) for r in rows] if by == "model" else list(models)
        self.estimated = {m for m in listed if is_estimate(self.prices, m)}
        self.endResetModel()
        self.headerDataChanged.emit(Qt.Orientation.Horizontal, 0, 0)

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802, B008
        if parent.isValid():
            return 0
        return len(self.rows) + (1 if self.rows else 0)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(COLUMNS)

    def row(self, index: int) -> dict[str, Any]:
        """A report row; the last is the total."""
        if index < len(self.rows):
            return self.rows[index]
        return {self.by: "Total", **self.total}

    def _estimate(self, row: Mapping[str, Any], total: bool = False) -> bool:
        """Whether the row's cost is (partly) an estimate: by model exactly, else if the period used an estimated model."""
        if float(row.get("usd", 0.0)) <= 0:
            return False
        if self.by == "model" and not total:
            return str(row.get("model", "")) in self.estimated
        return bool(self.estimated)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < self.rowCount():
            return None
        row = self.row(index.row())
        key, _heading, right = COLUMNS[index.column()]
        total = index.row() == len(self.rows)
        if role == Qt.ItemDataRole.DisplayRole:
            if key == "group" and total:
                return "Total"
            if key == "group":
                return str(row.get(self.by, ""))
            if key == "usd":
                estimate = self._estimate(row, total)
                return cost_text(float(row.get("usd", 0.0)), unknown=bool(row.get("unknown_cost")), estimate=estimate)
            return f"{int(row.get(key, 0)):,}"
        if role == Qt.ItemDataRole.TextAlignmentRole:
            align = Qt.AlignmentFlag.AlignRight if right else Qt.AlignmentFlag.AlignLeft
            return int(align | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole and key == "usd":
            notes = []
            if row.get("unknown_cost"):
                notes.append("Some calls used a model with no known price: their cost is not included.")
            if self._estimate(row, total):
                notes.append("An estimate from built-in prices; set your own in Preferences → Providers.")
            return " ".join(notes) or None
        if role == Qt.ItemDataRole.FontRole and total:
            from PySide6.QtGui import QFont

            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.UserRole:
            return row
        return None

    def headerData(  # noqa: N802
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation != Qt.Orientation.Horizontal or role != Qt.ItemDataRole.DisplayRole:
            return None
        if not 0 <= section < len(COLUMNS):
            return None
        if section == 0:
            return dict(GROUPINGS).get(self.by, "Group")
        return COLUMNS[section][1]


class SpendDialog(QDialog):
    """Totals by day, profile or model, and a bar per budget limit.

    Args:
        ledger: the data dir's spend ledger.
        budgets: profile -> its spending limits (the profiles' budgets).
        prices: the data dir's price table (which costs are estimates).
        parent: the Qt parent.
    """

    def __init__(
        self,
        ledger: SpendLedger,
        budgets: Mapping[str, Budget],
        prices: PriceTable | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("spendDialog")
        self.setWindowTitle("Spend")
        self.ledger = ledger
        self.budgets = dict(budgets)
        self.model = SpendModel(prices or ledger.prices, self)
        self.by = QComboBox()
        self.by.setObjectName("spendBy")
        for key, label in GROUPINGS:
            self.by.addItem(label, key)
        self.period = QComboBox()
        self.period.setObjectName("spendPeriod")
        for label, days in PERIODS:
            self.period.addItem(label, days)
        self.by.currentIndexChanged.connect(self.reload)
        self.period.currentIndexChanged.connect(self.reload)
        refresh = QPushButton("Re&fresh")
        refresh.clicked.connect(self.reload)
        self.view = QTableView()
        self.view.setObjectName("spendTable")
        self.view.setModel(self.model)
        self.view.verticalHeader().hide()
        self.view.setAlternatingRowColors(True)
        self.view.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        header = self.view.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.empty = QLabel("Nothing spent in this period. Calls to paid providers show up here once they finish.")
        self.empty.setObjectName("spendEmpty")
        self.empty.setWordWrap(True)
        self.budget_box = QGroupBox("Budgets")
        self.budget_form = QFormLayout(self.budget_box)
        self.bars: list[tuple[BudgetBar, QProgressBar]] = []
        self.note = QLabel(
            "~ marks a cost from built-in prices (an estimate); + marks calls whose price is unknown. "
            "Set your own prices in Preferences → Providers."
        )
        self.note.setObjectName("spendNote")
        self.note.setWordWrap(True)
        self.problem = QLabel()
        self.problem.setObjectName("spendProblem")
        self.problem.setWordWrap(True)
        self.problem.hide()
        top = QHBoxLayout()
        top.addWidget(QLabel("&Group by:"))
        top.itemAt(0).widget().setBuddy(self.by)  # type: ignore[union-attr]
        top.addWidget(self.by)
        top.addSpacing(12)
        top.addWidget(QLabel("Period:"))
        top.addWidget(self.period)
        top.addStretch(1)
        top.addWidget(refresh)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.budget_box)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.empty)
        layout.addWidget(self.problem)
        layout.addWidget(self.note)
        layout.addWidget(buttons)
        self.resize(720, 520)
        # attempts finish while it is open: look again now and then (a read of what was appended)
        self.timer = QTimer(self)
        self.timer.setObjectName("spendRefreshTimer")
        self.timer.setInterval(self.REFRESH_MS)
        self.timer.timeout.connect(self.reload)
        self.reload()

    #: how often an open Spend view reads the ledger again
    REFRESH_MS = 5000

    def showEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        self.timer.start()
        super().showEvent(event)

    def hideEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        self.timer.stop()  # nothing to do while nobody looks
        super().hideEvent(event)

    @Slot()
    def reload(self) -> None:
        """Reads the ledger again (it only reads what was appended since)."""
        by = str(self.by.currentData() or "day")
        since = since_day(self.period.currentData())
        try:
            rows = self.ledger.report(by, since=since)  # type: ignore[arg-type]
            models = [str(r["model"]) for r in self.ledger.report("model", since=since)] if by != "model" else []
            problem = None
        except (StoreError, OSError) as exc:
            rows, models, problem = [], [], f"The ledger cannot be read: {exc}"
        damaged = self.ledger.damaged_lines()
        if damaged and problem is None:
            problem = f"{counted(damaged, 'damaged ledger line')} {were(damaged)} skipped."
        self.problem.setText(problem or "")
        self.problem.setVisible(problem is not None)
        self.model.set_rows(by, rows, models)
        self.empty.setVisible(not rows)
        self.view.setVisible(bool(rows))
        self._show_budgets()

    def _show_budgets(self) -> None:
        while self.budget_form.rowCount():
            self.budget_form.removeRow(0)
        self.bars = []
        for profile, budget in sorted(self.budgets.items()):
            if budget is None or not budget.is_set():
                continue
            try:
                today = self.ledger.spent(profile, "day")
                month = self.ledger.spent(profile, "month")
            except (StoreError, OSError):
                continue
            for n, bar in enumerate(budget_bars(profile, budget, today, month)):
                widget = QProgressBar()
                widget.setObjectName(f"budget_{profile}_{bar.period}_{bar.unit}")
                widget.setRange(0, 1000)
                widget.setValue(round(bar.share * 1000))
                widget.setFormat(bar.text)
                widget.setTextVisible(True)
                widget.setToolTip(
                    f"Profile {profile}: " + bar.text + (" (budget reached: its jobs wait)" if bar.reached else "")
                )
                self.budget_form.addRow(f"{profile}:" if n == 0 else "", widget)
                self.bars.append((bar, widget))
        if not self.bars:
            self.budget_form.addRow(QLabel("No budget set. Set one per profile in Preferences → Providers."))


__all__ = ["SpendDialog", "SpendModel", "since_day"]
