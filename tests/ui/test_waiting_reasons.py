"""Why a job waits, as the window says it: the drained notice, free slots, pause, and flow control's holds.

The window runs its own lease driver here (real pool, real store) on a :class:`FakeClock`
with a 600 s retry backoff, so a retried job stays in backoff until the test moves the
clock, and flow control runs on the same clock.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PySide6.QtCore import Qt, QThreadPool

from desktop_queue.core import FakeClock, Outcome, Queue, RetryPolicy, RunContext
from desktop_queue.core.flow import FlowControl, ProfileLimits
from desktop_queue.core.ledger import Budget, SpendLedger
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.controller import Controller
from desktop_queue.ui.main_window import MainWindow
from desktop_queue.ui.models import TimelineRole

WAIT_MS = 5000
NO_KEY = "no API key for profile openai: enter it in Preferences → Providers or set OPENAI_API_KEY"


class Blocking:
    """A kind whose attempts run until the test sets ``release`` (it fills the slots)."""

    kind = "blocking"
    version = "1"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.running = 0

    def validate(self, payload: Any) -> None:
        return None

    def run(self, job: Any, context: RunContext) -> Outcome:
        self.running += 1
        while not self.release.wait(0.01):
            if context.cancelled.is_set():
                break
        return Outcome.success({"text": "done"})

    def classify(self, error: BaseException) -> Outcome:
        return Outcome.failure("retryable", type(error).__name__)


class Chat:
    """Stands in for ``openai.chat``: never runs here; ``missing_key`` is its self-check."""

    kind = "openai.chat"
    version = "1"

    def __init__(self) -> None:
        self.missing_key = False
        self.profile = SimpleNamespace(name="openai")  # the profile its jobs run under

    def validate(self, payload: Any) -> None:
        return None

    def unavailable_reason(self) -> str | None:
        return NO_KEY if self.missing_key else None

    def run(self, job: Any, context: RunContext) -> Outcome:
        return Outcome.success({"text": "unused"})

    def classify(self, error: BaseException) -> Outcome:
        return Outcome.failure("retryable", type(error).__name__)


class Tray:
    """Records the notices the window would show in the system tray."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def showMessage(self, _title: str, text: str, *_args: Any) -> None:  # noqa: N802 - Qt API
        self.messages.append(text)

    def hide(self) -> None:
        return None


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def blocking() -> Iterator[Blocking]:
    provider = Blocking()
    yield provider
    provider.release.set()


@pytest.fixture
def open_window(
    qtbot: Any, data_dir: Path, clock: FakeClock, prompts: Any, blocking: Blocking
) -> Iterator[Callable[..., MainWindow]]:
    """Opens a leasing window; ``limits`` puts the ``openai`` profile under flow control."""
    opened: list[tuple[MainWindow, Queue]] = []

    def open_(
        *,
        concurrency: int = 4,
        limits: ProfileLimits | None = None,
        lease: bool = True,
        budgets: dict[str, Budget] | None = None,
    ) -> MainWindow:
        chat = Chat()
        providers = {"demo": DemoProvider(tick_s=0.01), "blocking": blocking, "openai.chat": chat}
        queue = Queue.open(
            data_dir, providers, clock=clock, policy=RetryPolicy(base_s=600.0, cap_s=600.0), rng=random.Random(3)
        )
        flow = None
        if limits is not None:
            flow = FlowControl({"openai": limits}, clock=clock, ledger=SpendLedger(data_dir, clock))
        controller = Controller(
            queue, providers, concurrency=concurrency, refresh_ms=40, tick_ms=40, flow=flow, budgets=budgets
        )
        window = MainWindow(controller)
        window.chat = chat  # type: ignore[attr-defined]
        window.notifier.use_tray(Tray())  # type: ignore[arg-type]
        controller.setParent(window)
        qtbot.addWidget(window)
        controller.start(lease=lease)
        window.show()
        opened.append((window, queue))
        return window

    yield open_
    blocking.release.set()
    for window, queue in opened:
        window.close()
        queue.close()
    assert QThreadPool.globalInstance().waitForDone(5000)


def next_run(window: MainWindow, job_id: str) -> str:
    """The queue pane's "next run" cell of a job."""
    model = window.controller.queue_model
    row = model.row_of(job_id)
    if row is None:
        return ""
    column = [c.key for c in model.columns].index("next")
    return str(model.index(row, column).data(Qt.ItemDataRole.DisplayRole))


def now_text(window: MainWindow) -> str | None:
    return window.timeline_model.now_text


def show(qtbot: Any, window: MainWindow, job_id: str) -> None:
    qtbot.waitUntil(lambda: window.controller.queue_model.row_of(job_id) is not None, timeout=WAIT_MS)
    assert window.show_job(job_id)
    qtbot.waitUntil(
        lambda: window.timeline_model.job is not None and window.timeline_model.job.id == job_id, timeout=WAIT_MS
    )


