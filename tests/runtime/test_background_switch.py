"""The "pause background work" switch across real processes on one data dir.

A ``desktop-queue work`` process runs; another process (``desktop-queue
pause-background``) flips the switch; the worker honours it at once, and a worker
started afterwards (a restart) honours it too, until ``resume-background``.
Interactive jobs run all along. The test waits on the jobs' states (``qtbot.waitUntil``)
and on the worker's own "working on" line, never on a timer.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import Queue, State
from desktop_queue.core.pause import BackgroundSwitch
from desktop_queue.providers.demo import DemoProvider

WAIT_MS = 30_000


def dq(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One ``desktop-queue`` command in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class Worker:
    """A ``desktop-queue work`` process on the data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "work", "--concurrency", "2"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def wait_for(self, marker: bytes, timeout_s: float = 30.0) -> None:
        """Reads its stderr until it says ``marker``."""
        assert self.process.stderr is not None
        fd = self.process.stderr.fileno()
        seen = b""
        deadline = time.monotonic() + timeout_s
        while marker not in seen:
            left = deadline - time.monotonic()
            assert left > 0, f"the worker did not start: {seen.decode(errors='replace')}"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                assert chunk, f"the worker ended: {seen.decode(errors='replace')}"
                seen += chunk

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.communicate(timeout=30)


@pytest.fixture
def workers(data_dir: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def submit(queue: Queue, prompt: str, priority: str) -> str:
    return queue.submit("demo", {"prompt": prompt, "duration_s": 0.01}, priority=priority).job.id


def test_a_switch_flipped_in_one_process_holds_in_another_and_across_a_restart(
    qtbot: Any, data_dir: Path, workers: list[Worker]
) -> None:
    queue = Queue.open(data_dir, {"demo": DemoProvider()})
    try:
        first = Worker(data_dir)
        workers.append(first)
        first.wait_for(b"working on")

        paused = dq(data_dir, "pause-background", "--reason", "month-end batch off")
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout.startswith("Background work paused (by cli, ")

        # submitted first, so a worker that ignored the switch would take it with (or before) the other
        summary = submit(queue, "summarise the week", "background")
        question = submit(queue, "answer me", "interactive")
        qtbot.waitUntil(lambda: queue.get(question).state == State.SUCCEEDED, timeout=WAIT_MS)
        held = queue.get(summary)
        assert held.state == State.QUEUED and held.total_attempts == 0  # not leased, no attempt spent

        # a restart: the worker ends, a new one starts, the switch is still on
        first.stop()
        again = BackgroundSwitch(data_dir).state()
        assert again.paused and again.by == "cli" and again.reason == "month-end batch off"
        second = Worker(data_dir)
        workers.append(second)
        second.wait_for(b"note: Background work paused (by cli, ")  # it says so as it starts
        follow_up = submit(queue, "and one more question", "interactive")
        qtbot.waitUntil(lambda: queue.get(follow_up).state == State.SUCCEEDED, timeout=WAIT_MS)
        assert queue.get(summary).state == State.QUEUED and queue.get(summary).total_attempts == 0

        resumed = dq(data_dir, "resume-background", "--json")
        assert resumed.returncode == 0, resumed.stderr
        assert '"paused": false' in resumed.stdout and '"changed": true' in resumed.stdout
        qtbot.waitUntil(lambda: queue.get(summary).state == State.SUCCEEDED, timeout=WAIT_MS)
        assert queue.get(summary).total_attempts == 1
    finally:
        queue.close()
