"""The window says in one line why it cannot open, where Qt would print plugin lines and abort."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_queue.ui.display import NO_DISPLAY, NO_XCB_CURSOR, XCB_CURSOR, display_problem, loadable


def _problem(env: dict[str, str], platform: str = "linux", *, cursor: bool = True, qt65: bool = True) -> str | None:
    asked: list[str] = []

    def can_load(name: str) -> bool:
        asked.append(name)
        return cursor

    problem = display_problem(env, platform, needs_xcb_cursor=qt65, can_load=can_load)
    assert asked in ([], [XCB_CURSOR])
    return problem


def test_an_x11_session_with_the_cursor_library_opens() -> None:
    assert _problem({"DISPLAY": ":0"}) is None


def test_no_display_at_all_is_said_plainly() -> None:
    assert _problem({}) == NO_DISPLAY
    assert _problem({"QT_QPA_PLATFORM": "xcb"}) == NO_DISPLAY
    assert "desktop-queue work" in NO_DISPLAY


def test_x11_without_libxcb_cursor_names_the_package_to_install() -> None:
    assert _problem({"DISPLAY": ":0"}, cursor=False) == NO_XCB_CURSOR
    assert "libxcb-cursor0" in NO_XCB_CURSOR
    assert _problem({"DISPLAY": ":0"}, cursor=False, qt65=False) is None  # (older Qt does not load it)


@pytest.mark.parametrize(
    "env",
    [
        {"QT_QPA_PLATFORM": "offscreen"},
        {"QT_QPA_PLATFORM": "wayland"},
        {"QT_QPA_PLATFORM": "wayland;xcb", "DISPLAY": ":0"},
        {"WAYLAND_DISPLAY": "wayland-0"},
        {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"},
    ],
)
def test_a_chosen_platform_or_a_wayland_session_is_left_to_qt(env: dict[str, str]) -> None:
    assert _problem(env, cursor=False) is None


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_other_systems_are_left_to_qt(platform: str) -> None:
    assert _problem({}, platform, cursor=False) is None


def test_the_loader_is_asked_for_real() -> None:
    assert loadable("libc.so.6") if sys.platform.startswith("linux") else True
    assert not loadable("libdesktop-queue-no-such-library.so.0")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 and Wayland systems only")
def test_the_window_without_a_display_exits_1_with_one_line_and_touches_nothing(tmp_path: Path) -> None:
    """It printed Qt's "Reinstalling the application may fix this problem" and aborted (exit 134, a core file)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    data = tmp_path / "data"
    run = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines() == [f"desktop-queue: {NO_DISPLAY}"]
    assert not data.exists()  # nothing was opened, so nothing waits for a window that never came
