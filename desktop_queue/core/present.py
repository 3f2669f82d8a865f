"""How jobs read to people: state phrases, durations, error signatures (no Qt).

Shared by the command line and the window, so both say "retrying in 12 s" the same way.
Every function takes a job as a plain mapping (the store's dict, as
:meth:`Queue.raw_jobs` returns it) so the window never builds full :class:`Job` views
for its tables.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from desktop_queue.core.flow import BACKGROUND_PAUSED, FlowControl, FlowEvent, FlowEventType, background_reason
from desktop_queue.core.ledger import Budget, format_usd
from desktop_queue.core.model import Priority, State
from desktop_queue.core.pause import PauseState
from desktop_queue.core.wording import status_words

#: job dict -> why flow control holds a due job back (e.g. ``FlowControl.waiting_reason``), or None
HoldReason = Callable[[Mapping[str, Any]], str | None]

WAITING_LOWER_PRIORITY = "waiting: lower priority"
WAITING_SLOT = "waiting: a free slot"
#: a due job while the user has paused the queue (nothing new starts)
PAUSED = "paused"
BACKOFF = "backoff"
#: the "next run" of a finished job (succeeded, dead, cancelled)
NO_NEXT_RUN = "—"
NOW_PREFIX = "now: "
#: how late a lease may go unrenewed before a running job says so: its holder renews it
#: every third of the lease, and a few seconds absorb a busy machine's scheduling
LEASE_LATE_S = 5.0


def lease_overdue(job: Mapping[str, Any], now: float) -> float | None:
    """Seconds since a running job's lease expired unrenewed (more than :data:`LEASE_LATE_S`), else None.

    A holder that ended has its job taken back within moments; one that lives but is
    stopped or asleep keeps it (its answer must not be paid for twice) and is late.
    """
    expires = job.get("lease_expires_at")
    if job.get("state") != State.RUNNING or not isinstance(expires, (int, float)):
        return None
    late = now - expires
    return late if late > LEASE_LATE_S else None


def _ask(hold: HoldReason | None, job: Mapping[str, Any]) -> str | None:
    """``hold``'s reason for ``job``; None without a hold, or when it fails (a display
    must never break on a flow-control hiccup)."""
    if hold is None:
        return None
    try:
        return hold(job)
    except Exception:
        return None


def describe_state(job: Mapping[str, Any], now: float, hold: HoldReason | None = None) -> str:
    """The "next run" phrase: ``retrying in 12 s``, ``waiting: rate limit``, ``running 12 s``, or ``—``.

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
            if job.get("attempts") or job.get("total_attempts"):
                return f"retrying in {seconds(wait)} ({BACKOFF})"
            return f"scheduled for {scheduled_time(run_after, now)}"
        reason = _ask(hold, job)
        if reason:
            return reason
        return "ready" if not job.get("total_attempts") else "ready to retry"
    if state == State.RUNNING:
        # the State and Attempts columns say the rest; this says how long it has run
        started = job.get("started_at")
        text = f"running {seconds(max(0.0, now - started))}" if started is not None else "running"
        overdue = lease_overdue(job, now)
        return text if overdue is None else f"{text}, lease {seconds(overdue)} overdue"
    if state in (State.SUCCEEDED, State.DEAD, State.CANCELLED):
        return NO_NEXT_RUN  # finished: no next run (State and Last error say how it ended)
    return str(state)


def now_line(job: Mapping[str, Any], now: float, hold: HoldReason | None = None) -> str | None:
    """The timeline's synthetic last line (never stored): why a queued job waits now, or
    why a running one is stuck.

    ``now: waiting: rate limit (~12 s)``, ``now: waiting: provider unavailable``,
    ``now: waiting: concurrency cap``, ``now: waiting: lower priority (2 interactive
    jobs ahead)``, ``now: retrying in 12 s (backoff)`` or ``now: ready``, the same words
    as the queue pane's "next run" column (:func:`describe_state`); for a running job
    whose lease is overdue (:func:`lease_overdue`), who holds it and what the job waits
    for. None for any other job.
    """
    if job.get("state") == State.RUNNING:
        overdue = lease_overdue(job, now)
        if overdue is None:
            return None
        holder = worker_name(job.get("worker")) or "its worker"
        return (
            f"{NOW_PREFIX}lease {seconds(overdue)} overdue: {holder} has not renewed it (stopped, or asleep?). "
            "The job waits for that process and runs again only once it has ended: its answer is not paid for twice."
        )
    if job.get("state") != State.QUEUED:
        return None
    return NOW_PREFIX + describe_state(job, now, hold)


