"""The lease driver turns flow-control state changes into a Qt signal on its own thread."""

from __future__ import annotations

import threading
from typing import Any

from desktop_queue.core import FakeClock, Outcome, Queue, RunContext
from desktop_queue.core.flow import FlowControl, ProfileLimits
from desktop_queue.providers.demo import DemoProvider

from .conftest import WAIT_MS, DriverFactory


def test_a_breaker_opened_by_finished_attempts_is_signalled_from_the_driver_thread(
    qtbot: Any, queue: Queue, make_driver: DriverFactory
) -> None:
    flow = FlowControl({"demo": ProfileLimits(breaker_threshold=2, breaker_cooldown_s=30)}, clock=FakeClock())
    for i in range(3):
        queue.submit("demo", {"prompt": f"down {i}", "duration_s": 0.01, "fail_times": 5, "fail_with": "retryable"})
    driver = make_driver(concurrency=1, flow=flow)
    threads: list[threading.Thread] = []
    seen: list[tuple[str, str, str]] = []

    def record(profile: str, kind: str, text: str) -> None:
        threads.append(threading.current_thread())
        seen.append((profile, kind, text))

    driver.flow_event.connect(record)
    with qtbot.waitSignal(driver.flow_event, check_params_cb=lambda p, k, t: k == "breaker_opened", timeout=WAIT_MS):
        driver.start()
    opened = next(entry for entry in seen if entry[1] == "breaker_opened")  # (background jobs pause after it)
    assert opened[0] == "demo" and opened[2].startswith("demo: breaker open (2 retryable failures in a row)")
    assert set(threads) == {threading.main_thread()}
    # the breaker holds the rest back: no attempt is spent while it is open
    qtbot.waitUntil(lambda: driver.running == 0, timeout=WAIT_MS)
    spent = sum(j["total_attempts"] for j in queue.raw_jobs())
    for _ in range(5):
        driver.tick()
    assert sum(j["total_attempts"] for j in queue.raw_jobs()) == spent == 2


class BadArtifact(DemoProvider):
    """Answers with an artifact that is not base64."""

    def run(self, job: Any, context: RunContext) -> Outcome:
        return Outcome.success({"artifact_b64": "%%% not base64 %%%", "mime": "image/png"})


def test_an_artifact_that_is_not_base64_is_poison_and_stores_nothing(
    qtbot: Any, queue: Queue, make_driver: DriverFactory
) -> None:
    job = queue.submit("demo", {"prompt": "bad bytes"}, max_attempts=5).job
    driver = make_driver({"demo": BadArtifact()})
    # three poison attempts with full-jitter backoff between them (at most 1 s + 2 s)
    with qtbot.waitSignal(driver.job_finished, check_params_cb=lambda i, s: s == "dead", timeout=3 * WAIT_MS):
        driver.start()
    dead = queue.get(job.id)
    assert dead.last_error is not None and dead.last_error["class"] == "poison"
    assert dead.total_attempts == 3 and queue.results.count() == 0
