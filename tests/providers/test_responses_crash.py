"""A real crash mid ``openai.responses``: SIGKILL of a ``work`` subprocess, then a restart.

The restarted worker (the first opener, so start-up reconciliation runs) asks the
provider about the orphan by its provider job id and resumes polling the same
background response: the fake server sees exactly one creation request, and the
canary key never reaches the data directory or the workers' output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeOpenAI
from provider_helpers import CANARY_KEY, CANARY_PROMPT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL"),
]

#: GETs of the background response the restarted worker needs before it completes
POLLS_AFTER_RESTART = 3
DEADLINE_S = 30.0


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    """Polls ``predicate`` until it returns something truthy (no sleep: an Event wait)."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        pause.wait(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def env(tmp_path: Path, server: FakeOpenAI) -> dict[str, str]:
    """The worker's environment: the fake endpoint, the canary key, no real keyring."""
    out = dict(os.environ)
    out.update(
        OPENAI_BASE_URL=server.url,
        OPENAI_API_KEY=CANARY_KEY,
        PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",  # never the user's keyring
        QT_QPA_PLATFORM="offscreen",
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"),
    )
    out.pop("DESKTOP_QUEUE_DATA_DIR", None)
    return out


def cli(data_dir: Path, env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_sigkill_mid_background_response_resumes_the_same_provider_job(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], workers: list[subprocess.Popen[str]]
) -> None:
    data_dir = tmp_path / "data"
    server.polls_to_complete = 10**6  # in progress until the test says otherwise
    job = cli(
        data_dir,
        env,
        "submit",
        "openai.responses",
        "--input",
        json.dumps({"input": CANARY_PROMPT, "model": "test-model"}),
    )
    job_id = job["id"]

    log_path = tmp_path / "worker1.log"
    with log_path.open("w") as log_file:
        first = subprocess.Popen(
            [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "-v", "work", "--concurrency", "2"],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
        )
    workers.append(first)

    wait_for(lambda: server.created == 1, "the creation request")
    provider_job_id = wait_for(
        lambda: cli(data_dir, env, "show", job_id)["provider_job_id"], "the provider job id committed to the job"
    )
    assert provider_job_id == "resp_0001"
    assert first.poll() is None, "the worker stopped on its own"
    first.kill()  # SIGKILL: no shutdown, the lease stays behind
    assert first.wait(10) == -signal.SIGKILL

    with server.lock:
        server.responses[provider_job_id]["_polls_left"] = POLLS_AFTER_RESTART
    polls_before = server.count("responses.get")

    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "desktop_queue",
            "--data-dir",
            str(data_dir),
            "-v",
            "work",
            "--until-idle",
            "--max-seconds",
            str(DEADLINE_S),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S + 15,
    )
    assert second.returncode == 0, second.stderr

    final = cli(data_dir, env, "show", job_id)
    assert final["state"] == "succeeded", (final, second.stderr)
    assert final["provider_job_id"] == provider_job_id
    types = [ev["type"] for ev in final["events"]]
    assert types == ["submitted", "leased", "provider_job", "reconciled", "leased", "succeeded"], types
    assert server.created == 1
    assert server.count("responses.create") == 1, "the restart paid for a second generation"
    assert server.count("responses.get") - polls_before >= POLLS_AFTER_RESTART
    assert {r.path.split("/")[3] for r in server.of("responses.get")} == {provider_job_id}

    outputs = log_path.read_text() + second.stdout + second.stderr
    assert CANARY_KEY not in outputs
    for path in data_dir.rglob("*"):
        if path.is_file():
            assert CANARY_KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"