def interactive_ahead(
    jobs: Iterable[Mapping[str, Any]],
    now: float,
    *,
    kinds: Collection[str] | None = None,
    held: HoldReason | None = None,
) -> int:
    """How many queued, due interactive jobs the lease engine will take before any background one.

    Args:
        jobs: job dicts (e.g. the queue pane's rows).
        now: the current wall time.
        kinds: only jobs of these kinds count (the ones this worker runs); None: all.
        held: a job it names a reason for (flow control holds it) is skipped, because
            the lease engine passes over it too.
    """
    count = 0
    for job in jobs:
        if job.get("state") != State.QUEUED or job.get("priority") != Priority.INTERACTIVE:
            continue
        if (job.get("run_after") or 0.0) > now + 0.5:
            continue
        if kinds is not None and job.get("kind") not in kinds:
            continue
        if held is not None:
            try:
                if held(job):
                    continue
            except Exception:  # a display must never break on a flow-control hiccup
                pass
        count += 1
    return count


def priority_reason(job: Mapping[str, Any], ahead: int, free_slots: int | None = None) -> str | None:
    """``waiting: lower priority (2 interactive jobs ahead)`` for a background job, or None.

    Args:
        job: a queued job dict.
        ahead: queued, due interactive jobs (:func:`interactive_ahead`).
        free_slots: attempts the worker may still start now; when they cover every job
            ahead, the background job starts in the same round and nothing is said.
    """
    if job.get("priority") == Priority.INTERACTIVE or ahead <= 0:
        return None
    if free_slots is not None and free_slots > ahead:
        return None
    noun = "interactive job" if ahead == 1 else "interactive jobs"
    return f"{WAITING_LOWER_PRIORITY} ({ahead} {noun} ahead)"


def slot_reason(running: int, concurrency: int) -> str | None:
    """``waiting: a free slot (4 of 4 running)`` when every slot of the worker is busy, else None."""
    if running < max(1, concurrency):
        return None
    return f"{WAITING_SLOT} ({running} of {concurrency} running)"


def first_reason(*holds: HoldReason | None) -> HoldReason:
    """One hold that asks each of ``holds`` in turn and answers with the first reason."""

    def hold(job: Mapping[str, Any]) -> str | None:
        for each in holds:
            reason = _ask(each, job)
            if reason:
                return reason
        return None

    return hold


# ---------------------------------------------------------------------- providers


def _percent(value: Any) -> str:
    try:
        return f"{float(value) * 100:.0f}%"
    except (TypeError, ValueError):
        return "?"


def flow_event_text(event: FlowEvent) -> str:
    """A provider-level state change for people: ``openai: breaker open after 5 failures; …``."""
    detail = event.detail
    name = event.profile
    kind = event.type
    if kind == FlowEventType.BREAKER_OPENED:
        cool = detail.get("delay_s")
        probe = f"; one probe job goes in {seconds(float(cool))}" if isinstance(cool, (int, float)) else ""
        why = detail.get("reason") or "retryable failures in a row"
        return f"{name}: breaker open ({why}): its jobs wait without spending attempts{probe}"
    if kind == FlowEventType.BREAKER_HALF_OPEN:
        return f"{name}: breaker half-open: one probe job may go"
    if kind == FlowEventType.BREAKER_CLOSED:
        return f"{name}: breaker closed: the provider answers again; concurrency ramps back up"
    if kind == FlowEventType.RATE_LOWERED:
        return f"{name}: rate lowered to {_percent(detail.get('scale'))} (was {_percent(detail.get('was'))}) after a rate limit"
    if kind == FlowEventType.RATE_RECOVERED:
        return f"{name}: rate recovering: {_percent(detail.get('scale'))}"
    if kind == FlowEventType.PAUSED:
        wait = detail.get("retry_after_s")
        until = f" for {seconds(float(wait))}" if isinstance(wait, (int, float)) else ""
        return f"{name}: paused{until} by the provider's rate limit"
    if kind == FlowEventType.OFFLINE:
        why = _offline_text(name, str(detail.get("reason") or "offline"))
        delay = detail.get("delay_s")
        probe = f"; one job tries again in {seconds(float(delay))}" if isinstance(delay, (int, float)) else ""
        return f"{name}: {why}: its jobs wait without spending attempts{probe}"
    if kind == FlowEventType.BACK_ONLINE:
        return f"{name}: back online: its jobs run again"
    if kind == FlowEventType.BACKGROUND_PAUSED:
        return f"{background_reason(name, str(detail.get('cause') or 'failing'))}; interactive jobs keep its share"
    if kind == FlowEventType.BACKGROUND_RESUMED:
        start, step = detail.get("start"), detail.get("step_s")
        pace = ""
        if isinstance(start, int) and isinstance(step, (int, float)):
            pace = f" slowly ({start} at a time, one more every {float(step):g} s)"
        return f"{name}: background jobs resume{pace}"
    if kind == FlowEventType.RESERVED:
        return f"{name}: a large job waited too long for its budget; smaller jobs wait until it has started"
    return event.describe()


