"""Jobs, their states, events and the transition table (shared/DESIGN.md section 1).

The store keeps jobs as plain dicts (cheap to load, journal and snapshot);
:class:`Job` is the typed, read-only view handed to everything outside the core.
"""

from __future__ import annotations

import datetime as _dt
import functools
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from desktop_queue.core.errors import IllegalTransition
from desktop_queue.core.records import ErrorDict, EventDict, JobDict


class State(StrEnum):
    """Where a job is in its life."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


class Priority(StrEnum):
    """The lane a job waits in; interactive jobs are leased first."""

    INTERACTIVE = "interactive"
    BACKGROUND = "background"


class ErrorClass(StrEnum):
    """How a failure is handled (shared/DESIGN.md section 2)."""

    RETRYABLE = "retryable"
    THROTTLED = "throttled"
    FATAL = "fatal"
    POISON = "poison"


class Actor(StrEnum):
    """Who asked for a change."""

    USER = "user"
    CLI = "cli"
    SYSTEM = "system"


class EventType(StrEnum):
    """Every kind of entry in a job's timeline."""

    SUBMITTED = "submitted"
    LEASED = "leased"
    PROVIDER_JOB = "provider_job"
    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    THROTTLED = "throttled"
    DEAD_LETTERED = "dead_lettered"
    LEASE_EXPIRED = "lease_expired"
    CANCELLED = "cancelled"
    RETRIED = "retried"
    REPLAYED_AS = "replayed_as"
    RECONCILED = "reconciled"
    STALE_RESULT = "stale_result"
    RELEASED = "released"
    RESUMED = "resumed"
    #: a person closed a dead letter without retrying it (the job stays dead, flagged ``resolved_at``)
    RESOLVED = "resolved"
    #: a verified provider webhook about the job's provider job (see ``core.webhooks``)
    WEBHOOK = "webhook"
    #: the repair scan found something wrong with the job (stuck, running long, notice lost)
    REPAIR_FINDING = "repair_finding"


TERMINAL = frozenset({State.SUCCEEDED, State.DEAD, State.CANCELLED})
FINISHED = TERMINAL
LIVE = frozenset({State.QUEUED, State.RUNNING})

#: The state machine as data: state -> the states it may become.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.RUNNING, State.CANCELLED}),
    State.RUNNING: frozenset({State.SUCCEEDED, State.QUEUED, State.DEAD, State.CANCELLED}),
    State.SUCCEEDED: frozenset(),
    State.DEAD: frozenset({State.QUEUED}),
    State.CANCELLED: frozenset({State.QUEUED}),
}


#: the table as ``(current, target)`` string pairs: one set lookup per check
_ALLOWED = frozenset((str(current), str(target)) for current, targets in TRANSITIONS.items() for target in targets)


def check_transition(job_id: str, current: str, target: str) -> None:
    """Raises :class:`IllegalTransition` unless ``current -> target`` is in the table."""
    if (current, target) not in _ALLOWED:
        raise IllegalTransition(job_id, current, target)


#: The only keys an event's ``detail`` may carry: an allow-list, so that no
#: input text, prompt or secret can reach a timeline by accident.
DETAIL_KEYS = frozenset(
    {
        "reason",
        "error_class",
        "error",
        "status",
        "retry_after_s",
        "delay_s",
        "run_after",
        "run",
        "result_ref",
        "duplicate_of",
        "replay_of",
        "replayed_as",
        "provider_job_id",
        "expired_at",
        "poison_count",
        "priority",
        "kind",
        "key_source",
        "lease_s",
        "from_state",
        "to_state",
        "stale_epoch",
        "bytes",
        "edited",
        "note",
        "finding",
        #: the machine a job was submitted on (the host part of a worker id), for timelines
        "host",
    }
)

#: Detail values are short: a timeline explains, it does not archive.
MAX_DETAIL_TEXT = 300


def clean_detail(detail: dict[str, Any] | None) -> dict[str, Any]:
    """Keeps only allow-listed keys with scalar values, strings cut short."""
    if not detail:
        return {}
    out: dict[str, Any] = {}
    for key, value in detail.items():
        if key not in DETAIL_KEYS or value is None:
            continue
        kind = type(value)
        if kind is str or isinstance(value, str):
            if len(value) > MAX_DETAIL_TEXT:
                value = value[: MAX_DETAIL_TEXT - 1] + "…"
        elif kind is not int and kind is not float and not isinstance(value, (int, float, bool)):
            continue
        out[key] = value
    return out


def events_of(job: JobDict) -> list[EventDict]:
    """A stored job's events, parsed on first use.

    Snapshots keep each job's events as one JSON text (bytes), so opening a large store does
    not build millions of small dicts that nobody looks at; they are parsed (and kept
    parsed) the first time a timeline, a change or the metrics need them.
    """
    events = job.get("events")
    if isinstance(events, (str, bytes)):
        events = orjson.loads(events)
        job["events"] = events
    elif events is None:
        events = []
        job["events"] = events
    return events


