"""The timeline model with a synthetic last line: why a queued job waits *now*.

The line is not an event and is never stored: it is the queue pane's "next run"
phrase (:func:`desktop_queue.core.present.now_line`) shown where a reader of the
timeline looks next, e.g. ``now: waiting: rate limit (~12 s)``. It is refreshed on the
window's refresh tick and disappears when the job leaves the queue.

A succeeded job whose result file was deleted, or damaged and moved aside, does not
show a result path that is not there: the event that names the result says what
happened instead (``result file missing: …``, ``result damaged, moved aside to …``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, Qt

from desktop_queue.core.flow import BACKGROUND_PAUSED, BACKGROUND_RESUMING
from desktop_queue.core.model import Job
from desktop_queue.core.present import BACKOFF, NOW_PREFIX, PAUSED, short_ref
from desktop_queue.core.results import ResultStore
from desktop_queue.ui.icons import icon, state_icon
from desktop_queue.ui.models.timeline_model import TimelineModel, TimelineRole

AnyIndex = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()

#: the now line's detail text (what it is, since it looks like an event)
NOW_DETAIL = "the queue's current view of this job: not an event, not stored"


def now_category(text: str) -> str:
    """The timeline category (card colour) of a now line."""
    if f"({BACKOFF})" in text:
        return "retry"
    if "waiting:" in text or BACKGROUND_PAUSED in text or BACKGROUND_RESUMING in text:
        return "throttle"
    return "normal"


def now_icon_name(text: str) -> str | None:
    """The icon of a now line whose cause has its own picture (paused, offline), else None."""
    if text == NOW_PREFIX + PAUSED:
        return "action-pause"
    if " is offline (" in text:
        return "provider-down"
    return None


#: how the detail of an event names its result (see :func:`~desktop_queue.ui.models.timeline_model.event_detail`)
_RESULT_DETAIL = "result ref: "
_TEXT_ROLES = frozenset({Qt.ItemDataRole.DisplayRole, TimelineRole.DETAIL, Qt.ItemDataRole.ToolTipRole})


class LiveTimelineModel(TimelineModel):
    """:class:`TimelineModel` plus one synthetic last row while the job is queued.

    Rows ``0 .. n-1`` are the job's events; row ``n`` (only when :attr:`now_text` is
    set) is the now line, whose ``TimelineRole.EVENT`` is None.

    Args:
        parent: the owner.
        results: where the shown job's result is looked for (:attr:`result_note`; None:
            results are not checked).
    """

    def __init__(self, parent: QObject | None = None, results: ResultStore | None = None) -> None:
        super().__init__(parent)
        self._now: str | None = None
        self._results = results
        self._result_note: str | None = None
        # a different job: its now line is computed afresh (cleared inside the reset)
        self.modelAboutToBeReset.connect(self._clear_now)

    @property
    def result_note(self) -> str | None:
        """What is wrong with the shown job's result file (missing, damaged), or None."""
        return self._result_note

    def _check_result(self, job: Job | None) -> str | None:
        if job is None or not job.result_ref or self._results is None:
            return None
        problem = self._results.problem(job.idempotency_key)
        return problem.message if problem is not None else None

    def show_job(self, job: Job | None) -> None:
        self._result_note = self._check_result(job)  # before the reset: the views read it then
        super().show_job(job)

    def update_job(self, job: Job) -> None:
        note = self._check_result(job)
        changed = note != self._result_note and self.job is not None and job.id == self.job.id
        self._result_note = note
        super().update_job(job)
        if changed and self.event_count():
            self.dataChanged.emit(self.index(0, 0), self.index(self.event_count() - 1, 0))

    def _with_result_note(self, text: str) -> str:
        job = self.job
        if self._result_note is None or job is None or not job.result_ref:
            return text
        return text.replace(_RESULT_DETAIL + short_ref(job.result_ref), self._result_note)

    def _clear_now(self) -> None:
        self._now = None

    @property
    def now_text(self) -> str | None:
        """The synthetic line's text (``now: …``), or None when there is none."""
        return self._now

    def event_count(self) -> int:
        return super().rowCount()

    def is_now_row(self, row: int) -> bool:
        return self._now is not None and row == self.event_count()

    def rowCount(self, parent: AnyIndex = _ROOT) -> int:  # noqa: N802 - Qt API
        if parent.isValid():
            return 0
        return self.event_count() + (1 if self._now is not None else 0)

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not self.is_now_row(index.row()):
            value = super().data(index, role)
            if role in _TEXT_ROLES and isinstance(value, str):
                return self._with_result_note(value)
            return value
        text = self._now or ""
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{text}\n{NOW_DETAIL}"
        if role == TimelineRole.HEADLINE:
            return text
        if role == TimelineRole.DETAIL:
            return NOW_DETAIL
        if role == Qt.ItemDataRole.DecorationRole:
            own = now_icon_name(text)
            if own is not None:
                return icon(own)
            category = now_category(text)
            if category == "retry":
                return icon("event-retry")
            if category == "throttle":
                return icon("event-throttled")
            return state_icon("queued")
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{text[len(NOW_PREFIX) :] if text.startswith(NOW_PREFIX) else text}: {NOW_DETAIL}"
        if role == TimelineRole.CATEGORY:
            return now_category(text)
        return None  # EVENT, LINK: none

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        if index.isValid() and self.is_now_row(index.row()):
            return Qt.ItemFlag.ItemIsEnabled  # not selectable: it is not an event
        return super().flags(index)

    def set_now(self, text: str | None) -> None:
        """Shows, changes or removes the now line with the matching ranged signals."""
        if text == self._now:
            return
        row = self.event_count()
        if self._now is None:
            self.beginInsertRows(_ROOT, row, row)
            self._now = text
            self.endInsertRows()
        elif text is None:
            self.beginRemoveRows(_ROOT, row, row)
            self._now = None
            self.endRemoveRows()
        else:
            self._now = text
            index = self.index(row, 0)
            self.dataChanged.emit(index, index)

    def as_text(self) -> str:
        """The timeline as plain text, with the now line last (when there is one)."""
        text = self._with_result_note(super().as_text())
        if text and self._now is not None:
            text += f"{self._now}\n    ({NOW_DETAIL})\n"
        return text
