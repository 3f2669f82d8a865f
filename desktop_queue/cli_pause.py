"""``desktop-queue pause-background`` / ``resume-background``: the data dir's background switch.

While it is on, no process on the data dir (the window, any ``work``) starts a
background-lane job; interactive jobs still run, and running attempts finish. It is
kept in the data dir (:mod:`desktop_queue.core.pause`), so it outlasts every process,
and each one honours a flip within a tick of its lease driver. The window's
Queue → Pause background work is the same switch.

Hooked into :mod:`desktop_queue.cli` by :func:`add_parsers` and :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from desktop_queue.core.model import Actor
from desktop_queue.core.paths import data_dir as resolve_data_dir
from desktop_queue.core.pause import MAX_REASON, BackgroundSwitch, PauseState

# desktop_queue.core.present (flow control, the ledger) is imported where a pause is shown:
# the parser that adds these commands is built for every command

EXIT_OK = 0


def add_parsers(sub: Any) -> None:
    """Adds ``pause-background`` and ``resume-background`` to the CLI's subparsers."""
    p = sub.add_parser(
        "pause-background",
        help="start no background-lane job in any process on the data dir (interactive jobs still run)",
        description="Pauses background work for every process on the data dir (the window and every "
        "`work`), until `resume-background`; kept across restarts. Running attempts finish; "
        "interactive jobs still start.",
    )
    p.add_argument("--reason", type=_reason, default=None, metavar="TEXT", help="why (shown in the window)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser(
        "resume-background",
        help="let background-lane jobs start again (see pause-background)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def _reason(text: str) -> str:
    if len(text) > MAX_REASON:
        raise argparse.ArgumentTypeError(f"at most {MAX_REASON} characters, not {len(text)}")
    return text


def _print(state: PauseState, was: PauseState, as_json: bool) -> None:
    if as_json:
        doc = {**state.to_json(), "changed": state.paused != was.paused}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    from desktop_queue.core.present import background_pause_text, clock_time

    if state.paused:
        print(f"{background_pause_text(state, time.time())}{' (it already was)' if was.paused else ''}")
        print("No process on this data dir starts background jobs until `resume-background`; interactive jobs run.")
    elif was.paused:
        print(f"Background work resumed (it was paused by {was.by or 'someone'} at {clock_time(was.at, time.time())})")
    else:
        print("Background work was not paused; background jobs run")


def note_if_paused(switch: BackgroundSwitch, err: Callable[[str], None]) -> None:
    """Tells a starting ``work`` that background work is paused (it would seem to hang on background jobs)."""
    state = switch.state()
    if state.problem:
        err(f"note: {state.problem}")
    from desktop_queue.core.present import background_pause_text

    text = background_pause_text(state, time.time())
    if text is not None:
        err(f"note: {text}: only interactive jobs run until `desktop-queue resume-background`")


def cmd_pause_background(args: argparse.Namespace) -> int:
    switch = BackgroundSwitch(resolve_data_dir(args.data_dir))
    was = switch.state()
    _print(switch.set(True, str(Actor.CLI), reason=args.reason), was, args.json)
    return EXIT_OK


def cmd_resume_background(args: argparse.Namespace) -> int:
    switch = BackgroundSwitch(resolve_data_dir(args.data_dir))
    was = switch.state()
    _print(switch.set(False, str(Actor.CLI)), was, args.json)
    return EXIT_OK


COMMANDS = {"pause-background": cmd_pause_background, "resume-background": cmd_resume_background}
