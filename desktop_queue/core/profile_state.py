"""The real state of each provider profile, for the status bar: a pure function of flow state.

States, worst first: ``unconfigured``, ``no_key``, ``offline``, ``breaker_open``
(with when it retries), ``probing``, ``budget_reached``, ``rate_limited`` (with when it
resumes), ``slowed``, ``budget_nearly`` and ``ok``.
Which profiles are worth showing at all is decided here too (:func:`shown_profiles`):
those a person configured, and those that queued jobs use; nothing for a new user
who only runs demo jobs.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from desktop_queue.core.ledger import Budget
from desktop_queue.core.present import (
    BUDGET_WARN_SHARE,
    PROVIDER_DOWN,
    PROVIDER_OK,
    PROVIDER_PROBING,
    PROVIDER_SLOW,
    budget_use,
    seconds,
)


class ProfileStateKind(StrEnum):
    OK = "ok"
    UNCONFIGURED = "unconfigured"
    NO_KEY = "no_key"
    OFFLINE = "offline"
    BREAKER_OPEN = "breaker_open"
    PROBING = "probing"
    RATE_LIMITED = "rate_limited"
    SLOWED = "slowed"
    BUDGET_REACHED = "budget_reached"
    BUDGET_NEARLY = "budget_nearly"


_LEVELS = {
    ProfileStateKind.OK: PROVIDER_OK,
    ProfileStateKind.UNCONFIGURED: PROVIDER_SLOW,
    ProfileStateKind.NO_KEY: PROVIDER_SLOW,
    ProfileStateKind.OFFLINE: PROVIDER_DOWN,
    ProfileStateKind.BREAKER_OPEN: PROVIDER_DOWN,
    ProfileStateKind.PROBING: PROVIDER_PROBING,
    ProfileStateKind.RATE_LIMITED: PROVIDER_SLOW,
    ProfileStateKind.SLOWED: PROVIDER_SLOW,
    ProfileStateKind.BUDGET_REACHED: PROVIDER_DOWN,
    ProfileStateKind.BUDGET_NEARLY: PROVIDER_SLOW,
}


@dataclass(frozen=True)
class ProfileState:
    """One profile's state for people.

    Attributes:
        profile: the profile name.
        kind: what state it is in.
        text: the status-bar text (``ollama: rate limited until 14:02:10``).
        detail: a longer sentence for the tooltip (what to do about it).
        until: wall time the state is expected to end (rate limit, breaker), or None.
    """

    profile: str
    kind: ProfileStateKind
    text: str
    detail: str
    until: float | None = None

    @property
    def level(self) -> str:
        """``ok``, ``slow``, ``probing`` or ``down`` (the indicator's icon)."""
        return _LEVELS[self.kind]


def _at(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def profile_state(
    profile: str,
    snapshot: Mapping[str, Any] | None,
    now: float,
    *,
    configured: bool = True,
    budget: Budget | None = None,
    no_key: str | None = None,
) -> ProfileState:
    """The state of ``profile`` from flow control's snapshot (``FlowControl.snapshot``).

    Worst first: not set up, no key, offline, breaker open, probing, budget reached,
    rate limited, slowed down, budget nearly reached, ok.

    Args:
        profile: its name.
        snapshot: its flow snapshot (None: flow control does not know it).
        now: wall time (``until`` is computed from it).
        configured: a person configured it (False: the fallback profile with nothing set).
        budget: its spending limits (the snapshot holds the spend, not the limits).
        no_key: the provider's reason it cannot run (no API key), or None.
    """
    snap = snapshot or {}

    def state(kind: ProfileStateKind, rest: str, advice: str = "", until: float | None = None) -> ProfileState:
        when = f" (until {_at(until)})" if until is not None else ""
        detail = f"Provider “{profile}”: {rest}{when}" + (f". {advice}" if advice else "")
        return ProfileState(profile, kind, f"{profile}: {rest}", detail, until)

    if not configured:
        return state(
            ProfileStateKind.UNCONFIGURED,
            "not set up",
            "Jobs that use it wait; connect a provider in Preferences → Providers",
        )
    if no_key:
        return state(
            ProfileStateKind.NO_KEY,
            "no API key",
            "Its jobs wait without spending attempts; enter a key in Preferences → Providers",
        )
    offline = snap.get("offline")
    if offline:
        reason = str(offline)
        prefix = f"profile {profile} is "
        reason = reason[len(prefix) :] if reason.startswith(prefix) else reason
        return state(ProfileStateKind.OFFLINE, reason, "Its jobs wait; one probes it now and then")
    breaker = snap.get("breaker")
    if breaker == "open":
        wait = float(snap.get("reopens_s") or 0.0)
        return state(
            ProfileStateKind.BREAKER_OPEN,
            f"breaker open, retry in {seconds(wait)}",
            "It failed repeatedly; its jobs wait without spending attempts",
            now + wait,
        )
    if breaker == "half_open":
        return state(ProfileStateKind.PROBING, "breaker half-open, probing", "One job probes it; the others wait")
    use = budget_use(snap, budget)
    if use is not None and use[0] >= 1.0:
        return state(
            ProfileStateKind.BUDGET_REACHED,
            f"budget reached, {use[1]}",
            "Its jobs wait for the next day or month, or a higher budget in Preferences",
        )
    paused = float(snap.get("paused_s") or 0.0)
    if paused > 0:
        streak = int(snap.get("throttles") or 0)
        in_a_row = f" ({streak} in a row)" if streak > 1 else ""
        return state(
            ProfileStateKind.RATE_LIMITED,
            f"rate limited{in_a_row}, resuming in {seconds(paused)}",
            "The provider asked to slow down",
            now + paused,
        )
    scale = float(snap.get("scale") or 1.0)
    if scale < 0.995:
        return state(ProfileStateKind.SLOWED, f"rate lowered to {scale * 100:.0f}%")
    if use is not None and use[0] >= BUDGET_WARN_SHARE:
        return state(ProfileStateKind.BUDGET_NEARLY, f"budget nearly reached, {use[1]}")
    parts = ["ok"]
    busy = snap.get("in_flight") or 0
    cap = snap.get("concurrency_cap")
    if busy:
        parts.append(f"{busy}{'/' + str(cap) if cap else ''} in flight")
    ok = state(ProfileStateKind.OK, ", ".join(parts))
    if use is None:
        return ok
    # the spend so far goes to the tooltip: a status bar with several profiles has no room for it
    return ProfileState(profile, ok.kind, ok.text, f"{ok.detail}, {use[1]}", None)


def shown_profiles(
    configured: Iterable[str],
    used_by_jobs: Iterable[str],
    *,
    anything_configured: bool,
) -> list[str]:
    """The profiles worth an indicator: configured ones, then others that queued jobs use.

    Args:
        configured: every profile the runtime knows, in the user's order.
        used_by_jobs: the profiles that queued or running jobs name (or default to).
        anything_configured: False when the only profile is the fallback with nothing
            set: then only a profile that jobs actually use is shown.
    """
    used = list(dict.fromkeys(used_by_jobs))
    names = list(dict.fromkeys(configured))
    if not anything_configured:
        return [n for n in names if n in used] + [n for n in used if n not in names]
    return names + [n for n in used if n not in names]


__all__ = ["ProfileState", "ProfileStateKind", "profile_state", "shown_profiles"]
