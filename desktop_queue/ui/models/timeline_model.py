"""One job's event timeline as a list model."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from PySide6.QtCore import QAbstractListModel, QObject, Qt, Signal

from desktop_queue.core import Job
from desktop_queue.core.model import Event, EventType
from desktop_queue.core.present import clock_time, event_detail
from desktop_queue.ui.icons import icon
from desktop_queue.ui.models.columns import _ROOT, AnyIndex


class TimelineRole(IntEnum):
    """Data roles of :class:`TimelineModel`."""

    EVENT = Qt.ItemDataRole.UserRole
    CATEGORY = Qt.ItemDataRole.UserRole + 1
    LINK = Qt.ItemDataRole.UserRole + 2
    HEADLINE = Qt.ItemDataRole.UserRole + 3
    DETAIL = Qt.ItemDataRole.UserRole + 4


#: event type -> (category, label, icon)
EVENT_LOOK: dict[str, tuple[str, str, str]] = {
    EventType.SUBMITTED: ("normal", "Submitted", "event-submitted"),
    EventType.LEASED: ("normal", "Leased", "event-leased"),
    EventType.PROVIDER_JOB: ("normal", "Provider job started", "event-info"),
    EventType.SUCCEEDED: ("success", "Succeeded", "state-succeeded"),
    EventType.RETRY_SCHEDULED: ("retry", "Retry scheduled", "event-retry"),
    EventType.THROTTLED: ("throttle", "Throttled: waiting for the rate limit", "event-throttled"),
    EventType.DEAD_LETTERED: ("failure", "Dead-lettered", "state-dead"),
    EventType.LEASE_EXPIRED: ("expiry", "Lease expired", "event-lease-expired"),
    EventType.CANCELLED: ("cancel", "Cancelled", "state-cancelled"),
    EventType.RETRIED: ("retry", "Retried by hand (new run)", "event-retry"),
    EventType.REPLAYED_AS: ("link", "Replayed as a new job", "event-link"),
    EventType.RECONCILED: ("reconcile", "Reconciled after a crash", "event-reconciled"),
    EventType.STALE_RESULT: ("expiry", "Late result rejected (stale lease)", "event-stale"),
    EventType.RELEASED: ("normal", "Released (attempt not counted)", "event-info"),
    EventType.RESUMED: ("normal", "Lease renewed after a suspension", "event-info"),
    EventType.RESOLVED: ("success", "Resolved by hand (closed without a retry)", "state-succeeded"),
    EventType.WEBHOOK: ("normal", "Provider webhook received (verified)", "event-info"),
    EventType.REPAIR_FINDING: ("throttle", "Repair scan: something is wrong", "event-info"),
}

#: events a person caused outside any attempt: the attempt/epoch they carry is the job's
#: previous one ("Retried by hand · attempt 1 · epoch 1" read as if attempt 1 were retried)
_NO_ATTEMPT = frozenset({EventType.SUBMITTED, EventType.RETRIED, EventType.REPLAYED_AS})


def event_link(event: Event) -> str | None:
    """The job id an event links to (a replay's original, or the replay), if any."""
    target = event.detail.get("replayed_as") or event.detail.get("replay_of")
    return str(target) if target else None


def event_headline(event: Event, now: float | None = None, *, after_cancel: bool = False) -> str:
    """``12:03:04  Leased  · attempt 1 · epoch 3``.

    ``after_cancel``: the event is a stale result or renewal of an attempt a person
    cancelled (see :meth:`TimelineModel.after_cancel`), the expected end of that attempt.
    """
    _cat, label, _icon = EVENT_LOOK.get(event.type, ("normal", event.type.replace("_", " ").capitalize(), "event-info"))
    if event.type == EventType.STALE_RESULT:
        renewal = str(event.detail.get("reason", "")).startswith("heartbeat")
        if after_cancel:
            label = "Attempt told to stop after the cancel" if renewal else "Result arrived after the cancel: not kept"
        elif renewal:
            label = "Lease renewal refused (stale lease)"
    elif event.type == EventType.SUBMITTED and event.detail.get("replay_of"):
        label = f"Submitted as a replay of {event.detail['replay_of']}"
    elif event.type == EventType.REPLAYED_AS:
        label = f"Replayed as job {event.detail.get('replayed_as')}"
    parts = [clock_time(event.at, now), label]
    if (event.attempt or event.epoch) and event.type not in _NO_ATTEMPT:
        parts.append(f"attempt {event.attempt} · epoch {event.epoch}")
    return "  ·  ".join(parts)


class TimelineModel(QAbstractListModel):
    """The events of one job, oldest first; new events are appended with ranged inserts.

    Signals:
        job_changed(str): the model now shows another job (id, or "" for none).
    """

    job_changed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._job: Job | None = None
        self._events: list[Event] = []
        self._cancelled_epochs: set[int] = set()  # epochs of attempts a person cancelled

    @property
    def job(self) -> Job | None:
        return self._job

    def rowCount(self, parent: AnyIndex = _ROOT) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else len(self._events)

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._events):
            return None
        event = self._events[index.row()]
        category, _label, icon_name = EVENT_LOOK.get(event.type, ("normal", event.type, "event-info"))
        after_cancel = self.after_cancel(event)
        if event.type == EventType.SUBMITTED and event.detail.get("replay_of"):
            category, icon_name = "link", "event-link"
        elif after_cancel:  # what a cancel is expected to bring: not a warning
            category, icon_name = "cancel", "state-cancelled"
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{event_headline(event, after_cancel=after_cancel)}\n{event_detail(event)}"
        if role == TimelineRole.HEADLINE:
            return event_headline(event, after_cancel=after_cancel)
        if role == TimelineRole.DETAIL:
            return event_detail(event)
        if role == Qt.ItemDataRole.DecorationRole:
            return icon(icon_name)
        if role == Qt.ItemDataRole.ToolTipRole:
            link = event_link(event)
            return f"Click to open job {link}" if link else event_detail(event)
        if role == TimelineRole.EVENT:
            return event
        if role == TimelineRole.CATEGORY:
            return category
        if role == TimelineRole.LINK:
            return event_link(event)
        return None

    def after_cancel(self, event: Event) -> bool:
        """Whether ``event`` is a stale result or renewal of an attempt a person cancelled:
        the attempt ends so after a cancel (a running provider call still answers)."""
        return event.type == EventType.STALE_RESULT and event.epoch in self._cancelled_epochs

    def _note_cancels(self, events: list[Event]) -> None:
        self._cancelled_epochs.update(e.epoch for e in events if e.type == EventType.CANCELLED)

    def show_job(self, job: Job | None) -> None:
        """Shows another job's timeline (a reset: the rows are a different list)."""
        self.beginResetModel()
        self._job = job
        self._events = list(job.events) if job is not None else []
        self._cancelled_epochs = set()
        self._note_cancels(self._events)
        self.endResetModel()
        self.job_changed.emit(job.id if job is not None else "")

    def update_job(self, job: Job) -> None:
        """The same job changed: appends its new events (timelines only grow)."""
        if self._job is None or job.id != self._job.id or len(job.events) < len(self._events):
            self.show_job(job)
            return
        self._job = job
        new = list(job.events[len(self._events) :])
        if new:
            self._note_cancels(new)
            start = len(self._events)
            self.beginInsertRows(_ROOT, start, start + len(new) - 1)
            self._events.extend(new)
            self.endInsertRows()

    def as_text(self) -> str:
        """The timeline as plain text (what Copy puts on the clipboard)."""
        if self._job is None:
            return ""
        job = self._job
        lines = [f"{job.title} (job {job.id}, {job.kind}) — {job.state}"]
        if job.replay_of:
            lines.append(f"replay of {job.replay_of}")
        for event in self._events:
            lines.append(f"{event_headline(event, after_cancel=self.after_cancel(event))}\n    {event_detail(event)}")
        return "\n".join(lines) + "\n"