def indicator(window: MainWindow, profile: str = "openai") -> str:
    found = window.status.provider_items.get(profile)
    return "" if found is None else found[2].text()


# ---------------------------------------------------------------------- the drained notice


def test_the_drained_notice_waits_for_a_job_in_backoff(qtbot: Any, open_window: Any, clock: FakeClock) -> None:
    window = open_window()
    queue = window.controller.queue
    tray: Tray = window.notifier.tray
    job_id = queue.submit("demo", {"prompt": "flaky", "duration_s": 0, "fail_times": 1}).job.id
    # the first attempt fails: the job waits in a backoff of minutes, and the driver has nothing to run
    with qtbot.waitSignal(window.controller.driver.idle, timeout=WAIT_MS):
        pass
    qtbot.waitUntil(lambda: next_run(window, job_id).startswith("retrying in"), timeout=WAIT_MS)
    assert queue.get(job_id).state == "queued"
    assert tray.messages == []  # "nothing runnable now" is not "every job has finished"
    with qtbot.assertNotEmitted(window.drained, wait=300):
        window.controller.driver.idle.emit()  # said again: still not empty

    clock.advance(700)  # the backoff ends; the retry succeeds and only now is the queue empty
    with qtbot.waitSignal(window.drained, timeout=WAIT_MS) as drained:
        window.controller.driver.wake()
    assert queue.get(job_id).state == "succeeded"
    assert drained.args == ["The queue is empty: every job has finished."]
    assert tray.messages == drained.args
    with qtbot.assertNotEmitted(window.drained, wait=200):  # told once
        window.controller.driver.idle.emit()


def test_the_drained_notice_waits_for_a_job_running_in_another_process(qtbot: Any, open_window: Any) -> None:
    window = open_window()
    queue = window.controller.queue
    with qtbot.waitSignal(window.drained, timeout=WAIT_MS):
        queue.submit("demo", {"prompt": "here", "duration_s": 0})
    # a job leased by a worker that is not this window: the window's driver is idle, the queue is not empty
    other = queue.submit("openai.chat", {"prompt": "elsewhere"}).job.id
    window.controller.driver.pause()  # this window must not take it
    lease = queue.lease("elsewhere", kinds={"openai.chat"})
    assert lease is not None and lease.job_id == other
    window.controller.driver.resume()
    window._ran_something = True  # the window ran something since its last notice
    with qtbot.assertNotEmitted(window.drained, wait=300):
        window.controller.driver.idle.emit()
    queue.complete(lease, {"text": "ok"})
    # that worker finished: the refresh tick notices the queue is empty
    with qtbot.waitSignal(window.drained, timeout=WAIT_MS):
        pass


# ---------------------------------------------------------------------- free slots and pause


def test_a_job_waiting_for_a_free_slot_says_so_and_paused_says_paused(
    qtbot: Any, open_window: Any, blocking: Blocking
) -> None:
    window = open_window(concurrency=2)
    queue = window.controller.queue
    for n in range(2):
        queue.submit("blocking", {"n": n}, title=f"busy {n}")
    qtbot.waitUntil(lambda: window.controller.driver.running == 2, timeout=WAIT_MS)
    waiting = queue.submit("demo", {"prompt": "next", "duration_s": 0}, title="next").job.id
    show(qtbot, window, waiting)
    expected = "waiting: a free slot (2 of 2 running)"
    qtbot.waitUntil(lambda: now_text(window) == f"now: {expected}", timeout=WAIT_MS)
    assert next_run(window, waiting) == expected
    assert queue.get(waiting).attempts == 0

    window.controller.set_paused(True)
    qtbot.waitUntil(lambda: now_text(window) == "now: paused", timeout=WAIT_MS)
    assert next_run(window, waiting) == "paused"
    model = window.timeline_model
    assert model.index(model.rowCount() - 1).data(Qt.ItemDataRole.DecorationRole) is not None

    window.controller.set_paused(False)
    blocking.release.set()
    qtbot.waitUntil(lambda: queue.get(waiting).state == "succeeded", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: now_text(window) is None, timeout=WAIT_MS)


def test_a_kind_this_window_does_not_run_is_not_held_by_its_slots(qtbot: Any, open_window: Any) -> None:
    window = open_window(concurrency=1)
    queue = window.controller.queue
    queue.submit("blocking", {"n": 0})
    qtbot.waitUntil(lambda: window.controller.driver.running == 1, timeout=WAIT_MS)
    foreign = {
        "id": "x",
        "kind": "other.kind",
        "state": "queued",
        "run_after": 0.0,
        "attempts": 0,
        "total_attempts": 0,
        "priority": "interactive",
    }
    assert window.controller.hold_reason(foreign) is None


# ---------------------------------------------------------------------- flow control's holds


