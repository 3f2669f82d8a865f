"""The New dialog's "Run: now / at … / after …" control (the window's ``submit --at/--delay``)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QDateTime, Signal
from PySide6.QtWidgets import QComboBox, QDateTimeEdit, QHBoxLayout, QLineEdit, QWidget

from desktop_queue.core.durations import parse_duration, parse_time

NOW, AT, AFTER = "now", "at", "after"


class RunWhen(QWidget):
    """When a new job may start: now, at a local date and time, or after a duration (``1h30m``).

    The words and limits are those of ``submit --at/--delay`` (:mod:`desktop_queue.core.durations`).

    Args:
        clock: ``() -> wall time`` (the queue's clock).
        parent: the Qt parent.

    Signals:
        changed(): the choice or its value changed.
    """

    changed = Signal()

    def __init__(self, clock: Callable[[], float], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.clock = clock
        self.mode = QComboBox()
        self.mode.setObjectName("runWhenMode")
        self.mode.addItem("Now", NOW)
        self.mode.addItem("At…", AT)
        self.mode.addItem("After…", AFTER)
        self.at = QDateTimeEdit()
        self.at.setObjectName("runAt")
        self.at.setCalendarPopup(True)
        self.at.setDisplayFormat("yyyy-MM-dd HH:mm")
        self.after = QLineEdit()
        self.after.setObjectName("runAfter")
        self.after.setPlaceholderText("e.g. 90s, 15m, 1h30m, 2d")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.mode)
        layout.addWidget(self.at, 1)
        layout.addWidget(self.after, 1)
        self.mode.currentIndexChanged.connect(self._mode_changed)
        self.at.dateTimeChanged.connect(lambda _v: self.changed.emit())
        self.after.textChanged.connect(lambda _t: self.changed.emit())
        self._mode_changed()

    def current_mode(self) -> str:
        return str(self.mode.currentData())

    def set_mode(self, mode: str) -> None:
        self.mode.setCurrentIndex(self.mode.findData(mode))

    def _mode_changed(self) -> None:
        mode = self.current_mode()
        if mode == AT and self.at.isHidden():
            # an hour from now, on the minute: a sensible start to edit
            start = QDateTime.fromSecsSinceEpoch(int(self.clock() // 60 * 60 + 3600))
            self.at.setDateTime(start)
        self.at.setVisible(mode == AT)
        self.after.setVisible(mode == AFTER)
        self.changed.emit()

    def run_after(self) -> float | None:
        """The wall time to start at; None for now.

        Raises:
            InvalidInput: a bad duration, or a time in the past (the message says which).
        """
        mode, now = self.current_mode(), self.clock()
        if mode == AT:
            return parse_time(self.at.dateTime().toString("yyyy-MM-ddTHH:mm:ss"), now)
        if mode == AFTER:
            return now + parse_duration(self.after.text())
        return None
