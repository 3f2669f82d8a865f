"""Real ``desktop-queue work`` subprocesses against the fake OpenAI server, for the tests
that need several processes on one data dir (paid-once, drills).

The workers are other processes: there is nothing to wait on but what the server counted
or the store says, so :func:`wait_for` polls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeOpenAI

from desktop_queue.core import Queue
from desktop_queue.providers import discover

KEY = "sk-test-paid-once-0123456789"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """The fake OpenAI server on 127.0.0.1 (any key), for the workers to call."""
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def env_for(server: FakeOpenAI) -> dict[str, str]:
    """A worker's environment: the fake endpoint and key, never the user's keyring."""
    return {
        **os.environ,
        "OPENAI_BASE_URL": server.url,
        "OPENAI_API_KEY": KEY,
        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
        "QT_QPA_PLATFORM": "offscreen",
    }


def start_worker(data_dir: Path, server: FakeOpenAI, *flags: str) -> subprocess.Popen[bytes]:
    """``desktop-queue --data-dir D work --json FLAGS`` against ``server``."""
    return subprocess.Popen(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "work", "--json", *flags],
        env=env_for(server),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(worker: subprocess.Popen[bytes], timeout_s: float) -> dict[str, Any]:
    """Waits for a worker to exit 0 and returns its JSON summary (the key never in its output)."""
    out, err = worker.communicate(timeout=timeout_s)
    assert worker.returncode == 0, err.decode()
    assert KEY not in (out + err).decode()
    summary: dict[str, Any] = json.loads(out)
    return summary


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Polls ``condition`` every 50 ms until it holds (qtbot.waitUntil, without a Qt loop)."""
    tick = threading.Event()
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        tick.wait(0.05)


def submit(data_dir: Path, n: int, **extra: Any) -> list[str]:
    """``n`` distinct ``openai.chat`` jobs; their ids."""
    with Queue.open(data_dir, discover()) as queue:
        return [
            queue.submit("openai.chat", {"prompt": f"paid question {i}", "max_tokens": 8, **extra}).job.id
            for i in range(n)
        ]


def jobs(data_dir: Path) -> list[Any]:
    """Every job of the data dir, with its events."""
    with Queue.open(data_dir, discover()) as queue:
        return queue.list(with_events=True)
