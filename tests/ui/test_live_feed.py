"""The window follows the store's change feed: another process's job shows within a second, no tick reads.

The fallback timer is set to an hour in these tests, so a job that shows up came by the
watcher's path (its thread, its signal, the refresh it triggers), not by the timer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QThreadPool

from desktop_queue.core import Queue
from desktop_queue.providers.demo import DemoProvider

REPO = Path(__file__).resolve().parents[2]
#: an hour: no fallback read happens within a test
NEVER_MS = 3_600_000
#: what the issue asks: a change made elsewhere is on screen within a second
LIVE_MS = 1000


@pytest.fixture
def errors(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    from desktop_queue.ui import dialogs

    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(dialogs, "show_error", lambda _parent, title, text: shown.append((title, text)))
    monkeypatch.setattr(dialogs, "confirm", lambda *_args, **_kw: True)
    return shown


@pytest.fixture
def session(qtbot: Any, tmp_path: Path, errors: list[tuple[str, str]]) -> Iterator[Any]:
    """The app's window on a JSON data dir, live, the fallback an hour away, the driver off."""
    from desktop_queue.app import start

    made = start(
        tmp_path / "data", {"demo": DemoProvider(tick_s=0.01)}, lease=False, refresh_ms=50, fallback_ms=NEVER_MS
    )
    assert not isinstance(made, int), errors
    qtbot.addWidget(made.window)
    made.window.shutdown_timeout_ms = 3000
    try:
        made.window.show()
        yield made
    finally:
        made.close()
        assert QThreadPool.globalInstance().waitForDone(5000)


def _wait_following(qtbot: Any, refresher: Any) -> None:
    """Until the watcher runs and has made its first read (and the refresh that follows it)."""
    qtbot.waitUntil(lambda: refresher.following and refresher.fed_refreshes >= 1, timeout=5000)


def _submit_elsewhere(data_dir: Path, prompt: str) -> str:
    """``desktop-queue submit`` in another process; the new job's id."""
    env = {k: v for k, v in os.environ.items() if k != "DESKTOP_QUEUE_STORE"}
    done = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "submit", "demo", "--input",
         json.dumps({"prompt": prompt, "duration_s": 0}), "--json"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def _count_gui_reads(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the ``changed_since`` calls made on the GUI thread (the watcher's thread is not counted)."""
    gui = threading.get_ident()
    calls = [0]
    real = queue.changed_since

    def counted(version: int) -> tuple[int, set[str] | None]:
        if threading.get_ident() == gui:
            calls[0] += 1
        return real(version)

    monkeypatch.setattr(queue, "changed_since", counted)
    return calls


def test_a_job_another_process_submits_shows_within_a_second_by_the_feed(qtbot: Any, session: Any) -> None:
    refresher = session.controller.refresher
    model = session.controller.queue_model
    _wait_following(qtbot, refresher)
    assert refresher.timer.interval() == 50 and refresher.fallback_ms == NEVER_MS
    before = refresher.fed_refreshes
    job_id = _submit_elsewhere(session.queue.data_dir, "from another process")
    # (measured from the submitting process's exit: its commit was durable before it)
    qtbot.waitUntil(lambda: model.row_of(job_id) is not None, timeout=LIVE_MS)
    assert refresher.fed_refreshes > before, "the job came by the feed's refresh"


def test_the_refresh_timer_only_moves_the_clock_on_while_the_feed_runs(
    qtbot: Any, session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    refresher = session.controller.refresher
    _wait_following(qtbot, refresher)
    reads = _count_gui_reads(session.queue, monkeypatch)
    ticks = [0]
    refresher.refreshed.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
    # (the start-up's own reads settle first: the notices' outbox reads once, DELIVER_MS after the first refresh)
    qtbot.waitUntil(lambda: ticks[0] >= 40, timeout=10_000)
    reads[0], ticks[0] = 0, 0
    qtbot.waitUntil(lambda: ticks[0] >= 20, timeout=5000)  # a second of 50 ms ticks
    assert reads[0] == 0, f"{reads[0]} store read(s) on the GUI thread while nothing changed"
    # a change: the feed makes the GUI thread read once for it
    job = session.queue.submit("demo", {"prompt": "here", "duration_s": 0}).job
    qtbot.waitUntil(lambda: session.controller.queue_model.row_of(job.id) is not None, timeout=LIVE_MS)
    assert reads[0] >= 1


def test_a_window_behind_another_application_still_shows_a_change_within_a_second(qtbot: Any, session: Any) -> None:
    """Visible but not in front (a second screen): the feed costs a read per change, not per tick."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    from desktop_queue.ui.models.refresh import UNFOCUSED_MS, Pace

    refresher = session.controller.refresher
    _wait_following(qtbot, refresher)
    QApplication.instance().applicationStateChanged.emit(Qt.ApplicationState.ApplicationInactive)  # type: ignore[union-attr]
    assert refresher.pace == Pace.UNFOCUSED and refresher.timer.interval() == UNFOCUSED_MS
    job_id = _submit_elsewhere(session.queue.data_dir, "seen from behind")
    qtbot.waitUntil(lambda: session.controller.queue_model.row_of(job_id) is not None, timeout=LIVE_MS)
    assert refresher.last_fed


def test_without_its_watcher_the_timer_reads_the_store_again(qtbot: Any, session: Any) -> None:
    """The safety net: a watcher whose thread has ended leaves the window polling, not blind."""
    refresher = session.controller.refresher
    _wait_following(qtbot, refresher)
    assert refresher.watcher is not None
    assert refresher.watcher.stop(timeout_s=5.0)
    assert not refresher.following
    fed = refresher.fed_refreshes
    job_id = _submit_elsewhere(session.queue.data_dir, "while the watcher is gone")
    qtbot.waitUntil(lambda: session.controller.queue_model.row_of(job_id) is not None, timeout=LIVE_MS)
    assert refresher.fed_refreshes == fed  # (the timer's read found it)


def test_the_fallback_reads_the_store_when_no_wake_up_came(
    qtbot: Any, tmp_path: Path, errors: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lost wake-up (its process died between commit and notification) costs at most ``fallback_ms``."""
    from desktop_queue.app import start

    made = start(tmp_path / "data", {"demo": DemoProvider()}, lease=False, refresh_ms=50, fallback_ms=300)
    assert not isinstance(made, int), errors
    qtbot.addWidget(made.window)
    made.window.shutdown_timeout_ms = 3000
    try:
        refresher = made.controller.refresher
        _wait_following(qtbot, refresher)
        refresher.fed.disconnect(refresher._on_fed)  # every wake-up is lost from now on
        reads = _count_gui_reads(made.queue, monkeypatch)
        started = time.monotonic()
        qtbot.waitUntil(lambda: reads[0] >= 2, timeout=5000)
        # (two fallback reads: at least one full fallback period apart)
        assert time.monotonic() - started >= 0.3
    finally:
        made.close()
        assert QThreadPool.globalInstance().waitForDone(5000)
