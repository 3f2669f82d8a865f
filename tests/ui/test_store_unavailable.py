"""The window says when the store takes no changes (a full disk) and when jobs start again."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest

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
