"""``desktop-queue schedule ...`` and ``submit --at/--delay``: the scripting contract."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import time

import pytest

from tests.cli.conftest import Cli

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:00Z$")
TEMPLATE = ("--kind", "demo", "--input", json.dumps({"prompt": "hello", "duration_s": 0}))


def add(dq: Cli, name: str = "hourly", *extra: str) -> dict[str, object]:
    run = dq.run("schedule", "add", name, "--cron", "0 * * * *", *TEMPLATE, "--tz", "UTC", "--json", *extra)
    assert run.code == 0, run.err
    doc: dict[str, object] = run.json()
    return doc


def test_add_and_list_with_next_run_in_iso_utc(dq: Cli) -> None:
    added = add(dq, "hourly", "--catch-up", "latest", "--overlap", "allow", "--max-attempts", "2")
    assert added["name"] == "hourly" and added["catch_up"] == "latest" and added["overlap"] == "allow"
    listed = dq.run("schedule", "list", "--json")
    assert listed.code == 0, listed.err
    (row,) = listed.json()
    assert ISO_UTC.match(str(row["next_run"]))
    nxt = dt.datetime.fromisoformat(str(row["next_run"]).replace("Z", "+00:00")).timestamp()
    assert time.time() < nxt <= time.time() + 3600
    assert row["last_state"] is None and row["paused"] is False and row["max_attempts"] == 2
    text = dq.run("schedule", "list")
    assert text.code == 0 and "hourly" in text.out and "never ran" in text.out


def test_pause_resume_edit_remove(dq: Cli) -> None:
    add(dq)
    paused = dq.run("schedule", "pause", "hourly", "--json").json()
    assert paused["paused"] is True and paused["next_run"] is None
    assert dq.run("schedule", "resume", "hourly", "--json").json()["paused"] is False
    edited = dq.run("schedule", "edit", "hourly", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--json").json()
    assert edited["cron"] == "30 2 * * *" and edited["tz"] == "Europe/Berlin"
    assert dq.run("schedule", "edit", "hourly", "--rename", "nightly").code == 0
    assert [r["name"] for r in dq.run("schedule", "list", "--json").json()] == ["nightly"]
    assert dq.run("schedule", "remove", "nightly").code == 0
    assert dq.run("schedule", "list", "--json").json() == []


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--cron", "0 * *", *TEMPLATE), "not a cron expression"),
        (("--cron", "0 * * * *", *TEMPLATE, "--tz", "Mars/Olympus"), "not an IANA time zone"),
        (("--cron", "0 * * * *", "--kind", "nope", "--input", "{}"), "unknown job kind"),
        (("--cron", "0 * * * *", "--kind", "demo", "--input", "{oops"), "not valid JSON"),
        (("--cron", "0 * * * *", *TEMPLATE, "--catch-up", "some"), "invalid choice"),
        (("--cron", "0 * * * *", *TEMPLATE, "--max-attempts", "0"), "max attempts"),
        (("--kind", "demo", "--input", "{}"), "--cron"),
    ],
)
def test_bad_schedules_exit_2_with_one_clear_line_and_add_nothing(dq: Cli, args: tuple[str, ...], words: str) -> None:
    run = dq.run("schedule", "add", "bad", *args)
    assert run.code == 2
    assert words in run.err_lines[-1]
    assert dq.run("schedule", "list", "--json").json() == []


def test_a_name_is_used_once_and_a_missing_one_exits_3(dq: Cli) -> None:
    add(dq)
    again = dq.run("schedule", "add", "hourly", "--cron", "5 * * * *", *TEMPLATE)
    assert again.code == 2 and "already exists" in again.err
    for action in ("pause", "resume", "remove", "run-now"):
        run = dq.run("schedule", action, "nope")
        assert run.code == 3 and "no schedule named 'nope'" in run.err
    assert dq.run("schedule", "edit", "hourly").code == 2  # nothing to change


def test_run_now_then_a_worker_runs_it_and_list_shows_the_result(dq: Cli) -> None:
    add(dq)
    made = dq.run("schedule", "run-now", "hourly", "--json")
    assert made.code == 0, made.err
    job_id = made.json()["job_id"]
    job = dq.run("show", job_id, "--json").json()
    assert job["idempotency_key"].startswith("schedule:")
    assert dq.sub("work", "--until-idle", "--max-seconds", "30").code == 0
    (row,) = dq.run("schedule", "list", "--json").json()
    assert row["last_job_id"] == job_id and row["last_state"] == "succeeded"
    assert row["last_good_stale"] is False and row["last_good_preview"]


def test_a_damaged_schedules_file_is_set_aside_with_a_note(dq: Cli) -> None:
    add(dq)
    path = dq.data_dir / "schedules.json"
    path.write_text("{ not json")
    run = dq.run("schedule", "list", "--json")
    assert run.code == 0 and run.json() == []
    assert "damaged" in run.err and "set aside" in run.err
    assert list(dq.data_dir.glob("schedules.json.corrupt-*"))


# ----------------------------------------------------------------------------- submit --at / --delay


def test_submit_with_delay_is_queued_for_later(dq: Cli) -> None:
    before = time.time()
    job = dq.submit({"prompt": "later"}, "--delay", "1h30m")
    assert job["state"] == "queued"
    assert before + 5400 - 1 <= job["run_after"] <= time.time() + 5400 + 1
    line = dq.run("list")
    assert "scheduled for" in line.out


def test_submit_at_a_local_time_and_a_zoned_one(dq: Cli) -> None:
    local = (dt.datetime.now() + dt.timedelta(days=1)).replace(microsecond=0)
    job = dq.submit({"prompt": "local"}, "--at", local.isoformat())
    assert job["run_after"] == pytest.approx(local.timestamp(), abs=0.01)
    zoned = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)).replace(microsecond=0)
    job = dq.submit({"prompt": "zoned"}, "--at", zoned.isoformat())
    assert job["run_after"] == pytest.approx(zoned.timestamp(), abs=0.01)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--delay", "5x"), "not a duration"),
        (("--delay", "-5s"), "cannot be negative"),  # (argparse took "-5s" for an option)
        (("--delay=-1h30m",), "cannot be negative"),
        (("--delay", "0s"), "longer than zero"),
        (("--at", "tomorrow"), "not an ISO 8601 time"),
        (("--at", "2020-01-01T10:00"), "in the past"),
        (("--at", "2099-01-01T10:00"), "more than a year ahead"),
        (("--delay", "1h", "--batch", "-"), "not to --batch"),
    ],
)
def test_bad_times_exit_2_with_one_line(dq: Cli, args: tuple[str, ...], words: str) -> None:
    run = dq.run("submit", "demo", "--input", '{"prompt": "x"}', *args)
    assert run.code == 2
    assert words in run.err_lines[-1]
    assert dq.jobs() == []


def test_two_workers_started_together_make_one_job_per_window(dq: Cli) -> None:
    from desktop_queue.core.schedules import ScheduleBook, new_schedule

    book = ScheduleBook(dq.data_dir, time.time)
    payload = {"prompt": "every minute", "duration_s": 0}
    book.add(new_schedule("minutely", "* * * * *", "demo", payload, now=time.time() - 61, tz="UTC"))
    book.close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "desktop_queue", *dq.argv("work", "--until-idle", "--max-seconds", "30")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    keys = [j["idempotency_key"] for j in dq.jobs() if j["title"] == "minutely"]
    # both looked at once: one job for the due window (two only if a minute turned between them)
    assert len(keys) in (1, 2) and len(keys) == len(set(keys))
    assert all(k.startswith("schedule:") for k in keys)


def test_list_says_each_cron_in_words_and_lines_up_past_a_long_name(dq: Cli) -> None:
    """ "Summarise the overnight logs" pushed its row's cron a column right of the others'."""
    add(dq, "hourly")
    long = dq.run("schedule", "add", "Summarise the overnight logs", "--cron", "30 6 * * 1-5", *TEMPLATE, "--tz", "UTC")
    assert long.code == 0, long.err

    lines = dq.run("schedule", "list").out.splitlines()

    rows = [line for line in lines if not line.startswith(" ")]
    assert len(rows) == 2 and len({row.index(" UTC ") for row in rows}) == 1, lines
    said = [line.strip() for line in lines if line.startswith(" ")]
    assert said == ["Every hour", "At 06:30, Monday through Friday"]
