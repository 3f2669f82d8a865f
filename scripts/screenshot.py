"""Saves ``resources/screenshot.png``: the window, offscreen, with demo jobs in every state.

Beside it, ``result-text.png`` and ``result-image.png``: the Result view of a chat
answer (Markdown rendered) and of a generated image (an ``openai.image`` job whose
result is an image artifact, painted here).

Usage: ``QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/screenshot.py [OUTPUT] [--dark]``
(it sets the offscreen platform itself when none is given). Uses a temp data dir and
temp QSettings, never the user's. ``--dark`` renders the window with a dark palette,
as a desktop in dark mode would, to check that everything stays readable.
"""

from __future__ import annotations

import base64
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


ANSWER = """# Release notes — version 2.4

**Highlights**

- *Results in the window*: every answer, image and audio file can be read, looked at
  and played where the job is, with **Copy** and **Save as…**.
- Job **details**: the prompt, the model, tokens used and what it cost.
- `desktop-queue result ID` prints an answer, or writes an image with `--output`.

## Fixes

1. A long prompt is no longer cut at 32,767 characters.
2. The timeline keeps its place when a job finishes.

> Thanks to everyone who sent a crash report: none of your jobs were lost.
"""


def painted_image() -> bytes:
    """A PNG of a lighthouse at dusk (what an image model might answer), painted with QPainter."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QImage, QLinearGradient, QPainter, QPolygonF

    w, h = 1024, 768
    image = QImage(w, h, QImage.Format.Format_RGB32)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    sky = QLinearGradient(0, 0, 0, h * 0.62)
    for stop, colour in ((0.0, "#1d1f4a"), (0.55, "#8a3f6b"), (1.0, "#f29e4c")):
        sky.setColorAt(stop, QColor(colour))
    p.fillRect(QRectF(0, 0, w, h * 0.62), sky)
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor("#ffd27a"))
    p.drawEllipse(QPointF(w * 0.28, h * 0.6), 70, 70)
    sea = QLinearGradient(0, h * 0.62, 0, h)
    sea.setColorAt(0.0, QColor("#35406e"))
    sea.setColorAt(1.0, QColor("#0c1230"))
    p.fillRect(QRectF(0, h * 0.62, w, h * 0.38), sea)
    p.setBrush(QColor("#1a1726"))
    p.drawPolygon(
        QPolygonF([QPointF(560, h * 0.64), QPointF(960, h * 0.64), QPointF(1024, h * 0.72), QPointF(500, h * 0.72)])
    )
    beam = QColor(255, 236, 170, 70)
    p.setBrush(beam)
    p.drawPolygon(QPolygonF([QPointF(735, 250), QPointF(140, 120), QPointF(160, 330)]))
    p.setBrush(QColor("#efe7da"))
    p.drawPolygon(QPolygonF([QPointF(700, h * 0.64), QPointF(770, h * 0.64), QPointF(755, 280), QPointF(715, 280)]))
    p.setBrush(QColor("#b8323a"))
    for y in (330, 410, 490):
        p.drawRect(QRectF(700, y, 70, 24))
    p.setBrush(QColor("#ffe9a8"))
    p.drawRect(QRectF(712, 236, 46, 44))
    p.setBrush(QColor("#2a2733"))
    p.drawPolygon(QPolygonF([QPointF(705, 236), QPointF(765, 236), QPointF(735, 205)]))
    p.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data.data())


def wait_for(app: object, condition: object, timeout_s: float = 10.0) -> None:
    """Runs the event loop until ``condition()`` holds (a script may sleep; tests may not)."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        app.processEvents()  # type: ignore[attr-defined]
        time.sleep(0.01)


def main(output: Path, dark: bool = False, results_dir: Path | None = None) -> int:
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
    texts = (
        "Queue your prompts, close the lid, and find every answer waiting: Desktop Queue never loses a job.",
        ANSWER,
        "A white lighthouse with red bands on a dark cliff, its beam crossing a violet dusk sky over the sea.",
    )
    for i, title in enumerate(("Product blurb, short", "Release notes draft", "Alt text for hero image")):
        done.append(submit(title, 1700 - 40 * i))
        result = {"text": texts[i], "model": "gpt-4o-mini", "finish_reason": "stop", "provider": "demo"}
        run(done[-1], Outcome.success(result), 1690 - 40 * i, took=6.5 + 3 * i)
    at(1500)
    image_job = q.submit(
        "openai.image",
        {"prompt": "a lighthouse at dusk, red bands, violet sky", "size": "1024x768"},
        title="Image: lighthouse at dusk, hero",
    ).job.id
    png = painted_image()
    run(
        image_job,
        Outcome.success(
            {
                "artifact_b64": base64.b64encode(png).decode("ascii"),
                "artifact_name": "lighthouse.png",
                "mime": "image/png",
                "model": "gpt-image-1",
                "source": "b64",
                "provider": "openai.image",
            }
        ),
        1495,
        took=14.0,
    )
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
    if results_dir is not None:
        from desktop_queue.ui.job_tabs import RESULT_TAB

        view = window.job_tabs.result_view
        window.job_tabs.setCurrentIndex(RESULT_TAB)
        shown: list[str] = []
        view.shown.connect(shown.append)
        for job_id, name in ((done[1], "result-text.png"), (image_job, "result-image.png")):
            window.show_job(job_id)
            wait_for(app, lambda j=job_id: j in shown)
            app.processEvents()
            shot = window.grab()
            target = results_dir / name
            ok = shot.save(str(target), "PNG") and ok
            print(f"saved {target} ({shot.width()}x{shot.height()}): {view.content.message if view.content else '?'}")
    session.close()
    return 0 if ok else 1


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--dark"]
    out = Path(args[0]) if args else ROOT / "resources" / "screenshot.png"
    sys.exit(main(out, dark="--dark" in sys.argv[1:], results_dir=out.parent))
