"""The local API's bearer token: made on first use, kept in the user config dir.

``api-token`` in :func:`desktop_queue.core.paths.config_dir` (``DESKTOP_QUEUE_CONFIG_DIR``,
else platformdirs' user config dir, which follows ``XDG_CONFIG_HOME``), mode 0600,
written atomically: two processes starting at once end up with the same token, as
the file is created by a hard link that fails when another process got there first.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from desktop_queue.core.errors import StoreError
from desktop_queue.core.paths import config_dir
from desktop_queue.core.store.fileio import atomic_write

TOKEN_FILE = "api-token"
#: shorter than this is not a token we made (a truncated or hand-edited file)
MIN_TOKEN_CHARS = 32


def token_path(directory: Path | str | None = None) -> Path:
    """Where the token lives (``directory`` overrides the config dir)."""
    return (Path(directory) if directory is not None else config_dir()) / TOKEN_FILE


def load_or_create_token(directory: Path | str | None = None) -> str:
    """The API token, created (256 random bits, URL-safe) if there is none yet.

    Raises:
        StoreError: the config dir cannot be written, or the file is not a token.
    """
    path = token_path(directory)
    token = _read(path)
    if token is not None:
        return token
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    # overwrite=False: if another process made one meanwhile, keep theirs (and use it)
    atomic_write(path, (secrets.token_urlsafe(32) + "\n").encode(), overwrite=False)
    token = _read(path)
    if token is None:
        raise StoreError(f"{path} does not hold an API token; remove it to make a new one")
    return token


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None
    if len(text) < MIN_TOKEN_CHARS:
        raise StoreError(f"{path} does not hold an API token; remove it to make a new one")
    if os.name == "posix" and path.stat().st_mode & 0o077:
        # a token others can read is no secret: tighten it rather than refuse to start
        os.chmod(path, 0o600)
    return text


def token_matches(expected: str, given: str | None) -> bool:
    """Compares in constant time (no timing hint of how much of a guess was right)."""
    if not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())
