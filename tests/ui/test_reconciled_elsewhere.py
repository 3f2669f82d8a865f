"""The window says what a crash reconciliation found, even when a CLI command found it first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from desktop_queue.core import Queue
from desktop_queue.core.findings import FindingsLog
from desktop_queue.providers.demo import DemoProvider


def _leave_an_orphan(data_dir: Path, title: str) -> str:
    queue = Queue.open(data_dir, {"demo": DemoProvider()})
    job_id = queue.submit("demo", {"prompt": "orphan", "duration_s": 0.01}, title=title).job.id
    assert queue.lease("a-process-that-dies") is not None
    queue.close()  # no complete, no release: left running, as after a crash
    return job_id


def test_a_reconciliation_done_by_a_cli_command_is_shown_by_the_window(
    qtbot: Any, open_session: Any, data_dir: Path
) -> None:
    job_id = _leave_an_orphan(data_dir, "left behind")
    # a CLI command is the first to open the store: it reconciles, the window is not running
    out = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "show", job_id, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "reconciled" in [e["type"] for e in json.loads(out.stdout)["events"]]
    session = open_session(data_dir, lease=False)
    assert session.queue.reconciled == []  # this window found nothing itself ...
    banner = session.window.banner
    assert not banner.isHidden()  # ... and says what the command found
    text = banner.text.text()
    assert "1 interrupted job: 1 queued again" in text
    assert "found by another process" in text and "before this window opened" in text
    assert f"left behind (job {job_id})" in text
    session.close()
    # told once: the next window does not repeat it
    again = open_session(data_dir, lease=False)
    assert again.window.banner.isHidden()


def test_the_window_that_reconciles_tells_it_once_without_another_process(
    qtbot: Any, open_session: Any, data_dir: Path
) -> None:
    job_id = _leave_an_orphan(data_dir, "mine")
    session = open_session(data_dir, lease=False)
    assert [r.job_id for r in session.queue.reconciled] == [job_id]
    text = session.window.banner.text.text()
    assert "1 interrupted job: 1 queued again." in text and "another process" not in text
    assert FindingsLog(data_dir).unseen() == []  # shown: marked seen
