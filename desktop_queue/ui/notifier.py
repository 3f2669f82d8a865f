"""How the window tells people things: an in-window banner, and notices outside the window.

:class:`Banner` is the dismissable strip at the top of the window. :class:`Notifier`
sends a notice (a job dead-lettered, the queue drained, a provider down) through the
system tray when there is one.
"""

from __future__ import annotations

from enum import StrEnum

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMenu, QSystemTrayIcon, QToolButton, QWidget

from desktop_queue.ui.icons import icon

TITLE = "Desktop Queue"


class Level(StrEnum):
    """How much a notice matters (its icon, and how long it stays)."""

    INFO = "info"
    WARNING = "warning"


_TRAY_ICONS = {Level.INFO: QSystemTrayIcon.MessageIcon.Information, Level.WARNING: QSystemTrayIcon.MessageIcon.Warning}


class Banner(QFrame):
    """A dismissable, non-blocking message strip at the top of the window."""

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
        self.text = QLabel()
        self.text.setObjectName("bannerText")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QToolButton()
        close.setObjectName("bannerClose")
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.text, 1)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def show_message(self, text: str, icon_name: str = "event-info") -> None:
        self.icon.setPixmap(icon(icon_name).pixmap(18, 18))
        self.text.setText(text)
        self.show()


class Notifier(QObject):
    """Sends notices outside the window: through the system tray when there is one.

    Args:
        banner: the window's banner.
        parent: the window (owns the tray icon).
    """

    def __init__(self, banner: Banner, parent: QWidget) -> None:
        super().__init__(parent)
        self.banner = banner
        self.tray: QSystemTrayIcon | None = None

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
        self.tray = tray

    def notify(self, text: str, level: Level = Level.INFO, timeout_ms: int = 5000) -> None:
        """Tells ``text`` outside the window, if the platform offers a way."""
        if self.tray is not None:
            self.tray.showMessage(TITLE, text, _TRAY_ICONS[level], timeout_ms)

    def hide(self) -> None:
        if self.tray is not None:
            self.tray.hide()
