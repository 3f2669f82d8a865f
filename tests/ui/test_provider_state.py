"""Provider state in the window: the status-bar indicator, the breaker banner, the timeline's now line.

Flow control runs on a :class:`FakeClock`, driven into breaker-open and rate limits with
``on_outcome`` failures (what the lease driver feeds it); the window learns of it through
the driver's ``flow_event`` signal and its refresh timer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from desktop_queue.core import FakeClock, Outcome, Queue
from desktop_queue.core.flow import FlowControl, ProfileLimits
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.main_window import MainWindow
from desktop_queue.ui.models import TimelineRole
from desktop_queue.ui.timeline import LiveTimelineModel

WAIT_MS = 3000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def fail(flow: FlowControl, job_id: str, error_class: str = "retryable", **kwargs: Any) -> None:
    """One attempt of an ``openai.chat`` job that ends in ``error_class`` (what the driver feeds flow control)."""
    job = {"id": job_id, "kind": "openai.chat", "input": {"prompt": "p"}, "state": "queued"}
    assert flow.accept(job)
    flow.on_start(job)
    flow.on_outcome(job, Outcome.failure(error_class, f"{error_class} failure", **kwargs))


def indicator(window: MainWindow, profile: str = "openai") -> tuple[str, str]:
    """(text, tooltip) of a provider's status-bar indicator ("" while it does not exist)."""
    found = window.status.provider_items.get(profile)
    if found is None:
        return "", ""
    item, _picture, label = found
    return label.text(), item.toolTip()


# ---------------------------------------------------------------------- the indicator and the banner


def test_a_breaker_opening_shows_in_the_status_bar_and_is_announced_once(
    qtbot: Any, flow_window: Any, clock: FakeClock
) -> None:
    window, flow = flow_window(ProfileLimits(breaker_threshold=3, breaker_cooldown_s=25))
    driver = window.controller.driver
    qtbot.waitUntil(lambda: indicator(window)[0] == "openai: ok", timeout=WAIT_MS)
    assert window.status.provider_items["openai"][0].isVisible()
    assert window.status._provider_levels["openai"] == "ok"

    for n in range(3):
        fail(flow, f"down-{n}")
    opened = lambda profile, kind, text: kind == "breaker_opened"  # noqa: E731
    with (
        qtbot.waitSignal(window.provider_alert, timeout=WAIT_MS) as alert,
        qtbot.waitSignal(driver.flow_event, check_params_cb=opened, timeout=WAIT_MS) as event,
    ):
        driver.tick()  # every tick drains the flow events, not only a finished attempt

    profile, kind, text = event.args
    assert (profile, kind) == ("openai", "breaker_opened")
    assert text.startswith("openai: breaker open (3 retryable failures in a row)")
    assert alert.args[0] == "openai"
    assert not window.banner.isHidden() and "“openai” is not answering" in window.banner.text.text()
    assert indicator(window)[0] == "openai: breaker open, retry in 25 s"
    assert window.status._provider_levels["openai"] == "down"
    tip = indicator(window)[1]
    assert tip.startswith("Provider “openai”: breaker open, retry in 25 s")
    assert "Recent changes:" in tip and "breaker open (3 retryable failures in a row)" in tip

    clock.advance(10)  # the refresh timer keeps the countdown current
    qtbot.waitUntil(lambda: indicator(window)[0] == "openai: breaker open, retry in 15 s", timeout=WAIT_MS)

    # cool-down over: half-open; the probe fails and the breaker opens again -- not announced twice
    clock.advance(15)
    qtbot.waitUntil(lambda: indicator(window)[0] == "openai: breaker half-open, probing", timeout=WAIT_MS)
    window.banner.hide()
    fail(flow, "probe-1")
    with (
        qtbot.assertNotEmitted(window.provider_alert, wait=100),
        qtbot.waitSignal(driver.flow_event, check_params_cb=opened, timeout=WAIT_MS),
    ):
        driver.tick()
    assert window.banner.isHidden()
    assert indicator(window)[0] == "openai: breaker open, retry in 50 s"  # the cool-down doubled

    # a successful probe closes it; the next outage is announced again
    clock.advance(50)
    probe = {"id": "probe-2", "kind": "openai.chat", "input": {"prompt": "p"}, "state": "queued"}
    assert flow.accept(probe)
    flow.on_start(probe)
    flow.on_outcome(probe, Outcome.success({"text": "ok"}))
    closed = lambda profile, kind, text: kind == "breaker_closed"  # noqa: E731
    with qtbot.waitSignal(driver.flow_event, check_params_cb=closed, timeout=WAIT_MS):
        driver.tick()
    qtbot.waitUntil(lambda: indicator(window)[0].startswith("openai: ok"), timeout=WAIT_MS)
    assert "answers again" in window.statusBar().currentMessage()
    for n in range(3):
        fail(flow, f"again-{n}")
    with qtbot.waitSignal(window.provider_alert, timeout=WAIT_MS):
        driver.tick()


