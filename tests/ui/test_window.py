"""The window end to end: submit, run on the pool, timelines, dead letters, cancel, start-up."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, QThreadPool
from PySide6.QtWidgets import QApplication

from desktop_queue.core import Queue
from desktop_queue.core.model import EventType, State
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.commands import Command
from desktop_queue.ui.dialogs import SubmitDialog
from desktop_queue.ui.models import TimelineRole
from desktop_queue.ui.panes import select_job
from desktop_queue.ui.settings import APPLICATION, ORGANIZATION, Preferences

FAST = 0.05


def finished(job_id: str, state: str | None = None) -> Any:
    """A ``check_params_cb`` for ``driver.job_finished``: this job, in this state."""
    return lambda jid, st: jid == job_id and (state is None or st == state)


def timeline_types(window: Any) -> list[str]:
    """The stored events' types (the synthetic "now:" line of a queued job has no event)."""
    model = window.timeline_model
    events = (model.index(r).data(TimelineRole.EVENT) for r in range(model.rowCount()))
    return [event.type for event in events if event is not None]


def submit_demo(session: Any, prompt: str, **extra: Any) -> str:
    payload = {"prompt": prompt, "duration_s": FAST, **extra}
    return session.controller.submit("demo", payload, title=prompt, priority="background", max_attempts=3).job.id


def test_submit_through_the_dialog_runs_on_the_pool_and_the_timeline_explains_it(qtbot: Any, session: Any) -> None:
    window, driver = session.window, session.controller.driver
    window.action(Command.NEW).trigger()
    dialog = window.findChild(SubmitDialog)
    assert dialog is not None and dialog.isVisible()
    dialog.form.editor("prompt").setPlainText("a haiku about queues")
    dialog.form.editor("duration_s").setValue(FAST)
    dialog.title.setText("Haiku")
    seen: list[tuple[str, ...]] = []
    driver.job_started.connect(lambda jid: seen.append(("started", jid)))
    driver.job_finished.connect(lambda jid, st: seen.append(("finished", jid, st)))
    with qtbot.waitSignals([driver.job_started, driver.job_finished], order="strict", timeout=5000):
        dialog.submit_button.click()
    job_id = dialog.submit_result.job.id
    assert seen == [("started", job_id), ("finished", job_id, "succeeded")]
    assert window.queue_pane.selected()[0]["id"] == job_id
    qtbot.waitUntil(lambda: timeline_types(window) == ["submitted", "leased", "succeeded"], timeout=3000)
    qtbot.waitUntil(lambda: QThreadPool.globalInstance().activeThreadCount() == 0, timeout=3000)
    window.action(Command.COPY_TIMELINE).trigger()
    text = QApplication.clipboard().text()
    assert "Haiku" in text and "Succeeded" in text


def test_invalid_input_is_explained_inline_and_nothing_is_created(qtbot: Any, session: Any) -> None:
    dialog = session.window.new_job()
    dialog.tabs.setCurrentIndex(1)
    dialog.editor.setPlainText('{"prompt": "x", "duration_s": -1}')
    assert "duration_s" in dialog.message.text.text()
    assert not dialog.try_submit()
    dialog.editor.setPlainText('{"prompt": ')
    assert "not valid JSON" in dialog.message.text.text()
    assert not dialog.try_submit()
    assert dialog.isVisible()
    assert sum(session.queue.counts().values()) == 0
    dialog.reject()


def test_a_duplicate_submission_says_so_and_selects_the_existing_job(qtbot: Any, session: Any) -> None:
    driver = session.controller.driver
    first = session.window.new_job()
    first.form.editor("prompt").setPlainText("same")
    first.form.editor("duration_s").setValue(FAST)
    with qtbot.waitSignal(driver.job_finished, timeout=5000):
        first.submit_button.click()
    job_id = first.submit_result.job.id
    select_job(session.window.queue_pane.view, job_id)
    session.window.queue_pane.view.clearSelection()
    again = session.window.new_job()
    again.form.editor("prompt").setPlainText("same")
    again.form.editor("duration_s").setValue(FAST)
    again.submit_button.click()
    assert again.submit_result.duplicate
    assert "Already submitted" in session.window.banner.text.text()
    assert [j["id"] for j in session.window.queue_pane.selected()] == [job_id]
    assert sum(session.queue.counts().values()) == 1


