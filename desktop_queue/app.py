"""Start-up of the window: paths, single-instance lock, reconciliation, main window.

Order matters: the store is opened (and, by the first process, its orphans reconciled)
before the lease driver leases anything; then the window shows what start-up found in
a non-blocking banner. Store errors become a clear message box, never a traceback.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QApplication

from desktop_queue import qtload  # noqa: F401  (before the modules below: PySide6 reads none of them then)
from desktop_queue.core import Queue, QueueError, StoreError
from desktop_queue.core.backend import STORE_ENV, store_options
from desktop_queue.core.findings import Finding, FindingsLog, describe
from desktop_queue.core.ledger import Budget
from desktop_queue.core.liveness import holder_alive, this_process
from desktop_queue.core.migrate import describe as describe_store
from desktop_queue.core.paths import data_dir as resolve_data_dir
from desktop_queue.core.present import reconciliation_summary
from desktop_queue.core.store.fileio import FileLock
from desktop_queue.runtime import heap, qtcompat
from desktop_queue.ui import dialogs
from desktop_queue.ui.activation import ActivationServer, ask_running_window
from desktop_queue.ui.controller import Controller
from desktop_queue.ui.display import display_problem
from desktop_queue.ui.main_window import MainWindow
from desktop_queue.ui.models.refresh import FALLBACK_MS
from desktop_queue.ui.settings import (
    APPLICATION,
    ORGANIZATION,
    load_preferences,
    load_profiles_migrating,
    load_store,
)

log = logging.getLogger(__name__)

#: held by the window for as long as it runs (CLI commands and ``work`` ignore it)
GUI_LOCK_NAME = "gui.lock"
#: the exit code after SIGINT or SIGTERM closed the window (as ``work`` exits when interrupted)
EXIT_INTERRUPTED = 130
#: the exit code when the window cannot open here (no display, a missing system library)
EXIT_NO_WINDOW = 1
#: how long a second start waits for a window that does not answer to close: one that is
#: quitting gives its attempts up to 5 s to stop, then closes the store
CLOSING_WAIT_S = 10.0
#: set by :func:`relaunch` to the window process it replaces (``host/pid/start``)
RESTART_ENV = "DESKTOP_QUEUE_RESTART_OF"


class AlreadyRunning(Exception):
    """Another window already uses this data directory."""


class InstanceLock:
    """One window per data directory: a non-blocking OS lock on ``<data dir>/gui.lock``.

    The OS drops the lock when the process dies, so a crash never leaves it stuck.

    Args:
        directory: the data directory.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / GUI_LOCK_NAME
        self._lock: FileLock | None = None

    def acquire(self) -> None:
        """Takes the lock. Raises :class:`AlreadyRunning` if another window holds it."""
        lock = FileLock(self.path)
        if not lock.acquire(exclusive=True, blocking=False):
            lock.close()
            raise AlreadyRunning(str(self.path.parent))
        self._lock = lock

    def acquire_within(self, seconds: float) -> bool:
        """Takes the lock once its holder lets it go, trying for ``seconds``; False if it does not."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.1)
            try:
                self.acquire()
            except AlreadyRunning:
                continue
            return True
        return False

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock.close()
            self._lock = None


@dataclass
class Session:
    """A running window and everything it holds (closed in reverse order)."""

    window: MainWindow
    controller: Controller
    queue: Queue
    lock: InstanceLock
    banner: list[str] = field(default_factory=list)
    #: where a second start on this data directory asks the window to show itself
    activation: ActivationServer | None = None

    def close(self) -> None:
        """Closes the window if open, stops the driver, closes the store, drops the lock."""
        if self.activation is not None:
            self.activation.close()
        self.window.close()
        self.controller.shutdown(self.window.shutdown_timeout_ms)
        self.queue.close()
        self.lock.release()


def configure_application(app: QApplication) -> None:
    """Names the application so QSettings use the platform's usual place."""
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName(APPLICATION)
    app.setDesktopFileName("desktop-queue")


def unseen_findings(queue: Queue) -> list[Finding]:
    """The reconciliation findings no window has shown yet (none if they cannot be read)."""
    try:
        return FindingsLog(queue.data_dir).unseen()
    except OSError as exc:
        log.warning("reconciliation findings unreadable: %s", type(exc).__name__)
        return []


def reconciliation_lines(queue: Queue, findings: list[Finding]) -> list[str]:
    if not findings and queue.reconciled:  # found here, but not recorded (the notices say why)
        lines = [reconciliation_summary([r.decision for r in queue.reconciled]) + "."]
        lines += [f"• {item.title} (job {item.job_id}): {item.reason}" for item in queue.reconciled[:5]]
        if len(queue.reconciled) > 5:
            lines.append(f"• … and {len(queue.reconciled) - 5} more (see each job's timeline)")
        return lines
    titles = {}
    for finding in findings[:5]:
        try:
            titles[finding.job_id] = queue.get(finding.job_id).title
        except QueueError:  # purged since
            pass
    return describe(findings, titles, os.getpid(), time.time())


