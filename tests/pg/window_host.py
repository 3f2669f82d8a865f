"""One "machine"'s window for the done-when test: the real app's window, driven over stdin/stdout.

Run as ``python tests/pg/window_host.py --data-dir D --store postgresql://... [--fallback-ms N]
[--geometry X,Y,W,H]``, in a namespace of its own. It builds the window exactly as
``desktop-queue gui`` does (:func:`desktop_queue.app.start`: the providers, flow control,
the lease driver, the change feed), shows it (offscreen, or on a display), and then:

* writes one JSON line to stdout per thing the test waits for: ``ready`` (host, pid),
  ``app_state`` (whether the application is in front: the window reads the store when
  it comes to the front, so the test lets that happen first), and
  ``state`` each time a job's row in the window's queue model shows a new state (with
  ``by_feed``: whether the refresh that showed it read a change the change feed told
  of, and the watcher's counters);
* reads one JSON command per line from stdin, run on the GUI thread through the window's
  own paths: ``pause`` / ``resume`` (the toolbar's actions), ``submit`` (the controller's
  verb, as the Submit dialog calls it), ``timeline`` (the queue pane selects the job and
  the timeline pane shows it, as a click does: its heading and rows are written back),
  ``quit``.

Nothing here is imported by the package: it is the test's hand on a real window.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import QApplication


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class Bridge(QObject):
    """Carries the stdin thread's commands to the GUI thread (queued), and runs them there.

    Signals:
        command(object): one decoded command line.
    """

    command = Signal(object)

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session
        self.window = session.window
        self.controller = session.controller
        self.shown: dict[str, str] = {}
        self.command.connect(self.run, Qt.ConnectionType.QueuedConnection)
        self.controller.refresher.jobs_changed.connect(self.jobs_changed)

    @Slot(object)
    def jobs_changed(self, ids: set[str] | None) -> None:
        model = self.controller.queue_model
        refresher = self.controller.refresher
        for job_id in sorted(ids) if ids is not None else [model.job_at(r)["id"] for r in range(model.rowCount())]:
            row = model.row_of(job_id)
            if row is None:
                continue
            state = str(model.job_at(row)["state"])
            if self.shown.get(job_id) != state:
                self.shown[job_id] = state
                emit(
                    event="state",
                    id=job_id,
                    state=state,
                    t=time.time(),
                    fed=refresher.fed_refreshes,
                    following=refresher.following,
                    watcher_reads=refresher.watcher.reads if refresher.watcher is not None else None,
                    by_feed=refresher.last_fed,
                )

    @Slot(object)
    def run(self, cmd: dict[str, Any]) -> None:
        from desktop_queue.ui.commands import Command

        what = cmd.get("cmd")
        try:
            if what in ("pause", "resume"):
                self.window.action(Command.PAUSE if what == "pause" else Command.RESUME).trigger()
                emit(event=what, paused=self.controller.driver.paused)
            elif what == "submit":
                result = self.controller.submit(
                    cmd["kind"], cmd["input"], title=cmd.get("title"), priority="interactive", max_attempts=3
                )
                emit(event="submitted", id=result.job.id, t=time.time())
            elif what == "timeline":
                self.window.show_job(cmd["id"])
                model = self.window.timeline_model
                rows = [
                    str(model.data(model.index(r, 0), Qt.ItemDataRole.DisplayRole)) for r in range(model.rowCount())
                ]
                emit(event="timeline", id=cmd["id"], heading=self.window.timeline_pane.heading.text(), rows=rows)
            elif what == "quit":
                QApplication.instance().quit()  # type: ignore[union-attr]
            else:
                emit(event="error", message=f"unknown command {what!r}")
        except Exception as exc:  # (the test reads it; the window goes on)
            emit(event="error", message=f"{type(exc).__name__}: {exc}")


def _read_stdin(bridge: Bridge) -> None:
    for line in sys.stdin:
        if line.strip():
            bridge.command.emit(json.loads(line))
    bridge.command.emit({"cmd": "quit"})  # (the test went away: close)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--fallback-ms", type=int, default=None)
    parser.add_argument("--geometry", default=None, help="X,Y,W,H of the window")
    args = parser.parse_args()

    import os
    import socket

    from desktop_queue.app import configure_application, start
    from desktop_queue.runtime import qtcompat

    qtcompat.install()
    app = QApplication(sys.argv[:1])
    configure_application(app)
    extra = {} if args.fallback_ms is None else {"fallback_ms": args.fallback_ms}
    session = start(args.data_dir, store=args.store, **extra)
    if isinstance(session, int):
        emit(event="failed", code=session)
        return session
    session.window.shutdown_timeout_ms = 3000
    if args.geometry:
        x, y, w, h = (int(v) for v in args.geometry.split(","))
        session.window.setGeometry(x, y, w, h)
    session.window.show()
    bridge = Bridge(session)
    threading.Thread(target=_read_stdin, args=(bridge,), daemon=True).start()
    # (the window in front reads the store once more: the test waits for that before it
    # submits, so that what it sees next came by the change feed)
    app.applicationStateChanged.connect(
        lambda state: emit(event="app_state", active=state == Qt.ApplicationState.ApplicationActive)
    )
    session.window.activateWindow()
    emit(event="ready", host=socket.gethostname(), pid=os.getpid())
    emit(event="app_state", active=QApplication.applicationState() == Qt.ApplicationState.ApplicationActive)
    try:
        code = app.exec()
    finally:
        session.close()
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