def test_a_fatal_job_is_dead_lettered_then_retried_and_replayed_with_links(qtbot: Any, session: Any) -> None:
    window, driver = session.window, session.controller.driver
    with qtbot.waitSignal(driver.job_finished, timeout=5000) as died:
        job_id = submit_demo(session, "doomed", fail_times=1, fail_with="fatal")
    assert died.args == [job_id, "dead"]
    qtbot.waitUntil(lambda: session.controller.dead_model.row_of(job_id) is not None, timeout=3000)
    qtbot.waitUntil(lambda: window.status.dead_button.property("attention") is True, timeout=3000)
    window.tabs.setCurrentWidget(window.dead_pane)
    assert window.status.dead_button.property("attention") is False  # seen
    assert select_job(window.dead_pane.view, job_id)
    dead_row = window.dead_pane.selected()[0]
    assert dead_row["last_error"]["class"] == "fatal"
    assert window.action(Command.RETRY).isEnabled() and not window.action(Command.CANCEL).isEnabled()
    with qtbot.waitSignal(driver.job_finished, check_params_cb=finished(job_id), timeout=5000) as rerun:
        window.dead_pane.retry_button.click()
    assert rerun.args == [job_id, "succeeded"]
    qtbot.waitUntil(lambda: session.controller.dead_model.rowCount() == 0, timeout=3000)

    # Replay the (now succeeded) job with an edited input: a new, linked job
    assert window.show_job(job_id)
    dialog = window.replay_selected()
    assert dialog is not None and dialog.isVisible()
    edited = {"prompt": "doomed, take two", "duration_s": FAST}
    dialog.editor.setPlainText(json.dumps(edited))
    assert "edited input" in dialog.message.text.text()
    with qtbot.waitSignal(driver.job_finished, timeout=5000) as replayed:
        dialog.replay_button.click()
    new_id = dialog.new_job.id
    assert replayed.args == [new_id, "succeeded"]
    assert window.queue_pane.selected()[0]["id"] == new_id
    qtbot.waitUntil(lambda: "succeeded" in timeline_types(window), timeout=3000)
    first = window.timeline_model.index(0)
    assert first.data(TimelineRole.LINK) == job_id
    # click the link: the original is selected and its timeline links forward
    window.timeline_pane.link_activated.emit(first.data(TimelineRole.LINK))
    assert window.queue_pane.selected()[0]["id"] == job_id
    links = [window.timeline_model.index(r).data(TimelineRole.LINK) for r in range(window.timeline_model.rowCount())]
    assert new_id in links
    assert timeline_types(window).count("retried") == 1


def test_retry_all_matching_confirms_the_exact_count_and_retries_off_the_gui_thread(
    qtbot: Any, session: Any, prompts: Any
) -> None:
    window, driver = session.window, session.controller.driver
    ids = []
    for name in ("alpha one", "alpha two", "beta"):
        with qtbot.waitSignal(driver.job_finished, timeout=5000):
            ids.append(submit_demo(session, name, fail_times=1, fail_with="fatal"))
    qtbot.waitUntil(lambda: session.controller.dead_model.rowCount() == 3, timeout=3000)
    window.tabs.setCurrentWidget(window.dead_pane)
    window.dead_pane.search.setText("alpha")
    assert window.dead_pane.retry_all_button.text() == "Retr&y all matching (2)"
    window.retry_all_matching()
    assert "Retry 2 dead jobs matching “alpha”" in prompts.confirms[-1]
    task = session.controller.bulk_task
    assert task is not None and task.total == 2 and task.verb == "Retrying"
    qtbot.waitUntil(lambda: task.done, timeout=5000)
    assert sorted(task.result.done) == sorted(ids[:2])
    qtbot.waitUntil(lambda: all(session.queue.get(i).state == State.SUCCEEDED for i in ids[:2]), timeout=8000)
    assert session.queue.get(ids[2]).state == State.DEAD


