"""The Help menu's windows: the keyboard shortcuts (from the action registry) and About.

:func:`shortcut_rows` lists every registered action that has a shortcut, generated from
the registry itself, so the list cannot fall behind the menus. :func:`about_lines` says
which version runs on which Qt, and where it keeps its data and its configuration.
"""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import PySide6
from PySide6.QtCore import QSize, Qt, QUrl, qVersion
from PySide6.QtGui import QDesktopServices, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop_queue import __version__
from desktop_queue.ui.actions import MENUS, ActionRegistry
from desktop_queue.ui.icons import icon

#: keys that are no action of the registry, but that people look for all the same
OTHER_KEYS: tuple[tuple[str, str, str], ...] = (
    ("Tables", "Clear the filter", "Esc"),
    ("Tables", "Open a menu, a tab or press a button", "Alt+underlined letter"),
    ("Tables", "Show a job's events", "Enter (in the table), or double-click"),
)


@dataclass(frozen=True)
class ShortcutRow:
    """One line of the shortcuts dialog."""

    menu: str
    action: str
    keys: str
    tip: str = ""


def typed(key: QKeySequence) -> bool:
    """Whether a person types this key on a usual keyboard (not a media key such as "Find" or "Help")."""
    text = key.toString(QKeySequence.SequenceFormat.PortableText)
    return "+" in text or re.fullmatch(r"F\d+|Del|Esc|Ins|Backspace|Return|Enter|Home|End|Tab", text) is not None


def shortcut_rows(registry: ActionRegistry) -> list[ShortcutRow]:
    """Every registered action with a shortcut (in menu order), then :data:`OTHER_KEYS`."""
    rows = []
    for action_id, spec in registry.specs.items():
        keys = [k for k in registry[action_id].shortcuts() if typed(k)]
        if not keys:
            continue
        menu = MENUS.get(spec.menu or "", "&Other").replace("&", "")
        text = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in keys)
        rows.append(ShortcutRow(menu, spec.plain_text, text, spec.tip))
    rows.extend(ShortcutRow(menu, what, keys) for menu, what, keys in OTHER_KEYS)
    return rows


class ShortcutsDialog(QDialog):
    """Help → Keyboard shortcuts: a filterable list of every shortcut, grouped by menu.

    Args:
        rows: what to list (:func:`shortcut_rows`).
        parent: the window.
    """

    def __init__(self, rows: Iterable[ShortcutRow], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("shortcutsDialog")
        self.setWindowTitle("Keyboard shortcuts — Desktop Queue")
        self.rows = list(rows)
        self.filter = QLineEdit()
        self.filter.setObjectName("shortcutFilter")
        self.filter.setPlaceholderText("Filter by action or key")
        self.filter.setClearButtonEnabled(True)
        self.tree = QTreeWidget()
        self.tree.setObjectName("shortcutList")
        self.tree.setHeaderLabels(["Action", "Shortcut"])
        self.tree.setRootIsDecorated(False)
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        groups: dict[str, QTreeWidgetItem] = {}
        #: (group item, its lines)
        self.groups: list[tuple[QTreeWidgetItem, list[QTreeWidgetItem]]] = []
        for row in self.rows:
            group = groups.get(row.menu)
            if group is None:
                group = groups[row.menu] = QTreeWidgetItem(self.tree, [row.menu, ""])
                self.groups.append((group, []))
                font = group.font(0)
                font.setBold(True)
                group.setFont(0, font)
                group.setFlags(Qt.ItemFlag.ItemIsEnabled)
                group.setFirstColumnSpanned(True)
            item = QTreeWidgetItem(group, [row.action, row.keys])
            item.setToolTip(0, row.tip or row.action)
            next(lines for g, lines in self.groups if g is group).append(item)
        self.tree.expandAll()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.filter)
        layout.addWidget(self.tree, 1)
        layout.addWidget(buttons)
        self.filter.textChanged.connect(self.apply_filter)
        self.resize(fitted(QSize(520, 560), parent))

    def apply_filter(self, text: str) -> None:
        """Shows only the lines whose action or keys contain ``text`` (any case)."""
        needle = text.strip().casefold()
        for group, lines in self.groups:
            shown = 0
            for item in lines:
                match = not needle or needle in item.text(0).casefold() or needle in item.text(1).casefold()
                item.setHidden(not match)
                shown += match
            group.setHidden(shown == 0)

    def listed(self) -> list[tuple[str, str]]:
        """(action, keys) of every line shown now."""
        return [
            (item.text(0), item.text(1))
            for group, lines in self.groups
            for item in lines
            if not item.isHidden() and not group.isHidden()
        ]


def fitted(size: QSize, parent: QWidget | None) -> QSize:
    """``size``, or less where the screen is smaller (a high scale factor, a small screen)."""
    screen = parent.screen() if parent is not None else QGuiApplication.primaryScreen()
    if screen is None:
        return size
    area = screen.availableGeometry()
    return size.boundedTo(QSize(int(area.width() * 0.9), int(area.height() * 0.9)))


def about_lines(data_dir: Path, config_dir: Path) -> list[tuple[str, str]]:
    """(label, value) pairs of the About window."""
    return [
        ("Version", __version__),
        ("Data folder", str(data_dir)),
        ("Config folder", str(config_dir)),
        ("Qt", qVersion()),
        ("PySide", PySide6.__version__),
        ("Python", f"{platform.python_version()} ({sys.platform})"),
    ]


class AboutDialog(QDialog):
    """Help → About Desktop Queue: version, folders, Qt and PySide versions, with a Copy button.

    Args:
        data_dir: the data directory in use.
        config_dir: the configuration directory in use.
        parent: the window.
    """

    def __init__(self, data_dir: Path, config_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("aboutDialog")
        self.setWindowTitle("About Desktop Queue")
        self.lines = about_lines(data_dir, config_dir)
        logo = QLabel()
        logo.setPixmap(icon("app").pixmap(48, 48))
        title = QLabel(f"<b>Desktop Queue {__version__}</b>")
        title.setTextFormat(Qt.TextFormat.RichText)
        blurb = QLabel("Runs AI generation jobs on your own machine, and never loses one.")
        blurb.setWordWrap(True)
        self.details = QLabel("\n".join(f"{label}: {value}" for label, value in self.lines))
        self.details.setObjectName("aboutDetails")
        self.details.setTextFormat(Qt.TextFormat.PlainText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = QPushButton(icon("action-copy"), "&Copy details")
        self.copy_button.setObjectName("copyAbout")
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(self.copy)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(logo)
        layout.addWidget(title)
        layout.addWidget(blurb)
        layout.addWidget(self.details)
        layout.addWidget(buttons)
        self.setMinimumWidth(420)

    def copy(self) -> None:
        """Copies the details (for a bug report)."""
        QGuiApplication.clipboard().setText(self.details.text())


def open_folder(path: Path) -> str | None:
    """Opens ``path`` in the system's file manager (created first if missing); an error message, or None."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{path} cannot be created: {exc.strerror or exc}"
    if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
        return f"No file manager opened {path}"
    return None
