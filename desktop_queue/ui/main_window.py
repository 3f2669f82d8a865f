"""The main window: queue and dead-letter panes, the selected job's side, menus and toolbar.

The actions come from :mod:`desktop_queue.ui.actions`, the status bar from
:mod:`desktop_queue.ui.status_bar`, the banner and notices from :mod:`desktop_queue.ui.notifier`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QIcon
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QMainWindow,
    QMenu,
    QSplitter,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core import SubmitResult
from desktop_queue.core.alerts import FIRED, Transition
from desktop_queue.core.flow import FlowEventType
from desktop_queue.core.model import State
from desktop_queue.core.outbox import Notice
from desktop_queue.core.paths import config_dir
from desktop_queue.core.present import RECENT_WINDOW_S, worker_name
from desktop_queue.core.schedules import JobTemplate
from desktop_queue.core.windowed import WindowedMetrics
from desktop_queue.core.wording import counted
from desktop_queue.ui import dialogs, help_menu
from desktop_queue.ui.actions import ActionRegistry, ActionState
from desktop_queue.ui.commands import Command, actions_for, applies_to
from desktop_queue.ui.controller import Controller
from desktop_queue.ui.history_actions import HistoryActions, HistoryCommand, history_actions_for
from desktop_queue.ui.icons import icon, lit_icon, state_icon
from desktop_queue.ui.job_tabs import JobTabs
from desktop_queue.ui.local_api import LocalApi
from desktop_queue.ui.models.metrics_model import MetricsSource
from desktop_queue.ui.notifier import Banner, Channel, Level, Notifier
from desktop_queue.ui.panes.alerts_pane import AlertRulesDialog, AlertsPane
from desktop_queue.ui.panes.dead_letter_pane import DeadLetterPane
from desktop_queue.ui.panes.metrics_pane import MetricsPane
from desktop_queue.ui.panes.queue_pane import QueuePane
from desktop_queue.ui.panes.schedules_pane import ScheduleDialog, SchedulesPane, fresh_input
from desktop_queue.ui.panes.timeline_pane import TimelinePane
from desktop_queue.ui.settings import (
    Preferences,
    clear_window_state,
    load_preferences,
    load_window_mapping,
    load_window_number,
    load_window_state,
    save_preferences,
    save_window_state,
)
from desktop_queue.ui.spend_view import SpendDialog
from desktop_queue.ui.status_bar import StatusBar
from desktop_queue.ui.timeline import LiveTimelineModel

log = logging.getLogger(__name__)


def _finished_text(finished: int, dead_n: int) -> str:
    """One notice for several finished jobs: "1,204 jobs finished; 3 dead-lettered: …"."""
    waits = f"{'it waits' if dead_n == 1 else 'they wait'} for you in Dead letters"
    if dead_n == finished:  # (a retry of dead letters that all failed again: none "finished")
        return f"{counted(dead_n, 'job')} dead-lettered: {waits}"
    return f"{counted(finished, 'job')} finished" + (f"; {dead_n:,} dead-lettered: {waits}" if dead_n else "")


#: the window's size on a first start (smaller when the screen is)
DEFAULT_SIZE = (1200, 720)
#: the default split between the job tables and the job side (the timeline wraps its lines)
DEFAULT_SPLITTER = [870, 330]
#: the least the job side asks of the splitter (its headings elide), and the tables' least
JOB_SIDE_MIN = 240
TABLE_SIDE_MIN = 300
#: the ``window/…`` keys that "Reset layout" forgets
LAYOUT_KEYS = (
    "geometry",
    "state",
    "splitter",
    "queue_header",
    "dead_header",
    "queue_header_columns",
    "dead_header_columns",
    "queue_header_widths",
    "dead_header_widths",
)


def quit_question(running: int, held: int, verb: str = "Quit") -> str:
    """What Quit (or Restart) asks when attempts run, or finished ones wait for the store to take their answers."""
    said = []
    if running:
        said.append(f"{running} job{'s are' if running != 1 else ' is'} running.")
    if held:
        said.append(
            f"{held} finished job{'s wait' if held != 1 else ' waits'} for the store to save "
            f"{'their answers' if held != 1 else 'its answer'}."
        )
    said.append(f"{verb} anyway?")
    if running:
        said.append(f"{'They are' if running != 1 else 'It is'} stopped and queued again; nothing is lost.")
    if held:
        said.append(
            "An answer is kept on disk if a small file still fits there, and its job finishes at the next "
            "start; an answer that does not fit is lost, and its job runs again (a paid call is paid again)."
        )
    return " ".join(said)


class MainWindow(QMainWindow):
    """Desktop Queue's window.

    Args:
        controller: the queue's Qt side (models, driver, verbs).
        banner_lines: what start-up found (reconciliation, recoveries) to show non-blockingly.
        parent: the Qt parent.

    Signals:
        closed(): the window closed and the driver was shut down.
        provider_alert(str, str): a provider's breaker opened and the user was told once
            (banner, tray): profile, message.
        drained(str): the queue emptied after this window ran something, and the user
            was told (tray): the message.
    """

    closed = Signal()
    provider_alert = Signal(str, str)
    drained = Signal(str)

    controller: Controller
    history: HistoryActions

    def __init__(
        self, controller: Controller, banner_lines: list[str] | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("Desktop Queue")
        self.setWindowIcon(icon("app"))
        self.controller = controller
        self.shutdown_timeout_ms = 5000
        #: the window was closed by SIGINT or SIGTERM (:meth:`quit_now`)
        self.quit_by_signal = False
        #: the window closed to be started again (see :meth:`restart`)
        self.restart_requested = False
        self._quitting = False  # (quit_now: no question asked)
        self.prefs = load_preferences()
        self._dead_seen: int | None = None
        self._dead_count = 0
        self._ran_something = False
        #: the "queue is empty" notice last told (the banner takes it back when jobs come)
        self._drained_text: str | None = None
        self._timeline_id: str | None = None
        self._breaker_announced: set[str] = set()
        self._spend_dialog: SpendDialog | None = None

        # panes
        self.queue_pane = QueuePane(controller.queue_model)
        self.dead_pane = DeadLetterPane(controller.dead_model)
        self.timeline_model = LiveTimelineModel(self, results=controller.queue.results)
        self.timeline_pane = TimelinePane(self.timeline_model)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("paneTabs")
        self.tabs.addTab(self.queue_pane, state_icon("queued"), "Q&ueue")
        self.tabs.addTab(self.dead_pane, state_icon("dead"), "&Dead letters")
        self.schedules_pane: SchedulesPane = SchedulesPane(
            controller.schedules_model,
            lambda: list(controller.providers),
            input_for=lambda kind: fresh_input(controller.providers.get(kind), controller.profiles),
        )
        self.tabs.addTab(self.schedules_pane, "Sch&edules")
        # the charts refresh only while their tab shows, off the GUI thread (core/windowed.py)
        metrics = WindowedMetrics(controller.queue, flow=controller.flow)
        self.metrics_pane: MetricsPane = MetricsPane(MetricsSource(metrics, parent=self))
        # (no Alt letter: each of M, e, t, r, i, c, s is taken; View → Metrics has Ctrl+Shift+M)
        self.tabs.addTab(self.metrics_pane, "Metrics")
        self.closed.connect(lambda: self.metrics_pane.source.shutdown(self.shutdown_timeout_ms))
        self.alerts_pane: AlertsPane = AlertsPane(controller.alerts.model)
        # (no Alt letter either: each of A, l, e, r, t, s is taken; View → Alerts, Ctrl+Shift+A)
        self.tabs.addTab(self.alerts_pane, "Alerts")
        controller.alerts.changed.connect(self._update_alerts_tab)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("mainSplitter")
        self.splitter.addWidget(self.tabs)
        self.job_tabs = JobTabs(self.timeline_pane, controller.queue)
        if controller.flow is not None:  # (the profile a job runs on: its input's, else the default)
            self.job_tabs.details_view.profile_of = controller.flow.profile_for
        self.splitter.addWidget(self.job_tabs)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        # The job side never pushes the tables: whatever its views would like, it asks for
        # no more than JOB_SIDE_MIN (its headings elide), and it can be collapsed (View
        # menu, or dragged shut) on a small screen. The tables do not collapse.
        self.job_tabs.setMinimumWidth(JOB_SIDE_MIN)
        self.tabs.setMinimumWidth(TABLE_SIDE_MIN)
        self.splitter.setCollapsible(0, False)
        self.splitter.setCollapsible(1, True)
        self.splitter.splitterMoved.connect(lambda *_: self._job_side_moved())
        self.banner = Banner()
        self.banner.dismissed.connect(self._banner_dismissed)
        self._store_message: str | None = None  # what the banner says while the store takes no changes
        #: (finished, dead-lettered): what the banner has told of finished jobs since it was
        #: last dismissed, so that a later batch adds to it instead of hiding it
        self._told: tuple[int, int] = (0, 0)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 0)
        layout.addWidget(self.banner)
        layout.addWidget(self.splitter, 1)
        self.setCentralWidget(central)

        self.registry = ActionRegistry(self)
        self.history = HistoryActions(  # resolve, delete, export, bulk actions on dead letters
            self, {command: self.registry[command.value] for command in HistoryCommand}
        )
        self._build_toolbar()
        self.menus = self.registry.build_menus(self.menuBar())
        self.status = StatusBar()
        self.setStatusBar(self.status)
        self.status.dead_clicked.connect(lambda: self.tabs.setCurrentWidget(self.dead_pane))
        self.status.provider_clicked.connect(lambda profile: self.edit_preferences(profile=profile))
        self.notifier = Notifier(self.banner, self)
        self._build_tray()
        # the local API (Preferences → General), over this window's queue; the status bar says where
        self.local_api = LocalApi(controller.queue, lambda: self.controller.profiles, parent=self.status)
        self.status.addPermanentWidget(self.local_api.label)
        self.local_api.apply(self.prefs.api_enabled)

        # wiring
        self.queue_pane.selection_changed.connect(self._selection_changed)
        self.dead_pane.selection_changed.connect(self._selection_changed)
        self.tabs.currentChanged.connect(self._tab_changed)
        self.dead_pane.retry_requested.connect(self.retry_selected)
        self.dead_pane.replay_requested.connect(self.replay_selected)
        self.dead_pane.retry_all_requested.connect(self.retry_all_matching)
        self.queue_pane.first_run.demo_requested.connect(self.try_demo_job)
        self.queue_pane.first_run.connect_requested.connect(self.connect_provider)
        self.queue_pane.first_run.write_requested.connect(self.new_job)
        self.timeline_pane.link_activated.connect(self.show_job)
        self.timeline_pane.copy_requested.connect(self.copy_timeline)
        copy = self.action(Command.COPY_TIMELINE)
        copy.enabledChanged.connect(self.timeline_pane.copy_button.setEnabled)
        self.timeline_pane.copy_button.setEnabled(copy.isEnabled())
        for view in (self.queue_pane.view, self.dead_pane.view):
            view.customContextMenuRequested.connect(lambda pos, v=view: self._context_menu(v, pos))
            view.doubleClicked.connect(lambda _i: self.timeline_pane.view.setFocus())
        controller.refresher.jobs_changed.connect(self._jobs_changed)
        controller.refresher.refreshed.connect(self._update_status)
        controller.refresher.refreshed.connect(self.queue_pane.repaint_live)
        controller.refresher.error.connect(lambda m: self.banner.show_message(m, "state-dead"))
        controller.driver.paused_changed.connect(lambda _p: self._update_actions())
        controller.driver.job_started.connect(self._job_started)
        controller.driver.idle.connect(self._queue_drained)
        controller.driver.error.connect(lambda m: self.banner.show_message(m, "state-dead"))
        controller.driver.flow_event.connect(self._flow_event)
        controller.refresher.refreshed.connect(self._update_now_line)
        controller.refresher.refreshed.connect(self.job_tabs.tick)
        controller.driver.partial_text.connect(self.job_tabs.result_view.show_partial)
        self.job_tabs.result_view.partial_source = controller.driver.partial_of
        controller.message.connect(lambda m: self.statusBar().showMessage(m, 6000))
        controller.failed.connect(lambda m: self.banner.show_message(m, "state-dead"))
        controller.store_unavailable.connect(self._store_unavailable)
        controller.store_available.connect(self._store_available)
        controller.alerts.transitions.connect(self._alert_transitions)
        controller.alerts.notices.connect(self._announce_notices)
        self.alerts_pane.rules_requested.connect(self.edit_alert_rules)
        controller.refresher.follow(self)  # slower while hidden or behind another application

        self._restore_state()
        if banner_lines:
            self.banner.show_message("\n".join(banner_lines), "event-reconciled")
        self._update_actions()

    # ----------------------------------------------------------------- construction

    def _build_toolbar(self) -> None:
        toolbar = QToolBar("Main toolbar")
        toolbar.setObjectName("mainToolbar")
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        toolbar.setMovable(False)
        self.registry.build_toolbar(toolbar)
        self.addToolBar(toolbar)
        self.toolbar = toolbar

    def action(self, command: Command | HistoryCommand | str) -> QAction:
        """The one QAction of ``command`` (shared by menu, toolbar, context menu and tray)."""
        return self.registry[str(command)]

    @property
    def spend_action(self) -> QAction:
        return self.registry["spend"]

    def _build_tray(self) -> None:
        menu = QMenu(self)
        show = menu.addAction("&Show Desktop Queue")
        show.triggered.connect(self._show_from_tray)
        menu.addAction(self.action(Command.PAUSE))
        menu.addAction(self.action(Command.RESUME))
        menu.addSeparator()
        menu.addAction(self.action(Command.QUIT))
        self.notifier.build_tray(menu, self._show_from_tray)

    def _show_from_tray(self) -> None:
        self.bring_to_front()

    def bring_to_front(self) -> None:
        """Shows the window over the others (the tray's Show, a second start): out of the
        tray or the task bar if it was there, and as large as it was (a maximized window
        stays maximized)."""
        if self.isMinimized():
            self.setWindowState(self.windowState() & ~Qt.WindowState.WindowMinimized)
        self.show()
        self.raise_()
        self.activateWindow()
        # a dialog the window is waiting on (Quit's confirmation, a form) stays over it:
        # where no window manager keeps it there (Xvfb), raising the window alone hid it
        modal = QApplication.activeModalWidget()
        if modal is not None and modal is not self:
            modal.raise_()
            modal.activateWindow()

    # ----------------------------------------------------------------- window state

    def _restore_state(self) -> None:
        self.resize(*DEFAULT_SIZE)
        geometry = load_window_state("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        self.fit_to_screen()
        state = load_window_state("state")
        if state is not None:
            self.restoreState(state)
        splitter = load_window_state("splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)
        else:
            self.splitter.setSizes(DEFAULT_SPLITTER)
        for key, pane in (("queue_header", self.queue_pane), ("dead_header", self.dead_pane)):
            view = pane.view
            header = view.horizontalHeader()
            saved = load_window_state(key)
            # a state saved with other columns (an older version) would misplace every section
            if saved is not None and load_window_number(f"{key}_columns") == header.count():
                header.restoreState(saved)
                # the restored sort indicator sorts the model (restoreState does not say so)
                view.sortByColumn(header.sortIndicatorSection(), header.sortIndicatorOrder())
                # the widths the columns had room for, not those of the moment the state was
                # saved (a state saved without them, by an older version, keeps the defaults)
                pane.columns.restore_preferred(load_window_mapping(f"{key}_widths"))
        self._job_side_moved()

    def showEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        if not self._fitted_shown:
            # the window manager's decorations are known once shown: fit again with them
            self._fitted_shown = True
            QTimer.singleShot(0, self.fit_to_screen)

    _fitted_shown = False

    def fit_to_screen(self) -> None:
        """Keeps the window on its screen's available area (a geometry saved on a bigger
        screen, a higher scale factor): smaller if it must be, moved inside if it pokes out."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is None:
            return
        area = screen.availableGeometry()
        frame = self.frameGeometry()
        extra_w = max(0, frame.width() - self.width())  # the window manager's decorations
        extra_h = max(0, frame.height() - self.height())
        width = min(self.width(), area.width() - extra_w)
        height = min(self.height(), area.height() - extra_h)
        if (width, height) != (self.width(), self.height()):
            self.resize(max(width, self.minimumWidth()), max(height, self.minimumHeight()))
        frame = self.frameGeometry()
        x = min(max(frame.left(), area.left()), area.right() - frame.width() + 1)
        y = min(max(frame.top(), area.top()), area.bottom() - frame.height() + 1)
        if (x, y) != (frame.left(), frame.top()):
            self.move(max(x, area.left()), max(y, area.top()))

    def reset_layout(self) -> None:
        """The window as on a first start: size, splitter, toolbar, columns (order, widths, shown)."""
        clear_window_state(LAYOUT_KEYS)
        self.showNormal()
        self.resize(*DEFAULT_SIZE)
        self.fit_to_screen()
        self.toolbar.show()
        self.splitter.setSizes(self._default_split())
        for pane in (self.queue_pane, self.dead_pane):
            pane.reset_columns()
        self._job_side_moved()
        self.status.showMessage("Layout reset", 4000)

    def _default_split(self) -> list[int]:
        total = sum(self.splitter.sizes()) or sum(DEFAULT_SPLITTER)
        side = round(total * DEFAULT_SPLITTER[1] / sum(DEFAULT_SPLITTER))
        side = max(JOB_SIDE_MIN, side) if total - side >= TABLE_SIDE_MIN else 0
        return [total - side, side]

    @property
    def job_side_shown(self) -> bool:
        return self.splitter.sizes()[1] > 0

    def set_job_side_shown(self, shown: bool) -> None:
        """Shows or collapses the selected job's side (Timeline | Result | Details)."""
        if shown != self.job_side_shown:
            self.splitter.setSizes(self._default_split() if shown else [sum(self.splitter.sizes()), 0])
        self._job_side_moved()

    def _job_side_moved(self) -> None:
        action = self.registry["job_side"]
        if action.isChecked() != self.job_side_shown:
            action.setChecked(self.job_side_shown)

    def save_state(self) -> None:
        """Saves geometry, toolbar, splitter and header state under ``window/`` in QSettings."""
        values: dict[str, QByteArray] = {
            "geometry": self.saveGeometry(),
            "state": self.saveState(),
            "splitter": self.splitter.saveState(),
            "queue_header": self.queue_pane.view.horizontalHeader().saveState(),
            "dead_header": self.dead_pane.view.horizontalHeader().saveState(),
        }
        save_window_state(
            values,
            {
                "queue_header_columns": self.queue_pane.view.horizontalHeader().count(),
                "dead_header_columns": self.dead_pane.view.horizontalHeader().count(),
            },
            {
                "queue_header_widths": self.queue_pane.columns.preferred_by_key(),
                "dead_header_widths": self.dead_pane.columns.preferred_by_key(),
            },
        )

    # ----------------------------------------------------------------- selection and timeline

    def current_pane(self) -> QueuePane | DeadLetterPane:
        return self.dead_pane if self.tabs.currentWidget() is self.dead_pane else self.queue_pane

    def selection(self) -> list[dict]:
        """The job dicts selected in the visible pane."""
        if self.tabs.currentWidget() is self.alerts_pane:
            return []  # (the job actions do not reach through to the hidden queue's selection)
        return self.current_pane().selected()

    def _tab_changed(self, _index: int) -> None:
        if self.tabs.currentWidget() is self.dead_pane:
            self._dead_seen = self._dead_count
            self._update_status()
        self._selection_changed()

    def _selection_changed(self) -> None:
        jobs = self.selection()
        self._update_actions(jobs)
        job_id = jobs[0]["id"] if len(jobs) == 1 else None
        if job_id != self._timeline_id:
            self._timeline_id = job_id
            job = self.controller.job(job_id) if job_id else None
            self.timeline_model.show_job(job)
            self.job_tabs.show_job(job)
            self._update_now_line()

    def _jobs_changed(self, ids: set[str] | None) -> None:
        self._update_actions()
        if self._timeline_id and (ids is None or self._timeline_id in ids):
            job = self.controller.job(self._timeline_id)
            if job is not None:
                self.timeline_model.update_job(job)
                self.job_tabs.update_job(job)
                self.timeline_pane.refresh_heading()
                self._update_now_line()

    def _update_now_line(self) -> None:
        """The timeline's synthetic last line: why the shown job waits right now (queued, or
        running on a lease its holder has stopped renewing)."""
        self.timeline_model.set_now(self.controller.now_line(self.timeline_model.job))

    def show_job(self, job_id: str) -> bool:
        """Selects a job in the queue pane (clearing filters that hide it) and shows its timeline."""
        self.controller.refresher.refresh()
        self.tabs.setCurrentWidget(self.queue_pane)
        found = self.queue_pane.select(job_id)
        if found:
            self.queue_pane.view.setFocus()
        elif (job := self.controller.job(job_id)) is not None:
            # archived deeper than the pane loads to find it: its timeline all the same
            self.queue_pane.view.clearSelection()
            self._timeline_id = job.id
            self.timeline_model.show_job(job)
            self.job_tabs.show_job(job)
            self._update_now_line()
        return found

    def _update_actions(self, jobs: list[dict] | None = None) -> None:
        selected = self.selection() if jobs is None else jobs
        allowed = actions_for(selected, paused=self.controller.driver.paused)
        self.registry.update(ActionState(frozenset(allowed), frozenset(history_actions_for(selected))))
        self.dead_pane.retry_button.setEnabled(Command.RETRY in allowed and self.current_pane() is self.dead_pane)
        self.dead_pane.replay_button.setEnabled(Command.REPLAY in allowed and self.current_pane() is self.dead_pane)
        if hasattr(self, "history"):
            self.history.update(selected)

    def _context_menu(self, view: Any, pos: Any) -> None:
        self.registry.context_menu(self).popup(view.viewport().mapToGlobal(pos))

    # ----------------------------------------------------------------- status bar and notifications

    def _status_counts(self, fresh: bool = False) -> dict[str, int] | None:
        """Jobs per state, read again only when the refresh saw a change, or when ``fresh``
        (None: the store is unreachable). A fresh read is the status bar's too: until the
        refresh sees the last change, its copy would still say "1 running"."""
        version = self.controller.refresher.version
        cached = self._counts_cache
        if not fresh and cached is not None and cached[0] == version >= 0:
            return cached[1]
        try:
            counts = self.controller.queue.counts()
        except Exception:  # the store is unreachable: the banner already says so
            return None
        self._counts_cache = (version, counts)
        return counts

    #: how stale the status bar's word on flow control (degradations, provider states) may
    #: get while no job changes: it is read from the shared flow state, a transaction on
    #: PostgreSQL, so not on every 300 ms tick; a breaker or rate-limit change that this
    #: process sees comes at once through :meth:`_flow_event`
    FLOW_STATUS_S = 2.0
    _flow_status_at: tuple[int, float] | None = None  # (refresher version, monotonic time) of the last read

    def _flow_status_due(self) -> bool:
        version, now = self.controller.refresher.version, time.monotonic()
        last = self._flow_status_at
        if last is not None and last[0] == version and now - last[1] < self.FLOW_STATUS_S:
            return False
        self._flow_status_at = (version, now)
        return True

    def _update_status(self) -> None:
        """The status bar after a refresh tick; widgets are touched only when what they show changed."""
        flow_due = self._flow_status_due()
        if flow_due:
            self._update_background()
        counts = self._status_counts()
        if counts is None:
            return
        driver = self.controller.driver
        done = self.controller.refresher.tally.done_since(self.controller.queue.clock.now() - RECENT_WINDOW_S)
        if flow_due:
            self._update_providers()
        if self._ran_something:
            self._announce_if_drained(counts)
        if self._drained_text is not None and (counts.get(State.QUEUED, 0) or counts.get(State.RUNNING, 0)):
            # "the queue is empty" no longer holds once a job waits or runs again
            self.banner.withdraw(self._drained_text)
            self._drained_text = None
        shown = (
            sorted(counts.items()),
            driver.running,
            driver.concurrency,
            driver.paused,
            self.controller.store_problem,
            done,
            self._dead_seen,
            self.tabs.currentWidget() is self.dead_pane,
        )
        if shown == self._status_shown:
            return  # an idle tick: nothing to set (a style sheet set again re-polishes the button)
        self._status_shown = shown
        status = self.status
        status.show_counts(counts)
        self.queue_pane.set_counts(counts)
        paused = " (store unavailable)" if self.controller.store_problem else " (paused)" if driver.paused else ""
        status.show_capacity(driver.running, driver.concurrency, paused)
        status.show_throughput(done)
        dead = counts.get(State.DEAD, 0)
        self.dead_pane.set_total(dead, counts.get("resolved", 0))
        if self._dead_seen is None or self.tabs.currentWidget() is self.dead_pane:
            self._dead_seen = dead
        # (a dead letter's notice comes from the outbox: once, whichever process it died in)
        self._dead_count = dead
        status.show_dead(dead, self._dead_seen or 0)
        self.tabs.setTabText(1, f"&Dead letters ({dead:,})" if dead else "&Dead letters")
        if self._dead_tab_quiet != (dead == 0):
            self._dead_tab_quiet = dead == 0
            self.tabs.setTabIcon(1, lit_icon("state-dead", dead > 0))

    #: whether the Dead letters tab shows its greyed icon (no dead letter), None before the first count
    _dead_tab_quiet: bool | None = None
    #: (refresher version, counts) of the last ``Queue.counts()``; what the status bar last showed
    _counts_cache: tuple[int, dict[str, int]] | None = None
    _status_shown: tuple[Any, ...] | None = None

    def _update_background(self) -> None:
        """The background switch's action and the status bar's word on background work (another process may flip it)."""
        toggle = self.action("pause_background")
        paused = self.controller.background_state.paused
        if toggle.isChecked() != paused:
            toggle.setChecked(paused)
        try:
            text = self.controller.background_status()
        except Exception:  # a status display must never break the refresh
            return
        self.status.show_background(text)

    def _update_providers(self) -> None:
        """Refreshes every provider indicator from its profile's real state (computed in core)."""
        try:
            states = self.controller.profile_states()
        except Exception:  # a status display must never break the refresh
            return
        self.status.update_providers(states)
        self.queue_pane.first_run.set_profiles(self.controller.configured_profiles())

    def _flow_event(self, profile: str, kind: str, text: str) -> None:
        """A provider's breaker or rate limit changed: log it, update its indicator, tell once."""
        self.status.record_flow(profile, kind, text)
        if kind in (FlowEventType.BREAKER_OPENED, FlowEventType.OFFLINE) and profile not in self._breaker_announced:
            self._breaker_announced.add(profile)
            what = "is not answering" if kind == FlowEventType.BREAKER_OPENED else "cannot be reached"
            message = (
                f"The provider “{profile}” {what}: {text.split(': ', 1)[-1]}. "
                "Nothing burns its retries; the queue drains by itself when it answers again."
            )
            self.banner.show_message(message, "provider-down")
            self.notifier.notify(message, Level.WARNING, 8000)
            self.provider_alert.emit(profile, message)
        elif kind in (FlowEventType.BREAKER_CLOSED, FlowEventType.BACK_ONLINE):
            if profile in self._breaker_announced:
                self.statusBar().showMessage(f"The provider “{profile}” answers again; its jobs run.", 8000)
            self._breaker_announced.discard(profile)
        self._update_providers()

    def _update_alerts_tab(self) -> None:
        """The Alerts tab says how many alerts are active, with the warning icon only then."""
        active = self.controller.alerts.model.active_count()
        at = self.tabs.indexOf(self.alerts_pane)
        self.tabs.setTabText(at, f"Alerts ({active})" if active else "Alerts")
        self.tabs.setTabIcon(at, icon("provider-down") if active else QIcon())

    def _alert_transitions(self, transitions: list[Transition]) -> None:
        """An alert fired or cleared (recorded by this or another process): a banner and a notice, once."""
        for t in transitions:
            fired = t.kind == FIRED
            self.banner.show_message(t.describe(), "provider-down" if fired else "provider-ok")
            self.notifier.notify(t.describe(), Level.WARNING if fired else Level.INFO, 8000 if fired else 5000)

    def _announce_notices(self, notices: list[Notice]) -> None:
        """Finished jobs from the outbox (each delivered once across processes): one notice for the batch.

        A desktop notification tells each batch and fades. The banner stays until it is
        dismissed, so there a batch adds to what it told since: a second batch of 48 jobs
        must not hide that 4,900 finished and 51 were dead-lettered before them, even if
        another message ("the queue is empty") came in between.
        """
        if not notices:
            return
        if self.notifier.channel() is Channel.BANNER:
            finished = self._told[0] + len(notices)
            dead_n = self._told[1] + sum(1 for n in notices if n.state == State.DEAD)
            self._tell_finished(notices[0].text() if finished == 1 else _finished_text(finished, dead_n), dead_n > 0)
            self._told = (finished, dead_n)
            return
        if len(notices) <= 2:
            for notice in notices:
                self._tell_finished(notice.text(), notice.state == State.DEAD)
            return
        dead_n = sum(1 for n in notices if n.state == State.DEAD)
        self._tell_finished(_finished_text(len(notices), dead_n), dead_n > 0)

    def _tell_finished(self, text: str, dead: bool) -> None:
        """A notice of finished jobs: a warning shown longer when any was dead-lettered."""
        self.notifier.notify(text, Level.WARNING if dead else Level.INFO, 8000 if dead else 5000)

    def _banner_dismissed(self) -> None:
        self._told = (0, 0)  # read: the next finished jobs are told afresh

    def edit_alert_rules(self) -> AlertRulesDialog:
        """Opens the alert rules (thresholds, windows, on/off); saved to the config dir."""
        dialog = AlertRulesDialog({r.name: r for r in self.controller.alerts.rules()}, parent=self)
        dialog.open()
        return dialog

    def _store_unavailable(self, message: str) -> None:
        self._store_message = message
        # a store poisoned by a disk error takes changes again only once reopened: a restart,
        # which keeps the answers it holds (see LeaseDriver.shutdown)
        restart = ("&Restart Desktop Queue", self.restart) if self.controller.queue.store.poisoned else None
        self.banner.set_condition(message, "state-dead", restart)  # above the notices that follow, while it lasts
        self._update_status()

    def _store_available(self) -> None:
        self.banner.clear_condition()
        # the banner's message may still be the error that said so
        if self.banner.isVisible() and self.banner.text.text() == self._store_message:
            self.banner.hide()
        self._update_status()

    def _job_started(self, _job_id: str) -> None:
        self._ran_something = True

    def _queue_drained(self) -> None:
        """The driver found nothing to run: tell the user if the queue is really empty.

        "Nothing runnable now" is not "done": a job waiting in backoff, for a rate limit
        or for another process is still the user's business, and a notice that it
        finished would be wrong. So the notice waits until nothing is queued or
        running in any process on the data dir; the refresh tick looks again (the
        last job may finish in a ``work`` process, and this driver then stays idle).
        """
        if not self._ran_something:
            return
        counts = self._status_counts(fresh=True)
        if counts is not None:  # (None: the store is unreachable, and the banner already says so)
            self._announce_if_drained(counts)

    def _announce_if_drained(self, counts: dict[str, int]) -> None:
        if self.controller.driver.paused or counts.get(State.QUEUED, 0) or counts.get(State.RUNNING, 0):
            return
        self._ran_something = False
        dead = counts.get(State.DEAD, 0)
        message = "The queue is empty: every job has finished."
        if dead:
            message += f" {counted(dead, 'dead letter')} {'waits' if dead == 1 else 'wait'} for you."
        self.notifier.notify(message, Level.INFO, 5000)
        self._drained_text = message
        self.drained.emit(message)

    # ----------------------------------------------------------------- commands

    def new_job(self) -> dialogs.SubmitDialog:
        """Opens the submit dialog (window-modal, non-blocking); returns it."""
        dialog = dialogs.SubmitDialog(self.controller, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.submitted.connect(self._submitted)
        dialog.schedule_requested.connect(lambda template, d=dialog: self.schedule_job(template, d))
        dialog.open()
        return dialog

    def schedule_job(self, template: JobTemplate, source: QDialog | None = None) -> ScheduleDialog:
        """The Schedules tab, and its New schedule dialog on a job written in ``source`` (New job).

        ``source`` is hidden meanwhile: closed once the schedule is saved, shown again
        (what was typed in it kept) when the schedule is cancelled.
        """
        self.tabs.setCurrentWidget(self.schedules_pane)
        if source is not None:
            source.hide()
        dialog = self.schedules_pane.add_from(template)
        if source is not None:
            dialog.finished.connect(lambda code, s=source: self._scheduled_from(s, code))
        return dialog

    def _scheduled_from(self, source: QDialog, code: int) -> None:
        if self._quitting:
            return  # (put aside as the window quits: not shown again)
        if code == QDialog.DialogCode.Accepted.value:
            source.done(QDialog.DialogCode.Rejected.value)  # (nothing submitted: its job is the schedule's)
        else:
            source.open()

    def _submitted(self, result: SubmitResult) -> None:
        self.controller.refresher.refresh()
        self.show_job(result.job.id)
        if result.duplicate:
            self.banner.show_message(
                f"Already submitted: job {result.job.id} (“{result.job.title}”, {result.job.state}) has this input, "
                "so no new job was created. It is selected now.",
                "event-info",
            )

    def cancel_selected(self) -> None:
        """Cancels the selected queued/running jobs (asks first if any is running)."""
        jobs = [j for j in self.selection() if applies_to(Command.CANCEL, j)]
        if not jobs:
            return
        running = [j for j in jobs if j.get("state") == State.RUNNING]
        if len(running) == 1:
            # which job, and where: it may run in another process (a `work` on this or another machine)
            job = running[0]
            where = worker_name(job.get("worker"))
            question = (
                "Cancel a running job?",
                f"“{job.get('title') or job['id']}” is running now{f' on {where}' if where else ''}. "
                "Cancel anyway? Work in progress is lost; a result that arrives later is rejected.",
                "Cancel job",
            )
        elif running:
            question = (
                "Cancel running jobs?",
                f"{len(running)} jobs are running now. Cancel anyway? Work in progress is lost; "
                "a result that arrives later is rejected.",
                "Cancel jobs",
            )
        if running and not dialogs.confirm(self, *question):
            return
        self.controller.cancel([j["id"] for j in jobs])

    def retry_selected(self) -> None:
        jobs = [j for j in self.selection() if applies_to(Command.RETRY, j)]
        if jobs:
            self.controller.retry([j["id"] for j in jobs])

    def replay_selected(self) -> dialogs.ReplayDialog | None:
        """Opens the replay preview for the one selected finished job; returns the dialog."""
        jobs = self.selection()
        if len(jobs) != 1 or not applies_to(Command.REPLAY, jobs[0]):
            return None
        job = self.controller.job(jobs[0]["id"])
        if job is None:
            return None
        dialog = dialogs.ReplayDialog(self.controller, job, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: dialog.new_job is not None and self.show_job(dialog.new_job.id))
        dialog.open()
        return dialog

    def retry_all_matching(self) -> None:
        """Confirms with the exact count, then retries exactly those jobs, 500 per commit, off the GUI thread."""
        self.history.bulk_matching("retry")

    def refresh(self) -> None:
        self.controller.refresher.refresh()
        self.controller.driver.wake()

    def focus_search(self) -> None:
        search = self.current_pane().search
        search.setFocus()
        search.selectAll()

    def copy_timeline(self) -> None:
        text = self.timeline_model.as_text()
        if text:
            QGuiApplication.clipboard().setText(text)
            self.statusBar().showMessage("Timeline copied to the clipboard", 4000)

    def edit_preferences(self, new_profile: bool = False, profile: str | None = None) -> dialogs.PreferencesDialog:
        """Opens Preferences (window-modal, non-blocking); returns it.

        Args:
            new_profile: open on a new provider profile (from a preset).
            profile: open on the Providers tab with this profile selected.
        """
        # the profiles as saved (another process may have changed them), not as this window runs them
        dialog = dialogs.PreferencesDialog(self.prefs, None, self, new_profile=new_profile)
        if profile is not None:
            dialog.select_profile(profile)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._preferences_accepted(dialog))
        dialog.open()
        return dialog

    def show_pane(self, pane: QWidget) -> None:
        """Brings one of the pane tabs (queue, dead letters, schedules, metrics) to the front."""
        self.tabs.setCurrentWidget(pane)

    def show_spend(self) -> SpendDialog:
        """Opens the Spend view (non-modal; one at a time, raised if already open)."""
        from desktop_queue.core.ledger import PriceTable, SpendLedger

        if self._spend_dialog is not None:
            self._spend_dialog.reload()
            self._spend_dialog.raise_()
            self._spend_dialog.activateWindow()
            return self._spend_dialog
        data_dir = self.controller.queue.data_dir
        flow = self.controller.flow
        ledger = flow.ledger if flow is not None and flow.ledger is not None else SpendLedger(data_dir)
        dialog = SpendDialog(ledger, self.controller.budgets, PriceTable.load(data_dir), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.destroyed.connect(lambda: setattr(self, "_spend_dialog", None))
        self._spend_dialog = dialog
        dialog.show()
        return dialog

    def show_shortcuts(self) -> help_menu.ShortcutsDialog:
        """Help → Keyboard shortcuts (non-modal; generated from the action registry)."""
        dialog = help_menu.ShortcutsDialog(help_menu.shortcut_rows(self.registry), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def show_about(self) -> help_menu.AboutDialog:
        """Help → About (window-modal, non-blocking)."""
        dialog = help_menu.AboutDialog(self.controller.queue.data_dir, config_dir(), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def open_data_folder(self) -> None:
        self._open_folder(self.controller.queue.data_dir)

    def open_config_folder(self) -> None:
        self._open_folder(config_dir())

    def _open_folder(self, path: Any) -> None:
        problem = help_menu.open_folder(path)
        if problem is not None:
            self.banner.show_message(f"{problem}. Its path: {path}", "event-info")

    def try_demo_job(self) -> None:
        """Submits the first-run demo job and selects it (its timeline shows it run)."""
        from desktop_queue.core import QueueError
        from desktop_queue.ui.first_run import DEMO_INPUT, DEMO_TITLE

        try:
            result = self.controller.submit(
                "demo", dict(DEMO_INPUT), title=DEMO_TITLE, priority="interactive", max_attempts=None
            )
        except QueueError as exc:
            self.banner.show_message(f"The demo job could not be submitted: {exc}", "state-dead")
            return
        self.queue_pane.set_first_run(False)
        self._submitted(result)

    def connect_provider(self) -> dialogs.PreferencesDialog:
        """Preferences on a new provider profile, from a preset (the first-run "Connect a provider")."""
        return self.edit_preferences(new_profile=True)

    def _preferences_accepted(self, dialog: dialogs.PreferencesDialog) -> None:
        self.apply_preferences(dialog.preferences())
        self.controller.apply_profiles(dialog.profile_set())
        self._update_status()
        self._update_providers()  # (the first-run panel offers a job for a provider connected now)

    def apply_preferences(self, prefs: Preferences) -> None:
        """Stores ``prefs`` under ``preferences/`` and applies them now."""
        self.prefs = prefs
        save_preferences(prefs)
        self.controller.set_concurrency(prefs.concurrency)
        self.controller.driver.attempt_timeout_s = prefs.attempt_timeout_s  # from the next attempt on
        problem = self.local_api.apply(prefs.api_enabled)
        if problem is not None:
            self.statusBar().showMessage(f"The local API did not start: {problem}", 8000)
        self._update_status()

    # ----------------------------------------------------------------- shutdown

    def quit_now(self, signum: int | None = None) -> None:
        """Quits as File → Quit does, without asking (a logout, a shutdown, Ctrl+C in the
        terminal that started it): running attempts stop and are queued again."""
        self.quit_by_signal = signum is not None
        self._quitting = True
        log.info("quitting (%s)", f"signal {signum}" if signum is not None else "asked")
        for dialog in self.findChildren(QDialog):
            if isinstance(dialog, (dialogs.SubmitDialog, dialogs.ReplayDialog)):
                dialog.put_aside()  # (New job keeps what was typed for next time; neither asks)
        modal = QApplication.activeModalWidget()
        while modal is not None and modal is not self:  # a form or Quit's own question: nobody answers now
            modal.close()
            following = QApplication.activeModalWidget()
            modal = following if following is not modal else None
        # (after any open dialog's own event loop has returned)
        QTimer.singleShot(0, self._close_and_quit)

    def restart(self) -> bool:
        """Closes the window as Quit does (asking as it does), and has :func:`desktop_queue.app.main`
        start it again once this process has let go of the data dir; False if the person stayed."""
        self.restart_requested = True
        if not self.close():
            self.restart_requested = False
            return False
        QApplication.quit()
        return True

    def _close_and_quit(self) -> None:
        if self.close():
            QApplication.quit()  # (a dialog left open must not keep the process alive)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt API
        """Asks if jobs are running, then stops leasing, lets attempts stop, waits (bounded)."""
        driver = self.controller.driver
        running, held = driver.running, len(driver.held_ids())
        verb = "Restart" if self.restart_requested else "Quit"
        if (
            (running or held)
            and not self._quitting
            and not dialogs.confirm(self, f"{verb} Desktop Queue?", quit_question(running, held, verb), verb)
        ):
            event.ignore()
            return
        self.save_state()
        self.local_api.stop()
        self.controller.shutdown(self.shutdown_timeout_ms)
        self.notifier.hide()
        event.accept()
        self.closed.emit()