def test_cancel_a_running_job_rejects_its_late_result_and_leaves_the_pool_idle(
    qtbot: Any, session: Any, prompts: Any, stubborn: Any
) -> None:
    window, driver = session.window, session.controller.driver
    with qtbot.waitSignal(driver.job_started, timeout=5000) as started:
        job_id = session.controller.submit(
            "stubborn", {"n": 1}, title="slow", priority="interactive", max_attempts=2
        ).job.id
    assert started.args == [job_id]
    window.refresh()
    assert window.show_job(job_id)
    assert window.action(Command.CANCEL).isEnabled()
    window.action(Command.CANCEL).trigger()
    assert prompts.confirms and "running" in prompts.confirms[-1]
    assert session.queue.get(job_id).state == State.CANCELLED
    with qtbot.waitSignals([driver.stale_result, driver.job_finished], order="strict", timeout=5000):
        stubborn.release.set()
    job = session.queue.get(job_id)
    assert job.state == State.CANCELLED
    assert job.events[-1].type == EventType.STALE_RESULT
    qtbot.waitUntil(lambda: QThreadPool.globalInstance().activeThreadCount() == 0, timeout=3000)
    assert driver.running == 0


def test_a_job_submitted_by_the_cli_appears_and_runs_in_the_windows_worker(
    qtbot: Any, session: Any, data_dir: Path
) -> None:
    payload = json.dumps({"prompt": "from the shell", "duration_s": FAST})
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "desktop_queue",
            "--data-dir",
            str(data_dir),
            "submit",
            "demo",
            "--input",
            payload,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    job_id = json.loads(out.stdout)["id"]
    with qtbot.waitSignal(
        session.controller.driver.job_finished, check_params_cb=finished(job_id, "succeeded"), timeout=10000
    ):
        pass
    qtbot.waitUntil(lambda: session.controller.queue_model.row_of(job_id) is not None, timeout=3000)
    row = session.controller.queue_model.row_of(job_id)
    qtbot.waitUntil(lambda: session.controller.queue_model.job_at(row)["state"] == "succeeded", timeout=3000)
    assert session.queue.get(job_id).worker == session.controller.driver.worker_id


def test_start_up_reconciles_an_orphan_before_leasing_and_says_so(
    qtbot: Any, open_session: Any, data_dir: Path
) -> None:
    queue = Queue.open(data_dir, {"demo": DemoProvider()})
    job_id = queue.submit("demo", {"prompt": "orphan", "duration_s": FAST}, title="orphan").job.id
    assert queue.lease("a-process-that-dies") is not None
    queue.close()  # no complete, no release: the job is left running, as after a crash

    session = open_session(data_dir)
    assert [r.job_id for r in session.queue.reconciled] == [job_id]
    assert not session.window.banner.isHidden()
    assert "1 interrupted job: 1 queued again" in session.window.banner.text.text()
    session.window.show()
    with qtbot.waitSignal(
        session.controller.driver.job_finished, check_params_cb=finished(job_id, "succeeded"), timeout=5000
    ):
        pass
    types = [e.type for e in session.queue.get(job_id).events]
    assert types == ["submitted", "leased", "reconciled", "leased", "succeeded"]


