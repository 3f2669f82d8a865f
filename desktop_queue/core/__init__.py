"""The Qt-free job engine: model, state machine, durable store, leases, retries.

Nothing in this package imports Qt (an import-linter contract enforces it);
the runtime and the window adapt it, the command line drives it directly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Loaded on first use (PEP 562), not here: `from desktop_queue.core.errors import X` (what
# the command line and the window do) would otherwise import the whole engine, store and
# archive included, before a command is even parsed.
_HOME = {
    "Actor": "desktop_queue.core.model",
    "Backend": "desktop_queue.core.backend",
    "Clock": "desktop_queue.core.clock",
    "DuplicateKeyConflict": "desktop_queue.core.errors",
    "ErrorClass": "desktop_queue.core.model",
    "EventType": "desktop_queue.core.model",
    "FakeClock": "desktop_queue.core.clock",
    "IllegalTransition": "desktop_queue.core.errors",
    "InputTooLarge": "desktop_queue.core.errors",
    "InvalidInput": "desktop_queue.core.errors",
    "Job": "desktop_queue.core.model",
    "Lease": "desktop_queue.core.queue",
    "LookupResult": "desktop_queue.core.outcome",
    "MemoryBackend": "desktop_queue.core.memory",
    "NoSuchJob": "desktop_queue.core.errors",
    "NotAllowed": "desktop_queue.core.errors",
    "Outcome": "desktop_queue.core.outcome",
    "Priority": "desktop_queue.core.model",
    "Queue": "desktop_queue.core.queue",
    "QueueError": "desktop_queue.core.errors",
    "QueueFull": "desktop_queue.core.errors",
    "RetryPolicy": "desktop_queue.core.retry",
    "RunContext": "desktop_queue.core.outcome",
    "StaleLease": "desktop_queue.core.errors",
    "State": "desktop_queue.core.model",
    "StoreCorrupt": "desktop_queue.core.errors",
    "StoreError": "desktop_queue.core.errors",
    "SubmitResult": "desktop_queue.core.queue",
    "SystemClock": "desktop_queue.core.clock",
    "UnknownKind": "desktop_queue.core.errors",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next look-up is a plain module attribute
    return value


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