def background_pause_text(state: PauseState, now: float | None = None) -> str | None:
    """The status bar's ``Background work paused (by cli, 18:20:03)``, or None while it runs."""
    if not state.paused:
        return None
    who = state.by or "someone"
    when = f", {clock_time(state.at, now)}" if state.at is not None else ""
    said = f": {state.reason}" if state.reason else ""
    return f"Background work paused (by {who}{when}){said}"


def background_pause_reason(state: PauseState) -> str:
    """A background job's reason while the data dir's switch is on: ``background jobs paused (by cli)``."""
    return f"{BACKGROUND_PAUSED} (by {state.by or 'someone'})"


def shared_hold_reason(job: Mapping[str, Any], background: PauseState, flow: FlowControl | None) -> str | None:
    """Why a queued, due job waits for a reason every process on the data dir shares: the
    background switch (a background job), then flow control (a rate limit, an open
    breaker, a budget, a missing key); None when neither holds it. The window adds its
    own worker's reasons after these; ``list`` and ``show`` say these alone."""
    if job.get("priority") == Priority.BACKGROUND and background.paused:
        return background_pause_reason(background)
    return flow.waiting_reason(job) if flow is not None else None


#: provider status levels, worst last
PROVIDER_OK, PROVIDER_SLOW, PROVIDER_PROBING, PROVIDER_DOWN = "ok", "slow", "probing", "down"
#: the share of a budget spent from which the indicator warns
BUDGET_WARN_SHARE = 0.9

_PERIOD_WORDS = {"month": "this month", "day": "today"}


def budget_use(snapshot: Mapping[str, Any], budget: Budget | None) -> tuple[float, str] | None:
    """(share spent, ``$4.98 of $5.00 today``) of the profile's fullest budget, or None.

    Monthly limits come first on a tie: they hold longest. None without a budget or
    without the snapshot's spend (``spent_today_usd`` ...: no ledger).
    """
    if budget is None or not budget.is_set():
        return None
    fullest: tuple[float, str] | None = None
    limits = (
        ("month", "usd", budget.usd_per_month),
        ("month", "tokens", budget.tokens_per_month),
        ("day", "usd", budget.usd_per_day),
        ("day", "tokens", budget.tokens_per_day),
    )
    for period, unit, limit in limits:
        spent = snapshot.get(f"spent_{'today' if period == 'day' else 'month'}_{unit}")
        if limit is None or not isinstance(spent, (int, float)):
            continue
        share = float(spent) / limit if limit > 0 else 1.0
        when = _PERIOD_WORDS[period]
        if unit == "usd":
            text = f"{format_usd(float(spent))} of {format_usd(float(limit))} {when}"
        else:
            text = f"{int(spent):,} of {int(limit):,} tokens {when}"
        if fullest is None or share > fullest[0]:
            fullest = (share, text)
    return fullest


def _offline_text(name: str, reason: str) -> str:
    """``offline (cannot connect (ConnectError))`` from flow control's ``profile openai is offline (…)``."""
    prefix = f"profile {name} is "
    return reason[len(prefix) :] if reason.startswith(prefix) else reason


def _unavailable_text(name: str, reason: str) -> str:
    """``no API key`` from a provider's ``no API key for profile openai: enter it …``."""
    head = reason.split(": ", 1)[0]
    return head.replace(f" for profile {name}", "").strip() or reason