@pytest.mark.qt_log_ignore(r"This plugin does not support (propagateSizeHints|raise)\(\)")  # offscreen
def test_a_second_start_brings_the_running_window_to_the_front(open_session: Any, data_dir: Path, qtbot: Any) -> None:
    """As most desktop apps do: the second start shows the first window and exits, no dialog."""
    first = open_session(data_dir)
    assert not isinstance(first, int)
    first.window.show()
    first.window.showMinimized()
    qtbot.waitUntil(first.window.isMinimized)
    second = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from desktop_queue.app import main; sys.exit(main(sys.argv[1]))",
            str(data_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with qtbot.waitSignal(first.activation.asked, timeout=20000):
        pass
    qtbot.waitUntil(lambda: second.poll() is not None, timeout=20000)
    _out, err = second.communicate()
    assert second.returncode == 0, err
    assert "brought to the front" in err
    assert not first.window.isMinimized() and first.window.isVisible()


@pytest.mark.qt_log_ignore(r"This plugin does not support (propagateSizeHints|raise)\(\)")  # offscreen
def test_bringing_the_window_forward_keeps_its_open_dialog_over_it(open_session: Any, data_dir: Path) -> None:
    """Under Xvfb a second start raised the window over its own "Quit Desktop Queue?" dialog,
    which then waited out of sight."""
    from PySide6.QtWidgets import QApplication, QMessageBox

    session = open_session(data_dir)
    assert not isinstance(session, int)
    session.window.show()
    dialog = QMessageBox(QMessageBox.Icon.Question, "Quit Desktop Queue?", "Quit anyway?", parent=session.window)
    dialog.setModal(True)
    dialog.show()
    assert QApplication.activeModalWidget() is dialog
    raised: list[str] = []
    dialog.raise_ = lambda: raised.append("dialog")  # type: ignore[method-assign]
    session.window.bring_to_front()
    assert raised == ["dialog"] and dialog.isVisible()
    dialog.done(0)


def test_a_second_window_is_refused_clearly_when_the_first_does_not_answer(
    open_session: Any, data_dir: Path, prompts: Any, monkeypatch: Any
) -> None:
    """A window too busy to answer (here: this same thread, blocked in the second start)
    is explained instead."""
    from desktop_queue import app
    from desktop_queue.ui import activation

    monkeypatch.setattr(activation, "ANSWER_MS", 200)
    monkeypatch.setattr(app, "CLOSING_WAIT_S", 0.5)  # (it does not close: the wait runs out)
    first = open_session(data_dir)
    assert not isinstance(first, int)
    assert open_session(data_dir) == 1
    title, text = prompts.errors[-1]
    assert "already open" in title and str(data_dir) in text and "did not come to the front" in text


def test_a_start_while_the_window_is_closing_waits_for_it_and_opens(
    open_session: Any, data_dir: Path, prompts: Any, monkeypatch: Any
) -> None:
    """Quit, then start again at once: the closing window (giving its attempts up to 5 s
    to stop) held the lock and did not answer, and the new start said another was open."""
    from desktop_queue import app

    data_dir.mkdir(parents=True, exist_ok=True)
    # a window closing: it holds the lock until told to let go (its process ends)
    closing = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from desktop_queue.core.store.fileio import FileLock; "
            "lock = FileLock(sys.argv[1]); assert lock.acquire(exclusive=True, blocking=False); "
            "print('held', flush=True); sys.stdin.readline()",
            str(data_dir / app.GUI_LOCK_NAME),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    asked: list[Path] = []

    def unanswered(path: Path) -> bool:
        # the start found the lock held and asks the window, which does not answer: it
        # lets go only now, while the start waits
        asked.append(path)
        assert closing.stdin is not None
        closing.stdin.close()
        return False

    monkeypatch.setattr(app, "ask_running_window", unanswered)
    try:
        assert closing.stdout is not None and closing.stdout.readline().strip() == "held"
        session = open_session(data_dir)
    finally:
        if closing.stdin is not None and not closing.stdin.closed:
            closing.stdin.close()
        closing.wait(timeout=30)
    assert asked  # (the lock was held when the start came)
    assert not isinstance(session, int), prompts.errors
    assert prompts.errors == []


def test_a_socket_a_crashed_window_left_does_not_stop_the_next_one(open_session: Any, data_dir: Path) -> None:
    from PySide6.QtNetwork import QLocalServer

    from desktop_queue.ui.activation import server_name

    stale = QLocalServer()
    assert stale.listen(server_name(data_dir))  # as if its process had died without closing it
    session = open_session(data_dir)
    assert not isinstance(session, int)
    assert session.activation.listening
    stale.close()


def test_a_damaged_store_opens_and_the_banner_says_what_happened(open_session: Any, data_dir: Path) -> None:
    with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
        queue.submit("demo", {"prompt": "x"})
    journal = next((data_dir / "store").glob("journal-*.jsonl"))
    # spoil the header's checksum (whatever schema version it carries)
    journal.write_text(re.sub(r'"schema_version":\d+', '"schema_version":99', journal.read_text(), count=1))
    session = open_session(data_dir)
    assert not isinstance(session, int)
    assert not session.window.banner.isHidden()
    assert session.queue.report.notices[0] in session.window.banner.text.text()


def test_a_store_that_cannot_be_opened_is_a_clear_message_not_a_traceback(
    open_session: Any, data_dir: Path, prompts: Any, monkeypatch: Any
) -> None:
    from desktop_queue.core import StoreError

    def refuse(*_args: Any, **_kwargs: Any) -> Queue:
        raise StoreError("snapshot-000000000001.json was written by a newer Desktop Queue (schema 9)")

    with monkeypatch.context() as patch:
        patch.setattr(Queue, "open", refuse)
        assert open_session(data_dir) == 1
    title, message = prompts.errors[-1]
    assert "cannot be opened" in title and "newer Desktop Queue" in message and "Nothing was changed" in message
    # the refusal released the window lock: a fixed store opens at once
    assert not isinstance(open_session(data_dir), int)


def test_close_with_a_running_job_asks_then_gives_the_lease_back(qtbot: Any, session: Any, prompts: Any) -> None:
    driver = session.controller.driver
    with qtbot.waitSignal(driver.job_started, timeout=5000):
        job_id = submit_demo(session, "long", duration_s=30)
    prompts.answer = False
    session.window.close()
    assert session.window.isVisible() and driver.running == 1
    prompts.answer = True
    session.window.close()
    assert not session.window.isVisible()
    assert "1 job is running" in prompts.confirms[-1] and "It is stopped and queued again" in prompts.confirms[-1]
    assert QThreadPool.globalInstance().activeThreadCount() == 0
    job = session.queue.get(job_id)
    assert job.state == State.QUEUED and job.events[-1].type == EventType.RELEASED


def test_pause_resume_and_stop_after_current(qtbot: Any, session: Any) -> None:
    window, driver = session.window, session.controller.driver
    window.action(Command.PAUSE).trigger()
    assert driver.paused and window.action(Command.RESUME).isEnabled() and not window.action(Command.PAUSE).isEnabled()
    job_id = submit_demo(session, "held")
    window.refresh()
    assert session.queue.get(job_id).state == State.QUEUED
    with qtbot.waitSignal(driver.job_finished, check_params_cb=finished(job_id, "succeeded"), timeout=5000):
        window.action(Command.RESUME).trigger()
    qtbot.waitUntil(lambda: window.queue_pane.state_filter.itemText(3) == "Succeeded (1)", timeout=3000)
    assert window.queue_pane.state_filter.itemText(0) == "All states (1)"
    window.action(Command.STOP_AFTER_CURRENT).trigger()
    assert driver.paused


def test_preferences_and_window_state_are_kept_apart(qtbot: Any, session: Any) -> None:
    window = session.window
    window.apply_preferences(Preferences(concurrency=2))
    assert session.controller.driver.concurrency == 2
    window.save_state()
    settings = QSettings(ORGANIZATION, APPLICATION)
    assert int(settings.value("preferences/concurrency")) == 2
    window_keys = {k for k in settings.allKeys() if k.startswith("window/")}
    assert {"window/geometry", "window/splitter", "window/queue_header", "window/dead_header"} <= window_keys
    assert not any("concurrency" in k for k in window_keys)
    assert window.status.capacity_label.text().startswith("0/2 slots busy")


def test_the_attempt_timeout_is_a_preference_applied_from_the_next_attempt(qtbot: Any, session: Any) -> None:
    from desktop_queue.ui.dialogs import PreferencesDialog
    from desktop_queue.ui.settings import load_preferences

    window = session.window
    window.apply_preferences(Preferences(concurrency=2, attempt_timeout_s=90.0))
    assert session.controller.driver.attempt_timeout_s == 90.0
    assert load_preferences().attempt_timeout_s == 90.0
    dialog = PreferencesDialog(load_preferences())
    qtbot.addWidget(dialog)
    assert dialog.attempt_timeout.value() == 90
    dialog.attempt_timeout.setValue(0)  # "each kind's default"
    assert dialog.preferences().attempt_timeout_s is None
    window.apply_preferences(dialog.preferences())
    assert session.controller.driver.attempt_timeout_s is None
    assert load_preferences().attempt_timeout_s is None
