"""SIGTERM and SIGINT close the window as File → Quit does: nothing left running, nothing asked.

A logout, a shutdown or ``kill`` sends SIGTERM; Ctrl+C in the terminal that ran ``make run``
sends SIGINT. Before, either killed the window mid-attempt: the next start found the job
"running", its outcome unknown, and ran it again.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import Queue
from desktop_queue.core.model import EventType, State
from desktop_queue.providers.demo import DemoProvider

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _state(data_dir: Path, job_id: str) -> str:
    with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
        return str(queue.get(job_id).state)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_quits_the_window_and_gives_its_running_attempt_back(qtbot: Any, data_dir: Path, signum: int) -> None:
    with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
        job_id = queue.submit("demo", {"prompt": "a long one", "duration_s": 60}, title="long").job.id
    window = subprocess.Popen(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "gui"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def started() -> bool:
            assert window.poll() is None, window.communicate()  # (a window that died says why)
            return _state(data_dir, job_id) == State.RUNNING

        qtbot.waitUntil(started, timeout=30_000)
        window.send_signal(signum)
        _out, err = window.communicate(timeout=30)
    finally:
        if window.poll() is None:
            window.kill()
            window.wait()
    assert window.returncode == 130, err  # as `work` exits when interrupted
    with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
        job = queue.get(job_id)
        # given back by the window as it quit, not found "running" by the next start
        assert job.state == State.QUEUED, job
        assert [e.type for e in job.events] == [EventType.SUBMITTED, EventType.LEASED, EventType.RELEASED]
        assert not queue.reconciled


def test_a_signal_with_a_prompt_being_written_asks_nothing_and_keeps_it(
    qtbot: Any, open_session: Any, data_dir: Path, prompts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a logout with New job open on a typed prompt, "Discard this prompt?" came up and
    the window waited for an answer nobody would give, until the session killed it."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from desktop_queue.app import Session
    from desktop_queue.core.drafts import NEW_JOB, draft_path
    from desktop_queue.ui import dialogs

    quits: list[bool] = []
    monkeypatch.setattr(QApplication, "quit", lambda: quits.append(True))  # (the test's own app goes on)
    session = open_session(data_dir, lease=False)
    assert isinstance(session, Session)
    window = session.window
    window.show()
    dialog = window.new_job()
    dialog.kind.setCurrentIndex(dialog.kind.findData("demo"))
    editor = dialog.form.first_editor()
    qtbot.keyClicks(editor, "Half a prompt about otters")
    qtbot.keyClicks(dialog.title, "otters")
    assert dialog.has_typed_input()
    window.quit_now(signal.SIGTERM)
    qtbot.waitUntil(lambda: bool(quits), timeout=5000)
    assert prompts.confirms == []  # nothing asked
    assert not window.isVisible()  # (and the dialog is gone: closed, then deleted)
    session.close()
    # kept in the data dir, with the jobs' prompts; not in the settings file, which people copy and sync
    assert "otters" in draft_path(data_dir, NEW_JOB).read_text()
    settings = QSettings(dialogs.ORGANIZATION, dialogs.APPLICATION)
    settings.sync()
    assert "otters" not in Path(settings.fileName()).read_text(errors="replace")

    again = open_session(data_dir, lease=False)
    assert isinstance(again, Session)
    restored = again.window.new_job()
    assert restored.current_kind() == "demo" and restored.title.text() == "otters"
    assert restored.payload()["prompt"] == "Half a prompt about otters"
    assert "last closed" in restored.form_note.text.text() and restored.has_typed_input()
    restored.reject()  # asks, as for anything typed
    assert len(prompts.confirms) == 1
    fresh = again.window.new_job()  # the draft was handed over once
    assert not fresh.has_typed_input() and not draft_path(data_dir, NEW_JOB).exists()


def test_a_draft_of_a_kind_not_available_now_is_kept_for_later(open_session: Any, data_dir: Path) -> None:
    """A draft of a provider whose profile is gone for now (removed, or another config dir)."""
    from desktop_queue.app import Session
    from desktop_queue.core.drafts import NEW_JOB, draft_path, keep_draft

    fields = {"kind": "elsewhere.chat", "input": '{"prompt": "otters"}', "title": "", "batch": ""}
    keep_draft(data_dir, NEW_JOB, fields)
    session = open_session(data_dir, lease=False)
    assert isinstance(session, Session)
    dialog = session.window.new_job()
    assert not dialog.has_typed_input()
    dialog.reject()
    assert "otters" in draft_path(data_dir, NEW_JOB).read_text()
