"""The window's chrome: the Help menu, the shortcuts dialog, About, and Alt mnemonics without clashes."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import PySide6
from PySide6.QtCore import QUrl, qVersion
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QAbstractButton, QApplication, QGroupBox, QLabel, QMenu, QTabBar, QWidget

from desktop_queue import __version__
from desktop_queue.core.paths import config_dir
from desktop_queue.ui import help_menu
from desktop_queue.ui.actions import MENUS, SPECS
from desktop_queue.ui.columns import column_menu

_MNEMONIC = re.compile(r"(?<!&)&([^&\s])")


def mnemonic(text: str) -> str | None:
    """The Alt letter of a text ("Re&play" -> "p"), or None."""
    found = _MNEMONIC.search(text.replace("&&", ""))
    return found.group(1).casefold() if found else None


def _menu_clashes(menu: QMenu, where: str) -> list[str]:
    texts = [a.text() for a in menu.actions() if a.isVisible() and not a.isSeparator()]
    counts = Counter(m for m in map(mnemonic, texts) if m)
    clashes = [
        f"{where}: {letter!r} in {[t for t in texts if mnemonic(t) == letter]}" for letter, n in counts.items() if n > 1
    ]
    for action in menu.actions():
        if action.menu() is not None:
            clashes += _menu_clashes(action.menu(), f"{where} > {action.text()}")
    return clashes


def _window_mnemonics(window: QWidget) -> list[tuple[str, str]]:
    """(letter, what) of every Alt shortcut live in the window now: menu titles, visible tabs, buttons, labels."""
    found = [(m, f"menu {a.text()}") for a in window.menuBar().actions() if (m := mnemonic(a.text()))]
    for widget in window.findChildren(QWidget):
        if not widget.isVisibleTo(window) or widget.window() is not window:
            continue
        if isinstance(widget, QTabBar):
            texts = [widget.tabText(i) for i in range(widget.count()) if widget.isTabVisible(i)]
        elif isinstance(widget, QAbstractButton) or isinstance(widget, QLabel) and widget.buddy() is not None:
            texts = [widget.text()]
        elif isinstance(widget, QGroupBox):
            texts = [widget.title()]
        else:
            continue
        found += [(m, f"{type(widget).__name__} {t}") for t in texts if (m := mnemonic(t))]
    return found


def _assert_unique(found: list[tuple[str, str]], where: str) -> None:
    counts = Counter(letter for letter, _what in found)
    clashes = {letter: [w for m, w in found if m == letter] for letter, n in counts.items() if n > 1}
    assert not clashes, f"{where}: {clashes}"


def test_no_two_siblings_share_a_mnemonic(qtbot: Any, session: Any) -> None:
    """Alt+letter must do one thing: in each menu, and across the window's menu titles, tabs and buttons."""
    window = session.window
    job_id = session.queue.submit("demo", {"prompt": "x"}, title="a job").job.id
    window.refresh()
    qtbot.waitUntil(lambda: session.queue.get(job_id).state == "succeeded", timeout=5000)
    window.refresh()
    qtbot.waitUntil(window.queue_pane.view.isVisible, timeout=3000)
    assert window.show_job(job_id)  # its Result (text, "Plain") and Details show their buttons
    clashes = []
    for menu in window.menus.values():
        clashes += _menu_clashes(menu, menu.title())
    clashes += _menu_clashes(window.registry.context_menu(window), "context menu")
    pane = window.queue_pane
    headings = [c.header for c in window.controller.queue_model.columns]
    clashes += _menu_clashes(column_menu(pane.view, headings, pane.columns.main, pane.reset_columns, window), "columns")
    assert not clashes
    # every combination of the visible tabs: what is hidden has no live shortcut
    for pane_tab in range(window.tabs.count()):
        window.tabs.setCurrentIndex(pane_tab)
        if pane_tab == 1:
            window.dead_pane.group_toggle.setChecked(True)  # its buttons show too
        for job_tab in range(window.job_tabs.count()):
            window.job_tabs.setCurrentIndex(job_tab)
            QApplication.processEvents()
            where = f"{window.tabs.tabText(pane_tab)} / {window.job_tabs.tabText(job_tab)}"
            try:
                _assert_unique(_window_mnemonics(window), where)
            except AssertionError as exc:
                clashes.append(str(exc).splitlines()[0])
    assert not clashes


