"""What providers hand back to the engine, and what the engine hands to providers."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from desktop_queue.core.model import ErrorClass


@dataclass(frozen=True)
class Outcome:
    """The result of one attempt.

    Attributes:
        ok: True when the attempt produced a result.
        result: the JSON result (only when ``ok``).
        error_class: how the failure is handled (only when not ``ok``).
        message: a short, redacted description of the failure.
        status: the HTTP status behind the failure, if any.
        retry_after: seconds the provider asked us to wait, if it said.
        unreachable: the request never reached the provider (no connection could be
            made): nothing was sent or paid for, the attempt is given back and the
            profile counts as offline until a request connects again.
        key_fp: for an authentication failure (HTTP 401/403), a short one-way
            fingerprint of the API key that was refused (never the key), so that a
            replay preview can tell whether the key has changed since.
    """

    ok: bool
    result: Any = None
    error_class: ErrorClass | None = None
    message: str = ""
    status: int | None = None
    retry_after: float | None = None
    unreachable: bool = False
    key_fp: str | None = None

    @classmethod
    def success(cls, result: Any) -> Outcome:
        return cls(ok=True, result=result)

    @classmethod
    def failure(
        cls,
        error_class: ErrorClass | str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        unreachable: bool = False,
        key_fp: str | None = None,
    ) -> Outcome:
        return cls(
            ok=False,
            error_class=ErrorClass(error_class),
            message=message,
            status=status,
            retry_after=retry_after,
            unreachable=unreachable,
            key_fp=key_fp,
        )


@dataclass(frozen=True)
class LookupResult:
    """What a provider knows about a job that was running when its process died.

    Attributes:
        status: ``finished`` (``result`` holds it), ``running`` (still in progress
            at the provider), ``failed`` (``outcome`` says how) or ``unknown``.
    """

    status: str
    result: Any = None
    outcome: Outcome | None = None

    FINISHED = "finished"
    RUNNING = "running"
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclass
class RunContext:
    """Handed to a provider for one attempt.

    Attributes:
        job_id: the job.
        attempt: the attempt number within the current run.
        idempotency_key: the job's key (send it to providers that honour one).
        cancelled: set when the job was cancelled or its lease was lost; stop soon.
        heartbeat: call regularly while working; returns False when the lease is lost.
        record_provider_job: commit a provider-side job id before polling it.
        provider_job_id: the provider-side id from an earlier attempt, if any.
        stopping: set together with ``cancelled`` when the attempt must stop but the job
            itself was not cancelled (the worker shuts down, or the lease was lost): leave
            provider-side work running so that a later attempt can resume it.
        timeout_s: the attempt's timeout (None: none): a provider gives each blocking call
            no longer than this, so that a call that hangs ends as a retryable timeout.
            The runtime renews the lease meanwhile, whatever the provider does.
        partial: a streaming provider calls this with the text produced so far (all of
            it, each time) while it works; it is shown, never stored: only the final
            result is. None: nobody is watching.
    """

    job_id: str
    attempt: int
    idempotency_key: str
    cancelled: threading.Event = field(default_factory=threading.Event)
    heartbeat: Any = None
    record_provider_job: Any = None
    provider_job_id: str | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    timeout_s: float | None = None
    partial: Any = None

    def show_partial(self, text: str) -> None:
        """Hands the text so far to whoever watches (a failing watcher never stops the attempt)."""
        if self.partial is None:
            return
        try:
            self.partial(text)
        except Exception:  # a display must not break a paid call
            pass

    def beat(self) -> bool:
        """Heartbeats the lease; returns False (and sets ``cancelled``) when it is lost."""
        if self.heartbeat is None:
            return not self.cancelled.is_set()
        alive = bool(self.heartbeat())
        if not alive:
            self.cancelled.set()
        return alive


class Provider(Protocol):
    """The small interface every job kind implements.

    Attributes:
        kind: the job kind this provider runs (``demo``, ``openai.chat``, ...).
        version: part of the idempotency fingerprint; bump it when outputs change.
    """

    kind: str
    version: str

    def validate(self, payload: Any) -> None:
        """Raises :class:`~desktop_queue.core.errors.InvalidInput` if the input is unusable."""
        ...

    def run(self, job: Any, context: RunContext) -> Outcome:
        """Runs one attempt; never raises for expected failures."""
        ...

    def classify(self, error: BaseException) -> Outcome:
        """Turns an unexpected exception into a classified failure."""
        ...

    def lookup(self, job: Any) -> LookupResult:
        """Asks the provider what became of an orphaned job."""
        ...
