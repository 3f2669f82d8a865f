"""The engine's exceptions. Each maps to one CLI exit code (shared/DESIGN.md section 5)."""

from __future__ import annotations


class QueueError(Exception):
    """Base class of every error the engine raises on purpose.

    Attributes:
        exit_code: the command-line exit code for this error.
    """

    exit_code = 1


class InvalidInput(QueueError):
    """The submitted input is not acceptable (not JSON, wrong shape, ...)."""

    exit_code = 2


class InputTooLarge(InvalidInput):
    """The submitted input is over the size limit."""


class UnknownKind(InvalidInput):
    """No provider runs this kind of job."""


class NoSuchJob(QueueError):
    """No job has this id (or the prefix is ambiguous)."""

    exit_code = 3


class NotAllowed(QueueError):
    """The verb is not allowed in the job's current state."""

    exit_code = 4


class IllegalTransition(NotAllowed):
    """A state change the transition table does not allow.

    Args:
        job_id: the job.
        from_state: its current state.
        to_state: the state that was asked for.
    """

    def __init__(self, job_id: str, from_state: str, to_state: str) -> None:
        super().__init__(f"job {job_id}: cannot go from {from_state} to {to_state}")
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state


class StaleLease(QueueError):
    """A heartbeat, completion or failure came with a token that is no longer current."""

    exit_code = 4


class DuplicateKeyConflict(QueueError):
    """The idempotency key is already used by a job with a different input."""


class QueueFull(QueueError):
    """The interactive lane already holds its maximum of waiting jobs."""


class StoreError(QueueError):
    """The store cannot be read or written (disk full, permissions, newer format)."""


class StoreCorrupt(StoreError):
    """A store file failed its checksum or could not be parsed and could not be recovered."""