def test_the_mnemonic_reader_finds_a_clash() -> None:
    """The clash test can fail: two letters alike are found, && is no mnemonic."""
    assert mnemonic("Re&play…") == "p" and mnemonic("Save && close") is None and mnemonic("&&x &Y") == "y"
    try:
        _assert_unique([("p", "Re&play"), ("p", "&Pause")], "here")
    except AssertionError as exc:
        assert "Re&play" in str(exc)
    else:
        raise AssertionError("a clash went unnoticed")


def test_every_registered_action_is_in_a_menu_with_a_mnemonic(session: Any) -> None:
    window = session.window
    in_menus = {a.objectName() for menu in window.menus.values() for a in menu.actions()}
    for spec in SPECS:
        assert mnemonic(spec.text), spec.id
        if spec.menu is not None:
            assert f"action_{spec.id}" in in_menus, spec.id
            assert spec.menu in MENUS


def test_the_help_menu(session: Any) -> None:
    help_actions = [a.text() for a in session.window.menus["help"].actions() if not a.isSeparator()]
    assert help_actions == ["&Keyboard shortcuts", "Open &data folder", "Open &config folder", "&About Desktop Queue"]


class Opened:
    """Stands in for QDesktopServices: records the URLs asked for, answers ``ok``."""

    def __init__(self, ok: bool = True) -> None:
        self.ok = ok
        self.urls: list[QUrl] = []

    def openUrl(self, url: QUrl) -> bool:  # noqa: N802 - Qt API
        self.urls.append(url)
        return self.ok


def test_open_data_and_config_folders(session: Any, monkeypatch: Any) -> None:
    opened = Opened()
    monkeypatch.setattr(help_menu, "QDesktopServices", opened)
    window = session.window
    window.action("open_data").trigger()
    window.action("open_config").trigger()
    assert [Path(u.toLocalFile()) for u in opened.urls] == [Path(session.queue.data_dir), config_dir()]
    assert config_dir().is_dir()  # created, so that the file manager has something to show
    assert window.banner.isHidden()


