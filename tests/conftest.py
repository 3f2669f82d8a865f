"""Fixtures shared by every test: headless Qt, and nothing ever touches the real user profile."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _offscreen_laptop_screen() -> None:
    """Gives the offscreen platform a 1280×800 screen (its default is 800×800).

    The window keeps itself inside its screen's available area, so the screen the
    tests run on must be one people have: a common laptop's.
    """
    if os.environ.get("QT_QPA_PLATFORM") != "offscreen":
        return
    import json
    import tempfile

    screen = {"name": "laptop", "x": 0, "y": 0, "width": 1280, "height": 800, "logicalDpi": 96, "dpr": 1}
    # one file for every run (same content), replaced atomically: parallel runs never read half of it
    path = Path(tempfile.gettempdir()) / "desktop-queue-offscreen-1280x800.json"
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"screens": [screen]}), encoding="utf-8")
    os.replace(tmp, path)
    os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={path}"


_offscreen_laptop_screen()


@pytest.fixture(autouse=True)
def isolated_profile(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Redirects the data dir, QSettings and XDG/HOME dirs to a temp folder for every test."""
    root = tmp_path_factory.mktemp("profile")
    monkeypatch.setenv("DESKTOP_QUEUE_DATA_DIR", str(root / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(root / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(root / "share"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(root / "cache"))
    monkeypatch.setenv("HOME", str(root / "home"))
    (root / "home").mkdir()
    try:
        from PySide6.QtCore import QSettings
    except ImportError:  # pragma: no cover - Qt is a hard dependency
        yield root
        return
    for scope in (QSettings.Scope.UserScope, QSettings.Scope.SystemScope):
        QSettings.setPath(QSettings.Format.IniFormat, scope, str(root / "qsettings"))
        QSettings.setPath(QSettings.Format.NativeFormat, scope, str(root / "qsettings"))
    yield root


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh data directory for one test."""
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def opened_queues() -> Iterator[list[Any]]:
    """Queues a test opens (the ``open_queue`` fixtures add theirs); those left open are closed at teardown."""
    opened: list[Any] = []
    yield opened
    for queue in opened:
        if not queue.store.closed:
            queue.close()


@pytest.fixture(autouse=True)
def pool_left_idle() -> Iterator[None]:
    """Fails a test that leaves the global QThreadPool busy (napari's conftest idea)."""
    yield
    try:
        from PySide6.QtCore import QThreadPool
    except ImportError:  # pragma: no cover
        return
    pool = QThreadPool.globalInstance()
    if pool.activeThreadCount():
        finished = pool.waitForDone(5000)
        pytest.fail(f"the test left the global thread pool busy (drained: {finished})")
