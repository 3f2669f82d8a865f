"""The window says in one line why it cannot open, where Qt would print plugin lines and abort."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_queue.app import xcb_plugin_path
from desktop_queue.ui.display import (
    NO_DISPLAY,
    NO_XCB_CURSOR,
    XCB_CURSOR,
    debian_package,
    display_problem,
    load_error,
    loadable,
    missing_library,
)

PLUGIN = "/opt/qt/plugins/platforms/libqxcb.so"


def _problem(
    env: dict[str, str],
    platform: str = "linux",
    *,
    cursor: bool = True,
    qt65: bool = True,
    plugin_error: str | None = None,
) -> str | None:
    asked: list[str] = []

    def load(name: str) -> str | None:
        asked.append(name)
        if name == XCB_CURSOR:
            return None if cursor else f"{XCB_CURSOR}: cannot open shared object file: No such file or directory"
        assert name == PLUGIN
        return plugin_error

    problem = display_problem(env, platform, needs_xcb_cursor=qt65, xcb_plugin=PLUGIN, load=load)
    assert asked in ([], [XCB_CURSOR], [XCB_CURSOR, PLUGIN], [PLUGIN])
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


def test_x11_without_another_library_of_the_plugin_names_it_and_every_package() -> None:
    """A minimal Debian with Xvfb: the cursor library was there, libxcb-icccm was not, and Qt aborted."""
    error = "libxcb-icccm.so.4: cannot open shared object file: No such file or directory"
    problem = _problem({"DISPLAY": ":0"}, plugin_error=error)
    assert problem == missing_library("libxcb-icccm.so.4")
    assert "'sudo apt install libxcb-icccm4'" in problem
    assert "libxcb-keysyms1" in problem and "xcb-util-wm" in problem  # the next one it would lack, and Fedora's
    assert _problem({"DISPLAY": ":0"}, cursor=False, plugin_error=error) == NO_XCB_CURSOR  # the known one first


@pytest.mark.parametrize(
    "error",
    [
        None,  # it loads
        f"{PLUGIN}: cannot open shared object file: No such file or directory",  # (Qt says where it looked)
        "libQt6Gui.so.6: version `Qt_6.8' not found (required by libqxcb.so)",  # not a missing library
    ],
)
def test_a_plugin_that_loads_or_fails_otherwise_is_left_to_qt(error: str | None) -> None:
    assert _problem({"DISPLAY": ":0"}, plugin_error=error) is None


def test_a_plugin_path_chosen_by_hand_is_left_to_qt() -> None:
    error = "libxcb-icccm.so.4: cannot open shared object file: No such file or directory"
    assert _problem({"DISPLAY": ":0", "QT_QPA_PLATFORM_PLUGIN_PATH": "/elsewhere"}, plugin_error=error) is None


@pytest.mark.parametrize(
    ("soname", "package"),
    [
        ("libxcb-icccm.so.4", "libxcb-icccm4"),
        ("libxcb-render-util.so.0", "libxcb-render-util0"),
        ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
        ("libX11-xcb.so.1", "libx11-xcb1"),
        ("libGL.so.1", "libgl1"),
    ],
)
def test_the_debian_package_follows_debians_naming_rule(soname: str, package: str) -> None:
    assert debian_package(soname) == package


def test_the_loader_is_asked_for_real() -> None:
    assert loadable("libc.so.6") if sys.platform.startswith("linux") else True
    assert not loadable("libdesktop-queue-no-such-library.so.0")
    error = load_error("libdesktop-queue-no-such-library.so.0")
    assert error is not None and "libdesktop-queue-no-such-library.so.0" in error


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 systems only")
def test_the_plugin_asked_about_is_the_one_qt_loads() -> None:
    path = xcb_plugin_path()
    assert path is not None and Path(path).is_file() and Path(path).name == "libqxcb.so"


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