def provider_status(
    snapshot: Mapping[str, Any], budget: Budget | None = None, unavailable: str | None = None
) -> tuple[str, str]:
    """(level, text) of one provider profile for the status bar, from ``FlowControl.snapshot``.

    Worst first: ``("down", "openai: offline (cannot connect (ConnectError))")``,
    ``("down", "openai: breaker open, retry in 25 s")``, ``("probing", "openai:
    breaker half-open, probing")``, ``("down", "openai: budget reached, $5.00 of $5.00
    today")``, ``("slow", "openai: rate limited (3 in a row), resuming in 3.0 s")``,
    ``("slow", "openai: rate lowered to 50%")``, ``("slow", "openai: budget nearly
    reached, $4.60 of $5.00 today")`` or ``("ok", "openai: ok, 1/4 in flight, $1.20 of
    $5.00 today")``.

    A provider that cannot run at all says why first: ``("slow", "openai: no API key")``
    (a warning, not an outage: nothing was tried; the job's now line says what to do).

    Args:
        snapshot: ``FlowControl.snapshot(profile)``.
        budget: the profile's spending limits (the snapshot has the spend, not the limits).
        unavailable: the provider's own reason it cannot run (``unavailable_reason()``).
    """
    name = snapshot.get("profile", "?")
    if unavailable:
        return PROVIDER_SLOW, f"{name}: {_unavailable_text(name, unavailable)}"
    offline = snapshot.get("offline")
    if offline:
        return PROVIDER_DOWN, f"{name}: {_offline_text(name, str(offline))}"
    breaker = snapshot.get("breaker")
    if breaker == "open":
        return PROVIDER_DOWN, f"{name}: breaker open, retry in {seconds(snapshot.get('reopens_s') or 0.0)}"
    if breaker == "half_open":
        return PROVIDER_PROBING, f"{name}: breaker half-open, probing"
    use = budget_use(snapshot, budget)
    if use is not None and use[0] >= 1.0:
        return PROVIDER_DOWN, f"{name}: budget reached, {use[1]}"
    paused = float(snapshot.get("paused_s") or 0.0)
    if paused > 0:
        streak = int(snapshot.get("throttles") or 0)
        in_a_row = f" ({streak} in a row)" if streak > 1 else ""
        return PROVIDER_SLOW, f"{name}: rate limited{in_a_row}, resuming in {seconds(paused)}"
    scale = float(snapshot.get("scale") or 1.0)
    if scale < 0.995:
        return PROVIDER_SLOW, f"{name}: rate lowered to {_percent(scale)}"
    if use is not None and use[0] >= BUDGET_WARN_SHARE:
        return PROVIDER_SLOW, f"{name}: budget nearly reached, {use[1]}"
    parts = [f"{name}: ok"]
    cap = snapshot.get("concurrency_cap")
    busy = snapshot.get("in_flight") or 0
    if busy:
        parts.append(f"{busy}{'/' + str(cap) if cap else ''} in flight")
    if use is not None:
        parts.append(use[1])
    return PROVIDER_OK, ", ".join(parts)


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


def worker_name(worker: str | None) -> str | None:
    """The machine and process a worker id names, for people: ``render-box (pid 4123)``.

    A worker id is ``host:pid`` (:func:`desktop_queue.core.queue.default_worker_id`);
    another shape (a name a caller chose) is shown as it is; None or "" is None.
    """
    if not worker:
        return None
    host, sep, pid = worker.rpartition(":")
    if sep and host and pid.isdigit():
        return f"{host} (pid {pid})"
    return worker


#: event type -> what its worker did, before the worker's name ("leased by render-box (pid 4123)")
_WORKER_DID = {
    "leased": "leased by",
    "succeeded": "completed by",
    "retry_scheduled": "failed on",
    "throttled": "throttled on",
    "dead_lettered": "failed on",
    "released": "released by",
    "resumed": "renewed by",
    "provider_job": "started by",
    "lease_expired": "the lease of",
    "stale_result": "late result from",
}


