"""The window's action registry: every command's spec and its handler, in one place.

In the manner of Picard's ``ui/mainwindow/actions.py``: each :class:`ActionSpec` says
what a command is (id, text with its ``&`` mnemonic, icon, shortcut, status tip), where
it appears (menu and section, toolbar group, context-menu group), when it is enabled,
and what it does (a handler taking the window). :class:`ActionRegistry` turns the specs
into one ``QAction`` each, shared by the menus, the toolbar, the context menu, the tray
and the keyboard-shortcuts dialog, so none of them can disagree with another.

Which selection-dependent commands apply is still decided by the pure functions
:func:`~desktop_queue.ui.commands.actions_for` and
:func:`~desktop_queue.ui.history_actions.history_actions_for`; a spec's
``enabled_when`` only reads their answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import QMenu, QMenuBar, QToolBar, QWidget

from desktop_queue.ui.commands import Command
from desktop_queue.ui.history_actions import HISTORY_SPECS, HistoryCommand
from desktop_queue.ui.icons import icon

if TYPE_CHECKING:
    from desktop_queue.ui.main_window import MainWindow

Shortcut = QKeySequence.StandardKey | str | None

#: menu id -> title (with its mnemonic), in menu-bar order
MENUS: dict[str, str] = {
    "file": "&File",
    "job": "&Job",
    "queue": "&Queue",
    "view": "&View",
    "help": "&Help",
}


@dataclass(frozen=True)
class ActionState:
    """What the window's state allows now (the answers of the pure deciders)."""

    commands: frozenset[Command] = frozenset()
    history: frozenset[HistoryCommand] = frozenset()


def always(_state: ActionState) -> bool:
    return True


def when_allowed(command: Command | HistoryCommand) -> Callable[[ActionState], bool]:
    """``enabled_when`` of a command the deciders rule on."""
    if isinstance(command, HistoryCommand):
        return lambda state: command in state.history
    return lambda state: command in state.commands


@dataclass(frozen=True)
class ActionSpec:
    """One command of the window.

    Attributes:
        id: the action's id (its ``objectName`` is ``action_<id>``).
        text: the menu text, with its ``&`` mnemonic.
        tip: the status tip (also the tooltip after the text).
        handler: what triggering it does, given the window.
        icon: the icon's name in ``resources/icons`` ("" for none).
        shortcut: a standard key, a portable key string, or None.
        fallback: the shortcut when a standard key has none on this platform.
        menu: the menu it sits in (a key of :data:`MENUS`), or None.
        section: menu sections are separated; lower first, then registry order.
        toolbar: the toolbar group it sits in (groups are separated), or None.
        context: the job tables' context-menu group it sits in, or None.
        enabled_when: whether it is enabled in a given :class:`ActionState`.
        role: the macOS menu role (Quit, Preferences, About).
        checkable: an on/off action (the handler reads its state).
    """

    id: str
    text: str
    tip: str
    handler: Callable[[MainWindow], object]
    icon: str = ""
    shortcut: Shortcut = None
    fallback: str | None = None
    menu: str | None = None
    section: int = 0
    toolbar: int | None = None
    context: int | None = None
    enabled_when: Callable[[ActionState], bool] = field(default=always)
    role: QAction.MenuRole = QAction.MenuRole.NoRole
    checkable: bool = False

    @property
    def plain_text(self) -> str:
        """The text as read aloud: no mnemonic, no trailing ellipsis."""
        return self.text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…")


def _history(command: HistoryCommand, handler: Callable[[MainWindow], object], **placement: object) -> ActionSpec:
    text, icon_name, shortcut, tip = HISTORY_SPECS[command]
    return ActionSpec(
        command.value,
        text,
        tip,
        handler,
        icon=icon_name,
        shortcut=shortcut,
        enabled_when=when_allowed(command),
        **placement,  # type: ignore[arg-type]
    )


