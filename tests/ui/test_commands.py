"""Menus as data: what each selection allows, over every state."""

from __future__ import annotations

import pytest

from desktop_queue.core.model import State
from desktop_queue.ui.commands import ALWAYS, Command, actions_for

EXPECTED = {
    State.QUEUED: {Command.CANCEL},
    State.RUNNING: {Command.CANCEL},
    State.SUCCEEDED: {Command.REPLAY},
    State.DEAD: {Command.RETRY, Command.REPLAY},
    State.CANCELLED: {Command.RETRY, Command.REPLAY},
}
SELECTION_COMMANDS = {Command.CANCEL, Command.RETRY, Command.REPLAY}


@pytest.mark.parametrize("state", list(State))
def test_one_job_in_each_state(state: State) -> None:
    allowed = actions_for([{"id": "a", "state": str(state)}])
    assert allowed & SELECTION_COMMANDS == EXPECTED[state]
    assert allowed >= ALWAYS
    assert Command.COPY_TIMELINE in allowed


def test_every_state_is_covered() -> None:
    assert set(EXPECTED) == set(State)


def test_empty_selection_allows_only_global_commands() -> None:
    allowed = actions_for([])
    assert not allowed & (SELECTION_COMMANDS | {Command.COPY_TIMELINE})
    assert {Command.NEW, Command.REFRESH, Command.PREFERENCES, Command.PAUSE} <= allowed


@pytest.mark.parametrize("paused", [False, True])
def test_pause_and_resume_follow_the_queue(paused: bool) -> None:
    allowed = actions_for([], paused=paused)
    assert (Command.RESUME in allowed) is paused
    assert (Command.PAUSE in allowed) is not paused
    assert (Command.STOP_AFTER_CURRENT in allowed) is not paused


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ((State.QUEUED, State.DEAD), {Command.CANCEL, Command.RETRY}),
        ((State.SUCCEEDED, State.SUCCEEDED), set()),
        ((State.RUNNING, State.CANCELLED), {Command.CANCEL, Command.RETRY}),
    ],
)
def test_mixed_selection_enables_what_any_job_allows_but_replay_needs_one(
    states: tuple[State, ...], expected: set[Command]
) -> None:
    allowed = actions_for([{"id": str(i), "state": str(s)} for i, s in enumerate(states)])
    assert allowed & SELECTION_COMMANDS == expected
    assert Command.COPY_TIMELINE not in allowed
