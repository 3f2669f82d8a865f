"""User preferences and window state, kept apart in QSettings (``preferences/…`` vs ``window/…``).

Preferences are what a person chose (concurrency); window state is what the window
remembers about itself (geometry, splitters, headers). Resetting one never touches the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QSettings

ORGANIZATION = "desktop-queue"
APPLICATION = "Desktop Queue"
DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 32


@dataclass(frozen=True)
class Preferences:
    """What the user set in Preferences.

    Attributes:
        concurrency: how many jobs run at once in this window.
    """

    concurrency: int = DEFAULT_CONCURRENCY


def _settings() -> QSettings:
    return QSettings(ORGANIZATION, APPLICATION)


def load_preferences() -> Preferences:
    """Reads ``preferences/…`` (defaults for anything missing or unreadable)."""
    raw = _settings().value("preferences/concurrency", DEFAULT_CONCURRENCY)
    try:
        concurrency = int(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        concurrency = DEFAULT_CONCURRENCY
    return Preferences(concurrency=min(MAX_CONCURRENCY, max(1, concurrency)))


def save_preferences(prefs: Preferences) -> None:
    settings = _settings()
    settings.setValue("preferences/concurrency", prefs.concurrency)
    settings.sync()


def load_window_state(key: str) -> QByteArray | None:
    """A saved ``window/<key>`` blob (geometry, state, splitter, header), or None."""
    value = _settings().value(f"window/{key}")
    return value if isinstance(value, QByteArray) and not value.isEmpty() else None


def save_window_state(values: dict[str, QByteArray]) -> None:
    settings = _settings()
    for key, value in values.items():
        settings.setValue(f"window/{key}", value)
    settings.sync()
