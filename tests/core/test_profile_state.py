"""core.profile_state: each profile's real state for the status bar, a pure function of flow state."""

from __future__ import annotations

import datetime as dt

import pytest

from desktop_queue.core import FakeClock, Outcome
from desktop_queue.core.flow import FlowControl, ProfileLimits
from desktop_queue.core.ledger import Budget
from desktop_queue.core.profile_state import ProfileStateKind, profile_state, shown_profiles

NOW = 1_800_000_000.0


def hhmmss(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def job(n: int) -> dict:
    return {"id": f"j{n}", "kind": "openai.chat", "input": {"prompt": "p"}, "state": "queued"}


def run(flow: FlowControl, n: int, outcome: Outcome) -> None:
    assert flow.accept(job(n))
    flow.on_start(job(n))
    flow.on_outcome(job(n), outcome)


@pytest.mark.parametrize(
    ("kwargs", "snapshot", "kind", "text", "level"),
    [
        ({"configured": False}, {}, ProfileStateKind.UNCONFIGURED, "openai: not set up", "slow"),
        ({"no_key": "no API key for profile openai: …"}, {}, ProfileStateKind.NO_KEY, "openai: no API key", "slow"),
        (
            {},
            {"offline": "profile openai is offline (cannot connect (ConnectError))"},
            ProfileStateKind.OFFLINE,
            "openai: offline (cannot connect (ConnectError))",
            "down",
        ),
        ({}, {"breaker": "half_open"}, ProfileStateKind.PROBING, "openai: breaker half-open, probing", "probing"),
        (
            {"budget": Budget(usd_per_day=5.0)},
            {"spent_today_usd": 5.0},
            ProfileStateKind.BUDGET_REACHED,
            "openai: budget reached, $5.00 of $5.00 today",
            "down",
        ),
        (
            {"budget": Budget(usd_per_day=5.0)},
            {"spent_today_usd": 4.6},
            ProfileStateKind.BUDGET_NEARLY,
            "openai: budget nearly reached, $4.60 of $5.00 today",
            "slow",
        ),
        ({}, {"scale": 0.5}, ProfileStateKind.SLOWED, "openai: rate lowered to 50%", "slow"),
        (
            {"budget": Budget(usd_per_day=5.0)},
            {"in_flight": 1, "concurrency_cap": 4, "spent_today_usd": 1.2},
            ProfileStateKind.OK,
            "openai: ok, 1/4 in flight",
            "ok",
        ),
    ],
)
def test_each_state_from_a_snapshot(
    kwargs: dict, snapshot: dict, kind: ProfileStateKind, text: str, level: str
) -> None:
    state = profile_state("openai", snapshot, NOW, **kwargs)
    assert (state.kind, state.text, state.level) == (kind, text, level)
    assert state.detail.startswith(f"Provider “openai”: {text.split(': ', 1)[1]}")
    if kind is ProfileStateKind.OK:
        assert state.detail.endswith(", $1.20 of $5.00 today")  # the spend: in the tooltip


def test_unconfigured_and_no_key_win_over_everything_else() -> None:
    snapshot = {"breaker": "open", "reopens_s": 5.0}
    assert profile_state("p", snapshot, NOW, configured=False).kind is ProfileStateKind.UNCONFIGURED
    assert profile_state("p", snapshot, NOW, no_key="no key").kind is ProfileStateKind.NO_KEY


def test_breaker_open_and_rate_limited_say_until_when_from_real_flow_state() -> None:
    clock = FakeClock(NOW)
    flow = FlowControl({"openai": ProfileLimits(breaker_threshold=2, breaker_cooldown_s=30)}, clock=clock)
    for n in range(2):
        run(flow, n, Outcome.failure("retryable", "boom"))
    state = profile_state("openai", flow.snapshot("openai"), clock.now())
    assert state.kind is ProfileStateKind.BREAKER_OPEN and state.level == "down"
    assert state.text == "openai: breaker open, retry in 30 s"
    assert state.until == pytest.approx(NOW + 30) and f"until {hhmmss(NOW + 30)}" in state.detail

    flow = FlowControl({"openai": ProfileLimits()}, clock=clock)
    run(flow, 9, Outcome.failure("throttled", "slow down", retry_after=12.0))
    state = profile_state("openai", flow.snapshot("openai"), clock.now())
    assert state.kind is ProfileStateKind.RATE_LIMITED and state.text == "openai: rate limited, resuming in 12 s"
    assert state.until == pytest.approx(NOW + 12) and hhmmss(NOW + 12) in state.detail
    clock.advance(13)
    assert profile_state("openai", flow.snapshot("openai"), clock.now()).kind is ProfileStateKind.SLOWED


def test_only_configured_profiles_or_those_queued_jobs_use_are_shown() -> None:
    # a new user running demo jobs: nothing
    assert shown_profiles(["openai"], [], anything_configured=False) == []
    # the same user queues a chat job: its (unconfigured) profile shows
    assert shown_profiles(["openai"], ["openai"], anything_configured=False) == ["openai"]
    # configured profiles always show, in order, plus any other that jobs use
    assert shown_profiles(["openai", "ollama"], ["lab"], anything_configured=True) == ["openai", "ollama", "lab"]
