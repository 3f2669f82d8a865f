"""Delayed jobs: ``--at``/``--delay`` words, ``run_after`` on submit, and "scheduled for 14:00"."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.durations import parse_duration, parse_time
from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.present import describe_state, scheduled_time


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("1h", 3600), ("2d", 172800), ("1h30m", 5400), ("1d2h3m4s", 93784), (" 2H ", 7200)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "1x", "1m1h", "1h1h", "0s", "-5m", "1.5h", "h", "400d"])
def test_bad_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_duration(text)
    assert "\n" not in str(caught.value)


def test_times_with_and_without_a_zone() -> None:
    now = dt.datetime(2026, 12, 1, 12, 0).timestamp()  # local noon
    assert parse_time("2026-12-01T14:00", now) == dt.datetime(2026, 12, 1, 14, 0).timestamp()
    zulu = dt.datetime(2026, 12, 1, 14, tzinfo=dt.UTC).timestamp()
    assert parse_time("2026-12-01T14:00:00Z", zulu - 60) == zulu
    utc = dt.datetime(2026, 12, 2, 9, 30, tzinfo=dt.UTC).timestamp()
    assert parse_time("2026-12-02T10:30+01:00", now) == utc
    with pytest.raises(InvalidInput, match="in the past"):
        parse_time("2026-11-30T12:00", now)
    with pytest.raises(InvalidInput, match="ISO 8601"):
        parse_time("tomorrow", now)


def test_scheduled_for_reads_local_time_with_the_date_when_not_today() -> None:
    now = dt.datetime(2026, 12, 1, 12, 0).timestamp()
    assert scheduled_time(dt.datetime(2026, 12, 1, 14, 0).timestamp(), now) == "14:00"
    assert scheduled_time(dt.datetime(2026, 12, 1, 14, 0, 30).timestamp(), now) == "14:00:30"
    assert scheduled_time(dt.datetime(2026, 12, 2, 14, 0).timestamp(), now) == "2026-12-02 14:00"


def test_submit_with_run_after_waits_until_then(open_queue: Callable[..., Queue], clock: FakeClock) -> None:
    queue = open_queue()
    at = clock.now() + 3600
    job = queue.submit("demo", {"prompt": "later"}, run_after=at).job
    assert job.state == "queued" and job.run_after == at
    assert queue.lease("w") is None
    text = describe_state(job.to_json(with_events=False), clock.now())
    assert text == f"scheduled for {scheduled_time(at, clock.now())}"
    clock.advance(3601)
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job.id
    # a time in the past runs now; a bad one is refused
    assert queue.submit("demo", {"prompt": "past"}, run_after=0.0).job.run_after == clock.now()
    with pytest.raises(InvalidInput):
        queue.submit("demo", {"prompt": "nan"}, run_after=float("nan"))
