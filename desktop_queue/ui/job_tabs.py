"""The selected job's side of the window: its Timeline, its Result and its Details, as tabs."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QTabWidget, QWidget

from desktop_queue.core.model import Job, State
from desktop_queue.ui.details_view import DetailsView
from desktop_queue.ui.icons import icon, lit_icon
from desktop_queue.ui.panes.timeline_pane import TimelinePane
from desktop_queue.ui.result_view import ResultView
from desktop_queue.ui.settings import load_window_number, save_window_state

TIMELINE_TAB, RESULT_TAB, DETAILS_TAB = 0, 1, 2
#: ``window/<this>``: the tab shown last
TAB_SETTING = "job_tab"


class JobTabs(QTabWidget):
    """Timeline | Result | Details of one job; each reads only what it shows, when it is shown.

    Args:
        timeline_pane: the timeline (the window feeds its model itself).
        queue: the job engine the Result and Details views read from.
    """

    def __init__(self, timeline_pane: TimelinePane, queue: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("jobTabs")
        self.timeline_pane = timeline_pane
        self.result_view = ResultView(queue)
        self.details_view = DetailsView(queue)
        self.addTab(timeline_pane, icon("event-submitted"), "T&imeline")
        self.addTab(self.result_view, icon("state-succeeded"), "Re&sult")
        self.addTab(self.details_view, icon("event-info"), "De&tails")
        self.setDocumentMode(True)
        self._result_ready: bool | None = None
        self._show_result_ready(None)
        saved = load_window_number(TAB_SETTING)
        if saved is not None and 0 <= saved < self.count():
            self.setCurrentIndex(saved)
        # the tab a person reads is remembered: who looks at results keeps seeing them
        self.currentChanged.connect(lambda index: save_window_state({}, {TAB_SETTING: index}))

    def show_job(self, job: Job | None) -> None:
        """Another job is selected (None: none, or several)."""
        self.result_view.show_job(job)
        self.details_view.show_job(job)
        self._show_result_ready(job)

    def update_job(self, job: Job) -> None:
        """The shown job changed in the store."""
        self.result_view.update_job(job)
        self.details_view.update_job(job)
        self._show_result_ready(job)

    def _show_result_ready(self, job: Job | None) -> None:
        """The Result tab's check mark is green only when the job shown has succeeded: a green
        check beside "Result" while the job still runs (or died) said there was one to read."""
        ready = job is not None and job.state == State.SUCCEEDED
        if self._result_ready != ready:
            self._result_ready = ready
            self.setTabIcon(RESULT_TAB, lit_icon("state-succeeded", ready))

    def tick(self) -> None:
        """The window's refresh tick (a running job's progress)."""
        self.result_view.tick()
