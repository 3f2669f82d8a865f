"""The window's dead-letter and history commands: resolve, bulk retry/replay/resolve, delete, export.

:func:`history_actions_for` decides what a selection allows (a pure function, no Qt);
:class:`HistoryActions` holds the handlers of the window's history actions (the actions
themselves come from :mod:`desktop_queue.ui.actions`), asks for
confirmation with the exact count, and runs the bulk work through the controller (off
the GUI thread, with a progress dialog that can stop it between chunks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QAction

from desktop_queue.core import QueueError
from desktop_queue.core.model import TERMINAL, State
from desktop_queue.core.search import SearchQuery
from desktop_queue.ui import dialogs, history_dialogs
from desktop_queue.ui.controller import BulkTask

if TYPE_CHECKING:
    from desktop_queue.ui.main_window import MainWindow


class HistoryCommand(StrEnum):
    RESOLVE = "resolve"
    DELETE = "delete"
    DELETE_BEFORE = "delete_before"
    EXPORT = "export"


#: command -> (text with mnemonic, icon, shortcut, status tip)
HISTORY_SPECS: dict[HistoryCommand, tuple[str, str, str | None, str]] = {
    HistoryCommand.RESOLVE: (
        "Resol&ve…",
        "state-succeeded",
        "Ctrl+Shift+V",
        "Close the selected dead letters without retrying them",
    ),
    HistoryCommand.DELETE: (
        "&Delete…",
        "action-cancel",
        "Shift+Del",
        "Delete the selected finished jobs with their results",
    ),
    HistoryCommand.DELETE_BEFORE: (
        "Delete finished &before…",
        "action-cancel",
        None,
        "Delete the jobs finished before a date, with their results",
    ),
    HistoryCommand.EXPORT: (
        "E&xport…",
        "action-copy",
        "Ctrl+E",
        "Write the jobs matching the filter to CSV or JSON Lines",
    ),
}


def history_actions_for(jobs: Iterable[Mapping[str, Any]]) -> set[HistoryCommand]:
    """The history commands enabled for a selection (export and delete-before always are)."""
    selected = list(jobs)
    allowed = {HistoryCommand.DELETE_BEFORE, HistoryCommand.EXPORT}
    if any(j.get("state") == State.DEAD and j.get("resolved_at") is None for j in selected):
        allowed.add(HistoryCommand.RESOLVE)
    if any(j.get("state") in TERMINAL for j in selected):
        allowed.add(HistoryCommand.DELETE)
    return allowed


#: verb -> (question title, button verb, noun-phrase suffix)
_BULK_TEXT = {
    "retry": ("Retry dead letters?", "Retry"),
    "replay": ("Replay dead letters?", "Replay"),
    "resolve": ("Resolve dead letters?", "Resolve"),
}


class HistoryActions(QObject):
    """The history commands of one window (built once, wired to its panes)."""

    def __init__(self, window: MainWindow, actions: dict[HistoryCommand, QAction]) -> None:
        super().__init__(window)
        self.window = window
        self.controller = window.controller
        #: the window's actions of these commands (from its action registry, which runs the handlers)
        self.actions = actions
        self.progress: history_dialogs.BulkProgressDialog | None = None
        pane = window.dead_pane
        pane.resolve_requested.connect(self.resolve_selected)
        pane.bulk_requested.connect(self.bulk_matching)
        pane.groups_wanted.connect(self.refresh_groups)
        # the group list follows the dead letters, at most twice a second
        self.group_timer = QTimer(self)
        self.group_timer.setObjectName("groupRefreshTimer")
        self.group_timer.setSingleShot(True)
        self.group_timer.setInterval(500)
        self.group_timer.timeout.connect(self.refresh_groups)
        self.controller.refresher.jobs_changed.connect(self._jobs_changed)

    def action(self, command: HistoryCommand) -> QAction:
        return self.actions[command]

    def update(self, jobs: list[dict]) -> None:
        """Enables the dead-letter pane's Resolve button (the actions follow the registry)."""
        allowed = history_actions_for(jobs)
        in_dead = self.window.current_pane() is self.window.dead_pane
        self.window.dead_pane.resolve_button.setEnabled(HistoryCommand.RESOLVE in allowed and in_dead)

    # ----------------------------------------------------------------- groups

    def _jobs_changed(self, _ids: object) -> None:
        if self.window.dead_pane.group_toggle.isChecked() and not self.group_timer.isActive():
            self.group_timer.start()

    def refresh_groups(self) -> None:
        pane = self.window.dead_pane
        if pane.group_toggle.isChecked():
            pane.set_groups(self.controller.dead_groups(resolved=False) if not pane.resolved_shown else self._all())

    def _all(self) -> list:
        """Waiting and resolved dead letters in one list of groups (with "Show resolved")."""
        merged: dict[str, Any] = {}
        for group in [*self.controller.dead_groups(False), *self.controller.dead_groups(True)]:
            old = merged.get(group.signature)
            if old is None:
                merged[group.signature] = group
            else:
                from dataclasses import replace

                merged[group.signature] = replace(old, count=old.count + group.count)
        return sorted(merged.values(), key=lambda g: (-g.count, g.signature))

    # ----------------------------------------------------------------- verbs

    def _track(self, task: BulkTask) -> BulkTask:
        """Shows a progress dialog for a bulk action (also what tests wait on)."""
        self.progress = history_dialogs.BulkProgressDialog(task, self.window)
        self.progress.show()
        return task

    def resolve_selected(self) -> BulkTask | None:
        jobs = [j for j in self.window.selection() if j.get("state") == State.DEAD and j.get("resolved_at") is None]
        if not jobs:
            return None
        note = history_dialogs.ask_note(self.window, len(jobs))
        if note is None:
            return None
        ids = [j["id"] for j in jobs]
        if len(ids) <= 50:
            self.controller.resolve(ids, note)
            return None
        return self._track(self.controller.bulk("resolve", ids, note))

    def bulk_matching(self, verb: str) -> BulkTask | None:
        """Retries, replays or resolves every dead letter the pane's filter (and group) matches."""
        pane = self.window.dead_pane
        ids = pane.matching_ids()
        if not ids:
            return None
        title, button = _BULK_TEXT[verb]
        text = pane.search.text().strip()
        where = f" matching “{text}”" if text else ""
        if pane.group_signature is not None:
            where += f" with the error “{pane.group_signature or 'none recorded'}”"
        noun = "dead job" if len(ids) == 1 else "dead jobs"
        question = f"{button} {len(ids):,} {noun}{where}?"
        if verb == "replay":
            question += " Each gets a new linked job with the same input, in the background lane."
        note: str | None = None
        if verb == "resolve":
            note = history_dialogs.ask_note(self.window, len(ids))
            if note is None:
                return None
        elif not dialogs.confirm(self.window, title, question, f"{button} {len(ids):,}"):
            return None
        try:
            task = self.controller.bulk(verb, ids, note)
        except QueueError as exc:
            dialogs.show_error(self.window, title.rstrip("?"), str(exc))
            return None
        if verb == "retry":
            task.progress.connect(pane.set_progress)
        return self._track(task)

    def delete_selected(self) -> BulkTask | None:
        jobs = [j for j in self.window.selection() if j.get("state") in TERMINAL]
        if not jobs:
            return None
        n = len(jobs)
        noun = "finished job" if n == 1 else "finished jobs"
        if not dialogs.confirm(
            self.window,
            "Delete jobs?",
            f"Delete {n:,} {noun} with their results and files? This cannot be undone.",
            f"Delete {n:,}",
        ):
            return None
        return self._run(lambda: self.controller.delete([j["id"] for j in jobs]), "Delete jobs")

    def delete_before(self) -> BulkTask | None:
        choice = history_dialogs.ask_delete_before(self.window)
        if choice is None or not choice.states:
            return None
        try:
            n = self.controller.count_finished_before(choice.before, choice.states)
        except QueueError as exc:
            dialogs.show_error(self.window, "Delete jobs", str(exc))
            return None
        from desktop_queue.core.present import clock_time

        when = clock_time(choice.before, 0.0)
        if n == 0:
            self.window.statusBar().showMessage(f"No finished jobs finished before {when}", 6000)
            return None
        what = ", ".join(choice.states)
        if not dialogs.confirm(
            self.window,
            "Delete jobs?",
            f"Delete {n:,} finished jobs ({what}) finished before {when}, with their results and files? "
            "This cannot be undone.",
            f"Delete {n:,}",
        ):
            return None
        return self._run(lambda: self.controller.delete_before(choice.before, choice.states, n), "Delete jobs")

    def export(self) -> BulkTask | None:
        pane = self.window.current_pane()
        query = pane.proxy.query
        state = pane.proxy.state if pane is self.window.queue_pane else str(State.DEAD)
        query = query.with_state(state) if state else query
        resolved = None
        if pane is self.window.dead_pane:
            resolved = None if pane.resolved_shown else False
        what = self._describe(query, pane is self.window.dead_pane)
        choice = history_dialogs.ask_export(self.window, what)
        if choice is None:
            return None
        return self._run(
            lambda: self.controller.export(
                choice.path,
                query,
                choice.fmt,
                with_inputs=choice.with_inputs,
                with_results=choice.with_results,
                resolved=resolved,
            ),
            "Export",
        )

    @staticmethod
    def _describe(query: SearchQuery, dead: bool) -> str:
        parts = ["the dead letters" if dead else ("the jobs" if not query.state else f"the {query.state} jobs")]
        if query.text:
            parts.append(f"matching “{query.text}”")
        if query.kind:
            parts.append(f"of kind {query.kind}")
        return " ".join(parts)

    def _run(self, start: Any, title: str) -> BulkTask | None:
        try:
            task = start()
        except QueueError as exc:
            dialogs.show_error(self.window, title, str(exc))
            return None
        return self._track(task)
