"""The window says when the store takes no changes (a full disk) and when jobs start again."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest
from PySide6.QtWidgets import QToolButton

from desktop_queue.core.liveness import _start_time, this_process
from desktop_queue.core.store import journal as storage_module
from desktop_queue.runtime.driver import DISK_FULL
from desktop_queue.ui.controller import STORE_UNAVAILABLE

from .test_waiting_reasons import WAIT_MS, blocking, clock, next_run, open_window  # noqa: F401 (fixtures)


def test_a_full_disk_shows_in_the_banner_and_the_jobs_and_clears_when_room_returns(
    qtbot: Any, open_window: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = open_window(lease=False)
    controller = window.controller
    job_id = controller.queue.submit("demo", {"prompt": "p", "duration_s": 0}).job.id
    real = storage_module._pwrite_all
    full = {"on": True}

    def pwrite_all(fd: int, data: bytes, offset: int) -> None:
        if full["on"] and data.strip(b"\0"):  # zeros undo a torn write: a full disk allows them
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data, offset)

    monkeypatch.setattr(storage_module, "_pwrite_all", pwrite_all)
    with qtbot.waitSignal(controller.store_unavailable, timeout=WAIT_MS) as down:
        controller.driver.start()
    assert down.args == [DISK_FULL]
    assert window.banner.isVisible() and window.banner.text.text() == DISK_FULL
    assert window.status.capacity_label.text().endswith("(store unavailable)")
    qtbot.waitUntil(lambda: next_run(window, job_id) == STORE_UNAVAILABLE, timeout=WAIT_MS)

    full["on"] = False
    with qtbot.waitSignal(controller.store_available, timeout=WAIT_MS):
        pass
    assert not window.banner.isVisible()
    qtbot.waitUntil(lambda: controller.queue.get(job_id).state == "succeeded", timeout=WAIT_MS)
    assert controller.queue.get(job_id).attempts == 1
    assert not window.status.capacity_label.text().endswith("(store unavailable)")


def test_a_later_message_does_not_hide_that_the_store_takes_no_changes(
    qtbot: Any, open_window: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs that finished before the disk filled are told after it: the disk-full line stays above."""
    window = open_window(lease=False)
    controller = window.controller
    controller.queue.submit("demo", {"prompt": "p", "duration_s": 0})
    real = storage_module._pwrite_all
    full = {"on": True}

    def pwrite_all(fd: int, data: bytes, offset: int) -> None:
        if full["on"] and data.strip(b"\0"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data, offset)

    monkeypatch.setattr(storage_module, "_pwrite_all", pwrite_all)
    with qtbot.waitSignal(controller.store_unavailable, timeout=WAIT_MS):
        controller.driver.start()
    banner = window.banner
    assert banner.condition.text() == DISK_FULL and banner.condition.isVisible()
    assert not banner.text.isVisible()  # the driver's error says the same: said once

    banner.show_message("3 jobs finished")
    assert banner.condition.isVisible() and banner.condition.text() == DISK_FULL
    assert banner.text.isVisible() and banner.text.text() == "3 jobs finished"
    banner.findChild(QToolButton, "bannerClose").click()  # read, and dismissed
    assert not banner.isVisible()
    banner.show_message("4 jobs finished")
    assert banner.condition.isVisible()  # still true, so still said

    full["on"] = False
    with qtbot.waitSignal(controller.store_available, timeout=WAIT_MS):
        pass
    assert banner.isVisible() and not banner.condition.isVisible()
    assert banner.text.text() == "4 jobs finished"


def test_a_store_a_disk_error_poisoned_offers_a_restart_that_keeps_what_it_holds(
    qtbot: Any, open_window: Any, monkeypatch: pytest.MonkeyPatch, prompts: Any
) -> None:
    """A failed sync: the store takes nothing until reopened, and the banner offers just that."""
    window = open_window(lease=False)
    controller = window.controller
    controller.queue.submit("demo", {"prompt": "p", "duration_s": 0})

    def datasync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(storage_module, "_datasync", datasync)
    with qtbot.waitSignal(controller.store_unavailable, timeout=WAIT_MS):
        controller.driver.start()
    banner = window.banner
    assert "reopened" in banner.condition.text()
    assert banner.action.isVisible() and banner.action.text() == "&Restart Desktop Queue"

    # (the attempt that found the disk failing ends a moment later, its outcome held: the
    # question below counts it as waiting, not running, once it has)
    qtbot.waitUntil(lambda: controller.driver.running == 0, timeout=WAIT_MS)
    monkeypatch.setattr(type(controller.driver), "held_ids", lambda _self: ["a1"])
    prompts.answer = False  # asked, as Quit asks, and the person stays
    banner.action.click()
    assert prompts.confirms[-1].startswith("Restart Desktop Queue?\n1 finished job waits")
    assert window.isVisible() and not window.restart_requested

    prompts.answer = True
    banner.action.click()
    assert not window.isVisible() and window.restart_requested


def test_a_full_disk_offers_no_restart(qtbot: Any, open_window: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Room on the disk is what a full one needs: the window goes on by itself once there is some."""
    window = open_window(lease=False)
    controller = window.controller
    controller.queue.submit("demo", {"prompt": "p", "duration_s": 0})

    real = storage_module._pwrite_all

    def pwrite_all(fd: int, data: bytes, offset: int) -> None:
        if data.strip(b"\0"):  # zeros undo a torn write: a full disk allows them
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data, offset)

    monkeypatch.setattr(storage_module, "_pwrite_all", pwrite_all)
    with qtbot.waitSignal(controller.store_unavailable, timeout=WAIT_MS):
        controller.driver.start()
    assert window.banner.condition.text() == DISK_FULL and not window.banner.action.isVisible()


def test_the_restart_starts_the_same_command_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from desktop_queue import app

    started: list[tuple[list[str], dict[str, Any]]] = []
    monkeypatch.setattr(subprocess, "Popen", lambda args, **kwargs: started.append((args, kwargs)))
    monkeypatch.setattr(sys, "argv", ["/usr/bin/desktop-queue", "--data-dir", "/data", "gui"])
    app.relaunch()
    [(args, kwargs)] = started
    assert args == [sys.executable, "-m", "desktop_queue", "--data-dir", "/data", "gui"]
    assert kwargs["start_new_session"] is True
    assert kwargs["env"][app.RESTART_ENV] == this_process()  # it waits for this process to end


def test_a_restarted_window_waits_for_the_one_it_replaces_to_end() -> None:
    import subprocess
    import sys

    from desktop_queue.app import outlived

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    holder = f"{this_process().split('/')[0]}/{child.pid}/{_start_time(child.pid)}"
    assert outlived(holder, 0.05) is False  # still running: the wait ends at its bound
    assert child.stdin is not None
    child.stdin.close()
    assert outlived(holder, 30) is True  # ended (its parent has not collected it yet)
    child.wait()
