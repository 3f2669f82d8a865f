"""Fixtures for the window tests: a started window on a temp data dir, with prompts stubbed."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QThreadPool

from desktop_queue.core import FakeClock, Outcome, Queue, RetryPolicy, RunContext
from desktop_queue.core.flow import FlowControl, ProfileLimits
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.controller import Controller
from desktop_queue.ui.main_window import MainWindow

#: the offscreen platform warns about this on every top-level show; it is not our bug
OFFSCREEN_NOISE = r"This plugin does not support propagateSizeHints\(\)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/ui" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.qt_log_ignore(OFFSCREEN_NOISE))


class Prompts:
    """Records the confirmations and errors the window asked for; answers ``answer``."""

    def __init__(self) -> None:
        self.answer = True
        self.confirms: list[str] = []
        self.errors: list[tuple[str, str]] = []

    def confirm(self, _parent: Any, title: str, text: str, ok_text: str = "OK", cancel_text: str | None = None) -> bool:
        self.confirms.append(f"{title}\n{text}")
        return self.answer

    def show_error(self, _parent: Any, title: str, text: str) -> None:
        self.errors.append((title, text))


@pytest.fixture
def prompts(monkeypatch: pytest.MonkeyPatch) -> Prompts:
    """Replaces the modal prompts with a recorder (no modal loop in tests)."""
    from desktop_queue.ui import dialogs

    recorder = Prompts()
    monkeypatch.setattr(dialogs, "confirm", recorder.confirm)
    monkeypatch.setattr(dialogs, "show_error", recorder.show_error)
    return recorder


class StubbornProvider:
    """Ignores cancellation: finishes only when the test sets ``release`` (a late result)."""

    kind = "stubborn"
    version = "1"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def validate(self, payload: Any) -> None:
        return None

    def run(self, job: Any, context: RunContext) -> Outcome:
        self.started.set()
        self.release.wait(10)
        return Outcome.success({"text": "late"})

    def classify(self, error: BaseException) -> Outcome:
        return Outcome.failure("retryable", type(error).__name__)


@pytest.fixture
def stubborn() -> Iterator[StubbornProvider]:
    provider = StubbornProvider()
    yield provider
    provider.release.set()


@pytest.fixture
def providers(stubborn: StubbornProvider) -> dict[str, Any]:
    return {"demo": DemoProvider(tick_s=0.01), "stubborn": stubborn}


@pytest.fixture
def open_session(qtbot: Any, prompts: Prompts, providers: dict[str, Any]) -> Iterator[Any]:
    """A factory: opens windows on a data dir; every one is closed (and its pool drained) after the test."""
    from desktop_queue.app import Session, start

    sessions: list[Session] = []

    def opener(data_dir: Path, **kwargs: Any) -> Session | int:
        kwargs.setdefault("refresh_ms", 100)
        kwargs.setdefault("tick_ms", 50)
        result = start(data_dir, kwargs.pop("providers", providers), **kwargs)
        if not isinstance(result, int):
            qtbot.addWidget(result.window)
            result.window.shutdown_timeout_ms = 3000
            sessions.append(result)
        return result

    yield opener
    for provider in providers.values():
        if hasattr(provider, "release"):
            provider.release.set()
    for session in reversed(sessions):
        session.close()
    assert QThreadPool.globalInstance().waitForDone(5000)


@pytest.fixture
def session(open_session: Any, data_dir: Path) -> Any:
    """One started window on a fresh data dir."""
    result = open_session(data_dir)
    assert not isinstance(result, int)
    result.window.show()
    return result


@pytest.fixture(autouse=True)
def no_desktop_notifications(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows in tests never send real desktop notifications (a test gives its own ``notify-send``)."""
    from desktop_queue.ui import notifier

    monkeypatch.setattr(notifier, "find_notify_send", lambda: None)


# ---------------------------------------------------------------------- a window with flow control


class IdleChat:
    """Stands in for ``openai.chat`` (the windows of these tests never run it)."""

    kind = "openai.chat"
    version = "1"

    def validate(self, payload: Any) -> None:
        return None

    def run(self, job: Any, context: RunContext) -> Outcome:
        return Outcome.success({"text": "unused"})

    def classify(self, error: BaseException) -> Outcome:
        return Outcome.failure("retryable", type(error).__name__)


@pytest.fixture
def flow_window(
    qtbot: Any, data_dir: Path, clock: FakeClock, prompts: Any
) -> Iterator[Callable[..., tuple[MainWindow, FlowControl]]]:
    """Opens a window whose controller has flow control on the fake clock (the driver does not lease)."""
    opened: list[tuple[MainWindow, Queue]] = []

    def open_(limits: ProfileLimits, *, concurrency: int = 4) -> tuple[MainWindow, FlowControl]:
        queue = Queue.open(
            data_dir,
            {"demo": DemoProvider(tick_s=0.01), "openai.chat": IdleChat()},
            policy=RetryPolicy(base_s=600.0, cap_s=600.0),
            rng=random.Random(3),
        )
        flow = FlowControl({"openai": limits}, clock=clock)
        controller = Controller(queue, queue.providers, concurrency=concurrency, refresh_ms=40, tick_ms=40, flow=flow)
        window = MainWindow(controller)
        controller.setParent(window)
        qtbot.addWidget(window)
        controller.start(lease=False)
        window.show()
        opened.append((window, queue))
        return window, flow

    yield open_
    for window, queue in opened:
        window.close()
        queue.close()
    assert QThreadPool.globalInstance().waitForDone(5000)