#: every action of the main window, in menu order
SPECS: tuple[ActionSpec, ...] = (
    # File
    ActionSpec(
        Command.NEW,
        "&New job…",
        "Submit a new job (Ctrl+N)",
        lambda w: w.new_job(),
        icon="action-new",
        shortcut=QKeySequence.StandardKey.New,
        menu="file",
        toolbar=0,
        context=2,
    ),
    _history(HistoryCommand.EXPORT, lambda w: w.history.export(), menu="file", section=1),
    ActionSpec(
        Command.PREFERENCES,
        "Pre&ferences…",
        "Concurrency and other settings",
        lambda w: w.edit_preferences(),
        icon="action-preferences",
        shortcut=QKeySequence.StandardKey.Preferences,
        fallback="Ctrl+,",
        menu="file",
        section=2,
        role=QAction.MenuRole.PreferencesRole,
    ),
    ActionSpec(
        Command.QUIT,
        "&Quit",
        "Close Desktop Queue",
        lambda w: w.close(),
        shortcut=QKeySequence.StandardKey.Quit,
        menu="file",
        section=3,
        role=QAction.MenuRole.QuitRole,
    ),
    # Job
    ActionSpec(
        Command.CANCEL,
        "&Cancel job",
        "Cancel the selected queued or running jobs",
        lambda w: w.cancel_selected(),
        icon="action-cancel",
        shortcut="Del",
        menu="job",
        toolbar=1,
        context=0,
        enabled_when=when_allowed(Command.CANCEL),
    ),
    ActionSpec(
        Command.RETRY,
        "&Retry",
        "Queue the selected dead or cancelled jobs again",
        lambda w: w.retry_selected(),
        icon="action-retry",
        shortcut="Ctrl+R",
        menu="job",
        toolbar=1,
        context=0,
        enabled_when=when_allowed(Command.RETRY),
    ),
    ActionSpec(
        Command.REPLAY,
        "Re&play…",
        "Run a finished job again as a new linked job",
        lambda w: w.replay_selected(),
        icon="action-replay",
        shortcut="Ctrl+Shift+R",
        menu="job",
        toolbar=1,
        context=0,
        enabled_when=when_allowed(Command.REPLAY),
    ),
    _history(HistoryCommand.RESOLVE, lambda w: w.history.resolve_selected(), menu="job", context=0),
    _history(HistoryCommand.DELETE, lambda w: w.history.delete_selected(), menu="job", section=1, context=0),
    _history(HistoryCommand.DELETE_BEFORE, lambda w: w.history.delete_before(), menu="job", section=1),
    ActionSpec(
        Command.COPY_TIMELINE,
        "C&opy timeline",
        "Copy the selected job's timeline to the clipboard as text",
        lambda w: w.copy_timeline(),
        icon="action-copy",
        shortcut="Ctrl+Shift+C",
        menu="job",
        section=2,
        context=1,
        enabled_when=when_allowed(Command.COPY_TIMELINE),
    ),
    # Queue
    ActionSpec(
        Command.PAUSE,
        "&Pause queue",
        "Start nothing new; running jobs finish",
        lambda w: w.controller.set_paused(True),
        icon="action-pause",
        shortcut="Ctrl+P",
        menu="queue",
        toolbar=2,
        enabled_when=when_allowed(Command.PAUSE),
    ),
    ActionSpec(
        Command.RESUME,
        "Res&ume queue",
        "Start queued jobs again",
        lambda w: w.controller.set_paused(False),
        icon="action-resume",
        shortcut="Ctrl+Shift+P",
        menu="queue",
        toolbar=2,
        enabled_when=when_allowed(Command.RESUME),
    ),
    ActionSpec(
        Command.STOP_AFTER_CURRENT,
        "&Stop after current",
        "Let running jobs finish, then pause the queue",
        lambda w: w.controller.stop_after_current(),
        icon="action-stop-after",
        menu="queue",
        toolbar=2,
        enabled_when=when_allowed(Command.STOP_AFTER_CURRENT),
    ),
    ActionSpec(
        "pause_background",
        "Pause &background work",
        "Start no background job in any process on this data dir (kept across restarts); interactive jobs still run",
        lambda w: w.controller.set_background_paused(w.action("pause_background").isChecked()),
        icon="action-pause",
        menu="queue",
        section=1,
        checkable=True,
    ),
    ActionSpec(
        Command.REFRESH,
        "Re&fresh",
        "Reload the queue now (F5)",
        lambda w: w.refresh(),
        icon="action-refresh",
        shortcut=QKeySequence.StandardKey.Refresh,
        menu="queue",
        section=2,
        toolbar=3,
    ),
    # View
    ActionSpec(
        Command.FIND,
        "&Find…",
        "Filter the jobs by text (Ctrl+F)",
        lambda w: w.focus_search(),
        icon="action-find",
        shortcut=QKeySequence.StandardKey.Find,
        menu="view",
    ),
    ActionSpec(
        "spend",
        "&Spend…",
        "What the providers cost, by day, profile and model, against each budget",
        lambda w: w.show_spend(),
        icon="state-succeeded",
        shortcut="Ctrl+Shift+S",
        menu="view",
        section=1,
    ),
    ActionSpec(
        "schedules",
        "Sc&hedules",
        "The schedules: next and last runs, the last good result; add, change, run now",
        lambda w: w.show_pane(w.schedules_pane),
        shortcut="Ctrl+Shift+H",
        menu="view",
        section=1,
    ),
    ActionSpec(
        "metrics",
        "&Metrics",
        "Charts of the last hour, day or week: depth, throughput, waits, retries, throttles",
        lambda w: w.show_pane(w.metrics_pane),
        shortcut="Ctrl+Shift+M",
        menu="view",
        section=1,
    ),
    ActionSpec(
        "alerts",
        "&Alerts",
        "Alerts that fired and cleared (active ones on top), and their rules",
        lambda w: w.show_pane(w.alerts_pane),
        shortcut="Ctrl+Shift+A",
        menu="view",
        section=1,
    ),
    ActionSpec(
        "job_side",
        "Show the &job side",
        "Show or hide the selected job's Timeline, Result and Details beside the tables",
        lambda w: w.set_job_side_shown(w.action("job_side").isChecked()),
        shortcut="Ctrl+J",
        menu="view",
        section=2,
        checkable=True,
    ),
    ActionSpec(
        "reset_layout",
        "Reset &layout",
        "Window size, the split, and every table's columns (order, width, shown) as on a first start",
        lambda w: w.reset_layout(),
        menu="view",
        section=2,
    ),
    # Help
    ActionSpec(
        "shortcuts",
        "&Keyboard shortcuts",
        "Every shortcut of the window, by menu",
        lambda w: w.show_shortcuts(),
        shortcut=QKeySequence.StandardKey.HelpContents,
        fallback="F1",
        menu="help",
    ),
    ActionSpec(
        "open_data",
        "Open &data folder",
        "Open the folder with the job store and the results in the file manager",
        lambda w: w.open_data_folder(),
        menu="help",
        section=1,
    ),
    ActionSpec(
        "open_config",
        "Open &config folder",
        "Open the folder with the provider profiles (profiles.json) in the file manager",
        lambda w: w.open_config_folder(),
        menu="help",
        section=1,
    ),
    ActionSpec(
        "about",
        "&About Desktop Queue",
        "Version, folders, Qt and PySide versions",
        lambda w: w.show_about(),
        menu="help",
        section=2,
        role=QAction.MenuRole.AboutRole,
    ),
)


