"""The Qt-free job engine: model, state machine, durable store, leases, retries.

Nothing in this package imports Qt (an import-linter contract enforces it);
the runtime and the window adapt it, the command line drives it directly.
"""

from desktop_queue.core.backend import Backend
from desktop_queue.core.clock import Clock, FakeClock, SystemClock
from desktop_queue.core.errors import (
    DuplicateKeyConflict,
    IllegalTransition,
    InputTooLarge,
    InvalidInput,
    NoSuchJob,
    NotAllowed,
    QueueError,
    QueueFull,
    StaleLease,
    StoreCorrupt,
    StoreError,
    UnknownKind,
)
from desktop_queue.core.memory import MemoryBackend
from desktop_queue.core.model import (
    Actor,
    ErrorClass,
    EventType,
    Job,
    Priority,
    State,
)
from desktop_queue.core.outcome import LookupResult, Outcome, RunContext
from desktop_queue.core.queue import Lease, Queue, SubmitResult
from desktop_queue.core.retry import RetryPolicy

__all__ = [
    "Actor",
    "Backend",
    "Clock",
    "DuplicateKeyConflict",
    "ErrorClass",
    "EventType",
    "FakeClock",
    "IllegalTransition",
    "InputTooLarge",
    "InvalidInput",
    "Job",
    "Lease",
    "LookupResult",
    "MemoryBackend",
    "NoSuchJob",
    "NotAllowed",
    "Outcome",
    "Priority",
    "Queue",
    "QueueError",
    "QueueFull",
    "RetryPolicy",
    "RunContext",
    "StaleLease",
    "State",
    "StoreCorrupt",
    "StoreError",
    "SubmitResult",
    "SystemClock",
    "UnknownKind",
]
