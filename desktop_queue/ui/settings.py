"""User preferences and window state, kept apart in QSettings (``preferences/…`` vs ``window/…``).

Preferences are what a person chose (concurrency); window state is what the window
remembers about itself (geometry, splitters, headers). Resetting one never touches the other.
Provider profiles are not here: they live in ``profiles.json`` in the config dir
(:mod:`desktop_queue.providers.profiles`), shared with ``desktop-queue work``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from desktop_queue.providers.openai_compat import KEYRING_SERVICE, KeyringUnavailable
from desktop_queue.providers.profiles import (
    ProfileFileError,
    ProfileSet,
    load_profiles,
    migrate_legacy,
    profiles_path,
    save_profiles,
)
from desktop_queue.providers.setup import ProfileConfig

log = logging.getLogger(__name__)

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
        api_enabled: run the local API on 127.0.0.1 inside the window (see ``ui.local_api``).
    """

    concurrency: int = DEFAULT_CONCURRENCY
    attempt_timeout_s: float | None = None
    #: serve the local HTTP API (``desktop-queue serve``) from the window while it is open
    api_enabled: bool = False


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
    api = str(_settings().value("preferences/api_enabled", "false")).lower() in ("true", "1")
    return Preferences(
        concurrency=min(MAX_CONCURRENCY, max(1, concurrency)), attempt_timeout_s=timeout, api_enabled=api
    )


def save_preferences(prefs: Preferences) -> None:
    settings = _settings()
    settings.setValue("preferences/concurrency", prefs.concurrency)
    settings.setValue("preferences/attempt_timeout_s", prefs.attempt_timeout_s or 0)  # 0: the kind's default
    settings.setValue("preferences/api_enabled", prefs.api_enabled)
    settings.sync()


def _number(value: object, kind: type[int] | type[float]) -> int | float | None:
    try:
        number = kind(value)  # type: ignore[call-overload, arg-type]
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def legacy_provider_values(name: str = ProfileConfig.name) -> dict[str, Any]:
    """What an older version kept under QSettings ``providers/<name>/…`` (base URL, model, limits)."""
    settings = _settings()
    prefix = f"providers/{name}/"
    return {key[len(prefix) :]: settings.value(key) for key in settings.allKeys() if key.startswith(prefix)}


def load_profiles_migrating(directory: Path | str | None = None) -> ProfileSet:
    """The provider profiles (``profiles.json``), after moving an older QSettings profile into it.

    On the first run of this version, a profile set up in an older one's Preferences
    (QSettings ``providers/openai/…``) is written to the profiles file, so nobody loses
    their setup; the old keys are then removed, so it happens once. A profiles file that
    already exists always wins.
    """
    path = profiles_path(directory)
    if not path.exists():
        legacy = migrate_legacy(legacy_provider_values())
        if legacy is not None:
            try:
                save_profiles(ProfileSet((legacy,), legacy.name), directory)
            except ProfileFileError:
                log.warning("the older provider settings could not be moved to %s", path, exc_info=True)
            else:
                settings = _settings()
                settings.remove(f"providers/{legacy.name}")
                settings.sync()
    return load_profiles(directory)


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


