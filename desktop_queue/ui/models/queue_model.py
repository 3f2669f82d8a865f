"""The queue pane's model: every job."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject

from desktop_queue.core.present import HoldReason
from desktop_queue.ui.models.columns import QUEUE_COLUMNS, queue_columns
from desktop_queue.ui.models.job_table import ARCHIVE_PAGE, HistorySource, JobTableModel


class QueueModel(JobTableModel):
    """Every job of the queue.

    Args:
        clock: wall time (tests may pin it).
        hold: why flow control keeps a due job waiting (``FlowControl.waiting_reason``).
        parent: the Qt parent.
        history: where archived jobs are found (None: hot jobs only).
        page_size: archived rows per :meth:`fetchMore`.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        parent: QObject | None = None,
        *,
        hold: HoldReason | None = None,
        history: HistorySource | None = None,
        page_size: int = ARCHIVE_PAGE,
    ) -> None:
        super().__init__(
            queue_columns(hold) if hold is not None else QUEUE_COLUMNS,
            clock,
            parent,
            history=history,
            page_size=page_size,
        )
