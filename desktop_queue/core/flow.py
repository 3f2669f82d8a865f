"""Flow control: cost-aware rate limits, adaptive slow-down, concurrency caps, circuit breakers.

Everything here is Qt-free and reads time only from an injected clock
(``clock.now()``: wall time, as the state is shared by processes whose monotonic clocks
differ), so tests can jump it. The pieces:

- :class:`TokenBucket`: a per-window budget (requests per minute or tokens per
  minute). A job is admitted when its *estimated* cost fits; the estimate is later
  settled against the usage the provider reported.
- :class:`AdaptiveLimit`: a 429 (or a rate-limit header saying nothing is left)
  pauses the whole provider profile and lowers its shared budget and concurrency;
  consecutive 429s grow the pause exponentially (full jitter, capped, ``Retry-After``
  as a floor); recovery is gradual (additive increase, multiplicative decrease).
- :class:`ConcurrencyLimit`: at most N attempts of one profile at once.
- :class:`CircuitBreaker`: after N consecutive retryable failures the profile's
  jobs wait ("waiting: provider unavailable") without being leased, so they spend
  no attempts; after a cool-down one probe goes through; its success closes the
  breaker and concurrency ramps back up step by step.
- Offline: a request that could not even connect marks the profile offline; its
  jobs wait (their attempts given back) and one probe at a time finds out when it is
  back. Budgets: a job whose estimate would pass the profile's daily or monthly
  budget (against the :class:`~desktop_queue.core.ledger.SpendLedger`) waits.
- Degradation (:class:`Degradation`): while a profile is failing (breaker not closed,
  offline), paused by a 429 (or its rate-limit headers) or nearly out of budget,
  its *background-lane* jobs pause (not leased, no attempt spent) so that interactive
  jobs keep the profile's share; when it recovers they come back a few at a time
  (slow start), as the breaker's concurrency ramp does.
- :class:`FlowControl`: the facade the lease driver plugs into
  ``Queue.lease(accept=flow.accept)``; it also says why a job waits
  (:meth:`FlowControl.waiting_reason`) and records provider-level state changes as
  :class:`FlowEvent` records the caller can log or show. With a shared directory every
  process on a data dir works on one state (shared/DESIGN.md section 2); with a
  :class:`SharedState` of a database (:mod:`desktop_queue.core.pg.flowstate`), every
  process on every machine using that queue does.

A *profile* is one configured provider endpoint (base URL + key + limits). Limits,
breaker and adaptive state are kept per profile; a job's profile is the part of its kind
before the first dot (``openai.chat`` -> ``openai``). Profiles are configuration, never
job input.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import orjson

from desktop_queue.core.clock import Clock, SystemClock
from desktop_queue.core.errors import QueueError, StoreError
from desktop_queue.core.lapse import Lapse, os_reason
from desktop_queue.core.ledger import Budget, SpendLedger, Spent, budget_reason, estimate_usage, usage_of
from desktop_queue.core.liveness import holder_alive, this_process
from desktop_queue.core.model import ErrorClass, State
from desktop_queue.core.outcome import Outcome
from desktop_queue.core.redact import strings_in
from desktop_queue.core.store.fileio import FileLock, atomic_write, make_dirs

log = logging.getLogger(__name__)

_EPS = 1e-9


def _t(value: float) -> float | None:
    """A time for JSON: -inf ("never") as None."""
    return None if not math.isfinite(value) else value


def _ut(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else -math.inf


WAITING_RATE_LIMIT = "waiting: rate limit"
WAITING_UNAVAILABLE = "waiting: provider unavailable"
WAITING_CONCURRENCY = "waiting: concurrency cap"
#: how every reason for a degraded profile's background job begins
BACKGROUND_PAUSED = "background jobs paused"
#: how the reason of a background job held back by the slow start begins
BACKGROUND_RESUMING = "background jobs resuming"


class Degraded(StrEnum):
    """Why a profile's background-lane jobs pause (see :class:`Degradation`)."""

    FAILING = "failing"
    RATE_LIMITED = "rate_limited"
    BUDGET_LOW = "budget_low"


_DEGRADED_WORDS: dict[str, str] = {
    Degraded.FAILING: "is failing",
    Degraded.RATE_LIMITED: "is rate-limited",
    Degraded.BUDGET_LOW: "budget nearly spent",
}


def background_reason(profile: str, cause: Degraded | str) -> str:
    """``background jobs paused: openai is failing`` (or ``is rate-limited``, ``budget nearly spent``)."""
    words = _DEGRADED_WORDS.get(cause, str(cause))  # (a StrEnum's hash is its string's)
    return f"{BACKGROUND_PAUSED}: {profile} {words}"


#: what ended, in the slow start's reason: a rate-limit pause ending is no recovery (the
#: provider may well answer 429 to the next request too)
_ENDED_WORDS: dict[Degraded | None, str] = {
    Degraded.FAILING: "{} recovered",
    Degraded.RATE_LIMITED: "{}'s rate-limit pause is over",
    Degraded.BUDGET_LOW: "{} has budget again",
}


def resuming_reason(profile: str, cap: int, after: Degraded | None = None) -> str:
    """``background jobs resuming: openai recovered, 2 at a time for now`` (the slow start after ``after``)."""
    ended = _ENDED_WORDS.get(after, "{} recovered")
    return f"{BACKGROUND_RESUMING}: {ended.format(profile)}, {cap} at a time for now"


# ---------------------------------------------------------------------- records


class FlowEventType(StrEnum):
    """Provider-level state changes worth a log line or a status-bar message."""

    BREAKER_OPENED = "breaker_opened"
    BREAKER_HALF_OPEN = "breaker_half_open"
    BREAKER_CLOSED = "breaker_closed"
    RATE_LOWERED = "rate_lowered"
    RATE_RECOVERED = "rate_recovered"
    PAUSED = "paused"
    RESERVED = "reserved"
    OFFLINE = "offline"
    BACK_ONLINE = "back_online"
    BACKGROUND_PAUSED = "background_paused"
    BACKGROUND_RESUMED = "background_resumed"


@dataclass(frozen=True)
class FlowEvent:
    """One state change of one profile's flow control.

    Attributes:
        at: monotonic time of the change.
        profile: the provider profile it concerns.
        type: what happened.
        detail: small scalar facts (never input text, never a key).
    """

    at: float
    profile: str
    type: FlowEventType
    detail: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """A one-line text for a log or a status bar."""
        facts = ", ".join(f"{k}={v}" for k, v in self.detail.items())
        return f"{self.profile}: {self.type}" + (f" ({facts})" if facts else "")


@dataclass(frozen=True)
class Cost:
    """What one attempt is expected to spend.

    Attributes:
        requests: requests it makes (counted against RPM).
        tokens: tokens it is expected to use, prompt plus output (counted against TPM).
    """

    requests: int = 1
    tokens: int = 0


@dataclass(frozen=True)
class RateLimitInfo:
    """What a provider's rate-limit response headers said.

    Attributes:
        remaining_requests: ``x-ratelimit-remaining-requests``.
        remaining_tokens: ``x-ratelimit-remaining-tokens``.
        reset_s: seconds until the exhausted limit resets (the larger of the
            ``x-ratelimit-reset-*`` headers that matter), if known.
    """

    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_s: float | None = None


def estimate_cost(payload: Any, *, default_output_tokens: int = 256, chars_per_token: float = 4.0) -> Cost:
    """Estimates one attempt's cost from its input, before it runs.

    The prompt is every string in ``messages``, ``prompt``, ``input`` and
    ``instructions`` at ``chars_per_token`` characters per token, plus 4 tokens of
    framing per message; the output is ``max_tokens`` / ``max_completion_tokens`` /
    ``max_output_tokens`` or ``default_output_tokens``.

    Args:
        payload: the job's input.
        default_output_tokens: assumed output when the input sets no maximum.
        chars_per_token: the rough ratio of text to tokens.
    """
    if not isinstance(payload, dict):
        return Cost(1, default_output_tokens)
    chars = 0
    for key in ("prompt", "input", "instructions"):
        chars += sum(len(s) for s in strings_in(payload.get(key)))
    messages = payload.get("messages")
    framing = 0
    if isinstance(messages, list):
        framing = 4 * len(messages)  # role and separators
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else message
            chars += sum(len(s) for s in strings_in(content))
    output = default_output_tokens
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            output = value
            break
    return Cost(1, int(math.ceil(chars / chars_per_token)) + framing + output)


