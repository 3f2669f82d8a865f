"""Saves ``resources/screenshot.png``: the window, offscreen, with demo jobs in every state.

Usage: ``QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/screenshot.py [OUTPUT] [--dark]``
(it sets the offscreen platform itself when none is given). Uses a temp data dir and
temp QSettings, never the user's. ``--dark`` renders the window with a dark palette,
as a desktop in dark mode would, to check that everything stays readable.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtGui import QPalette

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent


def dark_palette() -> QPalette:
    """A dark palette like the one Fusion uses when the desktop is in dark mode."""
    from PySide6.QtGui import QColor, QPalette

    role = QPalette.ColorRole
    palette = QPalette()
    colours = {
        role.Window: "#2b2b2e",
        role.WindowText: "#e6e6e6",
        role.Base: "#1e1e20",
        role.AlternateBase: "#26262a",
        role.ToolTipBase: "#3a3a3e",
        role.ToolTipText: "#e6e6e6",
        role.Text: "#e6e6e6",
        role.Button: "#333337",
        role.ButtonText: "#e6e6e6",
        role.BrightText: "#ffffff",
        role.Light: "#505055",
        role.Midlight: "#3f3f44",
        role.Mid: "#6a6a70",
        role.Dark: "#1a1a1c",
        role.Shadow: "#000000",
        role.Highlight: "#2f6fbf",
        role.HighlightedText: "#ffffff",
        role.Link: "#7fb3ff",
        role.LinkVisited: "#c39bff",
        role.PlaceholderText: "#9a9aa0",
    }
    for colour_role, value in colours.items():
        palette.setColor(colour_role, QColor(value))
    for colour_role in (role.Text, role.WindowText, role.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, colour_role, QColor("#7a7a80"))
    return palette


def main(output: Path, dark: bool = False) -> int:
    from PySide6.QtCore import QSettings, QSize
    from PySide6.QtWidgets import QApplication

    from desktop_queue.app import configure_application, start
    from desktop_queue.core import Outcome, Queue
    from desktop_queue.core.clock import FakeClock
    from desktop_queue.providers import discover

    tmp = Path(tempfile.mkdtemp(prefix="dq-shot-"))
    for fmt in (QSettings.Format.IniFormat, QSettings.Format.NativeFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(tmp / "settings"))
    app = QApplication(sys.argv[:1])
    configure_application(app)
    app.setStyle("Fusion")
    if dark:
        app.setPalette(dark_palette())
    data = tmp / "data"
    providers = discover()
    # the jobs' history is written on a clock that ends just before the real "now", so
    # waits, run times and "retrying in …" read like a real half hour of work
    real_now = time.time()
    clock = FakeClock(real_now - 1800)

    def at(seconds_ago: float) -> None:
        clock.advance(max(0.0, real_now - seconds_ago - clock.now()))

    # an orphan left by a "crash": the window reconciles it at start-up and says so
    with Queue.open(data, providers, clock=clock) as q:
        orphan = q.submit(
            "demo", {"prompt": "storyboard, scene 4", "duration_s": 3}, title="Storyboard, scene 4"
        ).job.id
        at(1790)
        q.lease("laptop:4711")

    session = start(data, providers, lease=False)
    assert not isinstance(session, int), "could not open the window"
    window = session.window
    # a second handle, like the CLI: not first, no reconciliation
    q = Queue.open(data, providers, clock=clock)

    def submit(title: str, seconds_ago: float, **payload: object) -> str:
        at(seconds_ago)
        return q.submit("demo", {"prompt": title, "duration_s": 2, **payload}, title=title).job.id

    def run(job_id: str, outcome: Outcome | None, started_ago: float, took: float = 0.0) -> None:
        at(started_ago)
        while True:
            lease = q.lease("desktop:1234")
            assert lease is not None
            if lease.job_id == job_id:
                break
            q.release(lease, "screenshot set-up")
        if outcome is None:
            return
        at(started_ago - took)
        if outcome.ok:
            q.complete(lease, outcome.result)
        else:
            q.fail(lease, outcome)

    done = []
    for i, title in enumerate(("Product blurb, short", "Release notes draft", "Alt text for hero image")):
        done.append(submit(title, 1700 - 40 * i))
        run(done[-1], Outcome.success({"text": "…"}), 1690 - 40 * i, took=6.5 + 3 * i)
    dead = submit("Translate FAQ to German", 1400, fail_times=1, fail_with="fatal")
    run(dead, Outcome.failure("fatal", "demo: simulated invalid request (400)", status=400), 1395, took=1.2)
    dead2 = submit("Summarise meeting notes", 1300, fail_times=1, fail_with="fatal")
    run(dead2, Outcome.failure("fatal", "demo: simulated HTTP 422", status=422), 1290, took=0.8)
    cancelled = submit("Cover letter variant B", 1100)
    at(1000)
    q.cancel(cancelled)
    at(700)
    replay = q.replay(done[0], {"prompt": "Product blurb, short — friendlier tone", "duration_s": 2}).id
    run(replay, Outcome.success({"text": "…"}), 695, took=4.1)
    retrying = submit("Podcast intro voice-over", 240, fail_times=3)
    run(retrying, Outcome.failure("retryable", "demo: simulated connection reset"), 235, took=2.0)
    # retry_after reaches past the real "now": the pane says "retrying in …", and the set-up
    # leases below do not pick this job up again
    run(retrying, Outcome.failure("retryable", "demo: simulated HTTP 503", status=503, retry_after=240), 200, took=2.0)
    throttled = submit("Image: lighthouse at dusk", 90, fail_times=1, fail_with="throttled")
    run(
        throttled,
        Outcome.failure("throttled", "demo: simulated rate limit (429)", status=429, retry_after=85),
        60,
        took=0.5,
    )
    running = submit("Chapter 3 outline", 50, duration_s=20)
    run(running, None, 14)
    submit("Newsletter subject lines", 30)
    submit("Blog post: queues explained", 12, duration_s=5)
    q.close()

    window.resize(QSize(1640, 820))
    window.splitter.setSizes([1090, 550])
    window.show()
    session.controller.refresher.refresh()
    window._update_status()  # noqa: SLF001 - the status bar would catch up on the next tick
    window.show_job(retrying)
    app.processEvents()
    pixmap = window.grab()
    output.parent.mkdir(parents=True, exist_ok=True)
    ok = pixmap.save(str(output), "PNG")
    print(f"saved {output} ({pixmap.width()}x{pixmap.height()}), orphan {orphan} reconciled")
    session.close()
    return 0 if ok else 1


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--dark"]
    sys.exit(main(Path(args[0]) if args else ROOT / "resources" / "screenshot.png", dark="--dark" in sys.argv[1:]))
