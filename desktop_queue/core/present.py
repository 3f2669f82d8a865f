"""How jobs read to people: state phrases, durations, error signatures (no Qt).

Shared by the command line and the window, so both say "retrying in 12 s" the same way.
Every function takes a job as a plain mapping (the store's dict, as
:meth:`Queue.raw_jobs` returns it) so the window never builds full :class:`Job` views
for its tables.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Mapping
from typing import Any

from desktop_queue.core.model import State

_NUMBERS = re.compile(r"\d+(\.\d+)?")
_HEX_IDS = re.compile(r"\b[0-9a-f]{8,}\b")


#: job dict -> why flow control holds a due job back (e.g. ``FlowControl.waiting_reason``), or None
HoldReason = Callable[[Mapping[str, Any]], str | None]


def describe_state(job: Mapping[str, Any], now: float, hold: HoldReason | None = None) -> str:
    """The "next run" phrase: ``retrying in 12 s``, ``waiting: rate limit``, or the state.

    Args:
        job: a job dict (``state``, ``run_after``, ``attempts``, ``total_attempts``, ``last_error``).
        now: the current wall time.
        hold: asked for a queued job that is due: a reason (``waiting: provider
            unavailable``) replaces "ready"; None or an error keeps "ready".
    """
    state = job.get("state")
    error = job.get("last_error") or {}
    if state == State.QUEUED:
        run_after = job.get("run_after") or 0.0
        if run_after > now + 0.5:
            wait = run_after - now
            if error.get("class") == "throttled":
                return f"waiting: rate limit ({seconds(wait)})"
            label = "retrying" if job.get("attempts") or job.get("total_attempts") else "scheduled"
            return f"{label} in {seconds(wait)}"
        if hold is not None:
            try:
                reason = hold(job)
            except Exception:  # a display must never break on a flow-control hiccup
                reason = None
            if reason:
                return reason
        return "ready" if not job.get("total_attempts") else "ready to retry"
    if state == State.RUNNING:
        return f"attempt {job.get('attempts', 0)}/{job.get('max_attempts', 0)}"
    if state == State.DEAD and error:
        return f"dead ({error.get('class')})"
    return str(state)


def seconds(value: float | None) -> str:
    """A short duration for people: ``0.4 s``, ``12 s``, ``3 min``, ``2.5 h``."""
    if value is None:
        return "-"
    value = max(0.0, value)
    if value < 10:
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    if value < 172800:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.1f} d"


def clock_time(ts: float | None, now: float | None = None) -> str:
    """Local time of day for today's timestamps, date and time for older ones."""
    if ts is None:
        return "-"
    when = _dt.datetime.fromtimestamp(ts)
    today = _dt.datetime.fromtimestamp(now).date() if now is not None else _dt.date.today()
    return when.strftime("%H:%M:%S") if when.date() == today else when.strftime("%Y-%m-%d %H:%M")


def attempts_text(job: Mapping[str, Any]) -> str:
    """``2/5`` (this run's attempts against its budget)."""
    return f"{job.get('attempts', 0)}/{job.get('max_attempts', 0)}"


def wait_time(job: Mapping[str, Any], now: float) -> float | None:
    """Seconds from submission to the latest start (or until now while still waiting)."""
    created = job.get("created_at")
    if created is None:
        return None
    started = job.get("started_at")
    if started is not None:
        return max(0.0, started - created)
    if job.get("state") == State.QUEUED:
        return max(0.0, now - created)
    return None


def run_time(job: Mapping[str, Any], now: float) -> float | None:
    """Seconds the latest attempt ran (so far, while running)."""
    started = job.get("started_at")
    if started is None:
        return None
    if job.get("state") == State.RUNNING:
        return max(0.0, now - started)
    finished = job.get("finished_at")
    return max(0.0, finished - started) if finished is not None else None


def error_text(job: Mapping[str, Any]) -> str:
    """``fatal HTTP 400: demo: simulated invalid request`` or an empty string."""
    error = job.get("last_error")
    if not error:
        return ""
    status = f" HTTP {error['status']}" if error.get("status") else ""
    return f"{error.get('class', 'error')}{status}: {error.get('message', '')}"


def error_signature(job: Mapping[str, Any]) -> str:
    """The error with numbers and ids blanked, so that alike failures sort together."""
    error = job.get("last_error")
    if not error:
        return ""
    message = _HEX_IDS.sub("…", str(error.get("message", "")))
    message = _NUMBERS.sub("#", message)
    return f"{error.get('class', 'error')} {error.get('status') or ''} {message}".strip()


def reconciliation_summary(decisions: list[str]) -> str:
    """``2 interrupted jobs: 1 completed before the crash, 1 queued again`` from decisions."""
    if not decisions:
        return ""
    labels = {
        "succeeded": "completed before the crash",
        "requeued": "queued again",
        "resumed": "still running at the provider (resumed)",
        "dead": "dead-lettered (no attempts left)",
        "unchanged": "changed by another process meanwhile",
    }
    counts: dict[str, int] = {}
    for decision in decisions:
        counts[decision] = counts.get(decision, 0) + 1
    parts = [f"{n} {labels.get(d, d)}" for d, n in counts.items()]
    noun = "interrupted job" if len(decisions) == 1 else "interrupted jobs"
    return f"{len(decisions)} {noun}: " + ", ".join(parts)