def test_a_rate_limit_lowers_the_indicator_and_lists_the_events_in_its_tooltip(
    qtbot: Any, flow_window: Any, clock: FakeClock
) -> None:
    window, flow = flow_window(ProfileLimits(rpm=600))
    driver = window.controller.driver
    fail(flow, "throttled-1", "throttled", retry_after=3.0)
    kinds: list[str] = []
    driver.flow_event.connect(lambda _p, kind, _t: kinds.append(kind))
    driver.tick()
    assert kinds == ["rate_lowered", "paused"]
    qtbot.waitUntil(lambda: indicator(window)[0] == "openai: rate limited, resuming in 3.0 s", timeout=WAIT_MS)
    assert window.status._provider_levels["openai"] == "slow"
    clock.advance(3)
    qtbot.waitUntil(lambda: indicator(window)[0] == "openai: rate lowered to 50%", timeout=WAIT_MS)
    tip = indicator(window)[1]
    lines = tip.splitlines()
    assert lines[0] == "Provider “openai”: rate lowered to 50%"
    # newest first
    assert re.search(r"paused for 3\.0 s", lines[2]) and "rate lowered to 50% (was 100%)" in lines[3]
    assert window.banner.isHidden()  # a rate limit is not an outage: no banner


# ---------------------------------------------------------------------- the timeline's now line


def now_row(window: MainWindow) -> tuple[str | None, Any]:
    """(headline, event) of the timeline's last row."""
    model = window.timeline_model
    if model.rowCount() == 0:
        return None, None
    index = model.index(model.rowCount() - 1)
    return index.data(TimelineRole.HEADLINE), index.data(TimelineRole.EVENT)


def next_run(window: MainWindow, job_id: str) -> str:
    """The queue pane's "next run" cell of a job."""
    model = window.controller.queue_model
    row = model.row_of(job_id)
    assert row is not None
    column = [c.key for c in model.columns].index("next")
    return str(model.index(row, column).data(Qt.ItemDataRole.DisplayRole))


def show(qtbot: Any, window: MainWindow, job_id: str) -> None:
    window.controller.refresher.refresh()
    assert window.show_job(job_id)
    qtbot.waitUntil(
        lambda: window.timeline_model.job is not None and window.timeline_model.job.id == job_id, timeout=WAIT_MS
    )


def test_the_timeline_ends_with_why_a_queued_job_waits(qtbot: Any, flow_window: Any, clock: FakeClock) -> None:
    window, flow = flow_window(ProfileLimits(breaker_threshold=2, breaker_cooldown_s=30))
    queue = window.controller.queue
    # (interactive: a background job says its lane is paused, see test_degradation_ui.py)
    chat = queue.submit("openai.chat", {"prompt": "a haiku"}, title="chat", priority="interactive").job.id
    show(qtbot, window, chat)
    qtbot.waitUntil(lambda: now_row(window)[0] == "now: ready", timeout=WAIT_MS)
    assert now_row(window)[1] is None  # synthetic: not an event ...
    assert [e.type for e in queue.get(chat).events] == ["submitted"]  # ... and nothing was stored

    for n in range(2):
        fail(flow, f"down-{n}")
    qtbot.waitUntil(lambda: now_row(window)[0] == "now: waiting: provider unavailable", timeout=WAIT_MS)
    assert next_run(window, chat) == "waiting: provider unavailable"  # the queue pane says the same
    model = window.timeline_model
    last = model.index(model.rowCount() - 1)
    assert last.data(TimelineRole.CATEGORY) == "throttle"
    assert not (model.flags(last) & Qt.ItemFlag.ItemIsSelectable)
    assert window.timeline_model.as_text().rstrip().splitlines()[-2] == "now: waiting: provider unavailable"

    # the job runs: the line goes away
    lease = queue.lease("test", kinds={"openai.chat"})
    assert lease is not None and lease.job_id == chat
    qtbot.waitUntil(lambda: window.timeline_model.now_text is None, timeout=WAIT_MS)
    assert now_row(window)[1] is not None

    # it fails and backs off: "retrying in … (backoff)"
    queue.fail(lease, Outcome.failure("retryable", "HTTP 500", status=500))
    qtbot.waitUntil(lambda: (now_row(window)[0] or "").endswith("(backoff)"), timeout=WAIT_MS)
    assert re.fullmatch(r"now: retrying in \d+ (s|min) \(backoff\)", now_row(window)[0] or "")
    assert "now: " + next_run(window, chat) == now_row(window)[0]
    assert [e.type for e in queue.get(chat).events][-1] == "retry_scheduled"