def event_who(kind: str, actor: str, worker: str | None, host: str | None = None) -> str:
    """Who an event names, for people: the machine and process that ran the attempt, else the actor.

    ``leased by render-box (pid 4123)``, ``completed by render-box (pid 4123)``,
    ``failed on render-box (pid 4123)``; an event without a worker (submitted, cancelled)
    says who asked: ``by user``, ``by cli``, and where when the event names its machine
    (``host``: a submission's): ``by user on studio``. A person's verb on a job a worker
    held names both: ``by user, on render-box (pid 4123)``.
    """
    name = worker_name(worker)
    if name is None:
        return f"by {actor} on {host}" if host else f"by {actor}"
    if actor and actor != "system":
        return f"by {actor}, on {name}"
    return f"{_WORKER_DID.get(kind, 'on')} {name}"


def attempt_hosts(events: Iterable[Mapping[str, Any] | Any]) -> list[tuple[int, str]]:
    """(attempt, worker name) of each lease in ``events`` (dicts or :class:`~desktop_queue.core.model.Event`), in order."""
    out: list[tuple[int, str]] = []
    for event in events:
        get = event.get if isinstance(event, Mapping) else lambda key, e=event: getattr(e, key, None)
        if get("type") != "leased":
            continue
        name = worker_name(get("worker"))
        if name is not None:
            out.append((int(get("attempt") or 0), name))
    return out


def ran_on_text(events: Iterable[Mapping[str, Any] | Any]) -> str | None:
    """Where a job's attempts ran: ``attempt 1 on render-box (pid 4123), attempt 2 on hostb (pid 77)``; None: nowhere yet.

    An attempt given back and leased again by the same worker (a 429, a provider pause)
    is said once with a count: ``attempt 1 on vm (pid 8811) (3 leases)``, not three times.
    """
    hosts = attempt_hosts(events)
    if not hosts:
        return None
    parts = []
    for (attempt, name), same in itertools.groupby(hosts):
        n = sum(1 for _ in same)
        parts.append(f"attempt {attempt} on {name}" + (f" ({n} leases)" if n > 1 else ""))
    return ", ".join(parts)


#: detail a timeline row leaves out: said in its headline ("Replayed as job …"), or by event_who
TIMELINE_HIDDEN_DETAIL = frozenset({"replayed_as", "replay_of", "host"})


def event_detail(event: Any, hidden: Collection[str] = TIMELINE_HIDDEN_DETAIL) -> str:
    """``leased by render-box (pid 4123) · lease: 30 s · retry after: 1.2 s`` for an event
    (who: :func:`event_who`), durations with their unit, times of day as :func:`clock_time`.

    The window's timeline rows and ``show``'s timeline say an event's detail alike.
    """
    who = event_who(event.type, event.actor, event.worker, event.detail.get("host"))
    extra = []
    for key, value in event.detail.items():
        if key in hidden:
            continue
        if key in ("delay_s", "retry_after_s", "lease_s") and isinstance(value, (int, float)):
            # the unit moves from the key to the value: "delay: 0.9 s", not "delay s: 0.9 s"
            key, value = key[: -len("_s")], seconds(float(value))
        elif key in ("run_after", "expired_at") and isinstance(value, (int, float)):
            value = clock_time(float(value))
        elif key == "result_ref" and isinstance(value, str):
            value = short_ref(value)
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        extra.append(f"{key.replace('_', ' ')}: {value}")
    return " · ".join([who, *extra])


_HASHED_NAME = re.compile(r"^([0-9a-f]{8})[0-9a-f]{50}([0-9a-f]{6})(\.[\w.]+)?$")


def short_ref(ref: str) -> str:
    """A result file's path with its 64-digit key cut in the middle:
    ``results/09/097e9893…97b35c.json`` (four wrapped lines of hex in a timeline said nothing more)."""
    head, sep, name = ref.rpartition("/")
    found = _HASHED_NAME.match(name)
    if found is None:
        return ref
    return f"{head}{sep}{found.group(1)}…{found.group(2)}{found.group(3) or ''}"


def clock_time(ts: float | None, now: float | None = None) -> str:
    """Local time of day for today's timestamps, date and time for older ones."""
    if ts is None:
        return "-"
    when = _dt.datetime.fromtimestamp(ts)
    today = _dt.datetime.fromtimestamp(now).date() if now is not None else _dt.date.today()
    return when.strftime("%H:%M:%S") if when.date() == today else when.strftime("%Y-%m-%d %H:%M")


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # (English like the rest of the app, not the locale's)

#: days back that a table still names by weekday ("Sun 23:52"); a week ago would repeat today's name
_WEEKDAY_DAYS = 6