def usage_tokens(usage: Any) -> int | None:
    """The total tokens of a provider's ``usage`` object (chat or responses style), or None."""
    if not isinstance(usage, Mapping):
        return None
    total = usage.get("total_tokens")
    if isinstance(total, (int, float)) and not isinstance(total, bool):
        return int(total)
    parts = [usage.get(k) for k in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")]
    numbers = [int(p) for p in parts if isinstance(p, (int, float)) and not isinstance(p, bool)]
    return sum(numbers) if numbers else None


# ---------------------------------------------------------------------- building blocks


@dataclass
class _Spend:
    at: float
    cost: float
    tag: str | None


class TokenBucket:
    """A budget per window, e.g. 90,000 tokens per minute.

    Tokens spent come back exactly ``window_s`` after they were spent (a sliding
    window), which is the strict form of a token bucket: *no* window of
    ``window_s`` seconds ever sees more admitted cost than the budget (a classic
    refilling bucket allows up to twice the budget in its first minute). The one
    exception is a single cost larger than the whole budget: it is admitted alone,
    into an empty window, so that it is not refused forever.

    Args:
        budget: cost allowed per window (must be > 0).
        window_s: the window length in seconds.
    """

    def __init__(self, budget: float, window_s: float = 60.0) -> None:
        if budget <= 0 or window_s <= 0:
            raise ValueError("a bucket needs a positive budget and window")
        self.budget = float(budget)
        self.window_s = float(window_s)
        self.scale = 1.0
        self._spent: deque[_Spend] = deque()
        self._tags: dict[str, _Spend] = {}
        self._total = 0.0

    @property
    def effective_budget(self) -> float:
        """The budget after adaptive slow-down (``budget * scale``)."""
        return self.budget * self.scale

    def _expire(self, now: float) -> None:
        while self._spent and self._spent[0].at + self.window_s <= now:
            spend = self._spent.popleft()
            self._total -= spend.cost
            if spend.tag is not None and self._tags.get(spend.tag) is spend:
                del self._tags[spend.tag]
        if not self._spent:
            self._total = 0.0  # no float drift once empty

    def spent(self, now: float) -> float:
        """Cost admitted within the window ending at ``now``."""
        self._expire(now)
        return max(0.0, self._total)

    def fits(self, cost: float, now: float) -> bool:
        """True when ``cost`` can be admitted at ``now``."""
        self._expire(now)
        if not self._spent:
            return True  # an empty window takes anything (even an oversized cost)
        return self._total + cost <= self.effective_budget + _EPS

    def take(self, cost: float, now: float, tag: str | None = None) -> None:
        """Records ``cost`` as spent at ``now`` (whether or not it fits; see :meth:`try_take`)."""
        self._expire(now)
        spend = _Spend(now, float(cost), tag)
        self._spent.append(spend)
        self._total += spend.cost
        if tag is not None:
            self._tags[tag] = spend

    def try_take(self, cost: float, now: float, tag: str | None = None) -> bool:
        """Spends ``cost`` if it fits; returns whether it did."""
        if not self.fits(cost, now):
            return False
        self.take(cost, now, tag)
        return True

    def wait_time(self, cost: float, now: float) -> float:
        """Seconds until ``cost`` fits, assuming nothing else is admitted meanwhile."""
        if self.fits(cost, now):
            return 0.0
        remaining = self._total
        for spend in self._spent:
            remaining -= spend.cost
            if remaining + cost <= self.effective_budget + _EPS or remaining <= _EPS:
                return max(0.0, spend.at + self.window_s - now)
        return max(0.0, self._spent[-1].at + self.window_s - now)  # pragma: no cover - loop always returns

    def settle(self, tag: str, actual: float, now: float) -> float:
        """Replaces the estimate spent under ``tag`` with the ``actual`` cost.

        Returns:
            The correction applied (actual - estimate; 0 when the spend already left the window).
        """
        self._expire(now)
        spend = self._tags.get(tag)
        if spend is None:
            return 0.0
        delta = float(actual) - spend.cost
        spend.cost = float(actual)
        self._total += delta
        return delta

    def refund(self, tag: str, now: float) -> None:
        """Gives back what was spent under ``tag`` (the attempt used nothing)."""
        self.settle(tag, 0.0, now)
        self._tags.pop(tag, None)

    def dump(self) -> dict[str, Any]:
        """The bucket's state as JSON (what every process on a data dir shares)."""
        return {"scale": self.scale, "spent": [[s.at, s.cost, s.tag] for s in self._spent]}

    def load(self, data: Mapping[str, Any]) -> None:
        self.scale = float(data.get("scale", 1.0))
        self._spent = deque(_Spend(float(at), float(cost), tag) for at, cost, tag in data.get("spent", ()))
        self._tags = {s.tag: s for s in self._spent if s.tag is not None}
        self._total = sum(s.cost for s in self._spent)


class ConcurrencyLimit:
    """At most ``limit`` attempts at once (None: no limit of its own).

    Args:
        limit: the configured cap.
    """

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError("a concurrency limit is at least 1")
        self.limit = limit
        self.held: dict[str, str | None] = {}  # job id -> the process holding the slot

    def has_room(self, cap: int | None) -> bool:
        """True when one more attempt fits under ``cap`` (the effective limit now)."""
        return cap is None or len(self.held) < cap

    def acquire(self, job_id: str, owner: str | None = None) -> None:
        self.held[job_id] = owner

    def release(self, job_id: str) -> None:
        self.held.pop(job_id, None)


class AdaptiveLimit:
    """A shared slow-down factor for one profile: halved on a 429, regained step by step.

    Args:
        decrease: the factor applied on a throttle.
        floor: the lowest scale.
        recovery_step: added to the scale per quiet ``recovery_interval_s``.
        recovery_interval_s: how long without a throttle earns one step back.
        guard_s: throttles within this time of a decrease count once (a burst of
            429s from concurrent attempts is one signal, not five).
    """

    def __init__(
        self,
        *,
        decrease: float = 0.5,
        floor: float = 0.1,
        recovery_step: float = 0.1,
        recovery_interval_s: float = 10.0,
        guard_s: float = 1.0,
    ) -> None:
        self.decrease = decrease
        self.floor = floor
        self.recovery_step = recovery_step
        self.recovery_interval_s = recovery_interval_s
        self.guard_s = guard_s
        self.scale = 1.0
        self.paused_until = -math.inf
        self._last_change = -math.inf
        self._last_decrease = -math.inf
        self.streak = 0  # consecutive throttles without a success in between

    def dump(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "paused_until": _t(self.paused_until),
            "last_change": _t(self._last_change),
            "last_decrease": _t(self._last_decrease),
            "streak": self.streak,
        }

    def load(self, data: Mapping[str, Any]) -> None:
        self.scale = float(data.get("scale", 1.0))
        self.paused_until = _ut(data.get("paused_until"))
        self._last_change = _ut(data.get("last_change"))
        self._last_decrease = _ut(data.get("last_decrease"))
        self.streak = int(data.get("streak", 0))

    def throttle_pause(self, now: float, retry_after: float | None, rng: Any, *, base_s: float, cap_s: float) -> float:
        """A throttle: the whole profile pauses; returns for how long.

        Consecutive throttles grow the pause exponentially with full jitter (capped),
        even though each throttled job gets its attempt back: a server that answers 429
        to everything, with or without ``Retry-After``, sees a handful of requests, not
        hundreds. A ``Retry-After`` is a floor, never shortened by the jitter.
        """
        self.streak += 1
        ceiling = min(cap_s, base_s * (2 ** min(self.streak, 32)))
        pause = max(retry_after or 0.0, rng.uniform(0.0, ceiling))
        self.paused_until = max(self.paused_until, now + pause)
        return max(0.0, self.paused_until - now)

    def update(self, now: float) -> bool:
        """Applies the recovery earned since the last change; True if the scale rose."""
        if self.scale >= 1.0:
            return False
        base = max(self._last_change, self.paused_until)
        steps = int((now - base) // self.recovery_interval_s)
        if steps <= 0:
            return False
        self.scale = min(1.0, round(self.scale + steps * self.recovery_step, 6))
        self._last_change = base + steps * self.recovery_interval_s
        return True

    def pause_left(self, now: float) -> float:
        """Seconds the profile is still paused by a Retry-After (0: not paused)."""
        return max(0.0, self.paused_until - now)

    def on_throttle(self, now: float, retry_after: float | None) -> bool:
        """A 429: pause until ``retry_after`` and lower the scale; True if the scale dropped."""
        if retry_after is not None and retry_after > 0:
            self.paused_until = max(self.paused_until, now + retry_after)
        return self.lower(now)

    def lower(self, now: float) -> bool:
        """Lowers the scale after a throttle (once per ``guard_s``); True if it dropped."""
        if now - self._last_decrease < self.guard_s:
            return False
        self._last_decrease = now
        old = self.scale
        self.scale = max(self.floor, round(self.scale * self.decrease, 6))
        self._last_change = now
        return self.scale < old

    def on_exhausted(self, now: float, reset_s: float | None) -> None:
        """A header said nothing is left: pause until it resets (no scale change)."""
        if reset_s is not None and reset_s > 0:
            self.paused_until = max(self.paused_until, now + reset_s)


class BreakerState(StrEnum):
    """The circuit breaker's states."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Stops sending work to a provider that keeps failing, then probes it.

    Args:
        threshold: consecutive retryable failures that open it.
        cooldown_s: how long it stays open before one probe is let through.
        max_cooldown_s: the cool-down doubles after each failed probe, up to this.
        ramp_step_s: after closing, concurrency starts at 1 and grows by 1 per step.
        ramp_max: the ramp ends at this cap when the profile has no limit of its own.
    """

    def __init__(
        self,
        threshold: int = 5,
        cooldown_s: float = 30.0,
        *,
        max_cooldown_s: float = 300.0,
        ramp_step_s: float = 5.0,
        ramp_max: int = 8,
    ) -> None:
        self.threshold = threshold
        self.base_cooldown_s = cooldown_s
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self.ramp_step_s = ramp_step_s
        self.ramp_max = ramp_max
        self.state = BreakerState.CLOSED
        self.failures = 0
        self.opened_at = -math.inf
        self.probe: str | None = None
        self.closed_at: float | None = None

    def update(self, now: float) -> bool:
        """Moves open -> half-open when the cool-down is over; True if it did."""
        if self.state is BreakerState.OPEN and now >= self.opened_at + self.cooldown_s:
            self.state = BreakerState.HALF_OPEN
            self.probe = None
            return True
        return False

    def reopens_in(self, now: float) -> float:
        """Seconds until the next probe may go (0 unless open)."""
        if self.state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self.opened_at + self.cooldown_s - now)

    def allows(self, job_id: str) -> bool:
        """Whether ``job_id`` may start now (no change of state)."""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.HALF_OPEN:
            return self.probe is None or self.probe == job_id
        return False

    def admit(self, job_id: str) -> bool:
        """Lets ``job_id`` start; in half-open it becomes the one probe. True if it is the probe."""
        if self.state is BreakerState.HALF_OPEN and self.probe is None:
            self.probe = job_id
            return True
        return False

    def ramp_cap(self, now: float, limit: int | None) -> int | None:
        """The concurrency allowed by the ramp after closing (None: no ramp in effect)."""
        if self.state is not BreakerState.CLOSED:
            return 1
        if self.closed_at is None:
            return None
        cap = 1 + int((now - self.closed_at) // self.ramp_step_s)
        if cap >= (limit if limit is not None else self.ramp_max):
            self.closed_at = None
            return None
        return cap

    def on_success(self, job_id: str, now: float) -> bool:
        """A success; True if it closed the breaker."""
        self.failures = 0
        if self.state is BreakerState.CLOSED:
            return False
        self.state = BreakerState.CLOSED
        self.probe = None
        self.closed_at = now
        self.cooldown_s = self.base_cooldown_s
        return True

    def on_failure(self, job_id: str, now: float) -> bool:
        """A retryable failure; True if it opened (or re-opened) the breaker."""
        if self.state is BreakerState.HALF_OPEN:
            if self.probe != job_id:
                return False  # a straggler from before the breaker opened
            self.cooldown_s = min(self.max_cooldown_s, self.cooldown_s * 2)
            return self._open(now)
        if self.state is BreakerState.OPEN:
            return False
        self.failures += 1
        if self.failures >= self.threshold:
            return self._open(now)
        return False

    def on_reachable(self) -> None:
        """The provider answered (even with a fatal error): the failure streak ends."""
        if self.state is BreakerState.CLOSED:
            self.failures = 0

    def on_abandoned(self, job_id: str) -> None:
        """An attempt ended without an outcome (cancelled, released): a probe slot frees."""
        if self.probe == job_id:
            self.probe = None

    def dump(self) -> dict[str, Any]:
        return {
            "state": str(self.state),
            "failures": self.failures,
            "opened_at": _t(self.opened_at),
            "probe": self.probe,
            "closed_at": self.closed_at,
            "cooldown_s": self.cooldown_s,
        }

    def load(self, data: Mapping[str, Any]) -> None:
        self.state = BreakerState(data.get("state", "closed"))
        self.failures = int(data.get("failures", 0))
        self.opened_at = _ut(data.get("opened_at"))
        self.probe = data.get("probe")
        closed = data.get("closed_at")
        self.closed_at = float(closed) if isinstance(closed, (int, float)) else None
        self.cooldown_s = float(data.get("cooldown_s", self.base_cooldown_s))

    def _open(self, now: float) -> bool:
        self.state = BreakerState.OPEN
        self.opened_at = now
        self.probe = None
        self.closed_at = None
        self.failures = 0
        return True


# ---------------------------------------------------------------------- the facade


@dataclass(frozen=True)
class Degradation:
    """When a profile's background-lane jobs pause, and how they come back.

    Background work is what can wait (summaries, batch runs); a profile in trouble
    keeps what it still can do for the jobs someone waits for. While a cause holds,
    the profile's background jobs are not leased (they spend no attempt) and say why;
    interactive jobs go on under the usual limits. The probe that finds out whether a
    failing profile is back may be a background job when no interactive job waits:
    else a queue of background work alone would never learn that it recovered.

    Attributes:
        on_failing: pause while the breaker is open or half-open, or the profile is offline.
        on_rate_cut: pause while a 429 (or the provider's rate-limit headers) pauses the
            profile; when the pause ends they come back with the slow start, under the
            lowered rate both lanes share (interactive jobs are leased first).
        budget_reserve: pause while less than this share of any daily or monthly
            budget is left (0: never; the budget itself still holds every job).
        ramp_start: background attempts at once when the profile has recovered.
        ramp_step_s: one more background attempt at once per step, until the
            profile's concurrency limit (or the breaker's ramp ceiling) is reached.
    """

    on_failing: bool = True
    on_rate_cut: bool = True
    budget_reserve: float = 0.10
    ramp_start: int = 1
    ramp_step_s: float = 5.0


@dataclass(frozen=True)
class ProfileLimits:
    """The configured limits of one provider profile.

    Attributes:
        rpm: requests per minute (None: unlimited).
        tpm: tokens per minute (None: unlimited).
        concurrency: attempts at once (None: only the app's global limit).
        breaker_threshold: consecutive retryable failures that open the breaker.
        breaker_cooldown_s: how long the breaker stays open before a probe.
        ramp_step_s: after the breaker closes, one more concurrent attempt per step.
        aging_s: a job refused by the budget this long gets a reservation, so that
            smaller jobs behind it cannot keep it waiting forever.
        window_s: the rate window (60 s for per-minute limits).
        throttle_base_s: the first ceiling of a throttled profile's pause.
        throttle_cap_s: the largest ceiling of a throttled profile's pause.
        offline_probe_s: the longest wait between two probes of an unreachable profile.
        budget: daily and monthly spend limits (None: none).
        model: the model a job that names none runs on (for its price estimate).
        local: the endpoint is on this machine (free unless the user prices it).
        degradation: when its background jobs pause (see :class:`Degradation`).
    """

    rpm: float | None = None
    tpm: float | None = None
    concurrency: int | None = None
    breaker_threshold: int = 5
    breaker_cooldown_s: float = 30.0
    ramp_step_s: float = 5.0
    aging_s: float = 30.0
    window_s: float = 60.0
    throttle_base_s: float = 1.0
    throttle_cap_s: float = 60.0
    offline_probe_s: float = 30.0
    budget: Budget | None = None
    model: str | None = None
    local: bool = False
    degradation: Degradation = Degradation()


@dataclass
class _Admission:
    cost: Cost
    at: float
    started: bool = False
    owner: str | None = None  # the process that was admitted (see liveness.this_process)
    background: bool = False  # a background-lane job (counted against the slow start)


@dataclass
class _Waiter:
    since: float
    seen: float
    passed_over: bool = False  # a job that started waiting later (or never waited) went first


@dataclass
class _Offline:
    """A profile none of whose requests connect: its jobs wait, attempts unspent."""

    since: float
    failures: int
    probe_at: float  # when the next probe may go
    probe: str | None = None
    reason: str = ""


class _ProfileFlow:
    """All flow state of one profile.

    The budgets, in-flight attempts, breaker, slow-down and offline state are what every
    process on the data dir shares (:meth:`dump` / :meth:`load`); the waiters and the
    reservation only order this process's own candidates.
    """

    def __init__(self, name: str, limits: ProfileLimits) -> None:
        self.name = name
        self.limits = limits
        self.rpm = TokenBucket(limits.rpm, limits.window_s) if limits.rpm else None
        self.tpm = TokenBucket(limits.tpm, limits.window_s) if limits.tpm else None
        self.concurrency = ConcurrencyLimit(limits.concurrency)
        self.adaptive = AdaptiveLimit()
        self.breaker = CircuitBreaker(
            limits.breaker_threshold, limits.breaker_cooldown_s, ramp_step_s=limits.ramp_step_s
        )
        self.admitted: dict[str, _Admission] = {}
        self.offline: _Offline | None = None
        self.waiters: dict[str, _Waiter] = {}
        self.reserved: str | None = None
        self.reserved_cost: Cost | None = None
        self.last_prune = -math.inf
        #: why its background jobs pause now (None: they run), since when
        self.degraded: Degraded | None = None
        self.degraded_since = -math.inf
        #: when the last cause ended: background jobs come back a few at a time from then
        self.resumed_at: float | None = None
        #: which cause that was (None: not known, a state written by an older version)
        self.resumed_from: Degraded | None = None
        #: a background job was held back in this spell (only then is its start and end news)
        self.held_back = False

    def buckets(self) -> list[tuple[TokenBucket, str]]:
        out = []
        if self.rpm is not None:
            out.append((self.rpm, "requests"))
        if self.tpm is not None:
            out.append((self.tpm, "tokens"))
        return out

    def dump(self) -> dict[str, Any]:
        offline = self.offline
        return {
            "rpm": self.rpm.dump() if self.rpm is not None else None,
            "tpm": self.tpm.dump() if self.tpm is not None else None,
            "adaptive": self.adaptive.dump(),
            "breaker": self.breaker.dump(),
            "admitted": {
                job_id: [a.cost.requests, a.cost.tokens, a.at, a.started, a.owner]
                for job_id, a in self.admitted.items()
            },
            "offline": None
            if offline is None
            else [offline.since, offline.failures, offline.probe_at, offline.probe, offline.reason],
            "last_prune": _t(self.last_prune),
            # (keys of their own: a process of an older version reads the rest as before)
            "degrade": {
                "cause": None if self.degraded is None else str(self.degraded),
                "since": _t(self.degraded_since),
                "resumed_at": self.resumed_at,
                "resumed_from": None if self.resumed_from is None else str(self.resumed_from),
                "held": self.held_back,
            },
            "background": sorted(job_id for job_id, a in self.admitted.items() if a.background),
        }

    def load(self, data: Mapping[str, Any]) -> None:
        for bucket, key in ((self.rpm, "rpm"), (self.tpm, "tpm")):
            if bucket is not None and isinstance(data.get(key), Mapping):
                bucket.load(data[key])
        self.adaptive.load(data.get("adaptive") or {})
        self.breaker.load(data.get("breaker") or {})
        self.admitted = {
            job_id: _Admission(Cost(int(r), int(t)), float(at), bool(started), owner)
            for job_id, (r, t, at, started, owner) in (data.get("admitted") or {}).items()
        }
        self.concurrency.held = {job_id: a.owner for job_id, a in self.admitted.items()}
        off = data.get("offline")
        self.offline = None if not off else _Offline(float(off[0]), int(off[1]), float(off[2]), off[3], str(off[4]))
        self.last_prune = _ut(data.get("last_prune"))
        for job_id in data.get("background") or ():
            if job_id in self.admitted:
                self.admitted[job_id].background = True
        degrade = data.get("degrade") or {}
        cause = degrade.get("cause")
        # (a cause this version does not know holds nothing back here: it cannot say why)
        self.degraded = Degraded(cause) if cause in _DEGRADED_WORDS else None
        self.degraded_since = _ut(degrade.get("since"))
        resumed = degrade.get("resumed_at")
        self.resumed_at = float(resumed) if isinstance(resumed, (int, float)) else None
        ended = degrade.get("resumed_from")
        self.resumed_from = Degraded(ended) if ended in _DEGRADED_WORDS else None
        self.held_back = degrade.get("held") is True

    def background_cap(self, now: float) -> int | None:
        """How many background attempts may run at once in the slow start (None: no ramp in effect)."""
        if self.resumed_at is None:
            return None
        policy = self.limits.degradation
        step = max(policy.ramp_step_s, _EPS)
        cap = max(1, policy.ramp_start) + int(max(0.0, now - self.resumed_at) // step)
        full = self.concurrency.limit if self.concurrency.limit is not None else self.breaker.ramp_max
        if cap >= full:
            self.resumed_at = None  # fully back
            return None
        return cap

    def background_in_flight(self) -> int:
        return sum(1 for a in self.admitted.values() if a.background)

    def concurrency_cap(self, now: float) -> int | None:
        limit = self.concurrency.limit
        caps: list[int] = []
        ramp = self.breaker.ramp_cap(now, limit)
        if ramp is not None:
            caps.append(ramp)
        if limit is not None:
            caps.append(max(1, int(limit * self.adaptive.scale)))
        elif self.adaptive.scale < 1.0:
            # no configured cap: a throttled profile still runs fewer attempts at once
            caps.append(max(1, int(self.breaker.ramp_max * self.adaptive.scale)))
        return min(caps) if caps else None

    def rate_wait(self, cost: Cost, now: float) -> float:
        wait = self.adaptive.pause_left(now)
        for bucket, unit in self.buckets():
            amount = cost.requests if unit == "requests" else cost.tokens
            wait = max(wait, bucket.wait_time(amount, now))
        return wait


def _job_fields(job: Any) -> tuple[str, str, Any]:
    """(id, kind, input) of a job dict, a :class:`Job`, or a lease holding one."""
    if isinstance(job, Mapping):
        return str(job["id"]), str(job.get("kind", "")), job.get("input")
    inner = getattr(job, "job", None)
    if inner is not None and hasattr(inner, "kind"):
        job = inner
    return str(job.id), str(job.kind), getattr(job, "input", None)


def default_profile_of(kind: str, payload: Any) -> str:
    """The profile of a kind: the part before its first dot (``openai.chat`` -> ``openai``).

    Profiles are configuration, never job input: a job's input cannot move it to a
    profile with other limits, or to none (the providers refuse an input that names
    a profile they do not run on).
    """
    return kind.split(".", 1)[0]


def _is_background(job: Any) -> bool:
    """Whether ``job`` (a dict, :class:`Job` or lease) waits in the background lane.

    A job that names no lane is not held back as background work.
    """
    if isinstance(job, Mapping):
        return job.get("priority") == "background"
    inner = getattr(job, "job", None)
    if inner is not None and hasattr(inner, "kind"):
        job = inner
    return getattr(job, "priority", None) == "background"


class SharedState(Protocol):
    """Where the flow state that several processes share is kept: the storage seam of :class:`FlowControl`.

    A :meth:`FlowControl.session` holds :meth:`locked` for its whole length: no other
    process reads or writes the state meanwhile. What the block gets is the stored
    document, ``{}`` when there is none (or it is damaged: limits start afresh), or None
    when no one changed it since this process last read or wrote it (its memory is then
    current, including a write of its own that failed). Inside, :meth:`write` replaces
    the document; a write that changes nothing may be skipped. Implemented by
    :class:`_SharedFile` (``<data dir>/flow/state.json`` under an OS lock) and by
    :class:`desktop_queue.core.pg.flowstate.PgSharedState` (one row locked ``FOR UPDATE``
    in a transaction), with the same semantics.

    A shared state that several machines use may also have ``ended_attempts(job_ids) ->
    set[str]`` (called inside :meth:`locked`): which of these jobs no longer run under a
    live lease. Flow control asks it about attempts admitted by processes on other
    machines, whose liveness this one cannot check (:func:`holder_alive`), so that a
    machine that died mid-attempt does not hold a concurrency slot for ever.
    """

    def locked(self) -> AbstractContextManager[dict[str, Any] | None]:
        """Holds the state exclusively; yields the document (see above).

        Raises:
            ValueError: the document was written by a newer version.
            StoreError: the state cannot be reached (a database that does not answer).
        """
        ...

    def write(self, doc: dict[str, Any]) -> None:
        """Replaces the document (inside :meth:`locked`).

        Raises:
            OSError, StoreError: it could not be saved (limits keep working in memory).
        """
        ...

    def close(self) -> None: ...


def decode_flow_doc(raw: bytes, where: object) -> dict[str, Any]:
    """The flow state document in ``raw`` (``{}`` if damaged or not one), as every :class:`SharedState` reads it.

    Raises:
        ValueError: it was written by a newer Desktop Queue.
    """
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        log.warning("flow state %s is damaged; limits start afresh", where)
        return {}
    if not isinstance(doc, dict) or doc.get("format") != FLOW_FORMAT:
        return {}
    if doc.get("schema_version", 0) > FLOW_SCHEMA:
        raise ValueError(f"{where} was written by a newer Desktop Queue")
    return doc


class _SharedFile:
    """The flow state every process on a data dir shares: ``<dir>/state.json``.

    Held under an OS lock on the directory itself (a lock file could be deleted from
    under its holders, and a newcomer would then lock another file). The state is
    rewritten atomically (temp file and rename) without an fsync: it is a rate window
    and a few counters, which a power cut may reset but never tear.
    """

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        make_dirs(directory)
        self.path = directory / "state.json"
        self._lock = FileLock.on_directory(directory, directory / "lock")
        self._seen: tuple[int, int, int] | None = None
        self.raw: bytes = b""

    def lock(self) -> None:
        self._lock.acquire(exclusive=True)

    def unlock(self) -> None:
        self._lock.release()

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any] | None]:
        """:meth:`SharedState.locked`: the directory's lock, then :meth:`read`."""
        self.lock()
        try:
            yield self.read()
        finally:
            self.unlock()

    def read(self) -> dict[str, Any] | None:
        """The state if another process changed it since this one last read (else None)."""
        try:
            st = os.stat(self.path)
            seen = (st.st_ino, st.st_mtime_ns, st.st_size)
            if seen == self._seen:
                return None
            raw = self.path.read_bytes()
        except FileNotFoundError:  # none yet, or removed (even since the stat: by hand, a file system check)
            self._seen, self.raw = None, b""
            return {}
        except OSError as exc:  # a failing disk: one clear error, which stops leasing while it lasts
            raise StoreError(f"could not read the flow state {self.path}: {exc.strerror or exc}") from exc
        self._seen, self.raw = seen, raw
        return decode_flow_doc(raw, self.path)

    def write(self, doc: dict[str, Any]) -> None:
        raw = orjson.dumps(doc)
        if raw == self.raw:
            return
        atomic_write(self.path, raw, durable=False)
        st = os.stat(self.path)
        self._seen, self.raw = (st.st_ino, st.st_mtime_ns, st.st_size), raw

    def close(self) -> None:
        self._lock.close()


FLOW_FORMAT = "desktop-queue.flow"
FLOW_SCHEMA = 1


class NeedsSession(Exception):
    """A lease scan outside a session met a job that flow control governs (see :meth:`FlowControl.accept_unshared`).

    Raised inside the lease commit, which then writes nothing; the caller takes a
    :meth:`FlowControl.session` and scans again.
    """


class FlowControl:
    """Decides which queued jobs may start now, and says why the others wait.

    Thread-safe: ``accept`` runs inside the lease commit, outcomes arrive from the
    driver, ``waiting_reason`` is asked by the window. With ``shared_dir`` every
    process on the data dir works on one state (budgets, in-flight attempts, breaker,
    slow-down, pauses, offline), so the window and any number of ``work`` processes
    together never exceed one configured limit (shared/DESIGN.md section 2). Calls
    that belong together (a lease's scan over its candidates) share one look at that
    state through :meth:`session`.

    Args:
        profiles: profile name -> limits. Jobs of other profiles are never held back.
        clock: time source (``now()``: shared state must mean the same in every process).
        profile_of: (kind, input) -> profile name (default: :func:`default_profile_of`).
        estimator: input -> :class:`Cost` (default: :func:`estimate_cost`).
        listener: called with every :class:`FlowEvent` (outside the internal lock).
        admission_ttl_s: an admission never followed by ``on_start`` is given back
            after this long (the lease commit failed, or another process took the job).
        shared_dir: where the shared state lives (``<data dir>/flow``); None: this
            process only (unless ``shared`` is given).
        shared: where the shared state lives, for a store other than the data dir
            (:class:`desktop_queue.core.pg.flowstate.PgSharedState`); not with ``shared_dir``.
        ledger: the spend ledger budgets are checked against and usage recorded in.
        rng: randomness for the throttle pause's jitter.
    """

    def __init__(
        self,
        profiles: Mapping[str, ProfileLimits],
        *,
        clock: Clock | None = None,
        profile_of: Callable[[str, Any], str | None] | None = None,
        estimator: Callable[[Any], Cost] | None = None,
        listener: Callable[[FlowEvent], None] | None = None,
        admission_ttl_s: float = 60.0,
        shared_dir: Path | str | None = None,
        ledger: SpendLedger | None = None,
        rng: random.Random | None = None,
        shared: SharedState | None = None,
    ) -> None:
        if shared is not None and shared_dir is not None:
            raise ValueError("the flow state is shared through a directory or a SharedState, not both")
        self.clock: Clock = clock or SystemClock()
        self._profiles = {name: _ProfileFlow(name, limits) for name, limits in profiles.items()}
        self._profile_of = profile_of or default_profile_of
        self._estimator = estimator or estimate_cost
        self._listener = listener
        self._admission_ttl_s = admission_ttl_s
        self._lock = threading.RLock()
        self._depth = 0
        self._events: deque[FlowEvent] = deque(maxlen=1000)
        self._pending_emit: list[FlowEvent] = []
        self._shared: SharedState | None = _SharedFile(Path(shared_dir)) if shared_dir is not None else shared
        #: (a store that knows which attempts still hold a live lease: see SharedState)
        self._ended_elsewhere: Callable[[list[str]], set[str]] | None = getattr(shared, "ended_attempts", None)
        self.ledger = ledger
        self.rng = rng or random.Random()
        self._kind_holds: dict[str, str] = {}
        self._profile_holds: dict[str, str] = {}
        self._known_profiles_only: str | None = None  # kind prefix whose jobs need a configured profile
        self._others: dict[str, Any] = {}  # shared state of profiles this process does not run
        self._throttled: set[str] = set()  # jobs whose throttle pause is already counted
        # the state is saved around every lease: a full disk would log each one
        self._unsaved = Lapse(log, "could not save the flow state", "saved the flow state again")

    # ------------------------------------------------------------------ shared state

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Holds the flow state for a group of calls: one lock, one read, one write.

        The lease driver wraps each lease in one, so a scan over many queued jobs costs
        one look at the shared state. Take it before the store's commit lock, never
        inside it (the lease commit calls ``accept``).
        """
        with self._lock:
            self._depth += 1
            outer = self._depth == 1 and self._shared is not None
            try:
                if outer:
                    assert self._shared is not None
                    with self._shared.locked() as doc:
                        self._load(doc)
                        try:
                            yield
                        finally:
                            try:
                                self._shared.write(self._dump())
                            except (OSError, StoreError) as exc:  # a full disk: limits keep working in memory
                                self._unsaved.failed(os_reason(exc))
                            else:
                                self._unsaved.ended()
                else:
                    yield
            finally:
                self._depth -= 1
        self._flush()

    def _load(self, doc: dict[str, Any] | None) -> None:
        if doc is None:
            return  # unchanged since this process wrote or read it
        raw = doc.get("profiles")
        profiles = raw if isinstance(raw, dict) else {}
        # kept as read, so a write carries on the profiles other processes configure
        self._others = {name: data for name, data in profiles.items() if name not in self._profiles}
        for name, flow in self._profiles.items():
            data = profiles.get(name)
            if isinstance(data, Mapping):
                try:
                    flow.load(data)
                except (TypeError, ValueError, KeyError, IndexError):
                    log.warning("flow state of profile %s is damaged; its limits start afresh", name)
                    self._profiles[name] = _ProfileFlow(name, flow.limits)

    def _dump(self) -> dict[str, Any]:
        profiles: dict[str, Any] = dict(self._others)
        for name, flow in self._profiles.items():
            profiles[name] = flow.dump()
        return {"format": FLOW_FORMAT, "schema_version": FLOW_SCHEMA, "profiles": profiles}

    def close(self) -> None:
        if self._shared is not None:
            self._shared.close()

    # ------------------------------------------------------------------ configuration

    def configure(self, name: str, limits: ProfileLimits) -> None:
        """Adds a profile or changes its limits (what every process shares is kept)."""
        with self.session():
            old = self._profiles.get(name)
            flow = _ProfileFlow(name, limits)
            if old is not None:
                flow.load(old.dump())
            self._profiles[name] = flow

    def profiles(self) -> list[str]:
        with self._lock:
            return sorted(self._profiles)

    def hold_kind(self, kind: str, reason: str | None) -> None:
        """Holds every job of ``kind`` with ``reason`` (None: lets them go again).

        For what a provider says about itself ("no API key for profile openai …"): its
        jobs then wait, spending nothing, and the window shows why.
        """
        with self._lock:
            if reason is None:
                self._kind_holds.pop(kind, None)
            else:
                self._kind_holds[kind] = reason

    def profile_for(self, kind: str, payload: Any) -> str | None:
        """The profile a job of ``kind`` with input ``payload`` runs on (its input's, else the default)."""
        with self._lock:
            profile_of = self._profile_of
        return profile_of(kind, payload)

    def set_profile_of(self, profile_of: Callable[[str, Any], str | None]) -> None:
        """Changes how a job's profile is found (the default profile changed in Preferences)."""
        with self._lock:
            self._profile_of = profile_of

    def hold_profile(self, profile: str, reason: str | None) -> None:
        """Holds every job of ``profile`` with ``reason`` (None: lets them go again).

        :meth:`hold_kind` for one profile of a kind that runs on several (no API key
        for the ``openai`` profile holds its jobs, not those of a local ``ollama``).
        """
        with self._lock:
            if reason is None:
                self._profile_holds.pop(profile, None)
            else:
                self._profile_holds[profile] = reason

    def hold_unknown_profiles(self, kind_prefix: str | None) -> None:
        """Holds jobs of kinds starting with ``kind_prefix`` whose profile is not configured here.

        A job naming a profile that was removed, or added by another process a moment
        ago and not yet read here, waits (``waiting: profile lab is not configured``)
        instead of failing; it runs as soon as this process knows the profile.
        """
        with self._lock:
            self._known_profiles_only = kind_prefix

    def _ungoverned_hold(self, job: Any) -> str | None:
        """Why a job without a profile here waits: its kind's hold, or a profile that is not configured."""
        _job_id, kind, payload = _job_fields(job)
        held = self._kind_holds.get(kind)
        if held is not None:
            return held if held.startswith("waiting") else f"waiting: {held}"
        prefix = self._known_profiles_only
        if prefix is not None and kind.startswith(prefix):
            name = self._profile_of(kind, payload)
            if name is not None and name not in self._profiles:
                return f"waiting: profile {name} is not configured (add it in Preferences → Providers)"
        return None

    def profile_hold(self, profile: str) -> str | None:
        """The reason ``profile`` is held (:meth:`hold_profile`), or None."""
        with self._lock:
            return self._profile_holds.get(profile)

    # ------------------------------------------------------------------ internals

    def _flow_of(self, job: Any) -> tuple[str, _ProfileFlow | None, Any]:
        job_id, kind, payload = _job_fields(job)
        name = self._profile_of(kind, payload)
        return job_id, (self._profiles.get(name) if name is not None else None), payload

    def _emit(self, flow: _ProfileFlow, kind: FlowEventType, now: float, **detail: Any) -> None:
        event = FlowEvent(round(now, 3), flow.name, kind, detail)
        self._events.append(event)
        self._pending_emit.append(event)

    def _flush(self) -> None:
        """Hands recorded events to the listener, outside the lock."""
        with self._lock:
            if not self._pending_emit or self._depth:
                return
            pending, self._pending_emit = self._pending_emit, []
        if self._listener is not None:
            for event in pending:
                self._listener(event)

    def _update(self, flow: _ProfileFlow, now: float) -> None:
        if flow.breaker.update(now):
            self._emit(flow, FlowEventType.BREAKER_HALF_OPEN, now, reason="cool-down over; one probe may go")
        old = flow.adaptive.scale
        if flow.adaptive.update(now):
            for bucket, _unit in flow.buckets():
                bucket.scale = flow.adaptive.scale
            self._emit(flow, FlowEventType.RATE_RECOVERED, now, scale=round(flow.adaptive.scale, 3), was=round(old, 3))
        if now - flow.last_prune >= 5.0:
            flow.last_prune = now
            elsewhere: list[str] = []
            for job_id, adm in list(flow.admitted.items()):
                if not adm.started and now - adm.at > self._admission_ttl_s:
                    self._give_back(flow, job_id, now)
                elif adm.owner is not None and holder_alive(adm.owner) is False:
                    self._give_back(flow, job_id, now)  # its process ended mid-attempt: the slot frees
                elif (
                    adm.started
                    and adm.owner is not None
                    and self._ended_elsewhere is not None
                    and holder_alive(adm.owner) is None  # (another machine's process: ask the store)
                ):
                    elsewhere.append(job_id)
            if elsewhere:
                assert self._ended_elsewhere is not None
                for job_id in self._ended_elsewhere(elsewhere):
                    # a machine that died mid-attempt: its slot frees once its job's lease has
                    # run out; the request it probably sent still counts against the rate
                    self._give_back(flow, job_id, now, refund=False)
            ttl = max(flow.limits.window_s, flow.limits.aging_s) * 2
            for job_id, waiter in list(flow.waiters.items()):
                if now - waiter.seen > ttl:
                    del flow.waiters[job_id]
                    if flow.reserved == job_id:
                        flow.reserved, flow.reserved_cost = None, None
        self._update_degradation(flow, now)

    # ------------------------------------------------------------------ degradation

    def _degradation(self, flow: _ProfileFlow, now: float) -> Degraded | None:
        """Why the profile's background jobs should pause now (None: they may run)."""
        policy = flow.limits.degradation
        if policy.on_failing and (flow.breaker.state is not BreakerState.CLOSED or flow.offline is not None):
            return Degraded.FAILING
        # while the provider's pause lasts; not for the whole slow climb of the cut rate
        # after it (a minute after one 429): that rate holds both lanes already, and the
        # lease order puts interactive jobs first within it
        if policy.on_rate_cut and flow.adaptive.pause_left(now) > 0:
            return Degraded.RATE_LIMITED
        if policy.budget_reserve > 0 and self._budget_low(flow, now, policy.budget_reserve):
            return Degraded.BUDGET_LOW
        return None

    def _budget_low(self, flow: _ProfileFlow, now: float, reserve: float) -> bool:
        """True when less than ``reserve`` of any of the profile's budgets is left."""
        budget = flow.limits.budget
        if budget is None or self.ledger is None or not budget.is_set():
            return False
        try:
            day, month = self._spent(flow, now)
        except StoreError as exc:
            # (a database that restarts, say, as an answer comes back: the profile stays as
            # it was, so that the attempt that ended still frees its slot and records its
            # spend; the admission of the next one reads the ledger again)
            log.warning("could not read the spend of profile %s: %s", flow.name, exc)
            return flow.degraded is Degraded.BUDGET_LOW
        checks = (
            (budget.usd_per_day, day.usd),
            (budget.usd_per_month, month.usd),
            (budget.tokens_per_day, float(day.tokens)),
            (budget.tokens_per_month, float(month.tokens)),
        )
        return any(limit is not None and limit - used < reserve * limit for limit, used in checks)

    def _update_degradation(self, flow: _ProfileFlow, now: float) -> None:
        """Notes a change of the profile's degradation (shared by every process) and records it."""
        cause = self._degradation(flow, now)
        if cause == flow.degraded:
            return
        if cause is not None:
            if flow.degraded is None:
                flow.degraded_since = now
            flow.degraded, flow.resumed_at = cause, None
            if flow.held_back:  # the reason its waiting jobs give changed
                self._emit(flow, FlowEventType.BACKGROUND_PAUSED, now, cause=str(cause))
            return
        policy = flow.limits.degradation
        flow.degraded, flow.resumed_at, flow.resumed_from = None, now, flow.degraded
        if not flow.held_back:
            return  # no background job waited: nothing to tell
        flow.held_back = False
        self._emit(
            flow,
            FlowEventType.BACKGROUND_RESUMED,
            now,
            start=max(1, policy.ramp_start),
            step_s=policy.ramp_step_s,
            paused_s=round(now - flow.degraded_since, 3),
        )

    def _background_blocker(self, flow: _ProfileFlow, job_id: str, now: float) -> str | None:
        """Why a background job of ``flow`` may not start now for degradation (None: it may)."""
        if flow.degraded is not None:
            offline = flow.offline
            probe_free = (flow.breaker.state is BreakerState.HALF_OPEN and flow.breaker.probe in (None, job_id)) or (
                offline is not None and offline.probe in (None, job_id) and now >= offline.probe_at
            )
            if not (flow.degraded is Degraded.FAILING and probe_free):
                return background_reason(flow.name, flow.degraded)
            return None
        cap = flow.background_cap(now)
        if cap is not None and flow.background_in_flight() >= cap:
            return resuming_reason(flow.name, cap, flow.resumed_from)
        return None

    def _give_back(self, flow: _ProfileFlow, job_id: str, now: float, refund: bool = True) -> None:
        adm = flow.admitted.pop(job_id, None)
        flow.concurrency.release(job_id)
        flow.breaker.on_abandoned(job_id)
        if flow.offline is not None and flow.offline.probe == job_id:
            flow.offline.probe = None
        if adm is not None and refund:
            for bucket, _unit in flow.buckets():
                bucket.refund(job_id, now)

    def _spent(self, flow: _ProfileFlow, now: float) -> tuple[Spent, Spent]:
        """Today's and this month's spend of a profile.

        Asked afresh each time, under the shared state's lock: another process's attempt
        leaves the in-flight list and enters the ledger in one step, and a stale total
        would count it in neither (the ledger's read is one ``stat`` when nothing changed).
        """
        assert self.ledger is not None
        return self.ledger.spent(flow.name, "day", now), self.ledger.spent(flow.name, "month", now)

    def _budget_reason(self, flow: _ProfileFlow, job_id: str, kind: str, payload: Any, now: float) -> str | None:
        budget = flow.limits.budget
        if budget is None or self.ledger is None or not budget.is_set():
            return None
        day, month = self._spent(flow, now)
        usage = estimate_usage(kind, payload)
        model = _model_of(payload, None) or flow.limits.model or ""
        price = self.ledger.prices.cost_usd(model, usage, local=flow.limits.local)
        # what other attempts admitted but not yet recorded will spend, counted as estimated
        in_flight_tokens = sum(a.cost.tokens for j, a in flow.admitted.items() if j != job_id)
        in_flight_usd = 0.0
        if in_flight_tokens and usage.tokens:
            in_flight_usd = (price or 0.0) * in_flight_tokens / max(1, usage.tokens)
        day = Spent(day.tokens + in_flight_tokens, day.usd + in_flight_usd, day.unknown_cost)
        month = Spent(month.tokens + in_flight_tokens, month.usd + in_flight_usd, month.unknown_cost)
        return budget_reason(flow.name, budget, day, month, usage.tokens, price)

    def _blocker(
        self,
        flow: _ProfileFlow,
        job_id: str,
        kind: str,
        payload: Any,
        cost: Cost,
        now: float,
        background: bool = False,
    ) -> tuple[str, float] | None:
        """Why ``job_id`` may not start now: (reason, expected wait in s), or None."""
        blocked = self._why_not(flow, job_id, kind, payload, cost, now, background)
        if blocked is not None and background and flow.degraded is not None and not flow.held_back:
            # the first background job held back in this spell: news (whichever reason it gives)
            flow.held_back = True
            self._emit(flow, FlowEventType.BACKGROUND_PAUSED, now, cause=str(flow.degraded))
        return blocked

    def _why_not(
        self,
        flow: _ProfileFlow,
        job_id: str,
        kind: str,
        payload: Any,
        cost: Cost,
        now: float,
        background: bool,
    ) -> tuple[str, float] | None:
        held = self._kind_holds.get(kind) or self._profile_holds.get(flow.name)
        if held is not None:
            return (held if held.startswith("waiting") else f"waiting: {held}"), 0.0
        if background and flow.degraded in (Degraded.FAILING, Degraded.RATE_LIMITED):
            # before the breaker's or the rate limit's countdown: a background job does
            # not start when it ends (interactive work goes first, then the slow start)
            degraded = self._background_blocker(flow, job_id, now)
            if degraded is not None:
                return degraded, 0.0
        offline = flow.offline
        if offline is not None and (offline.probe not in (None, job_id) or now < offline.probe_at):
            return f"waiting: {offline.reason}", max(0.0, offline.probe_at - now)
        if not flow.breaker.allows(job_id):
            return WAITING_UNAVAILABLE, flow.breaker.reopens_in(now)
        if not flow.concurrency.has_room(flow.concurrency_cap(now)):
            return WAITING_CONCURRENCY, 0.0
        pause = flow.adaptive.pause_left(now)
        if pause > 0:
            return WAITING_RATE_LIMIT, pause
        budget = self._budget_reason(flow, job_id, kind, payload, now)
        if budget is not None:
            return budget, 0.0
        if flow.reserved is not None and flow.reserved != job_id:
            # an older job holds the budget's next turn; this one waits behind it
            wait = flow.rate_wait(flow.reserved_cost, now) if flow.reserved_cost is not None else 0.0
            return WAITING_RATE_LIMIT, wait
        wait = flow.rate_wait(cost, now)
        if wait > 0:
            return WAITING_RATE_LIMIT, wait
        if background:
            # after the budget's own check: a budget reached says more than one nearly spent
            degraded = self._background_blocker(flow, job_id, now)
            if degraded is not None:
                return degraded, 0.0
        return None

    @staticmethod
    def _format(reason: str, wait: float) -> str:
        if reason == WAITING_RATE_LIMIT and wait > 0:
            return f"{reason} (~{max(1, math.ceil(wait))} s)"
        return reason

    # ------------------------------------------------------------------ the driver's side

    def governs(self, job: Any) -> bool:
        """Whether ``job`` has a profile here: only such a job's calls use the shared state.

        A job without one is never held back but by its kind's hold (:meth:`hold_kind`,
        this process's own), and nothing it does changes a profile's state, so its calls
        need no :meth:`session`: no lock, no read, no write of the shared state.
        """
        with self._lock:
            return self._flow_of(job)[1] is not None

    def accept_unshared(self, job: Any) -> bool:
        """:meth:`accept` for a lease scan that holds no session, as long as it meets no governed job.

        Raises:
            NeedsSession: ``job`` has a profile here, and the scan holds no session: its
                answer needs the shared state, whose lock may not be taken inside the
                store's commit lock (where ``accept`` runs). The lease then writes
                nothing; scan again inside a :meth:`session`.
        """
        with self._lock:
            if self._depth:  # (the session is this thread's: a session holds the lock throughout)
                return self.accept(job)
            job_id, flow, _payload = self._flow_of(job)
            if flow is not None:
                raise NeedsSession(job_id)
            return self._ungoverned_hold(job) is None

    def accept(self, job: Any) -> bool:
        """May this queued job start now? If so, its estimated cost is spent (for ``Queue.lease``).

        Asking again for a job already admitted (and not yet finished) answers True
        without spending twice.
        """
        if not self.governs(job):
            with self._lock:
                return self._ungoverned_hold(job) is None
        with self.session():
            job_id, flow, payload = self._flow_of(job)
            kind = _job_fields(job)[1]
            if flow is None:
                return self._ungoverned_hold(job) is None
            now = self.clock.now()
            self._update(flow, now)
            if job_id in flow.admitted:
                return True
            cost = self._estimator(payload)
            background = _is_background(job)
            blocked = self._blocker(flow, job_id, kind, payload, cost, now, background)
            if blocked is not None:
                if blocked[0] == WAITING_RATE_LIMIT:
                    self._note_waiting(flow, job_id, cost, now)
                return False
            self._admit(flow, job_id, cost, now, background)
            return True

    def _note_waiting(self, flow: _ProfileFlow, job_id: str, cost: Cost, now: float) -> None:
        waiter = flow.waiters.get(job_id)
        if waiter is None:
            flow.waiters[job_id] = _Waiter(since=now, seen=now)
            return
        waiter.seen = now
        if flow.reserved is None and now - waiter.since >= flow.limits.aging_s:
            flow.reserved = job_id
            flow.reserved_cost = cost
            if waiter.passed_over:
                # only then is it news: in a paced backlog of equal jobs every one waits
                # longer than aging_s, and the head of the line taking its turn is no event
                self._emit(
                    flow,
                    FlowEventType.RESERVED,
                    now,
                    reason="a job waited too long for its budget; smaller jobs wait until it has started",
                    delay_s=round(now - waiter.since, 3),
                )

    def _admit(self, flow: _ProfileFlow, job_id: str, cost: Cost, now: float, background: bool = False) -> None:
        if flow.breaker.admit(job_id):
            self._emit(flow, FlowEventType.BREAKER_HALF_OPEN, now, reason="probe admitted")
        if flow.offline is not None and flow.offline.probe is None:
            flow.offline.probe = job_id  # one job at a time finds out whether it is back
        for bucket, unit in flow.buckets():
            bucket.take(cost.requests if unit == "requests" else cost.tokens, now, job_id)
        owner = this_process()
        flow.concurrency.acquire(job_id, owner)
        flow.admitted[job_id] = _Admission(cost, now, owner=owner, background=background)
        own = flow.waiters.pop(job_id, None)
        since = own.since if own is not None else now
        for waiter in flow.waiters.values():
            if waiter.since < since:
                waiter.passed_over = True
        if flow.reserved == job_id:
            flow.reserved = None
            flow.reserved_cost = None

    def on_start(self, job: Any) -> None:
        """The job was leased and handed to a worker (after ``accept`` said yes).

        A job that started without ``accept`` (another code path) is counted now.
        """
        if not self.governs(job):
            return
        with self.session():
            job_id, flow, payload = self._flow_of(job)
            if flow is None:
                return
            now = self.clock.now()
            adm = flow.admitted.get(job_id)
            if adm is None:
                self._admit(flow, job_id, self._estimator(payload), now, _is_background(job))
                adm = flow.admitted[job_id]
            adm.started = True

    def throttle_delay(self, job: Any, retry_after: float | None) -> float | None:
        """A throttled attempt of ``job``: pauses its whole profile; returns the pause.

        The caller requeues the job for that long (its attempt is given back), so that
        consecutive throttles back off exponentially although no attempt is spent.

        Returns:
            Seconds until the profile may send again (None: the job has no profile here).
        """
        if not self.governs(job):
            return None
        with self.session():
            job_id, flow, _payload = self._flow_of(job)
            if flow is None:
                return None
            now = self.clock.now()
            limits = flow.limits
            pause = flow.adaptive.throttle_pause(
                now, retry_after, self.rng, base_s=limits.throttle_base_s, cap_s=limits.throttle_cap_s
            )
            self._throttled.add(job_id)
            self._emit(flow, FlowEventType.PAUSED, now, retry_after_s=round(pause, 3), throttles=flow.adaptive.streak)
            self._update_degradation(flow, now)
            return pause

    def on_outcome(self, job: Any, outcome: Outcome | None, usage: Mapping[str, Any] | None = None) -> None:
        """An attempt ended: frees its slot, settles its cost and feeds breaker and limits.

        Args:
            job: the job (dict, :class:`Job` or lease).
            outcome: what the attempt produced; None when it ended without one
                (cancelled, released on shutdown).
            usage: the provider's reported usage (default: ``outcome.result["usage"]``).
        """
        if not self.governs(job):
            return
        with self.session():
            job_id, flow, payload = self._flow_of(job)
            if flow is None:
                return
            now = self.clock.now()
            self._update(flow, now)
            if outcome is None:
                self._give_back(flow, job_id, now)
            else:
                self._record(flow, job_id, outcome, usage, now)
                self._spend(flow, job, payload, outcome, now)
            self._update_degradation(flow, now)  # (a breaker that opened or closed says so at once)

    def _spend(self, flow: _ProfileFlow, job: Any, payload: Any, outcome: Outcome, now: float) -> None:
        """Records what the attempt used in the spend ledger (a failure that reported usage too)."""
        if self.ledger is None:
            return
        result = outcome.result if outcome.ok and isinstance(outcome.result, Mapping) else {}
        kind = _job_fields(job)[1]
        text = payload.get("input") if isinstance(payload, Mapping) else None
        used = usage_of(kind, result, input_chars=len(text) if isinstance(text, str) else None)
        if used.is_empty():
            return
        model = str(result.get("model") or _model_of(payload, None) or flow.limits.model or "")
        lease_attempt = getattr(job, "attempt", None)
        try:
            self.ledger.record(
                profile=flow.name,
                model=model,
                kind=kind,
                usage=used,
                job_id=_job_fields(job)[0],
                attempt=int(lease_attempt) if isinstance(lease_attempt, int) else 0,
                at=now,
                local=flow.limits.local,
            )
        except QueueError as exc:
            log.error("could not record the spend of job %s: %s", _job_fields(job)[0], exc)

    def on_release(self, job: Any) -> None:
        """An attempt ended without an outcome (same as ``on_outcome(job, None)``)."""
        self.on_outcome(job, None)

    def _record(
        self, flow: _ProfileFlow, job_id: str, outcome: Outcome, usage: Mapping[str, Any] | None, now: float
    ) -> None:
        flow.admitted.pop(job_id, None)
        flow.concurrency.release(job_id)
        unreachable = bool(getattr(outcome, "unreachable", False))
        if unreachable:
            self._went_offline(flow, job_id, outcome, now)
        elif flow.offline is not None:
            self._emit(flow, FlowEventType.BACK_ONLINE, now, reason="the endpoint answers again")
            flow.offline = None
        if outcome.ok:
            flow.adaptive.streak = 0
            if usage is None and isinstance(outcome.result, Mapping):
                usage = outcome.result.get("usage")
            actual = usage_tokens(usage)
            if actual is not None and flow.tpm is not None:
                flow.tpm.settle(job_id, actual, now)  # routine: not an event
            if flow.breaker.on_success(job_id, now):
                self._emit(flow, FlowEventType.BREAKER_CLOSED, now, reason="probe succeeded; concurrency ramps up")
            return
        # a failed attempt consumed its request, but (without usage) no tokens
        if flow.tpm is not None:
            flow.tpm.refund(job_id, now)
        if unreachable:
            flow.breaker.on_abandoned(job_id)  # offline is its own hold; the breaker is for answers
            return
        error_class = ErrorClass(outcome.error_class or ErrorClass.RETRYABLE)
        if error_class is ErrorClass.THROTTLED:
            flow.breaker.on_abandoned(job_id)
            old = flow.adaptive.scale
            if flow.adaptive.lower(now):
                for bucket, _unit in flow.buckets():
                    bucket.scale = flow.adaptive.scale
                self._emit(
                    flow,
                    FlowEventType.RATE_LOWERED,
                    now,
                    scale=round(flow.adaptive.scale, 3),
                    was=round(old, 3),
                    retry_after_s=outcome.retry_after,
                )
            if job_id in self._throttled:
                self._throttled.discard(job_id)  # its pause is counted (throttle_delay)
            else:
                flow.adaptive.throttle_pause(
                    now,
                    outcome.retry_after,
                    self.rng,
                    base_s=flow.limits.throttle_base_s,
                    cap_s=flow.limits.throttle_cap_s,
                )
                if outcome.retry_after:
                    self._emit(flow, FlowEventType.PAUSED, now, retry_after_s=outcome.retry_after)
        elif error_class is ErrorClass.RETRYABLE:
            probing = flow.breaker.state is BreakerState.HALF_OPEN
            if flow.breaker.on_failure(job_id, now):
                self._emit(
                    flow,
                    FlowEventType.BREAKER_OPENED,
                    now,
                    reason="the probe job failed"
                    if probing
                    else f"{flow.limits.breaker_threshold} retryable failures in a row",
                    delay_s=flow.breaker.cooldown_s,
                )
        else:
            flow.breaker.on_reachable()
            flow.breaker.on_abandoned(job_id)

    def _went_offline(self, flow: _ProfileFlow, job_id: str, outcome: Outcome, now: float) -> None:
        offline = flow.offline
        failures = 1 if offline is None else offline.failures + 1
        wait = min(flow.limits.offline_probe_s, 2.0 ** min(failures, 16))
        reason = f"profile {flow.name} is offline ({outcome.message or 'cannot connect'})"
        flow.offline = _Offline(offline.since if offline else now, failures, now + wait, None, reason[:200])
        if offline is None:
            self._emit(flow, FlowEventType.OFFLINE, now, reason=reason[:200], delay_s=round(wait, 3))

    def observe_rate_limit(self, profile: str, info: RateLimitInfo) -> None:
        """Rate-limit headers from a response: nothing left -> the profile pauses until the reset."""
        with self.session():
            flow = self._profiles.get(profile)
            if flow is None:
                return
            now = self.clock.now()
            exhausted = info.remaining_requests == 0 or info.remaining_tokens == 0
            if exhausted and info.reset_s:
                before = flow.adaptive.pause_left(now)
                flow.adaptive.on_exhausted(now, info.reset_s)
                if flow.adaptive.pause_left(now) > before:
                    self._emit(
                        flow,
                        FlowEventType.PAUSED,
                        now,
                        retry_after_s=round(info.reset_s, 3),
                        reason="rate-limit headers: nothing left until the reset",
                    )

    def forget(self, job_id: str) -> None:
        """The job left the queue (cancelled, finished elsewhere): drops any wait or reservation."""
        with self.session():
            now = self.clock.now()
            for flow in self._profiles.values():
                flow.waiters.pop(job_id, None)
                if flow.reserved == job_id:
                    flow.reserved, flow.reserved_cost = None, None
                if job_id in flow.admitted and not flow.admitted[job_id].started:
                    self._give_back(flow, job_id, now)

    # ------------------------------------------------------------------ the window's side

    def waiting_reason(self, job: Any) -> str | None:
        """Why a queued, due job would not start now, for people; None if it would.

        Returns e.g. ``"waiting: rate limit (~12 s)"``, ``"waiting: provider
        unavailable"``, ``"waiting: concurrency cap"``, ``"waiting: budget of profile
        openai reached, $4.98 of $5.00 today"``, for a background job of a degraded
        profile ``"background jobs paused: openai is failing"`` (see
        :class:`Degradation`), or a provider's own reason. Backoff and lane order are
        the queue's business, not flow control's.
        """
        with self.session():
            job_id, flow, payload = self._flow_of(job)
            kind = _job_fields(job)[1]
            if isinstance(job, Mapping) and job.get("state") not in (None, State.QUEUED):
                return None
            if flow is None:
                return self._ungoverned_hold(job)
            now = self.clock.now()
            self._update(flow, now)
            if job_id in flow.admitted:
                return None
            blocked = self._blocker(flow, job_id, kind, payload, self._estimator(payload), now, _is_background(job))
            return None if blocked is None else self._format(*blocked)

    def breaker_state(self, profile: str) -> BreakerState | None:
        """The profile's breaker state (None: no such profile)."""
        with self.session():
            flow = self._profiles.get(profile)
            if flow is None:
                return None
            self._update(flow, self.clock.now())
            return flow.breaker.state

    def snapshot(self, profile: str) -> dict[str, Any]:
        """The profile's state for a status display (breaker, scale, in flight, budgets left)."""
        with self.session():
            flow = self._profiles[profile]
            now = self.clock.now()
            self._update(flow, now)
            out: dict[str, Any] = {
                "profile": profile,
                "breaker": str(flow.breaker.state),
                "reopens_s": round(flow.breaker.reopens_in(now), 3),
                "scale": round(flow.adaptive.scale, 3),
                "paused_s": round(flow.adaptive.pause_left(now), 3),
                "throttles": flow.adaptive.streak,
                "in_flight": len(flow.concurrency.held),
                "concurrency_cap": flow.concurrency_cap(now),
                "reserved": flow.reserved,
                "offline": flow.offline.reason if flow.offline is not None else None,
                "background": None if flow.degraded is None else str(flow.degraded),
                "background_cap": flow.background_cap(now),
                "background_in_flight": flow.background_in_flight(),
            }
            for bucket, unit in flow.buckets():
                out[f"{unit}_spent"] = round(bucket.spent(now), 3)
                out[f"{unit}_budget"] = round(bucket.effective_budget, 3)
            if self.ledger is not None and flow.limits.budget is not None and flow.limits.budget.is_set():
                day, month = self._spent(flow, now)
                out["spent_today_usd"], out["spent_today_tokens"] = round(day.usd, 4), day.tokens
                out["spent_month_usd"], out["spent_month_tokens"] = round(month.usd, 4), month.tokens
            return out

    def degradations(self) -> dict[str, str]:
        """Profile -> what its background jobs are told now, for every profile that holds them back.

        ``{"openai": "background jobs paused: openai is failing"}``; a profile in its
        slow start says ``background jobs resuming: …``. Empty when every profile's
        background work runs freely.
        """
        with self.session():
            now = self.clock.now()
            out: dict[str, str] = {}
            for name, flow in sorted(self._profiles.items()):
                self._update(flow, now)
                if flow.degraded is not None:
                    out[name] = background_reason(name, flow.degraded)
                else:
                    cap = flow.background_cap(now)
                    if cap is not None:
                        out[name] = resuming_reason(name, cap, flow.resumed_from)
            return out

    def drain_events(self) -> list[FlowEvent]:
        """Every event recorded since the last drain (oldest first)."""
        with self._lock:
            events = list(self._events)
            self._events.clear()
        return events


def _model_of(payload: Any, default: str | None) -> str | None:
    model = payload.get("model") if isinstance(payload, Mapping) else None
    return model if isinstance(model, str) and model else default


__all__ = [
    "BACKGROUND_PAUSED",
    "BACKGROUND_RESUMING",
    "AdaptiveLimit",
    "BreakerState",
    "CircuitBreaker",
    "ConcurrencyLimit",
    "Cost",
    "Degradation",
    "Degraded",
    "FlowControl",
    "FlowEvent",
    "FlowEventType",
    "ProfileLimits",
    "RateLimitInfo",
    "TokenBucket",
    "background_reason",
    "WAITING_CONCURRENCY",
    "WAITING_RATE_LIMIT",
    "WAITING_UNAVAILABLE",
    "default_profile_of",
    "estimate_cost",
    "usage_tokens",
]
