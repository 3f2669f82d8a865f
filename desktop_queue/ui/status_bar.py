"""The window's status bar: job counts, this window's slots, throughput, dead letters, providers, background work.

It shows what it is given (counts, capacity, each provider's state computed in core)
and holds no business rule; the window decides when to update it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QStatusBar, QWidget

from desktop_queue.core.model import State
from desktop_queue.core.present import clock_time
from desktop_queue.core.wording import counted
from desktop_queue.ui.elided import ElidedLabel
from desktop_queue.ui.icons import icon, lit_icon, state_icon

#: the states counted in the status bar, in this order (dead letters have their own button)
COUNTED_STATES = (State.QUEUED, State.RUNNING, State.SUCCEEDED, State.CANCELLED)
#: provider status level -> status-bar icon (shapes differ, so colour is never the only cue)
PROVIDER_ICONS = {"ok": "provider-ok", "slow": "provider-slow", "probing": "provider-probing", "down": "provider-down"}
#: how many recent flow events a provider indicator's tooltip lists
FLOW_TOOLTIP_EVENTS = 8


class ClickableItem(QWidget):
    """A status-bar item that opens something when clicked (a provider's indicator: its Preferences).

    Signals:
        clicked(): the left button was released over it.
    """

    clicked = Signal()

    def mouseReleaseEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        if event.button() == Qt.MouseButton.LeftButton and self.rect().contains(event.position().toPoint()):
            self.clicked.emit()
        super().mouseReleaseEvent(event)


def status_item(item_icon: QIcon, tip: str) -> tuple[QWidget, QLabel]:
    """An icon and a text label for the status bar (the text is updated later)."""
    item = QWidget()
    item.setToolTip(tip)
    row = QHBoxLayout(item)
    row.setContentsMargins(6, 0, 6, 0)
    row.setSpacing(4)
    picture = QLabel()
    picture.setPixmap(item_icon.pixmap(14, 14))
    label = QLabel()
    row.addWidget(picture)
    row.addWidget(label)
    return item, label


def _item_of(label: QLabel) -> QWidget:
    """The status-bar item a label sits in (see :func:`status_item`)."""
    item = label.parentWidget()
    assert item is not None
    return item


class StatusBar(QStatusBar):
    """Counts per state, this window's slots, throughput, the dead-letter button, one item per provider.

    Signals:
        dead_clicked(): the dead-letter button was pressed.
        provider_clicked(str): a provider's indicator was clicked (the profile).
    """

    dead_clicked = Signal()
    provider_clicked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("statusBar")
        self.state_labels: dict[str, QLabel] = {}
        for state in COUNTED_STATES:
            item, label = status_item(state_icon(state), f"Jobs {state} (all processes)")
            label.setObjectName(f"count_{state}")
            self.addPermanentWidget(item)
            self.state_labels[state] = label
        item, self.capacity_label = status_item(
            icon("state-running"), "Jobs running in this window / jobs it may run at once"
        )
        self.capacity_label.setObjectName("capacityLabel")
        self.addPermanentWidget(item)
        item, self.throughput_label = status_item(icon("state-succeeded"), "Jobs that succeeded in the last minute")
        self.throughput_label.setObjectName("throughputLabel")
        self.addPermanentWidget(item)
        self.dead_button = QPushButton()
        self.dead_button.setObjectName("deadButton")
        self.dead_button.setFlat(True)
        self.dead_button.setIcon(state_icon("dead"))
        self.dead_button.setToolTip("Open the dead letters")
        self.dead_button.clicked.connect(self.dead_clicked)
        self.addPermanentWidget(self.dead_button)
        #: why background work does not run (the data dir's switch, degraded profiles); hidden while it runs
        self.background_item = QWidget()
        self.background_item.setObjectName("backgroundItem")
        row = QHBoxLayout(self.background_item)
        row.setContentsMargins(6, 0, 6, 0)
        row.setSpacing(4)
        picture = QLabel()
        picture.setPixmap(icon("action-pause").pixmap(14, 14))
        self.background_label = ElidedLabel()  # a long reason elides; the tooltip has it whole
        self.background_label.setObjectName("backgroundLabel")
        row.addWidget(picture)
        row.addWidget(self.background_label)
        self.background_item.hide()
        self.insertPermanentWidget(0, self.background_item)
        #: profile -> (item, icon label, text label): one indicator per provider under flow control
        self.provider_items: dict[str, tuple[ClickableItem, QLabel, QLabel]] = {}
        self._provider_levels: dict[str, str] = {}
        #: (wall time, profile, kind, text) of recent provider state changes, newest last
        self.flow_log: deque[tuple[float, str, str, str]] = deque(maxlen=200)
        #: the counts' items, least needed first: they hide in this order on a narrow window
        self._optional: list[QWidget] = [
            _item_of(self.throughput_label),
            _item_of(self.state_labels[State.CANCELLED]),
            _item_of(self.state_labels[State.SUCCEEDED]),
            _item_of(self.capacity_label),
            _item_of(self.state_labels[State.RUNNING]),
            _item_of(self.state_labels[State.QUEUED]),
        ]
        for item in [*self._optional, self.dead_button]:
            item.setMinimumWidth(1)  # never what keeps the window wide: it hides instead (fit_items)
        # a message ("Background work paused for every process…") is drawn left of the items:
        # they make room for it while it shows, and come back when it goes
        self.messageChanged.connect(lambda _message: self.fit_items())

    # ----------------------------------------------------------------- narrow windows

    def fit_items(self) -> None:
        """Shows the items that fit the bar's width beside the message shown now; the least
        needed hide first.

        The dead-letter button and the provider indicators stay; what hides is still
        in the queue pane's state filter ("Succeeded (12)"), and comes back when the
        message goes.
        """
        spacing = 8
        used = self.dead_button.sizeHint().width() + spacing + 24  # and the size grip
        message = self.currentMessage()
        if message:
            used += self.fontMetrics().horizontalAdvance(message) + 2 * spacing
        used += sum(item.sizeHint().width() + spacing for item, _p, _l in self.provider_items.values())
        background = self.background_item
        least = background.minimumSizeHint().width() if not background.isHidden() else 0
        used += least + spacing if least else 0
        for item in reversed(self._optional):  # the most needed first
            width = item.sizeHint().width() + spacing
            fits = used + width <= self.width()
            if fits:
                used += width
            if item.isHidden() == fits:
                item.setVisible(fits)
        if least:
            # the reason elides into what is left: given more, it squeezed the counts
            # beside it ("3 queu", "0 runn") instead of letting them hide
            background.setMaximumWidth(max(least, self.width() - used + least))

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self.fit_items()

    # ----------------------------------------------------------------- counts

    def show_counts(self, counts: dict[str, int]) -> None:
        for state, label in self.state_labels.items():
            label.setText(f"{counts.get(state, 0):,} {state}")
        self.fit_items()

    def show_capacity(self, running: int, concurrency: int, note: str = "") -> None:
        self.capacity_label.setText(f"{running}/{concurrency} slots busy here{note}")

    def show_throughput(self, done_last_minute: int) -> None:
        self.throughput_label.setText(f"{done_last_minute:,} done in the last minute")

    def show_dead(self, dead: int, seen: int) -> None:
        """The dead-letter button: the count, and how many arrived since the pane was last looked at."""
        grown = dead > seen
        if self.dead_button.property("none") != (dead == 0):  # (set on a change: a tick asks every second)
            self.dead_button.setProperty("none", dead == 0)
            self.dead_button.setIcon(lit_icon("state-dead", dead > 0))
        self.dead_button.setText(counted(dead, "dead letter") + (f"  (+{dead - seen:,} new)" if grown else ""))
        font = self.dead_button.font()
        font.setBold(grown)
        self.dead_button.setFont(font)
        self.dead_button.setProperty("attention", grown)
        self.dead_button.setStyleSheet(
            "QPushButton { background: #c0392b; color: white; border-radius: 4px; padding: 2px 8px; }" if grown else ""
        )

    def show_background(self, text: str | None) -> None:
        """``Background work paused (by cli, 18:20:03)``, ``background jobs paused: openai is failing``; None hides it."""
        shown = text is not None
        if self.background_label.text() != (text or ""):
            self.background_label.setText(text or "")
            self.background_item.setToolTip(
                (text or "") + "\n\nBackground-lane jobs wait without spending attempts; interactive jobs still run."
            )
            self.background_item.setAccessibleName(text or "")
        if self.background_item.isHidden() == shown:
            self.background_item.setVisible(shown)
            self.fit_items()

    # ----------------------------------------------------------------- providers

    def record_flow(self, profile: str, kind: str, text: str) -> None:
        """Remembers a provider state change for its indicator's tooltip."""
        self.flow_log.append((time.time(), profile, kind, text))

    def update_providers(self, states: Iterable[Any]) -> None:
        """Shows every provider's state (``ProfileState``s computed in core); drops removed ones."""
        shown = set()
        for state in states:
            profile = state.profile
            shown.add(profile)
            item, picture, label = self.provider_item(profile)
            if self._provider_levels.get(profile) != state.level:
                picture.setPixmap(icon(PROVIDER_ICONS.get(state.level, "provider-ok")).pixmap(14, 14))
                self._provider_levels[profile] = state.level
            label.setText(state.text)
            item.setToolTip(self.provider_tooltip(profile, state.detail) + "\n\nClick to open its settings.")
            item.setAccessibleName(state.text)
        for profile in [p for p in self.provider_items if p not in shown]:  # a profile removed in Preferences
            item, _picture, _label = self.provider_items.pop(profile)
            self._provider_levels.pop(profile, None)
            self.removeWidget(item)
            item.deleteLater()
        self.fit_items()  # (a state's text is longer or shorter than the last one)

    def provider_tooltip(self, profile: str, status: str) -> str:
        """The indicator's tooltip: the status, then the profile's recent flow events."""
        recent = [entry for entry in self.flow_log if entry[1] == profile][-FLOW_TOOLTIP_EVENTS:]
        lines = [status]
        if recent:
            lines.append("Recent changes:")
            now = time.time()
            lines.extend(f"{clock_time(at, now)}  {text}" for at, _p, _k, text in reversed(recent))
        else:
            lines.append("No rate limits or outages so far.")
        return "\n".join(lines)

    def provider_item(self, profile: str) -> tuple[ClickableItem, QLabel, QLabel]:
        """The status-bar indicator of ``profile`` (created on first use, left of the counts)."""
        found = self.provider_items.get(profile)
        if found is not None:
            return found
        item = ClickableItem()
        item.setObjectName(f"provider_{profile}")
        item.setCursor(Qt.CursorShape.PointingHandCursor)
        item.clicked.connect(lambda p=profile: self.provider_clicked.emit(p))
        row = QHBoxLayout(item)
        row.setContentsMargins(4, 0, 4, 0)
        row.setSpacing(4)
        picture = QLabel()
        picture.setObjectName(f"providerIcon_{profile}")
        label = ElidedLabel()
        label.setObjectName(f"providerLabel_{profile}")
        row.addWidget(picture)
        row.addWidget(label)
        self.insertPermanentWidget(len(self.provider_items), item)
        self.provider_items[profile] = (item, picture, label)
        return item, picture, label
