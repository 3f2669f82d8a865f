"""The local API inside the window: the Preferences checkbox starts it, quitting stops it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import Client

from desktop_queue.api.token import load_or_create_token
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.settings import Preferences, load_preferences, save_preferences


@pytest.fixture
def window(qtbot: Any, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from desktop_queue.app import start
    from desktop_queue.ui import dialogs

    monkeypatch.setattr(dialogs, "confirm", lambda *a, **k: True)
    session = start(data_dir, {"demo": DemoProvider(tick_s=0.01)}, refresh_ms=100, tick_ms=50)
    assert not isinstance(session, int)
    qtbot.addWidget(session.window)
    session.window.shutdown_timeout_ms = 3000
    session.window.local_api.port = 0  # any free port: tests never take the user's 8765
    yield session.window
    session.close()


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_the_checkbox_is_a_saved_preference(qtbot: Any) -> None:
    from desktop_queue.ui.dialogs import PreferencesDialog

    assert load_preferences().api_enabled is False  # off unless a person turns it on
    dialog = PreferencesDialog(Preferences(api_enabled=False), None)
    qtbot.addWidget(dialog)
    assert not dialog.api_enabled.isChecked() and "127.0.0.1" in dialog.api_enabled.text()
    dialog.api_enabled.setChecked(True)
    prefs = dialog.preferences()
    assert prefs.api_enabled is True
    save_preferences(prefs)
    assert load_preferences().api_enabled is True


def test_the_window_serves_the_api_while_asked_and_stops_on_quit(window: Any) -> None:
    assert window.local_api.url is None and not window.local_api.label.isVisible()
    window.apply_preferences(Preferences(api_enabled=True))
    url = window.local_api.url
    assert url is not None and url.startswith("http://127.0.0.1:")
    assert window.local_api.label.text() == f"API: {url}" and not window.local_api.label.isHidden()
    port = int(url.rsplit(":", 1)[1])
    client = Client(port, load_or_create_token())
    made = client.call("POST", "/jobs", {"kind": "demo", "input": {"prompt": "from a script", "duration_s": 0}})
    assert made.status == 201
    assert window.controller.queue.get(made.body["id"]).title == "from a script"  # the window's own queue
    window.apply_preferences(Preferences(api_enabled=False))
    assert window.local_api.url is None and refused(port)
    window.apply_preferences(Preferences(api_enabled=True))
    port = int(window.local_api.url.rsplit(":", 1)[1])
    window.close()
    assert refused(port)


def test_a_taken_port_is_said_in_the_status_bar(window: Any) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        window.local_api.port = holder.getsockname()[1]
        window.apply_preferences(Preferences(api_enabled=True))
        assert window.local_api.url is None
        assert window.local_api.label.text().startswith("API: not running (cannot listen on 127.0.0.1:")
        assert "did not start" in window.statusBar().currentMessage()
    finally:
        holder.close()