def table_time(ts: float | None, now: float | None = None) -> str:
    """A table cell's time, as short as it can be told apart: ``14:03:22`` today,
    ``Sun 23:52`` within the last six days, ``2026-11-28`` before (or after: a clock ahead).

    A job table's time column is as wide as its widest cell: a full date and time on
    yesterday's jobs pushed the last column out of a window of the usual size. The
    cell's tooltip gives the whole time (:func:`~desktop_queue.core.model.iso`).
    """
    if ts is None:
        return "-"
    when = _dt.datetime.fromtimestamp(ts)
    today = _dt.datetime.fromtimestamp(now).date() if now is not None else _dt.date.today()
    days = (today - when.date()).days
    if days == 0:
        return when.strftime("%H:%M:%S")
    if 0 < days <= _WEEKDAY_DAYS:
        return f"{_WEEKDAYS[when.weekday()]} {when:%H:%M}"
    return when.strftime("%Y-%m-%d")


def scheduled_time(ts: float, now: float) -> str:
    """When a delayed job starts, in local time: ``14:00`` today, ``2026-12-02 14:00`` another day.

    Seconds only when the time has some (``--delay 90s``): a whole minute reads as people set it.
    """
    when = _dt.datetime.fromtimestamp(ts)
    text = when.strftime("%H:%M" if when.second == 0 else "%H:%M:%S")
    if when.date() != _dt.datetime.fromtimestamp(now).date():
        text = f"{when.date().isoformat()} {text}"
    return text


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
    """``fatal HTTP 400: demo: simulated invalid request`` or an empty string.

    The status is not said twice: a provider's message that names it already
    ("openai.chat: HTTP 400: …") keeps the table's narrow column for what went wrong.
    """
    error = job.get("last_error")
    if not error:
        return ""
    message = str(error.get("message", ""))
    return f"{error.get('class', 'error')}{status_words(error.get('status'), message)}: {message}"