def test_no_api_key_shows_in_the_next_run_column_and_the_now_line(qtbot: Any, open_window: Any) -> None:
    window = open_window(limits=ProfileLimits())
    window.chat.missing_key = True
    queue = window.controller.queue
    job_id = queue.submit("openai.chat", {"prompt": "hello"}, title="chat").job.id
    show(qtbot, window, job_id)
    qtbot.waitUntil(lambda: now_text(window) == f"now: waiting: {NO_KEY}", timeout=WAIT_MS)
    assert next_run(window, job_id) == f"waiting: {NO_KEY}"
    model = window.controller.queue_model
    column = [c.key for c in model.columns].index("next")
    tip = model.index(model.row_of(job_id), column).data(Qt.ItemDataRole.ToolTipRole)
    assert tip == f"waiting: {NO_KEY}"  # the column elides; the tooltip has it whole
    assert window.timeline_model.index(window.timeline_model.rowCount() - 1).data(TimelineRole.CATEGORY) == "throttle"
    assert queue.get(job_id).attempts == 0
    qtbot.waitUntil(lambda: indicator(window) == "openai: no API key", timeout=WAIT_MS)
    assert window.status._provider_levels["openai"] == "slow"

    window.chat.missing_key = False  # the key was entered: it runs
    qtbot.waitUntil(lambda: queue.get(job_id).state == "succeeded", timeout=WAIT_MS)


def test_an_offline_profile_shows_in_the_job_and_the_indicator(qtbot: Any, open_window: Any) -> None:
    window = open_window(limits=ProfileLimits(), lease=False)
    flow = window.controller.flow
    queue = window.controller.queue
    # (interactive: a background job says its lane is paused, see test_degradation_ui.py)
    job_id = queue.submit("openai.chat", {"prompt": "hello"}, title="chat", priority="interactive").job.id
    show(qtbot, window, job_id)
    probe = {"id": "probe", "kind": "openai.chat", "input": {"prompt": "p"}, "state": "queued"}
    assert flow.accept(probe)
    flow.on_start(probe)
    flow.on_outcome(probe, Outcome.failure("retryable", "cannot connect (ConnectError)", unreachable=True))
    reason = "waiting: profile openai is offline (cannot connect (ConnectError))"
    qtbot.waitUntil(lambda: now_text(window) == f"now: {reason}", timeout=WAIT_MS)
    assert next_run(window, job_id) == reason
    qtbot.waitUntil(lambda: indicator(window) == "openai: offline (cannot connect (ConnectError))", timeout=WAIT_MS)
    assert window.status._provider_levels["openai"] == "down"
    model = window.timeline_model
    assert model.index(model.rowCount() - 1).data(Qt.ItemDataRole.DecorationRole) is not None

    with qtbot.waitSignal(window.provider_alert, timeout=WAIT_MS) as alert:
        window.controller.driver.drain_flow_events()
    assert "cannot be reached" in alert.args[1] and "ConnectError" in alert.args[1]


def test_a_reached_budget_shows_in_the_job_and_the_indicator(qtbot: Any, open_window: Any, clock: FakeClock) -> None:
    budget = Budget(usd_per_day=5.0)
    window = open_window(
        limits=ProfileLimits(budget=budget, model="gpt-4o-mini"), lease=False, budgets={"openai": budget}
    )
    flow = window.controller.flow
    queue = window.controller.queue
    qtbot.waitUntil(lambda: indicator(window) == "openai: ok", timeout=WAIT_MS)
    # the spend of an ok profile is in its tooltip (a status bar with several profiles has no room)
    qtbot.waitUntil(
        lambda: "$0.00 of $5.00 today" in window.status.provider_items["openai"][0].toolTip(), timeout=WAIT_MS
    )
    from desktop_queue.core.ledger import Usage

    flow.ledger.record(
        profile="openai",
        model="gpt-4o-mini",
        kind="openai.chat",
        usage=Usage(tokens_in=10),
        job_id="earlier",
        attempt=1,
        usd=4.6,
    )
    qtbot.waitUntil(lambda: indicator(window) == "openai: budget nearly reached, $4.60 of $5.00 today", timeout=WAIT_MS)
    assert window.status._provider_levels["openai"] == "slow"
    flow.ledger.record(
        profile="openai",
        model="gpt-4o-mini",
        kind="openai.chat",
        usage=Usage(tokens_in=10),
        job_id="earlier",
        attempt=2,
        usd=0.4,
    )
    job_id = queue.submit("openai.chat", {"prompt": "hello", "model": "gpt-4o-mini"}, title="chat").job.id
    show(qtbot, window, job_id)
    reason = "waiting: budget of profile openai reached, $5.00 of $5.00 today"
    qtbot.waitUntil(lambda: now_text(window) == f"now: {reason}", timeout=WAIT_MS)
    assert next_run(window, job_id) == reason
    qtbot.waitUntil(lambda: indicator(window) == "openai: budget reached, $5.00 of $5.00 today", timeout=WAIT_MS)
    assert window.status._provider_levels["openai"] == "down"
