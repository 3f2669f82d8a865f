"""Whether the window can open here, asked before Qt is: Qt aborts the process when it cannot.

On X11 and Wayland systems Qt picks its platform plugin when ``QApplication`` is made;
when none loads it prints a few ``qt.qpa.plugin`` lines ending in "Reinstalling the
application may fix this problem" and calls ``abort()``. The causes of nearly every such
start have a one-line answer:

* no display at all (an SSH session, a service, a container): neither ``DISPLAY`` nor
  ``WAYLAND_DISPLAY`` is set;
* X11 without ``libxcb-cursor``, which Qt's xcb plugin needs from Qt 6.5 on and which
  many desktops do not install (Ubuntu 22.04 among them);
* X11 without another of the libraries the xcb plugin links (``libxcb-icccm``,
  ``libxcb-keysyms``, ... on a minimal system): the plugin is loaded here as Qt would
  load it, and the library the loader could not find is named.

Anything else (a platform chosen with ``QT_QPA_PLATFORM``, a Wayland session, macOS,
Windows, a plugin that fails for another reason) is left to Qt. This module imports no Qt.
"""

from __future__ import annotations

import ctypes
import re
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


#: what Qt's xcb plugin links beyond Xlib and libxcb itself, as Debian and Ubuntu name the
#: packages (Qt's "X11 requirements"): one line installs every one a minimal system lacks
XCB_PACKAGES_DEBIAN = (
    "libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0 "
    "libxcb-render-util0 libxcb-shape0 libxcb-xfixes0 libxcb-xkb1 libxkbcommon-x11-0"
)
#: the same as Fedora and Arch name them
XCB_PACKAGES_OTHERS = "xcb-util-cursor xcb-util-wm xcb-util-image xcb-util-keysyms xcb-util-renderutil libxkbcommon-x11"

#: the loader's message for a library it did not find: "libxcb-icccm.so.4: cannot open shared object file: ..."
_NOT_FOUND = re.compile(r"([\w.+-]+\.so(?:\.\d+)*): cannot open shared object file")


def load_error(name: str) -> str | None:
    """Why the dynamic loader cannot load the shared library ``name`` (as Qt would), or None when it can."""
    try:
        ctypes.CDLL(name)
    except OSError as exc:
        return str(exc) or "cannot be loaded"
    return None


def loadable(name: str) -> bool:
    """Whether the dynamic loader finds and loads the shared library ``name`` (as Qt's plugin would)."""
    return load_error(name) is None


def debian_package(soname: str) -> str:
    """The Debian package of a library by Debian's naming rule: ``libxcb-icccm.so.4`` is
    ``libxcb-icccm4``, ``libxkbcommon-x11.so.0`` is ``libxkbcommon-x11-0``."""
    stem, _, version = soname.partition(".so")
    version = version.lstrip(".").split(".")[0]
    stem = stem.lower()
    if not version:
        return stem
    return f"{stem}-{version}" if stem[-1:].isdigit() else f"{stem}{version}"


def missing_library(soname: str) -> str:
    """The one line for an X11 library of Qt's xcb plugin that is not installed."""
    return (
        f"the window needs the system library {soname}, which is not installed (Qt loads it to draw on X11). "
        f"Install it ('sudo apt install {debian_package(soname)}' on Debian and Ubuntu) and start again; "
        f"every X11 library Qt needs: 'sudo apt install {XCB_PACKAGES_DEBIAN}', "
        f"'sudo dnf install {XCB_PACKAGES_OTHERS}' on Fedora, 'sudo pacman -S {XCB_PACKAGES_OTHERS}' on Arch. "
        "The command line works without it ('desktop-queue --help')"
    )


def display_problem(
    environ: Mapping[str, str],
    platform: str,
    *,
    needs_xcb_cursor: bool,
    xcb_plugin: str | None = None,
    load: Callable[[str], str | None] = load_error,
) -> str | None:
    """Why Qt would abort instead of opening the window, or None when it should open (or it is Qt's call).

    Args:
        environ: the environment Qt will read.
        platform: ``sys.platform``.
        needs_xcb_cursor: the Qt in use is 6.5 or later.
        xcb_plugin: the path of the xcb platform plugin Qt would load, if known.
        load: why a shared library cannot be loaded, or None (the dynamic loader by default).
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
    if needs_xcb_cursor and load(XCB_CURSOR) is not None:
        return NO_XCB_CURSOR
    if xcb_plugin is not None and environ.get("QT_QPA_PLATFORM_PLUGIN_PATH") is None:
        error = load(xcb_plugin)
        found = _NOT_FOUND.search(error) if error else None
        if found is not None and found.group(1) not in xcb_plugin:
            return missing_library(found.group(1))
    return None


__all__ = [
    "NO_DISPLAY",
    "NO_XCB_CURSOR",
    "XCB_CURSOR",
    "debian_package",
    "display_problem",
    "load_error",
    "loadable",
    "missing_library",
]
