"""The one refresh timer that feeds the job table models with what changed."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from desktop_queue.core import Queue, QueueError
from desktop_queue.ui.models.job_table import JobTableModel


class RefreshCoordinator(QObject):
    """Polls the queue for changes on one named timer and feeds them to the models.

    Changes made by any process (this window, the CLI, a headless worker) show up
    within one interval.

    Args:
        queue: the engine.
        models: the job table models to keep up to date.
        interval_ms: the refresh interval (250-500 ms).
        parent: the Qt parent.

    Signals:
        jobs_changed(object): the set of job ids that changed (None: everything was reloaded).
        refreshed(): a refresh tick ran (the clock moved on).
        error(str): the store could not be read.
    """

    jobs_changed = Signal(object)
    refreshed = Signal()
    error = Signal(str)

    def __init__(
        self, queue: Queue, models: list[JobTableModel], interval_ms: int = 300, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.queue = queue
        self.models = list(models)
        self.version = -1
        self.timer = QTimer(self)
        self.timer.setObjectName("refreshTimer")
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.refresh)

    def start(self) -> None:
        """Loads everything once, then polls."""
        self.refresh()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def soon(self) -> None:
        """Refreshes as soon as the event loop is free (after a verb of this window)."""
        QTimer.singleShot(0, self, self.refresh)

    @Slot()
    def refresh(self) -> None:
        """One coalesced update: what changed since the last version, and nothing else."""
        try:
            if self.version < 0:
                self.version = self.queue.refresh()
                jobs = self.queue.raw_jobs()
                for model in self.models:
                    model.reset_jobs(jobs)
                self.jobs_changed.emit(None)
            else:
                version, ids = self.queue.changed_since(self.version)
                self.version = version
                if ids is None:
                    jobs = self.queue.raw_jobs()
                    for model in self.models:
                        model.reset_jobs(jobs)
                    self.jobs_changed.emit(None)
                elif ids:
                    jobs = self.queue.raw_jobs(ids)
                    for model in self.models:
                        model.apply(jobs)
                    self.jobs_changed.emit(set(ids))
        except QueueError as exc:
            self.error.emit(str(exc))
            return
        for model in self.models:
            model.tick()
        self.refreshed.emit()
