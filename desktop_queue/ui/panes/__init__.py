"""The window's panes: the queue table, the dead letters, and the event timeline, one module each."""

from desktop_queue.ui.panes.common import (
    EmptyState,
    SelectOnKeyboardFocus,
    configure_job_table,
    reset_header,
    select_job,
    selected_jobs,
)
from desktop_queue.ui.panes.dead_letter_pane import DeadLetterPane
from desktop_queue.ui.panes.queue_pane import QueuePane
from desktop_queue.ui.panes.timeline_pane import TimelineDelegate, TimelinePane, wrapped_text

__all__ = [
    "DeadLetterPane",
    "EmptyState",
    "QueuePane",
    "SelectOnKeyboardFocus",
    "TimelineDelegate",
    "TimelinePane",
    "configure_job_table",
    "reset_header",
    "select_job",
    "selected_jobs",
    "wrapped_text",
]