def test_the_now_line_names_the_rate_limit_and_the_concurrency_cap(
    qtbot: Any, flow_window: Any, clock: FakeClock
) -> None:
    window, flow = flow_window(ProfileLimits(rpm=1, concurrency=1))
    queue = window.controller.queue
    chat = queue.submit("openai.chat", {"prompt": "waits"}, title="chat").job.id
    show(qtbot, window, chat)
    other = {"id": "elsewhere", "kind": "openai.chat", "input": {"prompt": "p"}, "state": "queued"}
    assert flow.accept(other)
    flow.on_start(other)
    qtbot.waitUntil(lambda: now_row(window)[0] == "now: waiting: concurrency cap", timeout=WAIT_MS)
    flow.on_outcome(other, Outcome.success({"text": "ok"}))
    qtbot.waitUntil(lambda: now_row(window)[0] == "now: waiting: rate limit (~60 s)", timeout=WAIT_MS)
    assert next_run(window, chat) == "waiting: rate limit (~60 s)"
    clock.advance(48)
    qtbot.waitUntil(lambda: now_row(window)[0] == "now: waiting: rate limit (~12 s)", timeout=WAIT_MS)


def test_a_background_job_behind_interactive_ones_says_lower_priority(qtbot: Any, flow_window: Any) -> None:
    window, _flow = flow_window(ProfileLimits(), concurrency=1)
    queue = window.controller.queue
    background = queue.submit("demo", {"prompt": "later"}, title="bg", priority="background").job.id
    for n in range(2):
        queue.submit("demo", {"prompt": f"urgent {n}"}, title=f"fg {n}", priority="interactive")
    show(qtbot, window, background)
    expected = "waiting: lower priority (2 interactive jobs ahead)"
    qtbot.waitUntil(lambda: now_row(window)[0] == f"now: {expected}", timeout=WAIT_MS)
    assert next_run(window, background) == expected
    # the interactive ones themselves are just ready
    assert {
        next_run(window, j["id"]) for j in window.controller.queue_model.jobs() if j["priority"] == "interactive"
    } == {"ready"}
    window.controller.set_paused(True)  # nothing starts while paused: that is the reason, not the lane
    assert next_run(window, background) == "paused"
    qtbot.waitUntil(lambda: now_row(window)[0] == "now: paused", timeout=WAIT_MS)


def test_the_live_timeline_passes_the_model_tester_with_and_without_its_now_line(
    qtmodeltester: Any, data_dir: Path
) -> None:
    with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
        job = queue.get(queue.submit("demo", {"prompt": "x"}).job.id)
        model = LiveTimelineModel()
        model.show_job(job)
        qtmodeltester.check(model)
        model.set_now("now: ready")
        assert model.rowCount() == len(job.events) + 1
        qtmodeltester.check(model)
        model.set_now("now: waiting: rate limit (~3 s)")
        assert model.index(model.rowCount() - 1).data(TimelineRole.CATEGORY) == "throttle"
        model.show_job(job)  # another job (or the same, afresh): the line is computed anew
        assert model.now_text is None and model.rowCount() == len(job.events)
        model.set_now("now: ready")
        model.set_now(None)
        assert model.rowCount() == len(job.events)


def test_a_job_whose_holder_stopped_renewing_says_so_in_the_timeline_and_the_queue(
    qtbot: Any, data_dir: Path, clock: FakeClock
) -> None:
    """A `work` process stopped past its lease kept its job, which read only "running 63 s"."""
    from desktop_queue.ui.controller import Controller

    queue = Queue.open(data_dir, {"demo": DemoProvider()}, clock=clock)
    controller = Controller(queue, queue.providers, refresh_ms=40, tick_ms=40)
    window = MainWindow(controller)
    controller.setParent(window)
    qtbot.addWidget(window)
    controller.start(lease=False)
    window.show()
    try:
        job_id = queue.submit("demo", {"prompt": "slow"}, title="held").job.id
        lease = queue.lease("render-box:4123", lease_s=30)
        assert lease is not None and lease.job_id == job_id
        show(qtbot, window, job_id)
        assert not str(now_row(window)[0]).startswith("now:") and next_run(window, job_id) == "running 0.0 s"
        clock.advance(63)
        expected = (
            "now: lease 33 s overdue: render-box (pid 4123) has not renewed it (stopped, or asleep?). "
            "The job waits for that process and runs again only once it has ended: its answer is not paid for twice."
        )
        qtbot.waitUntil(lambda: now_row(window)[0] == expected, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: next_run(window, job_id) == "running 63 s, lease 33 s overdue", timeout=WAIT_MS)
    finally:
        window.close()
        queue.close()