def chosen_store(store: str | None = None) -> str:
    """The store the window opens: ``--store``, else ``$DESKTOP_QUEUE_STORE``, else Preferences' Store
    (with its password from the OS keyring); "" is the data directory's JSON store."""
    if store is not None and store.strip():
        return store.strip()
    return os.environ.get(STORE_ENV, "").strip() or load_store()


def start(
    data_dir: str | Path | None = None,
    providers: Mapping[str, Any] | None = None,
    *,
    store: str | None = None,
    lease: bool = True,
    refresh_ms: int = 300,
    tick_ms: int = 250,
    live: bool = True,
    fallback_ms: int = FALLBACK_MS,
) -> Session | int:
    """Opens the data directory and the window (not yet shown); an exit code if it cannot.

    Args:
        data_dir: ``--data-dir`` (else ``DESKTOP_QUEUE_DATA_DIR``, else the user data dir).
        providers: kind -> provider (default: every installed provider, the OpenAI-compatible
            kinds configured from Preferences, under flow control).
        store: ``--store`` (a ``postgresql://`` URL; see :func:`chosen_store`).
        lease: start the lease driver (the screenshot script keeps it off).
        refresh_ms: the views' refresh interval.
        tick_ms: the lease driver's tick.
        live: the window learns of changes from the store's change feed (on PostgreSQL
            ``LISTEN/NOTIFY``), read on a thread of its own; its refresh timer then asks
            the store nothing (see :mod:`desktop_queue.ui.models.refresh`).
        fallback_ms: live: how often the window reads the store all the same (a safety net).
    """
    qtcompat.install()
    path = resolve_data_dir(data_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        dialogs.show_error(
            None, "Desktop Queue cannot start", f"The data directory {path} cannot be created: {exc.strerror or exc}."
        )
        return 1
    lock = InstanceLock(path)
    try:
        lock.acquire()
    except AlreadyRunning:
        if ask_running_window(path):
            print(f"Desktop Queue is already open on {path}: its window was brought to the front.", file=sys.stderr)
            return 0
        # a window that does not answer may be quitting (Quit, then a start at once): wait
        # for it to let go before saying another window is open
        print(f"Waiting for the Desktop Queue window on {path} to close…", file=sys.stderr)
        if not lock.acquire_within(CLOSING_WAIT_S):
            dialogs.show_error(
                None,
                "Desktop Queue is already open",
                f"Another Desktop Queue window is already using\n{path}\n"
                "and did not come to the front when asked (it may be busy).\n\n"
                "Switch to that window, or start this one with another --data-dir.\n"
                "(Command-line tools and desktop-queue work can share the directory.)",
            )
            return 1
    except OSError as exc:
        dialogs.show_error(None, "Desktop Queue cannot start", f"{path} is not usable: {exc.strerror or exc}.")
        return 1
    previous = os.environ.pop(RESTART_ENV, None)
    if previous and not outlived(previous, CLOSING_WAIT_S):
        log.warning("the window this one replaces is still running; its jobs wait for their leases to expire")
    location = chosen_store(store)
    where = f"PostgreSQL store: {describe_store(location)}" if location else f"Data directory: {path}"
    try:
        options = store_options(location)
    except (StoreError, ValueError) as exc:
        lock.release()
        dialogs.show_error(None, "The job store cannot be opened", f"{exc}\n\nNothing was changed or deleted. {where}")
        return 1
    flow = None
    budgets: dict[str, Budget] = {}
    profiles = None
    profile_notices: list[str] = []
    if providers is None:
        from desktop_queue.providers.profiles import ProfileFileError
        from desktop_queue.providers.setup import build

        try:
            profiles = load_profiles_migrating()
        except ProfileFileError as exc:  # a newer version's file: left alone, the environment is used
            from desktop_queue.providers.profiles import environment_profile

            profiles = environment_profile()
            profile_notices.append(f"{exc}. Provider profiles come from the environment for now.")
        profile_notices.extend(profiles.notices)
        # on PostgreSQL the limits, breakers and spend ledger are the database's, shared by every machine
        providers, flow = build(profiles, data_dir=path, backend=options.get("backend"))
        budgets = {p.name: p.budget() for p in profiles.profiles}
    try:
        # the first opener reconciles orphans here, before any lease
        queue = Queue.open(path, providers, **options)
    except (StoreError, ValueError) as exc:
        lock.release()
        dialogs.show_error(
            None,
            "The job store cannot be opened",
            f"{exc}\n\nNothing was changed or deleted. {where}",
        )
        return 1
    except QueueError as exc:
        lock.release()
        dialogs.show_error(None, "Desktop Queue cannot start", str(exc))
        return 1
    try:
        purged, files = queue.apply_retention()  # a no-op unless a policy was set (`desktop-queue retention`)
        if purged or files:
            log.info("retention removed %d finished jobs and %d damaged files", purged, files)
    except QueueError as exc:
        log.warning("retention not applied: %s", exc)
    prefs = load_preferences()
    controller = Controller(
        queue,
        providers,
        concurrency=prefs.concurrency,
        refresh_ms=refresh_ms,
        tick_ms=tick_ms,
        flow=flow,
        budgets=budgets,
        attempt_timeout_s=prefs.attempt_timeout_s,
        profiles=profiles,
        live=live,
        fallback_ms=fallback_ms,
    )
    if profiles is not None and profiles.path is not None:
        controller.watch_profiles(profiles.path)  # `desktop-queue profile add` reaches this window too
    findings = unseen_findings(queue)
    lines = reconciliation_lines(queue, findings) + queue.report.notices + profile_notices
    window = MainWindow(controller, lines)
    if findings:
        try:
            FindingsLog(queue.data_dir).mark_seen(findings)  # told once, by this window's banner
        except (OSError, StoreError) as exc:
            log.warning("could not remember the findings shown: %s", type(exc).__name__)
    controller.setParent(window)
    activation = ActivationServer(path, window)
    activation.asked.connect(window.bring_to_front)
    controller.start(lease=lease)
    return Session(window, controller, queue, lock, lines, activation)


def qt_at_least(major: int, minor: int) -> bool:
    """Whether the Qt library loaded (not the binding) is ``major.minor`` or later."""
    from PySide6.QtCore import qVersion

    found = tuple(int(part) for part in qVersion().split(".")[:2])
    return found >= (major, minor)


def xcb_plugin_path() -> str | None:
    """Where the Qt in use keeps its X11 platform plugin, if it has one (Linux and BSD builds)."""
    from PySide6.QtCore import QLibraryInfo

    path = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms" / "libqxcb.so"
    return str(path) if path.is_file() else None


def main(data_dir: str | None = None, store: str | None = None) -> int:
    """Runs the window (on ``store``: see :func:`chosen_store`) until it is closed; the process exit code."""
    qtcompat.install()
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        problem = display_problem(
            os.environ, sys.platform, needs_xcb_cursor=qt_at_least(6, 5), xcb_plugin=xcb_plugin_path()
        )
        if problem is not None:  # Qt would print its plugin lines and abort the process
            print(f"desktop-queue: {problem}", file=sys.stderr)
            return EXIT_NO_WINDOW
        app = QApplication(sys.argv[:1])
    configure_application(app)
    heap.start_giving_back(app)  # (the window stays open for days: what it frees goes back)
    session = start(data_dir, store=store)
    if isinstance(session, int):
        return session
    session.window.show()
    bridge = None
    if sys.platform != "win32":
        from desktop_queue.runtime.signals import SignalBridge

        # a logout, a shutdown or `kill` (SIGTERM), Ctrl+C where it was started (SIGINT): the
        # window quits as File → Quit does, without asking; running attempts are given back
        bridge = SignalBridge((signal.SIGINT, signal.SIGTERM), session.window.quit_now, app)
    try:
        code = app.exec()
    finally:
        if bridge is not None:
            bridge.close()
        session.close()
    if session.window.restart_requested and not session.window.quit_by_signal:
        relaunch()
    return EXIT_INTERRUPTED if session.window.quit_by_signal else int(code)


def relaunch() -> subprocess.Popen[bytes]:
    """Starts the window again with this process's command line (its data dir and store).

    Called once this window let go of the data dir (its lock, its activation server), so
    the new one neither finds it open nor is brought to it; it waits for the lock if this
    process has not quite ended (see :data:`CLOSING_WAIT_S`).
    """
    log.info("starting Desktop Queue again")
    return subprocess.Popen(
        [sys.executable, "-m", "desktop_queue", *sys.argv[1:]],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, RESTART_ENV: this_process()},
    )


def outlived(holder: str, within_s: float) -> bool:
    """Waits up to ``within_s`` for the process ``holder`` to end; whether it did.

    A restarted window opens the store only once the window it replaces has ended: the
    jobs that one held (an answer it kept for the store) are then settled at once, where
    a holder still alive would leave them running until their leases expired.
    """
    deadline = time.monotonic() + within_s
    while holder_alive(holder):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
