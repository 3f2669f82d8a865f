"""``desktop-queue work`` on a store that hits a disk error stops and says so (exit 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from desktop_queue.core import Queue, State
from desktop_queue.providers import discover

# fdatasync fails from the Nth call on, in the worker process only: a disk that starts failing
WORKER = """
import os, sys
real, calls = os.fdatasync, [0]
def failing(fd):
    calls[0] += 1
    if calls[0] > int(os.environ["FAIL_AFTER"]):
        raise OSError(5, "Input/output error")
    real(fd)
os.fdatasync = failing
from desktop_queue.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_work_stops_with_a_clear_message_when_the_disk_fails(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Queue.open(data, discover()) as queue:
        ids = [queue.submit("demo", {"prompt": f"job {i}", "duration_s": 0.01}).job.id for i in range(20)]
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            WORKER,
            "--data-dir",
            str(data),
            "work",
            "--json",
            "--concurrency",
            "1",
            "--until-idle",
            "--max-seconds",
            "60",
        ],
        env={**os.environ, "FAIL_AFTER": "6", "QT_QPA_PLATFORM": "offscreen"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=90,
        check=False,
    )
    assert run.returncode == 1, run.stderr.decode()
    err = run.stderr.decode()
    assert "disk error" in err and "until it is reopened" in err
    assert err.count("disk error") < 10  # it stopped, rather than failing every tick
    summary = json.loads(run.stdout)
    assert summary["stopped"] == "the store hit a disk error"
    # reopened on a good disk: every job is there, none lost, and the rest can run
    with Queue.open(data, discover()) as queue:
        jobs = {j.id: j for j in queue.list()}
        assert set(jobs) == set(ids)
        assert all(j.state in (State.QUEUED, State.RUNNING, State.SUCCEEDED) for j in jobs.values())
