"""Whether the window can open here, asked before Qt is: Qt aborts the process when it cannot.

On X11 and Wayland systems Qt picks its platform plugin when ``QApplication`` is made;
when none loads it prints a few ``qt.qpa.plugin`` lines ending in "Reinstalling the
application may fix this problem" and calls ``abort()``. Two causes account for nearly
every such start, and both have a one-line answer:

* no display at all (an SSH session, a service, a container): neither ``DISPLAY`` nor
  ``WAYLAND_DISPLAY`` is set;
* X11 without ``libxcb-cursor``, which Qt's xcb plugin needs from Qt 6.5 on and which
  many desktops do not install (Ubuntu 22.04 among them).

Anything else (a platform chosen with ``QT_QPA_PLATFORM``, a Wayland session, macOS,
Windows) is left to Qt. This module imports no Qt.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping

#: the library Qt's xcb plugin loads from Qt 6.5 on
XCB_CURSOR = "libxcb-cursor.so.0"

NO_DISPLAY = (
    "there is no display to open the window on (neither DISPLAY nor WAYLAND_DISPLAY is set). "
    "Start it from a desktop session, or use the command line, which needs none: "
    "'desktop-queue work' runs the queue without a window, 'desktop-queue --help' lists every command"
)

NO_XCB_CURSOR = (
    "the window needs the system library libxcb-cursor, which is not installed "
    "(Qt 6.5 and later load it to draw on X11). Install it and start again: "
    "'sudo apt install libxcb-cursor0' on Debian and Ubuntu, 'sudo dnf install xcb-util-cursor' on Fedora, "
    "'sudo pacman -S xcb-util-cursor' on Arch. The command line works without it ('desktop-queue --help')"
)


def loadable(name: str) -> bool:
    """Whether the dynamic loader finds and loads the shared library ``name`` (as Qt's plugin would)."""
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def display_problem(
    environ: Mapping[str, str],
    platform: str,
    *,
    needs_xcb_cursor: bool,
    can_load: Callable[[str], bool] = loadable,
) -> str | None:
    """Why Qt would abort instead of opening the window, or None when it should open (or it is Qt's call).

    Args:
        environ: the environment Qt will read.
        platform: ``sys.platform``.
        needs_xcb_cursor: the Qt in use is 6.5 or later.
        can_load: whether a shared library loads (the dynamic loader by default).
    """
    if not platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return None
    chosen = [p.split(":", 1)[0].strip() for p in environ.get("QT_QPA_PLATFORM", "").split(";") if p.strip()]
    if chosen and chosen != ["xcb"]:
        return None  # offscreen, wayland, vnc, a fallback list: the person chose; Qt says what fails
    if not chosen and environ.get("WAYLAND_DISPLAY"):
        return None  # a Wayland session: Qt picks its plugin (and falls back to xcb on its own)
    if not environ.get("DISPLAY"):
        return NO_DISPLAY
    if needs_xcb_cursor and not can_load(XCB_CURSOR):
        return NO_XCB_CURSOR
    return None


__all__ = ["NO_DISPLAY", "NO_XCB_CURSOR", "XCB_CURSOR", "display_problem", "loadable"]
