"""Schedules: windows across daylight saving, catch-up, overlap, pause on failure, at most once."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.outcome import Outcome
from desktop_queue.core.schedules import (
    GRACE_S,
    MAX_CATCH_UP,
    Entry,
    JobTemplate,
    NoSuchSchedule,
    Schedule,
    ScheduleBook,
    ScheduleError,
    Scheduler,
    ScheduleState,
    TickReport,
    describe_cron,
    due_windows,
    entry_json,
    iso_utc,
    last_run,
    new_schedule,
    next_window,
    plan,
)

UTC = dt.UTC
REPO = Path(__file__).resolve().parents[2]


def ts(*args: int) -> float:
    return dt.datetime(*args, tzinfo=UTC).timestamp()


def sched(cron: str = "0 * * * *", tz: str = "UTC", created: float | None = None, **kw: Any) -> Schedule:
    return Schedule(
        id="s1", name="hourly", cron=cron, tz=tz, kind="demo", input={"prompt": "hi"}, created_at=created or 0.0, **kw
    )


def isos(windows: list[float]) -> list[str]:
    return [iso_utc(w) for w in windows]


# ----------------------------------------------------------------------------- windows and DST


def test_due_windows_are_those_after_last_evaluated_up_to_now() -> None:
    s = sched()
    assert isos(due_windows(s, ts(2026, 5, 1, 10, 0), ts(2026, 5, 1, 13, 0))) == [
        "2026-05-01T11:00:00Z",
        "2026-05-01T12:00:00Z",
        "2026-05-01T13:00:00Z",
    ]
    # a window exactly at last_evaluated was decided already
    assert due_windows(s, ts(2026, 5, 1, 13, 0), ts(2026, 5, 1, 13, 30)) == []


def test_due_windows_are_bounded_however_long_the_gap() -> None:
    s = sched(cron="* * * * *")
    found = due_windows(s, ts(2025, 1, 1), ts(2026, 1, 1), limit=MAX_CATCH_UP)
    assert len(found) == MAX_CATCH_UP
    assert isos(found)[-1] == "2026-01-01T00:00:00Z"


def test_a_new_schedule_has_no_windows_before_it_was_created() -> None:
    s = sched(created=ts(2026, 5, 1, 10, 30))
    assert isos(due_windows(s, None, ts(2026, 5, 1, 12, 0))) == ["2026-05-01T11:00:00Z", "2026-05-01T12:00:00Z"]


def test_spring_forward_berlin_daily_in_the_skipped_hour_runs_once_at_the_change() -> None:
    s = sched(cron="30 2 * * *", tz="Europe/Berlin", created=ts(2026, 3, 27))
    assert isos(due_windows(s, None, ts(2026, 3, 31))) == [
        "2026-03-27T01:30:00Z",  # 02:30 CET
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z",  # 02:30 does not exist: 03:00 CEST, the moment of the change
        "2026-03-30T00:30:00Z",  # 02:30 CEST
    ]


def test_spring_forward_berlin_hourly_runs_every_real_hour_once() -> None:
    s = sched(cron="0 * * * *", tz="Europe/Berlin")
    got = due_windows(s, ts(2026, 3, 28, 22, 30), ts(2026, 3, 29, 3, 0))
    assert isos(got) == [
        "2026-03-28T23:00:00Z",  # 00:00 CET
        "2026-03-29T00:00:00Z",  # 01:00 CET
        "2026-03-29T01:00:00Z",  # 03:00 CEST (02:00 never happened)
        "2026-03-29T02:00:00Z",
        "2026-03-29T03:00:00Z",
    ]


def test_fall_back_berlin_daily_in_the_repeated_hour_runs_once() -> None:
    s = sched(cron="30 2 * * *", tz="Europe/Berlin", created=ts(2026, 10, 23))
    assert isos(due_windows(s, None, ts(2026, 10, 27))) == [
        "2026-10-23T00:30:00Z",
        "2026-10-24T00:30:00Z",
        "2026-10-25T00:30:00Z",  # the first 02:30 (CEST); the second (CET) does not run again
        "2026-10-26T01:30:00Z",
    ]


def test_fall_back_berlin_hourly_runs_both_real_hours() -> None:
    s = sched(cron="0 * * * *", tz="Europe/Berlin")
    assert isos(due_windows(s, ts(2026, 10, 24, 23, 30), ts(2026, 10, 25, 2, 0))) == [
        "2026-10-25T00:00:00Z",  # 02:00 CEST
        "2026-10-25T01:00:00Z",  # 02:00 CET
        "2026-10-25T02:00:00Z",  # 03:00 CET
    ]


def test_next_window_walks_forward_as_due_windows_walks_back_across_the_changes() -> None:
    for cron in ("30 2 * * *", "0 * * * *", "*/20 1-3 * * *"):
        s = sched(cron=cron, tz="Europe/Berlin")
        for start, end in ((ts(2026, 3, 27), ts(2026, 4, 1)), (ts(2026, 10, 23), ts(2026, 10, 28))):
            forward, t = [], start
            while True:
                t = next_window(s, t)
                if t > end:
                    break
                forward.append(t)
            assert due_windows(s, start, end, limit=10_000) == forward, cron


ZONES = st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Sydney", "UTC", "Asia/Kolkata"])
CRONS = st.sampled_from(["0 * * * *", "30 2 * * *", "15 1,2,3 * * *", "0 0 * * 0", "*/45 * * * *"])


@settings(max_examples=60, deadline=None)
@given(zone=ZONES, cron=CRONS, start=st.integers(ts(2026, 1, 1), ts(2027, 1, 1)))
def test_windows_increase_and_never_repeat_a_wall_time_unless_hourly(zone: str, cron: str, start: float) -> None:
    from zoneinfo import ZoneInfo

    s = sched(cron=cron, tz=zone)
    windows, t = [], float(start)
    for _ in range(30):
        t = next_window(s, t)
        windows.append(t)
    assert windows == sorted(set(windows))
    if cron.split()[1] != "*":
        walls = [dt.datetime.fromtimestamp(w, ZoneInfo(zone)).replace(tzinfo=None) for w in windows]
        assert len(walls) == len(set(walls))


# ----------------------------------------------------------------------------- plan: catch-up, overlap


NOW = ts(2026, 5, 1, 15, 0, 10)
CLOSED_AT = ts(2026, 5, 1, 11, 30)  # closed for three and a half hours: 12, 13, 14, 15 are due


def state(**kw: Any) -> ScheduleState:
    return ScheduleState(last_evaluated=CLOSED_AT, **kw)


@pytest.mark.parametrize(
    ("catch_up", "now", "expected"),
    [
        ("skip", NOW, ["2026-05-01T15:00:00Z"]),  # 15:00 is on time; 12-14 were missed
        ("skip", ts(2026, 5, 1, 15, 30), []),  # every due window was missed
        ("latest", ts(2026, 5, 1, 15, 30), ["2026-05-01T15:00:00Z"]),
        ("latest", NOW, ["2026-05-01T15:00:00Z"]),
        ("all", NOW, ["2026-05-01T12:00:00Z", "2026-05-01T13:00:00Z", "2026-05-01T14:00:00Z", "2026-05-01T15:00:00Z"]),
    ],
)
def test_catch_up_policies(catch_up: str, now: float, expected: list[str]) -> None:
    decided = plan(sched(catch_up=catch_up), state(), now, previous_active=False)
    assert isos(list(decided.run)) == expected


def test_catch_up_all_is_bounded() -> None:
    decided = plan(sched(catch_up="all"), state(), ts(2026, 5, 3), previous_active=False)
    assert len(decided.run) == MAX_CATCH_UP
    assert iso_utc(decided.run[-1]) == "2026-05-03T00:00:00Z"


def test_a_window_within_grace_is_on_time() -> None:
    decided = plan(
        sched(),
        ScheduleState(last_evaluated=ts(2026, 5, 1, 14, 59)),
        ts(2026, 5, 1, 15) + GRACE_S,
        previous_active=False,
    )
    assert isos(list(decided.run)) == ["2026-05-01T15:00:00Z"]
    late = plan(
        sched(),
        ScheduleState(last_evaluated=ts(2026, 5, 1, 14, 59)),
        ts(2026, 5, 1, 15) + GRACE_S + 1,
        previous_active=False,
    )
    assert late.run == () and late.skipped is not None and "catch-up: skip" in late.skipped


def test_overlap_skip_and_allow() -> None:
    skip = plan(sched(), state(), NOW, previous_active=True)
    assert skip.run == () and skip.skipped is not None and "still queued or running" in skip.skipped
    allow = plan(sched(overlap="allow"), state(), NOW, previous_active=True)
    assert isos(list(allow.run)) == ["2026-05-01T15:00:00Z"]


def test_a_paused_schedule_plans_nothing() -> None:
    assert plan(sched(), state(paused=True), NOW, previous_active=False).run == ()


# ----------------------------------------------------------------------------- the scheduler on a queue


@pytest.fixture
def at_noon() -> FakeClock:
    return FakeClock(start=ts(2026, 5, 1, 12, 0, 0) - 30)


@pytest.fixture
def squeue(open_queue: Callable[..., Queue], at_noon: FakeClock) -> Queue:
    return open_queue(clock=at_noon)


def add(queue: Queue, name: str = "hourly", cron: str = "0 * * * *", **kw: Any) -> Entry:
    book = ScheduleBook(queue.data_dir, queue.clock.now)
    try:
        return book.add(new_schedule(name, cron, "demo", {"prompt": "hi"}, now=queue.clock.now(), tz="UTC", **kw))
    finally:
        book.close()


def finish(queue: Queue, ok: bool) -> None:
    lease = queue.lease("w")
    assert lease is not None
    if ok:
        queue.complete(lease, {"text": "the answer"})
    else:
        queue.fail(lease, Outcome.failure("fatal", "bad request", status=400))


def test_each_window_creates_one_job_keyed_by_schedule_and_window(squeue: Queue, at_noon: FakeClock) -> None:
    entry = add(squeue)
    scheduler = Scheduler(squeue)
    assert scheduler.tick().created == ()  # 11:59:30: nothing due
    at_noon.advance(40)
    report = scheduler.tick()
    assert len(report.created) == 1
    job = squeue.get(report.created[0])
    assert job.idempotency_key == f"schedule:{entry.schedule.id}:2026-05-01T12:00:00Z"
    assert job.state == "queued" and job.title == "hourly"
    # the same window again (a restart forgets nothing: a new Scheduler reads the file)
    assert Scheduler(squeue).tick().created == ()
    assert len(squeue.list()) == 1


def test_a_tick_with_nothing_due_writes_nothing(squeue: Queue, at_noon: FakeClock) -> None:
    add(squeue)
    scheduler = Scheduler(squeue)
    at_noon.advance(40)
    scheduler.tick()
    path = squeue.data_dir / "schedules.json"
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    for _ in range(3):
        at_noon.advance(600)  # 12:10, 12:20, 12:30: no window
        assert scheduler.tick() == TickReport()
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_a_second_evaluator_with_stale_state_gets_the_existing_job(squeue: Queue, at_noon: FakeClock) -> None:
    entry = add(squeue)
    at_noon.advance(40)
    book = ScheduleBook(squeue.data_dir, at_noon.now)
    before = book.load()
    first = Scheduler(squeue).tick()
    book.change(lambda _entries: before)  # as if the state write had been lost
    second = Scheduler(squeue).tick()
    assert len(first.created) == 1 and second.created == ()
    assert [j.idempotency_key for j in squeue.list()] == [f"schedule:{entry.schedule.id}:2026-05-01T12:00:00Z"]
    book.close()


def test_overlap_skip_waits_for_the_previous_run(squeue: Queue, at_noon: FakeClock) -> None:
    add(squeue)
    scheduler = Scheduler(squeue)
    at_noon.advance(40)
    assert len(scheduler.tick().created) == 1
    at_noon.advance(3600)  # 13:00: the 12:00 run is still queued
    assert scheduler.tick().created == ()
    entry = scheduler.book.get("hourly")
    assert entry.state.last_skipped is not None and "still queued or running" in entry.state.last_skipped
    finish(squeue, ok=True)
    at_noon.advance(3600)
    assert len(scheduler.tick().created) == 1


def test_pause_after_three_dead_runs_in_a_row(squeue: Queue, at_noon: FakeClock) -> None:
    add(squeue)
    scheduler = Scheduler(squeue)
    at_noon.advance(40)
    assert len(scheduler.tick().created) == 1
    reports = []
    for _ in range(3):
        finish(squeue, ok=False)
        at_noon.advance(3600)
        reports.append(scheduler.tick())
    # two failures: the next windows still run; the third pauses it before the next window
    assert [len(r.created) for r in reports] == [1, 1, 0]
    assert [r.paused for r in reports] == [(), (), ("hourly",)]
    entry = scheduler.book.get("hourly")
    assert entry.state.paused and entry.state.dead_streak == 3
    assert entry.state.paused_reason is not None and "3 failed runs in a row" in entry.state.paused_reason
    assert "bad request" in entry.state.paused_reason
    assert entry.next_run(at_noon.now()) is None
    at_noon.advance(3600)
    assert scheduler.tick().created == ()  # paused: no new job
    resumed = scheduler.book.set_paused("hourly", False)
    assert not resumed.state.paused and resumed.state.dead_streak == 0
    at_noon.advance(3600)
    assert len(scheduler.tick().created) == 1  # the next window after the resume only


def test_a_success_resets_the_dead_streak_and_is_the_last_good_result(squeue: Queue, at_noon: FakeClock) -> None:
    add(squeue)
    scheduler = Scheduler(squeue)
    at_noon.advance(40)
    good = scheduler.tick().created[0]
    finish(squeue, ok=True)
    at_noon.advance(3600)
    bad = scheduler.tick().created[0]
    finish(squeue, ok=False)
    at_noon.advance(60)
    scheduler.tick()
    entry = scheduler.book.get("hourly")
    assert entry.state.dead_streak == 1 and entry.state.last_good_job_id == good
    jobs = {j["id"]: j for j in squeue.raw_jobs()}
    run = last_run(entry, jobs)
    assert run.job_id == bad and run.state == "dead" and run.stale and run.good_job_id == good
    data = entry_json(entry, at_noon.now(), jobs)
    assert data["last_good_stale"] is True and data["next_run"] == "2026-05-01T14:00:00Z"


def test_catch_up_latest_after_being_closed(squeue: Queue, at_noon: FakeClock) -> None:
    add(squeue, catch_up="latest")
    at_noon.advance(3 * 3600 + 1800)  # closed until 15:29:30
    report = Scheduler(squeue).tick()
    assert [squeue.get(i).idempotency_key.split(":", 2)[2] for i in report.created] == ["2026-05-01T15:00:00Z"]


def test_run_now_ignores_overlap_and_makes_a_new_job_each_time(squeue: Queue) -> None:
    add(squeue)
    scheduler = Scheduler(squeue)
    first, second = scheduler.run_now("hourly"), scheduler.run_now("hourly")
    assert first != second
    assert scheduler.book.get("hourly").state.pending == (first, second)
    with pytest.raises(NoSuchSchedule):
        scheduler.run_now("nope")


def test_the_profile_goes_into_the_job_input(squeue: Queue) -> None:
    add(squeue, profile="lab")
    job_id = Scheduler(squeue).run_now("hourly")
    assert squeue.get(job_id).input == {"prompt": "hi", "profile": "lab"}


# ----------------------------------------------------------------------------- the file


def test_bad_schedules_are_refused_with_one_line(tmp_path: Path) -> None:
    for kw, words in (
        ({"cron": "every hour"}, "not a cron expression"),
        ({"tz": "Mars/Olympus"}, "not an IANA time zone"),
        ({"catch_up": "some"}, "catch-up must be"),
        ({"overlap": "maybe"}, "overlap must be"),
        ({"name": ""}, "schedule name"),
    ):
        fields: dict[str, Any] = {"cron": "0 * * * *", "tz": "UTC", "name": "x", **kw}
        name, cron = fields.pop("name"), fields.pop("cron")
        with pytest.raises(InvalidInput, match=words):
            new_schedule(name, cron, "demo", {}, now=0.0, **fields)


def test_names_are_unique_and_edits_keep_the_state(tmp_path: Path) -> None:
    book = ScheduleBook(tmp_path, lambda: 100.0)
    book.add(new_schedule("a", "0 * * * *", "demo", {}, now=100.0, tz="UTC"))
    with pytest.raises(InvalidInput, match="already exists"):
        book.add(new_schedule("a", "5 * * * *", "demo", {}, now=100.0, tz="UTC"))
    edited = book.edit("a", cron="15  *  * * *", overlap="allow")
    assert edited.schedule.cron == "15 * * * *" and edited.state.last_evaluated == 100.0
    assert book.remove("a").schedule.name == "a" and book.load() == []
    book.close()


def test_a_damaged_file_is_set_aside_with_a_notice(tmp_path: Path) -> None:
    book = ScheduleBook(tmp_path, lambda: 100.0)
    book.add(new_schedule("a", "0 * * * *", "demo", {}, now=100.0, tz="UTC"))
    path = tmp_path / "schedules.json"
    path.write_bytes(path.read_bytes()[:-40])
    assert book.load() == []
    assert "damaged" in book.notices[0] and "set aside" in book.notices[0]
    aside = list(tmp_path.glob("schedules.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].stat().st_size > 0
    book.add(new_schedule("b", "0 * * * *", "demo", {}, now=100.0, tz="UTC"))
    assert [e.schedule.name for e in book.load()] == ["b"]
    book.close()


def test_a_hand_edit_that_breaks_the_checksum_is_set_aside(tmp_path: Path) -> None:
    book = ScheduleBook(tmp_path, lambda: 100.0)
    book.add(new_schedule("a", "0 * * * *", "demo", {}, now=100.0, tz="UTC"))
    path = tmp_path / "schedules.json"
    path.write_text(path.read_text().replace('"0 * * * *"', '"5 * * * *"'))
    assert book.load() == [] and "checksum" in book.notices[0]
    book.close()


def test_a_newer_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "schedules.json"
    body = json.dumps({"format": "desktop-queue-schedules", "schema_version": 99, "schedules": []})
    path.write_text(body)
    book = ScheduleBook(tmp_path, lambda: 100.0)
    with pytest.raises(ScheduleError, match="newer"):
        book.load()
    assert path.read_text() == body
    book.close()


def test_state_round_trips_through_json() -> None:
    s = ScheduleState(last_evaluated=1.5, last_window=3600.0, pending=("a", "b"), paused=True, paused_reason="x")
    assert ScheduleState.from_json(json.loads(json.dumps(s.to_json()))) == s
    sc = sched(profile="p", max_attempts=3)
    assert Schedule.from_json(json.loads(json.dumps(sc.to_json()))) == dataclasses.replace(sc, created_at=0.0)


# ----------------------------------------------------------------------------- real processes

TICK = """
import json, sys
from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.schedules import Scheduler
queue = Queue.open(sys.argv[1], clock=FakeClock(start=float(sys.argv[2])), background_compaction=False)
report = Scheduler(queue).tick()
queue.close()
print(json.dumps(list(report.created)))
"""


def _tick_processes(data_dir: Path, now: float, n: int) -> list[list[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TICK, str(data_dir), repr(now)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(n)
    ]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        outs.append(json.loads(out))
    return outs


def test_two_processes_in_the_same_window_create_one_job_per_window(data_dir: Path) -> None:
    created = ts(2026, 5, 1, 2, 30)
    book = ScheduleBook(data_dir, lambda: created)
    book.add(new_schedule("all", "0 * * * *", "demo", {"n": 1}, now=created, tz="UTC", catch_up="all"))
    book.add(new_schedule("one", "0 * * * *", "demo", {"n": 2}, now=created, tz="UTC", overlap="allow"))
    book.close()
    now = ts(2026, 5, 1, 6, 0, 20)  # all: 03, 04, 05, 06; one: 06 (on time)
    outs = _tick_processes(data_dir, now, 2)
    assert sum(len(o) for o in outs) == 5
    # a restart in the same window creates nothing new
    assert _tick_processes(data_dir, now + 30, 1) == [[]]
    queue = Queue.open(data_dir)
    try:
        keys = sorted(j.idempotency_key for j in queue.list())
    finally:
        queue.close()
    assert len(keys) == len(set(keys)) == 5
    assert sum(k.endswith("T06:00:00Z") for k in keys) == 2


@pytest.mark.parametrize(
    ("title", "name"),
    [
        ("Overnight: log summary!", "Overnight log summary"),
        ("  -- résumé   of the day --", "resume of the day"),
        ("日本語のタイトル", ""),
        (None, ""),
        ("x" * 80, "x" * 64),
    ],
)
def test_a_template_suggests_a_schedule_name_that_validates(title: str | None, name: str) -> None:
    template = JobTemplate("demo", {"prompt": "p"}, title=title)
    assert template.suggested_name() == name
    if name:
        assert new_schedule(name, "0 * * * *", "demo", {}, now=0.0, tz="UTC").name == name  # (it validates)


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        ("0 * * * *", "Every hour"),
        ("*/30 * * * *", "Every 30 minutes"),
        ("30 6 * * 1-5", "At 06:30, Monday through Friday"),  # (a 24-hour clock, as every time shown)
        ("0 7 * * 0", "At 07:00, only on Sunday"),
        ("@daily", None),  # (no words for a shorthand: it speaks for itself)
    ],
)
def test_a_cron_is_said_in_words(cron: str, words: str | None) -> None:
    assert describe_cron(cron) == words


def test_a_listed_schedule_says_when_in_words(tmp_path: Path) -> None:
    entry = Entry(new_schedule("news", "0 7 * * 1-5", "demo", {}, now=0.0, tz="UTC"), ScheduleState())
    assert entry_json(entry, 0.0)["when"] == "At 07:00, Monday through Friday"
