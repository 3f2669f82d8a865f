"""The status bar reads the shared flow state when jobs change, not on every refresh tick.

On PostgreSQL each read of it is a transaction; an idle window read it four times a
second for a line that had not changed.
"""

from __future__ import annotations

from typing import Any


def test_an_idle_window_reads_the_flow_state_once_until_jobs_change(session: Any, qtbot: Any) -> None:
    window = session.window
    window.FLOW_STATUS_S = 3600.0  # (only a job change may ask again within this test)
    calls = {"status": 0, "flow": 0}
    background_status = window.controller.background_status

    def counted_flow() -> str | None:
        calls["flow"] += 1
        return background_status()

    window.controller.background_status = counted_flow
    window.controller.refresher.refreshed.connect(lambda *_: calls.__setitem__("status", calls["status"] + 1))
    qtbot.waitUntil(lambda: calls["status"] >= 1, timeout=10_000)
    first = calls["flow"]
    qtbot.waitUntil(lambda: calls["status"] >= 6, timeout=10_000)
    assert calls["flow"] == first <= 1  # five more ticks, nothing changed: not read again

    session.queue.submit("demo", {"prompt": "a change", "duration_s": 0})
    qtbot.waitUntil(lambda: calls["flow"] > first, timeout=10_000)  # a job changed: read again
