"""Saves ``resources/screenshot.png``: the window, offscreen, with demo jobs in every state.

Usage: ``QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/screenshot.py [OUTPUT]``
(it sets the offscreen platform itself when none is given). Uses a temp data dir and
temp QSettings, never the user's.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent


def main(output: Path) -> int:
    from PySide6.QtCore import QSettings, QSize
    from PySide6.QtWidgets import QApplication

    from desktop_queue.app import configure_application, start
    from desktop_queue.core import Outcome, Queue
    from desktop_queue.providers import discover

    tmp = Path(tempfile.mkdtemp(prefix="dq-shot-"))
    for fmt in (QSettings.Format.IniFormat, QSettings.Format.NativeFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(tmp / "settings"))
    app = QApplication(sys.argv[:1])
    configure_application(app)
    app.setStyle("Fusion")
    data = tmp / "data"
    providers = discover()

    # an orphan left by a "crash": the window reconciles it at start-up and says so
    with Queue.open(data, providers) as q:
        orphan = q.submit("demo", {"prompt": "storyboard, scene 4", "duration_s": 3}, title="Storyboard, scene 4").job.id
        q.lease("laptop:4711")

    session = start(data, providers, lease=False)
    assert not isinstance(session, int), "could not open the window"
    window = session.window
    q = Queue.open(data, providers)  # a second handle, like the CLI: not first, no reconciliation

    def submit(title: str, **payload: object) -> str:
        return q.submit("demo", {"prompt": title, "duration_s": 2, **payload}, title=title).job.id

    def run(job_id: str, outcome: Outcome | None) -> None:
        while True:
            lease = q.lease("desktop:1234")
            assert lease is not None
            if lease.job_id == job_id:
                break
            q.release(lease, "screenshot set-up")
        if outcome is None:
            return
        if outcome.ok:
            q.complete(lease, outcome.result)
        else:
            q.fail(lease, outcome)

    done = [submit(t) for t in ("Product blurb, short", "Release notes draft", "Alt text for hero image")]
    for job_id in done:
        run(job_id, Outcome.success({"text": "…"}))
    dead = submit("Translate FAQ to German", fail_times=1, fail_with="fatal")
    run(dead, Outcome.failure("fatal", "demo: simulated invalid request (400)", status=400))
    dead2 = submit("Summarise meeting notes", fail_times=1, fail_with="fatal")
    run(dead2, Outcome.failure("fatal", "demo: simulated HTTP 422", status=422))
    retrying = submit("Podcast intro voice-over", fail_times=2)
    run(retrying, Outcome.failure("retryable", "demo: simulated connection reset", retry_after=42))
    throttled = submit("Image: lighthouse at dusk", fail_times=1, fail_with="throttled")
    run(throttled, Outcome.failure("throttled", "demo: simulated rate limit (429)", status=429, retry_after=25))
    running = submit("Chapter 3 outline", duration_s=20)
    run(running, None)
    cancelled = submit("Cover letter variant B")
    q.cancel(cancelled)
    replay = q.replay(done[0], {"prompt": "Product blurb, short — friendlier tone", "duration_s": 2}).id
    run(replay, Outcome.success({"text": "…"}))
    submit("Newsletter subject lines")
    submit("Blog post: queues explained", duration_s=5)
    q.close()

    window.resize(QSize(1480, 800))
    window.splitter.setSizes([960, 520])
    window.show()
    session.controller.refresher.refresh()
    window._update_status()  # noqa: SLF001 - the status bar would catch up on the next tick
    window.show_job(replay)
    app.processEvents()
    pixmap = window.grab()
    output.parent.mkdir(parents=True, exist_ok=True)
    ok = pixmap.save(str(output), "PNG")
    print(f"saved {output} ({pixmap.width()}x{pixmap.height()}), orphan {orphan} reconciled")
    session.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "resources" / "screenshot.png"))
