"""The Alerts pane: the active alerts on top, then every alert fired or cleared, with times;
and the dialog that edits the alert rules' thresholds (the config dir's ``alerts.json``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.alerts import DEFAULTS, USES_WINDOW, Rule, save_rules
from desktop_queue.core.errors import StoreError
from desktop_queue.ui.models.alerts_model import AlertsModel


class AlertsPane(QWidget):
    """The alert history: active alerts first, then fired and cleared ones, newest first.

    Signals:
        rules_requested(): "Rules…" was pressed (the window opens :class:`AlertRulesDialog`).
    """

    rules_requested = Signal()

    def __init__(self, model: AlertsModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("alertsPane")
        self.model = model
        self.heading = QLabel()
        self.heading.setObjectName("alertsHeading")
        self.view = QTableView()
        self.view.setObjectName("alertsView")
        self.view.setModel(model)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setAlternatingRowColors(True)
        self.view.setShowGrid(False)
        self.view.setWordWrap(False)
        self.view.verticalHeader().setVisible(False)
        header = self.view.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.rules_button = QPushButton("Rules…")  # (no Alt letter: every letter of it is taken in this window)
        self.rules_button.setObjectName("alertRulesButton")
        self.rules_button.setToolTip("Change when alerts fire: thresholds, windows, and which rules are on")
        self.rules_button.clicked.connect(self.rules_requested)
        top = QHBoxLayout()
        top.addWidget(self.heading, 1)
        top.addWidget(self.rules_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)
        for signal in (model.rowsInserted, model.rowsRemoved, model.dataChanged):
            signal.connect(lambda *_: self.update_heading())
        # the header's own fitting missed rows that changed after it: an alert that cleared
        # read "Cle…" in a column fitted to "Active" and "Fired"
        for signal in (model.rowsInserted, model.rowsRemoved, model.dataChanged, model.modelReset):
            signal.connect(lambda *_: QTimer.singleShot(0, self._fit_columns))
        self.update_heading()

    def _fit_columns(self) -> None:
        # (column by column, the last one aside: it keeps stretching to the pane's edge)
        for column in range(self.model.columnCount() - 1):
            self.view.resizeColumnToContents(column)

    def update_heading(self) -> None:
        active = self.model.active_count()
        if active:
            self.heading.setText(f"{active} active alert{'s' if active != 1 else ''}; the history below")
        elif self.model.rowCount():
            self.heading.setText("No active alert. Alerts fired and cleared, newest first:")
        else:
            self.heading.setText("No alert has fired on this data dir yet.")


#: the columns of the rules dialog: field, label, tooltip
_FIELDS = (
    ("threshold", "Threshold", "the value at which the alert fires"),
    ("clear_below", "Clear below", "the value under which it clears (a band below the threshold stops flapping)"),
    ("window_s", "Window (s)", "how far back a count or a trend looks"),
    ("for_s", "Fire after (s)", "how long the condition must hold before the alert fires"),
    ("clear_s", "Clear after (s)", "how long it must be over before the alert clears"),
)


class AlertRulesDialog(QDialog):
    """Edits the alert rules; saves their differences from the defaults to the config dir.

    Args:
        rules: the rules in use, by name.
        config_dir: where ``alerts.json`` is saved (None: the user's config dir).
        parent: the window.
    """

    def __init__(
        self, rules: Mapping[str, Rule], config_dir: Path | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("alertRulesDialog")
        self.setWindowTitle("Alert rules")
        self.config_dir = config_dir
        self.rules = dict(rules)
        self.enabled: dict[str, QCheckBox] = {}
        self.spins: dict[tuple[str, str], QDoubleSpinBox] = {}
        grid = QGridLayout()
        grid.addWidget(QLabel("<b>Rule</b>"), 0, 0)
        for col, (_f, label, tip) in enumerate(_FIELDS, 1):
            head = QLabel(f"<b>{label}</b>")
            head.setToolTip(tip)
            grid.addWidget(head, 0, col)
        for row, rule in enumerate(self.rules.values(), 1):
            box = QCheckBox(rule.name.replace("_", " "))
            box.setObjectName(f"rule_{rule.name}")
            box.setChecked(rule.enabled)
            box.setToolTip(rule.text)
            self.enabled[rule.name] = box
            grid.addWidget(box, row, 0)
            for col, (field_name, label, tip) in enumerate(_FIELDS, 1):
                spin = QDoubleSpinBox()
                spin.setObjectName(f"rule_{rule.name}_{field_name}")
                spin.setRange(0.0, 10_000_000.0)
                spin.setDecimals(2)
                value = getattr(rule, field_name)
                spin.setValue(rule.threshold if value is None else float(value))
                spin.setToolTip(f"{label}: {tip}")
                # (a rule that reads only the present has no window to set)
                spin.setEnabled(field_name != "window_s" or rule.name in USES_WINDOW)
                self.spins[(rule.name, field_name)] = spin
                grid.addWidget(spin, row, col)
        self.problem = QLabel()
        self.problem.setObjectName("alertRulesProblem")
        self.problem.setWordWrap(True)
        self.problem.hide()
        defaults = QPushButton("Restore &defaults")
        defaults.setObjectName("alertRulesDefaults")
        defaults.clicked.connect(self.restore_defaults)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.addButton(defaults, QDialogButtonBox.ButtonRole.ResetRole)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        intro = QLabel(
            "An alert fires once when its condition starts and clears once when it ends. "
            "Every window and worker on this machine uses these rules from its next scan."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        layout.addLayout(grid)
        layout.addWidget(self.problem)
        layout.addWidget(buttons, 0, Qt.AlignmentFlag.AlignRight)

    def edited(self) -> dict[str, Rule]:
        """The rules as the dialog shows them."""
        out = {}
        for name, rule in self.rules.items():
            changes: dict[str, Any] = {"enabled": self.enabled[name].isChecked()}
            for field_name, _label, _tip in _FIELDS:
                changes[field_name] = self.spins[(name, field_name)].value()
            if rule.clear_below is None and changes["clear_below"] == changes["threshold"]:
                changes["clear_below"] = None  # no band was set, and none is asked for
            out[name] = dataclasses.replace(rule, **changes)
        return out

    def restore_defaults(self) -> None:
        for name in self.rules:
            default = DEFAULTS.get(name)
            if default is None:
                continue
            self.enabled[name].setChecked(default.enabled)
            for field_name, _label, _tip in _FIELDS:
                value = getattr(default, field_name)
                self.spins[(name, field_name)].setValue(default.threshold if value is None else float(value))

    def save(self) -> None:
        rules = self.edited()
        try:
            save_rules(rules, self.config_dir)
        except StoreError as exc:
            self.problem.setText(f"Not saved: {exc}")
            self.problem.show()
            return
        self.rules = rules
        self.accept()


__all__ = ["AlertRulesDialog", "AlertsPane"]
