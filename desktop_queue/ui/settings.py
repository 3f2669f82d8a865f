"""User preferences and window state, kept apart in QSettings (``preferences/…`` vs ``window/…``).

Preferences are what a person chose (concurrency); window state is what the window
remembers about itself (geometry, splitters, headers). Resetting one never touches the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QSettings

from desktop_queue.providers.setup import ProfileConfig

ORGANIZATION = "desktop-queue"
APPLICATION = "Desktop Queue"
DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 32


@dataclass(frozen=True)
class Preferences:
    """What the user set in Preferences.

    Attributes:
        concurrency: how many jobs run at once in this window.
        attempt_timeout_s: give up on an attempt that has not answered after this long
            (None: each kind's own default; a job's input may set its own ``timeout_s``).
    """

    concurrency: int = DEFAULT_CONCURRENCY
    attempt_timeout_s: float | None = None


def _settings() -> QSettings:
    return QSettings(ORGANIZATION, APPLICATION)


def load_preferences() -> Preferences:
    """Reads ``preferences/…`` (defaults for anything missing or unreadable)."""
    raw = _settings().value("preferences/concurrency", DEFAULT_CONCURRENCY)
    try:
        concurrency = int(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        concurrency = DEFAULT_CONCURRENCY
    timeout = _number(_settings().value("preferences/attempt_timeout_s", 0), float)
    return Preferences(concurrency=min(MAX_CONCURRENCY, max(1, concurrency)), attempt_timeout_s=timeout)


def save_preferences(prefs: Preferences) -> None:
    settings = _settings()
    settings.setValue("preferences/concurrency", prefs.concurrency)
    settings.setValue("preferences/attempt_timeout_s", prefs.attempt_timeout_s or 0)  # 0: the kind's default
    settings.sync()


def _number(value: object, kind: type[int] | type[float]) -> int | float | None:
    try:
        number = kind(value)  # type: ignore[call-overload, arg-type]
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


#: ProfileConfig field -> number type of the budgets kept under ``providers/<name>/…``
BUDGET_KEYS: dict[str, type[int] | type[float]] = {
    "budget_usd_per_day": float,
    "budget_usd_per_month": float,
    "budget_tokens_per_day": int,
    "budget_tokens_per_month": int,
}


def load_provider_profile(name: str = ProfileConfig.name) -> ProfileConfig:
    """Reads ``providers/<name>/…`` (base URL, model, rpm, tpm, concurrency, budgets; never a key).

    Missing or unreadable values fall back to the defaults (rates and budgets: unlimited).
    Prices are not here: they live in the data dir (``prices.json``), shared with ``work``.
    """
    settings = _settings()
    prefix = f"providers/{name}/"
    base_url = str(settings.value(prefix + "base_url", "") or "").strip() or None
    model = str(settings.value(prefix + "model", "") or "").strip() or ProfileConfig.model
    concurrency = _number(settings.value(prefix + "concurrency"), int)
    return ProfileConfig(
        name=name,
        base_url=base_url,
        model=model,
        rpm=_number(settings.value(prefix + "rpm"), float),
        tpm=_number(settings.value(prefix + "tpm"), float),
        concurrency=int(concurrency) if concurrency else None,
        **{key: _number(settings.value(prefix + key), kind) for key, kind in BUDGET_KEYS.items()},  # type: ignore[arg-type]
    )


def save_provider_profile(config: ProfileConfig) -> None:
    """Writes ``providers/<name>/…`` (0 stands for "no limit"). The key goes to the keyring, never here."""
    settings = _settings()
    prefix = f"providers/{config.name}/"
    settings.setValue(prefix + "base_url", config.base_url or "")
    settings.setValue(prefix + "model", config.model)
    settings.setValue(prefix + "rpm", config.rpm or 0)
    settings.setValue(prefix + "tpm", config.tpm or 0)
    settings.setValue(prefix + "concurrency", config.concurrency or 0)
    for key in BUDGET_KEYS:
        settings.setValue(prefix + key, getattr(config, key) or 0)
    settings.sync()


def load_window_state(key: str) -> QByteArray | None:
    """A saved ``window/<key>`` blob (geometry, state, splitter, header), or None."""
    value = _settings().value(f"window/{key}")
    return value if isinstance(value, QByteArray) and not value.isEmpty() else None


def load_window_number(key: str) -> int | None:
    """A saved ``window/<key>`` number (e.g. the column count next to a header state), or None."""
    value = _settings().value(f"window/{key}")
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def save_window_state(values: dict[str, QByteArray], numbers: dict[str, int] | None = None) -> None:
    """Writes ``window/<key>`` blobs and numbers (what the window remembers about itself)."""
    settings = _settings()
    for key, value in values.items():
        settings.setValue(f"window/{key}", value)
    for key, number in (numbers or {}).items():
        settings.setValue(f"window/{key}", number)
    settings.sync()