def load_window_mapping(key: str) -> dict[str, object]:
    """A saved ``window/<key>`` mapping (e.g. a table's preferred widths by column), or an
    empty one (none saved, or not readable)."""
    blob = load_window_state(key)
    if blob is None:
        return {}
    try:
        value = json.loads(bytes(blob.data()))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def save_window_state(
    values: dict[str, QByteArray],
    numbers: dict[str, int] | None = None,
    mappings: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Writes ``window/<key>`` blobs, numbers and mappings (what the window remembers about itself)."""
    settings = _settings()
    for key, value in values.items():
        settings.setValue(f"window/{key}", value)
    for key, number in (numbers or {}).items():
        settings.setValue(f"window/{key}", number)
    for key, mapping in (mappings or {}).items():
        settings.setValue(f"window/{key}", QByteArray(json.dumps(mapping).encode()))
    settings.sync()


def clear_window_state(keys: tuple[str, ...]) -> None:
    """Forgets ``window/<key>`` for each key (Reset layout); preferences are not touched."""
    settings = _settings()
    for key in keys:
        settings.remove(f"window/{key}")
    settings.sync()


# ---------------------------------------------------------------------- the store

#: the keyring user of the store's password: ``store:<URL without it>`` (no profile name has a ``:``)
STORE_PASSWORD_USER = "store:{url}"


def split_store_password(url: str) -> tuple[str, str | None]:
    """A ``postgresql://`` URL without its password, and the password (None: it has none).

    The password may be in the URL's user part (``user:pw@host``) or its query (``?password=pw``).
    """
    from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url.strip())
    password = parts.password
    if password is not None:
        user, _, host = parts.netloc.rpartition("@")
        name = user.partition(":")[0]
        parts = parts._replace(netloc=f"{name}@{host}" if name else host)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(name == "password" for name, _ in query):
        # (decoded by parse_qsl: encoded again, as a user part's password is)
        password = password or quote(next(value for name, value in query if name == "password"), safe="")
        kept = [(name, value) for name, value in query if name != "password"]
        parts = parts._replace(query=urlencode(kept, safe="/"))
    if password is None:
        return url.strip(), None
    return urlunsplit(parts), password


def join_store_password(url: str, password: str | None) -> str:
    """``url`` (without a password) with ``password`` put back in (as typed: percent-encoded)."""
    from urllib.parse import urlsplit, urlunsplit

    if not password:
        return url
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def check_store_url(url: str) -> str | None:
    """What is wrong with a Store field's text (None: it is empty, or a PostgreSQL URL)."""
    text = url.strip()
    if not text:
        return None
    if not text.startswith(("postgresql://", "postgres://")):
        return "the store is a postgresql://… URL (or empty: the data directory)"
    if any(ch.isspace() for ch in text):
        return "a store URL has no spaces"
    return None


def saved_store_url() -> str:
    """The store chosen in Preferences as saved: without its password ("": the data dir)."""
    return str(_settings().value("preferences/store", "") or "").strip()


def load_store() -> str:
    """The store chosen in Preferences, its password (if any) taken from the OS keyring ("": the data dir)."""
    url = saved_store_url()
    if not url:
        return ""
    try:
        import keyring

        password = keyring.get_password(KEYRING_SERVICE, STORE_PASSWORD_USER.format(url=url))
    except Exception as exc:  # no usable keyring: connect without it (the server says if it needs one)
        log.warning("the store's password could not be read from the keyring: %s", type(exc).__name__)
        password = None
    return join_store_password(url, password)


def save_store(url: str) -> None:
    """Saves the Preferences store: the URL without its password in QSettings, the password in the keyring.

    Raises:
        KeyringUnavailable: the URL has a password and no keyring can keep it (nothing is saved:
            a password is never written to the settings).
    """
    bare, password = split_store_password(url)
    if password:
        try:
            import keyring

            keyring.set_password(KEYRING_SERVICE, STORE_PASSWORD_USER.format(url=bare), password)
        except Exception as exc:
            raise KeyringUnavailable(
                f"the store's password could not be saved: no usable OS keyring ({type(exc).__name__}); "
                "leave it out of the URL (use ~/.pgpass) instead"
            ) from None
    settings = _settings()
    settings.setValue("preferences/store", bare)
    settings.sync()


def probe_store(url: str, timeout_s: int = 5) -> tuple[bool, str]:
    """Connects to the store ``url`` once: ``(True, "connected to PostgreSQL 16.4")`` or ``(False, why)``."""
    problem = check_store_url(url)
    if problem is not None:
        return False, problem
    if not url.strip():
        return True, "the data directory (the default)"
    try:
        import psycopg
    except ImportError:
        return False, "the PostgreSQL store needs psycopg: pip install 'desktop-queue[postgres]'"
    try:
        with psycopg.connect(url.strip(), connect_timeout=timeout_s, autocommit=True) as conn:
            row = conn.execute("SHOW server_version").fetchone()
    except psycopg.Error as exc:
        lines = str(exc).strip().splitlines()  # (never the URL: it may hold a password)
        return False, f"cannot connect: {lines[0] if lines else type(exc).__name__}"
    return True, f"connected to PostgreSQL {row[0] if row else '?'}"
