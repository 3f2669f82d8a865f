"""SVG icons from ``resources/icons``, found from a checkout or an installed package.

The app still works when the files are missing: every lookup then returns an empty
``QIcon`` and the text beside it carries the meaning.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from PySide6.QtGui import QIcon

ENV_RESOURCES = "DESKTOP_QUEUE_RESOURCES"


def resource_dirs() -> list[Path]:
    """Where resources may live, most specific first."""
    package = Path(__file__).resolve().parent.parent
    candidates = []
    env = os.environ.get(ENV_RESOURCES)
    if env:
        candidates.append(Path(env))
    candidates += [package / "resources", package.parent / "resources"]
    return [c for c in candidates if c.is_dir()]


@functools.cache
def icon_path(name: str) -> Path | None:
    """The SVG file for ``name`` (e.g. ``state-dead``), or None if it is not installed."""
    for root in resource_dirs():
        path = root / "icons" / f"{name}.svg"
        if path.is_file():
            return path
    return None


@functools.cache
def icon(name: str) -> QIcon:
    """The icon for ``name``; an empty icon if its file is missing."""
    path = icon_path(name)
    return QIcon(str(path)) if path is not None else QIcon()


def state_icon(state: str) -> QIcon:
    """The icon of a job state (shape differs per state, so colour is never the only cue)."""
    return icon(f"state-{state}")


@functools.cache
def quiet_icon(name: str) -> QIcon:
    """``name``'s icon greyed out, as a disabled control draws it: for a count of nothing
    (a red warning beside "0 dead letters" says something is wrong when nothing is)."""
    source = icon(name)
    if source.isNull():
        return source
    quiet = QIcon()
    for side in (16, 20, 24, 32, 48):
        quiet.addPixmap(source.pixmap(side, side, QIcon.Mode.Disabled))
    return quiet


def lit_icon(name: str, lit: bool) -> QIcon:
    """``name``'s icon when what it marks is there (a dead letter, a result), else greyed."""
    return icon(name) if lit else quiet_icon(name)
