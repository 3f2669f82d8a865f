"""Flow control's shared state is locked and read only for jobs it governs.

A job whose kind has no profile (demo, next to a configured ``openai`` profile) is held
back by nothing in the shared state, so leasing and finishing it takes no file lock on
``<data dir>/flow``; a governed job still takes its session, and lane order is kept
when the two kinds are mixed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import Queue
from desktop_queue.core.errors import StoreError
from desktop_queue.core.flow import FlowControl, ProfileLimits, _SharedFile
from desktop_queue.core.model import State
from desktop_queue.providers.demo import DemoProvider

from .conftest import WAIT_MS, DriverFactory

NEVER_MS = 600_000  # (with follow=False: no look but the one start() makes, not even the feed's)


@pytest.fixture
def flow_locks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the shared flow state's file-lock acquisitions."""
    taken: list[int] = []
    real = _SharedFile.lock

    def counting(self: _SharedFile) -> None:
        taken.append(1)
        real(self)

    monkeypatch.setattr(_SharedFile, "lock", counting)
    return taken


def shared_flow(data_dir: Path) -> FlowControl:
    return FlowControl({"openai": ProfileLimits(concurrency=2)}, shared_dir=data_dir / "flow")


def instant(prompt: str) -> dict[str, Any]:
    return {"prompt": prompt, "duration_s": 0}


def test_jobs_without_a_profile_take_no_lock_on_the_shared_flow_state(
    qtbot: Any, queue: Queue, make_driver: DriverFactory, data_dir: Path, flow_locks: list[int]
) -> None:
    ids = [queue.submit("demo", instant(f"job {i}")).job.id for i in range(12)]
    flow = shared_flow(data_dir)
    providers = {"demo": DemoProvider(tick_s=0.01), "openai.chat": DemoProvider(tick_s=0.01)}
    driver = make_driver(providers, concurrency=3, tick_ms=NEVER_MS, follow=False, flow=flow)
    finished: list[str] = []
    driver.job_finished.connect(lambda job_id, state: finished.append(state))

    driver.start()
    qtbot.waitUntil(lambda: len(finished) == len(ids), timeout=WAIT_MS)

    assert [queue.get(i).state for i in ids] == [State.SUCCEEDED] * len(ids)
    assert flow_locks == []


def test_a_governed_job_takes_its_session_and_keeps_its_place_in_line(
    qtbot: Any, make_driver: DriverFactory, tmp_path: Path, flow_locks: list[int]
) -> None:
    providers = {"demo": DemoProvider(tick_s=0.01), "openai.chat": DemoProvider(tick_s=0.01)}
    queue = Queue.open(tmp_path / "mixed", providers)
    governed = queue.submit("openai.chat", instant("first")).job.id
    plain = [queue.submit("demo", instant(f"then {i}")).job.id for i in range(3)]
    flow = shared_flow(tmp_path / "mixed")
    driver = make_driver(providers, on=queue, concurrency=1, tick_ms=NEVER_MS, follow=False, flow=flow)
    started: list[str] = []
    finished: list[str] = []
    driver.job_started.connect(started.append)
    driver.job_finished.connect(lambda job_id, state: finished.append(state))

    driver.start()
    qtbot.waitUntil(lambda: len(finished) == 4, timeout=WAIT_MS)

    assert started == [governed, *plain]  # submission order, whichever kind needs the session
    assert flow_locks  # the governed job's lease and outcome looked at the shared state
    assert flow.snapshot("openai")["in_flight"] == 0  # its slot was freed under the session
    driver.shutdown(timeout_ms=WAIT_MS)
    queue.close()


def test_an_outcome_the_shared_state_could_not_take_is_told_again_and_frees_its_slot(
    qtbot: Any, make_driver: DriverFactory, tmp_path: Path
) -> None:
    """Flow control's shared state does not answer as an attempt ends (a database away
    longer than its retries): the job still finishes, and the next tick tells flow control
    again, so the profile's one slot is freed for the next job instead of held for ever."""
    providers = {"openai.chat": DemoProvider(tick_s=0.01)}
    queue = Queue.open(tmp_path / "data", providers)
    ids = [queue.submit("openai.chat", instant(f"job {i}")).job.id for i in range(2)]
    flow = FlowControl({"openai": ProfileLimits(concurrency=1)}, shared_dir=tmp_path / "data" / "flow")
    real = flow.on_outcome
    refusals = [StoreError("the PostgreSQL queue's flow state did not answer")]

    def on_outcome(*args: Any, **kwargs: Any) -> None:
        if refusals:
            raise refusals.pop()
        real(*args, **kwargs)

    flow.on_outcome = on_outcome  # type: ignore[method-assign]
    driver = make_driver(providers, on=queue, concurrency=2, flow=flow)
    finished: list[str] = []
    driver.job_finished.connect(lambda job_id, state: finished.append(job_id))

    driver.start()
    qtbot.waitUntil(lambda: len(finished) == 2, timeout=WAIT_MS)

    assert not refusals and finished == ids
    assert [queue.get(i).state for i in ids] == [State.SUCCEEDED] * 2
    assert flow.snapshot("openai")["in_flight"] == 0
    driver.shutdown(timeout_ms=WAIT_MS)
    queue.close()


def test_plain_jobs_ahead_of_a_governed_one_are_not_dropped_from_the_line(
    qtbot: Any, make_driver: DriverFactory, tmp_path: Path
) -> None:
    """Two demo jobs, then a chat job, four free slots. The scan without a session took
    the two demo jobs, met the chat job and started again inside a session; the two
    jobs it had passed over were left out of this process's line, and never ran here
    (a power-cut drill found them queued after every worker had gone idle)."""
    providers = {"demo": DemoProvider(tick_s=0.01), "openai.chat": DemoProvider(tick_s=0.01)}
    queue = Queue.open(tmp_path / "mixed", providers)
    ids = [
        queue.submit("demo", instant("first")).job.id,
        queue.submit("demo", instant("second")).job.id,
        queue.submit("openai.chat", instant("governed")).job.id,
        queue.submit("demo", instant("after")).job.id,
    ]
    flow = shared_flow(tmp_path / "mixed")
    driver = make_driver(providers, on=queue, concurrency=4, tick_ms=NEVER_MS, follow=False, flow=flow)
    started: list[str] = []
    driver.job_started.connect(started.append)

    driver.start()  # (one look: with follow=False nothing looks again)
    qtbot.waitUntil(lambda: len(started) == 4, timeout=WAIT_MS)

    assert started == ids
    driver.shutdown(timeout_ms=WAIT_MS)
    queue.close()