def test_a_folder_that_does_not_open_is_named_in_the_banner(session: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(help_menu, "QDesktopServices", Opened(ok=False))
    session.window.action("open_data").trigger()
    assert not session.window.banner.isHidden()
    assert str(session.queue.data_dir) in session.window.banner.text.text()


def test_the_shortcuts_dialog_lists_every_registered_shortcut(qtbot: Any, session: Any) -> None:
    window = session.window
    window.action("shortcuts").trigger()
    dialog = window.findChild(help_menu.ShortcutsDialog)
    assert dialog is not None and dialog.isVisible()
    listed = dialog.listed()
    expected = 0
    for action_id, spec in window.registry.specs.items():
        keys = [k for k in window.registry[action_id].shortcuts() if help_menu.typed(k)]
        if not keys:
            continue
        expected += 1
        text = keys[0].toString(QKeySequence.SequenceFormat.NativeText)
        assert any(name == spec.plain_text and text in shown for name, shown in listed), (spec.id, listed)
    assert expected >= 15  # New, Cancel, Retry, Replay, Pause, ..., Keyboard shortcuts
    assert ("Keyboard shortcuts", "F1") in listed
    dialog.filter.setText("replay")
    assert [name for name, _keys in dialog.listed()] == ["Replay"]
    dialog.filter.setText("")
    assert len(dialog.listed()) == len(listed)


def test_a_new_action_appears_in_the_shortcuts_dialog(session: Any) -> None:
    """The list is generated from the registry: an action added there is listed, nothing else to edit."""
    from dataclasses import replace

    from desktop_queue.ui.actions import ActionRegistry

    extra = replace(SPECS[0], id="extra", text="E&xtra thing", shortcut="Ctrl+Alt+X", menu="view")
    registry = ActionRegistry(session.window, [*SPECS, extra])
    rows = help_menu.shortcut_rows(registry)
    assert any(r.action == "Extra thing" and r.menu == "View" and "X" in r.keys for r in rows)
    for action in registry.actions.values():  # (not the window's: drop them again)
        session.window.removeAction(action)


def test_about_names_the_version_folders_and_qt(session: Any) -> None:
    window = session.window
    window.action("about").trigger()
    dialog = window.findChild(help_menu.AboutDialog)
    assert dialog is not None
    text = dialog.details.text()
    for part in (__version__, str(session.queue.data_dir), str(config_dir()), qVersion(), PySide6.__version__):
        assert part in text
    dialog.copy()
    assert QApplication.clipboard().text() == text
    about = window.action("about")
    assert isinstance(about, QAction) and about.menuRole() == QAction.MenuRole.AboutRole


def test_view_menu_brings_the_schedules_and_metrics_panes_forward(qtbot: Any, session: Any) -> None:
    """The Metrics and Alerts tabs have no Alt letter left (each of their letters is taken): the View
    menu and its shortcut reach it, and the Schedules pane, from the keyboard."""
    window = session.window
    window.tabs.setCurrentWidget(window.queue_pane)
    window.action("metrics").trigger()
    assert window.tabs.currentWidget() is window.metrics_pane
    window.action("schedules").trigger()
    assert window.tabs.currentWidget() is window.schedules_pane
    window.action("alerts").trigger()
    assert window.tabs.currentWidget() is window.alerts_pane
    assert window.action("metrics").shortcut().toString() == "Ctrl+Shift+M"


def _dialog_mnemonics(dialog: QWidget) -> list[tuple[str, str]]:
    """(letter, what) of every Alt shortcut live in a dialog now: visible tabs, buttons, labels with a buddy."""
    found = []
    for widget in dialog.findChildren(QWidget):
        if not widget.isVisibleTo(dialog):
            continue
        if isinstance(widget, QTabBar):
            texts = [widget.tabText(i) for i in range(widget.count()) if widget.isTabVisible(i)]
        elif isinstance(widget, QAbstractButton) or isinstance(widget, QLabel) and widget.buddy() is not None:
            texts = [widget.text()]
        else:
            continue
        found += [(m, f"{type(widget).__name__} {t}") for t in texts if (m := mnemonic(t))]
    return found


def test_the_new_job_and_replay_dialogs_give_each_field_an_alt_letter_of_its_own(
    qtbot: Any, open_session: Any, data_dir: Path
) -> None:
    """A chat form's "&Model" beside the dialog's "&Max attempts", "Pro&file" beside the "&Form"
    tab, "&Temperature", "Max &tokens" and "&Title": Alt+M, F and T cycled instead of acting."""
    from desktop_queue.providers import discover
    from desktop_queue.ui import dialogs

    kinds = discover()
    session = open_session(data_dir, lease=False, providers=kinds)
    assert not isinstance(session, int)
    window = session.window
    window.show()
    dialog = window.new_job()
    qtbot.waitUntil(dialog.isVisible, timeout=3000)
    clashes = []
    for index in range(dialog.kind.count()):
        dialog.kind.setCurrentIndex(index)
        dialog.tabs.setCurrentIndex(0)
        if dialog.form is not None:
            dialog.form.show_advanced(True)  # (its fields too)
        QApplication.processEvents()
        try:
            _assert_unique(_dialog_mnemonics(dialog), dialog.kind.currentText())
        except AssertionError as exc:
            clashes.append(str(exc).splitlines()[0])
    dialog.reject()
    assert not clashes
    # a replay of a chat job: its form beside the Form and JSON tabs, Replay, Cancel and Input
    job = session.queue.submit("openai.chat", {"prompt": "again"}, title="again").job
    replay = dialogs.ReplayDialog(session.controller, job, window)
    qtbot.addWidget(replay)
    replay.open()
    assert replay.form is not None
    replay.form.show_advanced(True)
    QApplication.processEvents()
    _assert_unique(_dialog_mnemonics(replay), "replay")
    replay.reject()
    # the rule itself: a text keeps its letter unless another holds it first; one that
    # clashes moves to a free one, never to a letter another text keeps
    from desktop_queue.ui.forms import free_mnemonics

    assert free_mnemonics(["Pro&file:", "&Prompt:", "&Model:"], {"f", "m"}) == ["P&rofile:", "&Prompt:", "M&odel:"]
