"""Item models of the window, one module per model.

* :mod:`.columns`: the data roles, cell looks and columns of the job tables;
* :mod:`.job_table`: :class:`JobTableModel`, hot rows in sorted order, then archived rows;
* :mod:`.queue_model`, :mod:`.dead_letter_model`: the two panes' tables;
* :mod:`.filter_proxy`: :class:`JobFilterProxy`, search and filters;
* :mod:`.dead_groups`: :class:`DeadGroupModel`, dead letters by error signature;
* :mod:`.timeline_model`: :class:`TimelineModel`, one job's events;
* :mod:`.refresh`: :class:`RefreshCoordinator`, the one refresh timer.

The names below are the package's interface: ``from desktop_queue.ui.models import X``.
"""

from desktop_queue.ui.models.columns import (
    DEAD_COLUMNS,
    QUEUE_COLUMNS,
    CellLook,
    Column,
    JobRole,
    queue_columns,
    replayed_as_text,
)
from desktop_queue.ui.models.dead_groups import DeadGroupModel
from desktop_queue.ui.models.dead_letter_model import DeadLetterModel
from desktop_queue.ui.models.filter_proxy import JobFilterProxy
from desktop_queue.ui.models.job_table import ARCHIVE_PAGE, ArchiveFilter, HistorySource, JobTableModel, archived_job
from desktop_queue.ui.models.queue_model import QueueModel
from desktop_queue.ui.models.refresh import RefreshCoordinator
from desktop_queue.ui.models.timeline_model import (
    EVENT_LOOK,
    TimelineModel,
    TimelineRole,
    event_detail,
    event_headline,
    event_link,
)

__all__ = [
    "ARCHIVE_PAGE",
    "DEAD_COLUMNS",
    "EVENT_LOOK",
    "QUEUE_COLUMNS",
    "ArchiveFilter",
    "CellLook",
    "Column",
    "DeadGroupModel",
    "DeadLetterModel",
    "HistorySource",
    "JobFilterProxy",
    "JobRole",
    "JobTableModel",
    "QueueModel",
    "RefreshCoordinator",
    "TimelineModel",
    "TimelineRole",
    "archived_job",
    "event_detail",
    "event_headline",
    "event_link",
    "queue_columns",
    "replayed_as_text",
]
