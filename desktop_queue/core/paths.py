"""Where Desktop Queue keeps its data: resolved in exactly one place.

Data: ``--data-dir``, then ``DESKTOP_QUEUE_DATA_DIR``, then platformdirs'
``user_data_dir("desktop-queue")``. Configuration (provider profiles): ``DESKTOP_QUEUE_CONFIG_DIR``,
then platformdirs' ``user_config_dir("desktop-queue")``.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "desktop-queue"
ENV_DATA_DIR = "DESKTOP_QUEUE_DATA_DIR"
ENV_CONFIG_DIR = "DESKTOP_QUEUE_CONFIG_DIR"


def data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The data directory to use (not created here)."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get(ENV_DATA_DIR)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def config_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The configuration directory (provider profiles), shared by the window and every command."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get(ENV_CONFIG_DIR)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))
