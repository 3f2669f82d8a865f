"""Menus as data: what a selection of jobs allows, decided by one pure function (no Qt).

The window turns each :class:`Command` into one ``QAction``; :func:`actions_for` says
which of them are enabled for the current selection. Toolbar items stay visible and are
only disabled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from desktop_queue.core.model import State


class Command(StrEnum):
    """Every command of the window (one ``QAction`` each)."""

    NEW = "new"
    CANCEL = "cancel"
    RETRY = "retry"
    REPLAY = "replay"
    PAUSE = "pause"
    RESUME = "resume"
    STOP_AFTER_CURRENT = "stop_after_current"
    REFRESH = "refresh"
    PREFERENCES = "preferences"
    COPY_TIMELINE = "copy_timeline"
    FIND = "find"
    QUIT = "quit"


#: Commands that apply to a selection, and the states each accepts.
SELECTION_RULES: dict[Command, frozenset[str]] = {
    Command.CANCEL: frozenset({State.QUEUED, State.RUNNING}),
    Command.RETRY: frozenset({State.DEAD, State.CANCELLED}),
    Command.REPLAY: frozenset({State.SUCCEEDED, State.DEAD, State.CANCELLED}),
}

#: Commands that never depend on the selection.
ALWAYS = frozenset({Command.NEW, Command.REFRESH, Command.PREFERENCES, Command.FIND, Command.QUIT})


def applies_to(command: Command, job: Mapping[str, Any]) -> bool:
    """True if ``command`` can act on this one job."""
    return job.get("state") in SELECTION_RULES.get(command, frozenset())


def actions_for(jobs: Iterable[Mapping[str, Any]], *, paused: bool = False) -> set[Command]:
    """The commands enabled for a selection of jobs and a queue that is (or is not) paused.

    A selection command is enabled when at least one selected job allows it (the
    command then acts on those jobs only). Replay and Copy timeline need exactly one job.

    Args:
        jobs: the selected jobs (dicts with at least ``state``).
        paused: whether leasing is paused.
    """
    selected = list(jobs)
    allowed = set(ALWAYS)
    allowed.add(Command.RESUME if paused else Command.PAUSE)
    if not paused:
        allowed.add(Command.STOP_AFTER_CURRENT)
    for command in (Command.CANCEL, Command.RETRY):
        if any(applies_to(command, job) for job in selected):
            allowed.add(command)
    if len(selected) == 1:
        allowed.add(Command.COPY_TIMELINE)
        if applies_to(Command.REPLAY, selected[0]):
            allowed.add(Command.REPLAY)
    return allowed