def iso(ts: float | None) -> str:
    """Formats a stored timestamp for people (local time, seconds)."""
    if ts is None:
        return "-"
    return _dt.datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


@dataclass(frozen=True)
class Event:
    """One entry of a job's append-only timeline."""

    type: str
    at: float
    attempt: int
    epoch: int
    worker: str | None
    actor: str
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: EventDict | dict[str, Any]) -> Event:
        return cls(
            type=raw["type"],
            at=raw["at"],
            attempt=raw.get("attempt", 0),
            epoch=raw.get("epoch", 0),
            worker=raw.get("worker"),
            actor=raw.get("actor", "system"),
            detail=dict(raw.get("detail") or {}),
        )


def job_fields(raw: JobDict, with_events: bool = True) -> dict[str, Any]:
    """The field values of :class:`Job` for a stored job: the one place that maps one to the other.

    A stored job leaves out what is still at its default (no lease yet, no error, …).
    """
    return {
        "id": raw["id"],
        "seq": raw["seq"],
        "kind": raw["kind"],
        "title": raw.get("title") or "",
        "priority": raw["priority"],
        "input": raw.get("input"),
        "idempotency_key": raw["key"],
        "key_source": raw.get("key_source", "fingerprint"),
        "max_attempts": raw["max_attempts"],
        "state": raw["state"],
        "attempts": raw.get("attempts", 0),
        "total_attempts": raw.get("total_attempts", 0),
        "run": raw.get("run", 1),
        "created_at": raw["created_at"],
        "updated_at": raw.get("updated_at", raw["created_at"]),
        "run_after": raw.get("run_after", raw["created_at"]),
        "deadline_at": raw.get("deadline_at"),
        "lease_epoch": raw.get("lease_epoch", 0),
        "lease_expires_at": raw.get("lease_expires_at"),
        "worker": raw.get("worker"),
        "last_error": raw.get("last_error"),
        "result_ref": raw.get("result_ref"),
        "provider_job_id": raw.get("provider_job_id"),
        "replay_of": raw.get("replay_of"),
        "replayed_as": tuple(raw.get("replayed_as") or ()),
        "poison_count": raw.get("poison_count", 0),
        "started_at": raw.get("started_at"),
        "finished_at": raw.get("finished_at"),
        "resolved_at": raw.get("resolved_at"),
        "raw_events": tuple(events_of(raw)) if with_events else (),
    }


@dataclass(frozen=True)
class Job:
    """A read-only snapshot of one job, as of the moment it was taken."""

    id: str
    seq: int
    kind: str
    title: str
    priority: str
    input: Any
    idempotency_key: str
    key_source: str
    max_attempts: int
    state: str
    attempts: int
    total_attempts: int
    run: int
    created_at: float
    updated_at: float
    run_after: float
    deadline_at: float | None
    lease_epoch: int
    lease_expires_at: float | None
    worker: str | None
    last_error: ErrorDict | None
    result_ref: str | None
    provider_job_id: str | None
    replay_of: str | None
    replayed_as: tuple[str, ...]
    poison_count: int
    started_at: float | None
    finished_at: float | None
    #: when a person resolved this dead letter (closed it without retrying), or None
    resolved_at: float | None
    #: the stored events as of the moment the view was taken (see :attr:`events`)
    raw_events: tuple[EventDict, ...] = field(default=(), repr=False)

    @functools.cached_property
    def events(self) -> tuple[Event, ...]:
        """The timeline, built on first use: most views (a commit's return value, a lease)
        never look at it."""
        return tuple([Event.from_dict(e) for e in self.raw_events])

    @classmethod
    def from_dict(cls, raw: JobDict, with_events: bool = True) -> Job:
        """Builds the view from the store's dict (the lease token is never exposed).

        The view is a copy: later changes to the stored job do not show in it.
        """
        return cls(**job_fields(raw, with_events))

    @property
    def is_finished(self) -> bool:
        return self.state in TERMINAL

    def to_json(self, with_events: bool = True, with_input: bool = True) -> dict[str, Any]:
        """A JSON-ready dict for the command line's ``--json`` output."""
        out: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "title": self.title,
            "state": self.state,
            "priority": self.priority,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "total_attempts": self.total_attempts,
            "run": self.run,
            "idempotency_key": self.idempotency_key,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "run_after": self.run_after,
            "lease_epoch": self.lease_epoch,
            "lease_expires_at": self.lease_expires_at,
            "worker": self.worker,
            "last_error": self.last_error,
            "result_ref": self.result_ref,
            "provider_job_id": self.provider_job_id,
            "replay_of": self.replay_of,
            "replayed_as": list(self.replayed_as),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "resolved_at": self.resolved_at,
        }
        if with_input:
            out["input"] = self.input
        if with_events:
            out["events"] = [
                {
                    "type": e.type,
                    "at": e.at,
                    "attempt": e.attempt,
                    "epoch": e.epoch,
                    "worker": e.worker,
                    "actor": e.actor,
                    "detail": e.detail,
                }
                for e in self.events
            ]
        return out
