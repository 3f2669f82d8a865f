"""The dead-letter pane's model: only the dead jobs."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import QObject

from desktop_queue.core import State
from desktop_queue.ui.models.columns import DEAD_COLUMNS
from desktop_queue.ui.models.job_table import ARCHIVE_PAGE, HistorySource, JobTableModel


class DeadLetterModel(JobTableModel):
    """Only the dead jobs, archived ones included: a job leaves this model when it is retried."""

    archive_state = str(State.DEAD)

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        parent: QObject | None = None,
        *,
        history: HistorySource | None = None,
        page_size: int = ARCHIVE_PAGE,
    ) -> None:
        super().__init__(DEAD_COLUMNS, clock, parent, history=history, page_size=page_size)

    def include(self, job: Mapping[str, Any]) -> bool:
        return job.get("state") == State.DEAD