def error_signature(job: Mapping[str, Any]) -> str:
    """The error with its varying parts blanked, so that alike failures sort together.

    Blanked, in this order (each rule sees what the earlier ones left): quoted values
    (``'…'``), UUIDs, prefixed ids such as ``req_8f3a…`` or ``chatcmpl-AbC1…`` (the
    prefix stays: it says what kind of id it was), long hex or base62 tokens, durations
    (``1.5s``, ``6m0s``) and numbers (``#``). Words that merely contain a digit, such as
    the model ``gpt-4o``, stay as they are.
    """
    error = job.get("last_error")
    if not error:
        return ""
    message = str(error.get("message", ""))
    # re caches compiled patterns: no cost per row of a sorted table
    rules = (
        (r"(?<!\w)(['\"`])[^'\"`\n]{1,120}\1(?!\w)", r"\1…\1"),
        (r"(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "…"),
        (r"(?<![\w-])([A-Za-z]{2,16}[_-])(?=[A-Za-z0-9]*\d)[A-Za-z0-9]{4,}(?![\w-])", r"\1…"),
        (r"(?<![\w-])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}(?![\w-])", "…"),
        (r"(?<![\w-])(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{16,}(?![\w-])", "…"),
        (r"(?<![\w.-])(?:\d+(?:\.\d+)?(?:ms|h|m|s))+(?![\w-])", "#"),
        (r"(?<![\w.-])\d+(?:[.,]\d+)*(?![\w-])", "#"),
    )
    for pattern, replacement in rules:
        message = re.sub(pattern, replacement, message)
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


#: how long "done in the last minute" looks back
RECENT_WINDOW_S = 60.0


class JobTally:
    """What the window's status bar and lanes need to know about the hot jobs, kept up to
    date from the change feed instead of walking every job on every refresh tick.

    Fed the same job dicts as the queue pane's model (:meth:`reset` with every hot
    job, :meth:`apply` with the changed ones, as ``Queue.raw_jobs`` returns them), it
    answers in time proportional to the few jobs concerned, never to the stored ones:
    the counts per state, the succeeded jobs of the last minute, the queued
    interactive jobs (the lane the lease engine serves first) and the kinds of the
    active jobs. Every answer equals a full recount over the latest copy of each job
    (tested with Hypothesis against :func:`recount`).
    """

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._state: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        #: queued interactive jobs: id -> job dict (``held`` is asked about the job itself)
        self._interactive: dict[str, Mapping[str, Any]] = {}
        #: active (queued or running) jobs: id -> kind, and how many per kind
        self._active: dict[str, str] = {}
        self._kinds: dict[str, int] = {}
        #: succeeded jobs not yet known to be older than the last cutoff asked: id -> finished_at
        self._recent: dict[str, float] = {}
        self._cutoff = float("-inf")

    def reset(self, jobs: Iterable[Mapping[str, Any]], recent: Mapping[str, float] | None = None) -> None:
        """Forgets everything and counts ``jobs`` (the whole hot set).

        ``recent`` (``id -> finished_at``, :meth:`Queue.finished_since
        <desktop_queue.core.queue.Queue.finished_since>`) names the recent successes the
        hot set may lack: the jobs already archived. A job of ``jobs`` answers for itself.
        """
        self._clear()
        self.apply(jobs)
        for job_id, finished in (recent or {}).items():
            if job_id not in self._state:
                self._recent[job_id] = float(finished)

    def apply(self, jobs: Iterable[Mapping[str, Any]]) -> None:
        """Takes the new copies of changed jobs (a job not named keeps its last copy)."""
        for job in jobs:
            job_id = str(job["id"])
            state = str(job.get("state", ""))
            old = self._state.get(job_id)
            if old is not None:
                self._counts[old] -= 1
                if not self._counts[old]:
                    del self._counts[old]
            self._state[job_id] = state
            self._counts[state] = self._counts.get(state, 0) + 1
            if state == State.QUEUED and job.get("priority") == Priority.INTERACTIVE:
                self._interactive[job_id] = job
            else:
                self._interactive.pop(job_id, None)
            kind = self._active.pop(job_id, None)
            if kind is not None:
                self._kinds[kind] -= 1
                if not self._kinds[kind]:
                    del self._kinds[kind]
            if state in (State.QUEUED, State.RUNNING):
                kind = str(job.get("kind", ""))
                self._active[job_id] = kind
                self._kinds[kind] = self._kinds.get(kind, 0) + 1
            finished = job.get("finished_at")
            if state == State.SUCCEEDED and finished is not None and float(finished) >= self._cutoff:
                self._recent[job_id] = float(finished)
            else:
                self._recent.pop(job_id, None)

    def counts(self) -> dict[str, int]:
        """Hot jobs per state (states with none left out)."""
        return dict(self._counts)

    def done_since(self, cutoff: float) -> int:
        """How many jobs succeeded at or after ``cutoff`` (e.g. ``now - 60``).

        Cutoffs are expected to move forward (a clock): jobs older than one asked for
        are let go, so each is looked at about once after it finished.
        """
        if cutoff > self._cutoff:
            self._cutoff = cutoff
            for job_id in [i for i, at in self._recent.items() if at < cutoff]:
                del self._recent[job_id]
        return sum(1 for at in self._recent.values() if at >= cutoff)

    def queued_interactive(self) -> list[Mapping[str, Any]]:
        """The queued interactive jobs (the lane served first; at most a handful)."""
        return list(self._interactive.values())

    def interactive_ahead(
        self, now: float, *, kinds: Collection[str] | None = None, held: HoldReason | None = None
    ) -> int:
        """:func:`interactive_ahead` over the queued interactive jobs only."""
        return interactive_ahead(self._interactive.values(), now, kinds=kinds, held=held)

    def active_kinds(self) -> set[str]:
        """The kinds of the queued and running jobs."""
        return set(self._kinds)


def recount(jobs: Iterable[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """What :class:`JobTally` answers, by walking ``jobs`` (the reference its tests compare with)."""
    jobs = list(jobs)
    counts: dict[str, int] = {}
    for job in jobs:
        counts[str(job.get("state", ""))] = counts.get(str(job.get("state", "")), 0) + 1
    cutoff = now - RECENT_WINDOW_S
    return {
        "counts": counts,
        "done": sum(
            1
            for j in jobs
            if j.get("state") == State.SUCCEEDED and j.get("finished_at") is not None and j["finished_at"] >= cutoff
        ),
        "interactive_ahead": interactive_ahead(jobs, now),
        "active_kinds": {str(j.get("kind", "")) for j in jobs if j.get("state") in (State.QUEUED, State.RUNNING)},
    }
