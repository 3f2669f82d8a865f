"""How the window tells people things: an in-window banner, and notices outside the window.

:class:`Banner` is the dismissable strip at the top of the window. :class:`Notifier`
sends a notice (a job dead-lettered, the queue drained, a provider down) the best way
the desktop offers, and never drops it:

1. the system tray's balloon, when there is a tray that shows messages;
2. else a desktop notification through ``notify-send`` (Linux desktops without a tray,
   e.g. GNOME: the freedesktop notification service still shows it), started with
   ``QProcess`` so the window never waits for it;
3. else, or when that fails to start, the in-window banner.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from enum import StrEnum

from PySide6.QtCore import QObject, QProcess, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QSystemTrayIcon,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.ui.icons import icon

TITLE = "Desktop Queue"


class Level(StrEnum):
    """How much a notice matters (its icon, and how long it stays)."""

    INFO = "info"
    WARNING = "warning"


_TRAY_ICONS = {Level.INFO: QSystemTrayIcon.MessageIcon.Information, Level.WARNING: QSystemTrayIcon.MessageIcon.Warning}
#: level -> (notify-send urgency, freedesktop icon name, banner icon)
_DESKTOP = {
    Level.INFO: ("normal", "dialog-information", "event-info"),
    Level.WARNING: ("critical", "dialog-warning", "state-dead"),
}


class Channel(StrEnum):
    """Where a notice went."""

    TRAY = "tray"
    DESKTOP = "desktop"
    BANNER = "banner"


def find_notify_send() -> str | None:
    """``notify-send`` where the platform has it (Linux with libnotify's tool installed), else None."""
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("notify-send")


class Banner(QFrame):
    """A dismissable, non-blocking message strip at the top of the window.

    It shows the latest message, and above it a *condition*: a state that lasts until it
    is cleared (the store takes no changes), which a later message ("3 jobs finished")
    must not hide.

    Signals:
        dismissed(): the person closed it.
    """

    dismissed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 6, 6, 6)
        self.icon = QLabel()
        self.icon.setFixedSize(20, 20)
        self.condition = self._label("bannerCondition")
        font = self.condition.font()
        font.setBold(True)
        self.condition.setFont(font)
        self.condition.hide()
        self.text = self._label("bannerText")
        lines = QVBoxLayout()
        lines.setContentsMargins(0, 0, 0, 0)
        lines.addWidget(self.condition)
        lines.addWidget(self.text)
        self.action = QPushButton()
        self.action.setObjectName("bannerAction")
        self.action.hide()
        self.action.clicked.connect(self._act)
        self._on_action: Callable[[], object] | None = None
        close = QToolButton()
        close.setObjectName("bannerClose")
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        close.clicked.connect(self.dismissed)
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(lines, 1)
        layout.addWidget(self.action, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self._message_icon = "event-info"
        self._condition_icon = ""
        self.hide()

    @staticmethod
    def _label(name: str) -> QLabel:
        label = QLabel()
        label.setObjectName(name)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return label

    def show_message(self, text: str, icon_name: str = "event-info") -> None:
        self._message_icon = icon_name
        self.text.setText(text)
        self._layout_lines()
        self.show()

    def set_condition(
        self, text: str, icon_name: str = "state-dead", action: tuple[str, Callable[[], object]] | None = None
    ) -> None:
        """Shows ``text`` above every message until :meth:`clear_condition`.

        ``action``: (button text, what it does): what ends the condition, one click away.
        """
        self._condition_icon = icon_name
        self.condition.setText(text)
        self._on_action = action[1] if action is not None else None
        self.action.setText(action[0] if action is not None else "")
        self.action.setVisible(action is not None)
        self._layout_lines()
        self.show()

    def clear_condition(self) -> None:
        """The condition ended: the banner keeps the latest message (if any), or goes."""
        self.condition.clear()
        self._on_action = None
        self.action.hide()
        self._layout_lines()
        if not self.text.isVisibleTo(self):
            self.hide()

    def withdraw(self, text: str) -> bool:
        """Takes back the message ``text`` if it is the one shown (a state it told no longer
        holds); the banner goes unless a condition stays. Returns whether it was shown."""
        if self.text.text() != text:
            return False
        self.text.clear()
        self._layout_lines()
        if not self.condition.text():
            self.hide()
        return True

    def _act(self) -> None:
        if self._on_action is not None:
            self._on_action()

    def _layout_lines(self) -> None:
        condition = self.condition.text()
        self.condition.setVisible(bool(condition))
        # a message saying the condition again (the error that started it) is shown once
        self.text.setVisible(bool(self.text.text()) and self.text.text() != condition)
        name = self._condition_icon if condition else self._message_icon
        self.icon.setPixmap(icon(name).pixmap(18, 18))


class Notifier(QObject):
    """Sends notices outside the window: tray, else desktop notification, else the banner.

    Args:
        banner: the window's banner (the last resort).
        parent: the window (owns the tray icon).

    Attributes:
        notify_send: the ``notify-send`` program used without a tray (None: none).
        sent: ``(channel, text)`` of every notice, newest last (the last 50).
    """

    def __init__(self, banner: Banner, parent: QWidget) -> None:
        super().__init__(parent)
        self.banner = banner
        self.tray: QSystemTrayIcon | None = None
        self._tray_messages = False
        self.notify_send = find_notify_send()
        self.sent: list[tuple[Channel, str]] = []

    def build_tray(self, menu: QMenu, on_activate: object) -> None:
        """Shows a tray icon with ``menu`` (when the platform has a tray)."""
        if not QSystemTrayIcon.isSystemTrayAvailable():
            return
        tray = QSystemTrayIcon(icon("app"), self)
        tray.setToolTip(TITLE)
        tray.setContextMenu(menu)
        tray.activated.connect(
            lambda reason: on_activate() if reason == QSystemTrayIcon.ActivationReason.Trigger else None  # type: ignore[operator]
        )
        tray.show()
        self.use_tray(tray, QSystemTrayIcon.supportsMessages())

    def use_tray(self, tray: QSystemTrayIcon, shows_messages: bool = True) -> None:
        """Sends notices through ``tray`` (when it ``shows_messages``)."""
        self.tray = tray
        self._tray_messages = shows_messages

    def channel(self) -> Channel:
        """Where the next notice goes."""
        if self.tray is not None and self._tray_messages:
            return Channel.TRAY
        if self.notify_send is not None:
            return Channel.DESKTOP
        return Channel.BANNER

    def notify(self, text: str, level: Level = Level.INFO, timeout_ms: int = 5000) -> Channel:
        """Tells ``text`` the best way the platform offers; returns where it went."""
        channel = self.channel()
        if channel is Channel.TRAY and self.tray is not None:
            self.tray.showMessage(TITLE, text, _TRAY_ICONS[level], timeout_ms)
        elif channel is Channel.DESKTOP and self.notify_send is not None:
            urgency, icon_name, _banner_icon = _DESKTOP[level]
            args = ["--app-name", TITLE, "--urgency", urgency, "--icon", icon_name, "--expire-time", str(timeout_ms)]
            started, _pid = QProcess.startDetached(self.notify_send, [*args, TITLE, text])
            if not started:  # the tool went away: the banner, rather than nothing
                channel = Channel.BANNER
        if channel is Channel.BANNER:
            self.banner.show_message(text, _DESKTOP[level][2])
        self.sent = [*self.sent[-49:], (channel, text)]
        return channel

    def hide(self) -> None:
        if self.tray is not None:
            self.tray.hide()