def shortcuts_for(shortcut: Shortcut, fallback: str | QKeySequence | None = None) -> list[QKeySequence]:
    """The key sequences of ``shortcut``; ``fallback`` when a standard key has none on this platform."""
    if shortcut is None:
        return []
    if isinstance(shortcut, str):
        return [QKeySequence(shortcut)]
    bindings = [k for k in QKeySequence.keyBindings(shortcut) if not k.isEmpty()]
    if not bindings and fallback is not None:
        return [QKeySequence(fallback)]
    return bindings


class ActionRegistry:
    """One ``QAction`` per :class:`ActionSpec`, owned by the window, and the places they appear.

    Args:
        window: the main window (owns the actions; the handlers get it).
        specs: the specs (default :data:`SPECS`).
    """

    def __init__(self, window: MainWindow, specs: Iterable[ActionSpec] = SPECS) -> None:
        self.window = window
        self.specs: dict[str, ActionSpec] = {}
        self.actions: dict[str, QAction] = {}
        for spec in specs:
            if spec.id in self.specs:
                raise ValueError(f"action {spec.id!r} is registered twice")
            self.specs[spec.id] = spec
            action = QAction(icon(spec.icon) if spec.icon else QIcon(), spec.text, window)
            action.setObjectName(f"action_{spec.id}")
            action.setShortcuts(shortcuts_for(spec.shortcut, spec.fallback))
            action.setStatusTip(spec.tip)
            action.setToolTip(f"{spec.plain_text} — {spec.tip}")
            action.setMenuRole(spec.role)
            action.setCheckable(spec.checkable)
            action.triggered.connect(lambda _checked=False, h=spec.handler: h(window))
            window.addAction(action)  # its shortcut works wherever it is shown (or not)
            self.actions[spec.id] = action

    def __getitem__(self, action_id: str) -> QAction:
        return self.actions[action_id]

    def _placed(self, attribute: str, value: str | None = None) -> list[tuple[int, ActionSpec]]:
        """``(group, spec)`` of the specs placed by ``attribute``, by group then registry order."""
        placed = []
        for order, spec in enumerate(self.specs.values()):
            if attribute == "menu":
                if spec.menu == value:
                    placed.append((spec.section, order, spec))
            else:
                group = getattr(spec, attribute)
                if group is not None:
                    placed.append((group, order, spec))
        return [(group, spec) for group, _order, spec in sorted(placed, key=lambda p: (p[0], p[1]))]

    def _fill(self, target: QMenu | QToolBar, placed: list[tuple[int, ActionSpec]]) -> None:
        previous: int | None = None
        for group, spec in placed:
            if previous is not None and group != previous:
                target.addSeparator()
            target.addAction(self.actions[spec.id])
            previous = group

    def build_menus(self, bar: QMenuBar) -> dict[str, QMenu]:
        """Fills the menu bar: one menu per :data:`MENUS` entry."""
        menus = {}
        for menu_id, title in MENUS.items():
            menu = bar.addMenu(title)
            menu.setObjectName(f"menu_{menu_id}")
            self._fill(menu, self._placed("menu", menu_id))
            menus[menu_id] = menu
        return menus

    def build_toolbar(self, toolbar: QToolBar) -> None:
        self._fill(toolbar, self._placed("toolbar"))

    def context_menu(self, parent: QWidget) -> QMenu:
        """The job tables' context menu (a new one each time: it is shown once)."""
        menu = QMenu(parent)
        self._fill(menu, self._placed("context"))
        return menu

    def update(self, state: ActionState) -> None:
        """Enables each action as its ``enabled_when`` says for ``state``."""
        for action_id, spec in self.specs.items():
            self.actions[action_id].setEnabled(spec.enabled_when(state))
