"""Notices without a tray: a desktop notification where the platform has one, else the banner."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core.model import State
from desktop_queue.ui.notifier import Channel, Level


class Tray:
    """A tray icon that records its balloons."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def showMessage(self, _title: str, text: str, *_args: Any) -> None:  # noqa: N802 - Qt API
        self.messages.append(text)

    def hide(self) -> None:
        return None


def test_without_tray_or_desktop_notifications_the_banner_says_it(qtbot: Any, session: Any) -> None:
    window = session.window
    notifier = window.notifier
    assert notifier.tray is None or notifier.channel() is not Channel.TRAY  # offscreen: no tray
    notifier.notify_send = None
    assert notifier.channel() is Channel.BANNER
    assert window.banner.isHidden()
    # a real notice: the queue drains after this window ran a job. The banner is read as
    # the window says so: the job's own notice (“x” finished) comes from the outbox, on a
    # tick of its own, and under load may come after and take the banner's place
    shown: list[str] = []
    window.drained.connect(lambda _message: shown.append(window.banner.text.text()))
    with qtbot.waitSignal(window.drained, timeout=5000) as drained:
        session.queue.submit("demo", {"prompt": "x"})
        window.refresh()
    assert not window.banner.isHidden()
    assert shown[-1] == drained.args[0] == "The queue is empty: every job has finished."
    assert (Channel.BANNER, drained.args[0]) in notifier.sent


def test_the_banner_takes_back_the_queue_is_empty_once_a_job_runs_again(qtbot: Any, session: Any) -> None:
    """It went on saying "The queue is empty" under a status bar that said "1 running"."""
    window = session.window
    notifier = window.notifier
    notifier.notify_send = None
    with qtbot.waitSignal(window.drained, timeout=5000) as drained:
        session.queue.submit("demo", {"prompt": "first"}, title="first")
        window.refresh()
    # (the job's own notice comes on a tick of its own: once it has, the banner is the window's)
    qtbot.waitUntil(lambda: (Channel.BANNER, "\u201cfirst\u201d finished") in notifier.sent, timeout=5000)
    window.banner.show_message(drained.args[0])

    session.queue.submit("demo", {"prompt": "a slow second", "duration_s": 30})  # (another process, say)
    window.refresh()

    qtbot.waitUntil(window.banner.isHidden, timeout=5000)
    assert window.banner.text.text() == ""


@pytest.mark.skipif(sys.platform == "win32", reason="a shell script stands in for notify-send")
def test_a_desktop_notification_goes_through_notify_send(qtbot: Any, session: Any, tmp_path: Path) -> None:
    out = tmp_path / "args.txt"
    fake = tmp_path / "notify-send"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{out}.tmp" && mv "{out}.tmp" "{out}"\n', encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    window = session.window
    window.notifier.notify_send = str(fake)
    assert window.notifier.notify("2 job(s) dead-lettered", Level.WARNING) is Channel.DESKTOP
    qtbot.waitUntil(out.exists, timeout=5000)
    args = out.read_text(encoding="utf-8").splitlines()
    assert args[-2:] == ["Desktop Queue", "2 job(s) dead-lettered"]
    assert args[args.index("--urgency") + 1] == "critical"
    assert window.banner.isHidden()  # told once, outside the window


def test_a_notify_send_that_does_not_start_falls_back_to_the_banner(session: Any, tmp_path: Path) -> None:
    window = session.window
    window.notifier.notify_send = os.fspath(tmp_path / "gone" / "notify-send")
    assert window.notifier.notify("The queue is empty") is Channel.BANNER
    assert window.banner.text.text() == "The queue is empty"


def test_a_tray_that_shows_messages_comes_first(qtbot: Any, session: Any, tmp_path: Path) -> None:
    window = session.window
    tray = Tray()
    window.notifier.use_tray(tray)  # type: ignore[arg-type]
    window.notifier.notify_send = str(tmp_path / "never-used")
    # a dead letter arriving is told through the tray
    job = session.queue.submit("demo", {"prompt": "x", "fail_times": 9, "fail_with": "fatal"}).job
    qtbot.waitUntil(lambda: session.queue.get(job.id).state == State.DEAD, timeout=5000)
    qtbot.waitUntil(lambda: any("dead-lettered" in m for m in tray.messages), timeout=5000)
    assert window.notifier.sent[-1][0] is Channel.TRAY
    window.notifier.use_tray(tray, shows_messages=False)  # a tray without balloons: not used
    assert window.notifier.channel() is Channel.DESKTOP


def _notices(start: int, n: int, dead: frozenset[int] | set[int] = frozenset()) -> list[Any]:
    from desktop_queue.core.outbox import Notice

    return [
        Notice(f"j{i}:1:x", f"j{i}", State.DEAD if i in dead else State.SUCCEEDED, f"job {i}", "demo", float(i))
        for i in range(start, start + n)
    ]


def test_the_banner_adds_a_later_batch_of_finished_jobs_to_what_it_told(session: Any) -> None:
    """The banner stays until dismissed: a batch of 48 must not hide that 4,900 finished and
    51 were dead-lettered before them (a desktop notification tells each batch and fades)."""
    from PySide6.QtWidgets import QToolButton

    window = session.window
    window.notifier.notify_send = None
    assert window.notifier.channel() is Channel.BANNER
    session.controller.alerts.notices.emit(_notices(0, 4900, dead=set(range(0, 4900, 97))))
    assert window.banner.text.text() == "4,900 jobs finished; 51 dead-lettered: they wait for you in Dead letters"
    window.banner.show_message("The queue is empty: every job has finished.")  # something else in between
    session.controller.alerts.notices.emit(_notices(4900, 48))
    assert window.banner.text.text() == "4,948 jobs finished; 51 dead-lettered: they wait for you in Dead letters"
    window.banner.findChild(QToolButton, "bannerClose").click()  # read and dismissed: told afresh
    assert window.banner.isHidden()
    session.controller.alerts.notices.emit(_notices(5000, 1))
    assert window.banner.text.text() == "“job 5000” finished"
    session.controller.alerts.notices.emit(_notices(5001, 1, dead={5001}))
    assert window.banner.text.text() == "2 jobs finished; 1 dead-lettered: it waits for you in Dead letters"
    window.banner.findChild(QToolButton, "bannerClose").click()
    session.controller.alerts.notices.emit(_notices(5002, 31, dead=set(range(5002, 5033))))  # "retry all", failed again
    assert window.banner.text.text() == "31 jobs dead-lettered: they wait for you in Dead letters"


@pytest.mark.parametrize(
    ("dead", "said"),
    [(0, ""), (1, " 1 dead letter waits for you."), (50_000, " 50,000 dead letters wait for you.")],
)
def test_the_queue_drained_notice_counts_its_dead_letters_with_separators(
    qtbot: Any, session: Any, dead: int, said: str
) -> None:
    window = session.window
    with qtbot.waitSignal(window.drained, timeout=5000) as drained:
        window._announce_if_drained({State.DEAD: dead, State.SUCCEEDED: 3})
    assert drained.args[0] == "The queue is empty: every job has finished." + said
