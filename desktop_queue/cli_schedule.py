"""``desktop-queue schedule ...``: add, list, edit, pause, resume, remove and run-now schedules.

A thin layer over :mod:`desktop_queue.core.schedules`, with the exit codes of
:mod:`desktop_queue.cli` (2 bad arguments, 3 no such schedule). ``schedule list
--json`` gives ``next_run`` in ISO 8601 UTC; the text output is in local time.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import time
from typing import Any

from desktop_queue.core.errors import InvalidInput, UnknownKind
from desktop_queue.core.schedules import (
    CATCH_UP,
    DEFAULT_PAUSE_AFTER,
    OVERLAP,
    Entry,
    Scheduler,
    check_zone,
    describe_cron,
    entry_json,
    last_run,
    local_zone_name,
    new_schedule,
    result_preview,
)

ACTIONS = ("pause", "resume", "remove", "run-now")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _template_options(q: argparse.ArgumentParser, *, edit: bool) -> None:
    """The fields ``add`` takes and ``edit`` may change (``edit`` leaves out what is not given)."""
    from desktop_queue.cli import MAX_ATTEMPTS_HELP, PRIORITY_HELP

    q.add_argument("--cron", required=not edit, metavar="EXPR", help="five-field cron expression, e.g. '0 * * * *'")
    q.add_argument("--kind", required=not edit, help="job kind, e.g. demo")
    q.add_argument("--input", dest="input_json", required=not edit, metavar="JSON", help="the job's input as JSON")
    q.add_argument("--tz", metavar="ZONE", help="IANA time zone the cron is read in (default: this computer's)")
    q.add_argument("--catch-up", choices=CATCH_UP, help="missed windows after a pause in running (default: skip)")
    q.add_argument("--overlap", choices=OVERLAP, help="while the previous run is queued or running (default: skip)")
    q.add_argument("--priority", choices=["interactive", "background"], help=PRIORITY_HELP)
    q.add_argument("--max-attempts", type=int, metavar="N", help=MAX_ATTEMPTS_HELP)
    q.add_argument("--title", help="the jobs' title (default: the schedule's name)")
    q.add_argument("--profile", help="provider profile the jobs run on (default: the default profile)")
    q.add_argument(
        "--pause-after",
        type=_count,
        metavar="N",
        help=f"pause after N dead runs in a row (default {DEFAULT_PAUSE_AFTER}; 0: never)",
    )
    q.add_argument("--json", action="store_true", help="print JSON")


def add_parser(sub: Any) -> None:
    """Adds ``schedule`` and its actions to the command line's subparsers."""
    from desktop_queue.cli import _Parser

    p = sub.add_parser(
        "schedule",
        help="jobs that run on a cron schedule (every process on the data dir runs them once)",
        description="Schedules live in schedules.json in the data dir; the window and every `work` run them.",
    )
    ssub = p.add_subparsers(dest="schedule_command", metavar="ACTION", parser_class=_Parser, required=True)
    q = ssub.add_parser("add", help="add a schedule")
    q.add_argument("name", help="a name: letters, digits, spaces, '.', '_' and '-'")
    _template_options(q, edit=False)
    q = ssub.add_parser("edit", help="change a schedule (its history stays)")
    q.add_argument("name", help="the schedule's name")
    q.add_argument("--rename", metavar="NEW", help="a new name")
    _template_options(q, edit=True)
    q = ssub.add_parser("list", help="the schedules, with their next and last runs")
    q.add_argument("--json", action="store_true", help="print JSON (times in ISO 8601 UTC)")
    for action, text in (
        ("pause", "stop making jobs (queued ones stay)"),
        ("resume", "make jobs again, from the next window on"),
        ("remove", "remove a schedule (its jobs stay)"),
        ("run-now", "submit its job now, whatever the overlap rule"),
    ):
        q = ssub.add_parser(action, help=text)
        q.add_argument("name", help="the schedule's name")
        q.add_argument("--json", action="store_true", help="print JSON")


def _local(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    when = _dt.datetime.fromtimestamp(ts)
    today = _dt.datetime.fromtimestamp(now).date()
    return when.strftime("%H:%M") if when.date() == today else when.strftime("%Y-%m-%d %H:%M")


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """The template fields given on the command line."""
    from desktop_queue.cli import _parse_json

    out: dict[str, Any] = {}
    if args.input_json is not None:
        out["input"] = _parse_json(args.input_json, "--input")
    for name, attr in (
        ("cron", "cron"),
        ("kind", "kind"),
        ("tz", "tz"),
        ("catch_up", "catch_up"),
        ("overlap", "overlap"),
        ("priority", "priority"),
        ("max_attempts", "max_attempts"),
        ("title", "title"),
        ("profile", "profile"),
        ("pause_after", "pause_after"),
    ):
        value = getattr(args, attr)
        if value is not None:
            out[name] = value
    if "tz" in out:
        check_zone(out["tz"])
    return out


def _check_job(queue: Any, kind: str, payload: Any) -> None:
    """Refuses a template its provider would refuse, now rather than at every window."""
    provider = queue.providers.get(kind)
    if provider is None and queue.providers:
        known = ", ".join(sorted(queue.providers)) or "none"
        raise UnknownKind(f"unknown job kind {kind!r} (known kinds: {known})")
    if provider is not None and hasattr(provider, "validate"):
        provider.validate(payload)


def _line(entry: Entry, now: float, jobs: dict[str, dict[str, Any]], name_width: int = 20, cron_width: int = 16) -> str:
    """One schedule: name, cron, zone, next and last run; below, the cron in words and why it waits."""
    s, st = entry.schedule, entry.state
    nxt = _local(entry.next_run(now), now) if not st.paused else "paused"
    run = last_run(entry, jobs)
    last = f"{run.state} ({run.job_id})" if run.job_id else "never ran"
    indent = " " * (name_width + 1)
    text = f"{s.name:<{name_width}} {s.cron:<{cron_width}} {s.tz:<18} next {nxt:<16} last {last}"
    if said := describe_cron(s.cron):
        text += f"\n{indent}{said}"
    if st.paused and st.paused_reason:
        text += f"\n{indent}{st.paused_reason}"
    elif st.last_skipped:
        text += f"\n{indent}{st.last_skipped}"
    return text


def run(args: argparse.Namespace) -> int:
    """Runs one ``schedule`` action; returns the exit code (errors are raised as QueueError)."""
    from desktop_queue.cli import EXIT_OK, _err, _open, _out

    action = args.schedule_command
    with _open(args) as queue:
        scheduler = Scheduler(queue)
        book = scheduler.book
        try:
            for notice in book.notices:
                _err(f"note: {notice}")
            now = queue.clock.now()
            if action == "add":
                fields = _fields(args)
                fields.setdefault("tz", local_zone_name())
                kind, payload, cron = fields.pop("kind"), fields.pop("input"), fields.pop("cron")
                schedule = new_schedule(args.name, cron, kind, payload, now=now, **fields)
                _check_job(queue, schedule.kind, schedule.job_input())
                entry = book.add(schedule)
                _say(args, entry, now, f"added schedule {entry.schedule.name}")
            elif action == "edit":
                fields = _fields(args)
                if args.rename:
                    fields["name"] = args.rename
                if not fields:
                    raise InvalidInput("nothing to change: give at least one of --cron, --input, --tz, ...")
                old = book.get(args.name).schedule
                changed = dataclasses.replace(old, **fields)
                _check_job(queue, changed.kind, changed.job_input())
                entry = book.edit(args.name, **fields)
                _say(args, entry, now, f"changed schedule {entry.schedule.name}")
            elif action == "list":
                entries = book.load()
                for notice in book.notices:
                    _err(f"note: {notice}")
                ids = {i for e in entries for i in (e.state.last_job_id, e.state.last_good_job_id) if i}
                jobs = scheduler.jobs(ids)
                if args.json:
                    rows = []
                    for e in entries:
                        row = entry_json(e, now, jobs)
                        row["last_good_preview"] = result_preview(queue, last_run(e, jobs).good_job_id)
                        rows.append(row)
                    _out(rows)
                elif not entries:
                    print(
                        "no schedules: add one with `desktop-queue schedule add NAME --cron EXPR --kind KIND --input JSON`"
                    )
                else:
                    # (columns as wide as the longest name and cron: "Summarise the overnight logs" ran on)
                    name_width = max(20, *(len(e.schedule.name) for e in entries))
                    cron_width = max(16, *(len(e.schedule.cron) for e in entries))
                    for e in entries:
                        print(_line(e, now, jobs, name_width, cron_width))
                        shown = last_run(e, jobs)
                        if shown.stale:
                            preview = result_preview(queue, shown.good_job_id, 80) or "(no text)"
                            print(
                                f"{'':<{name_width + 1}}last good result, not current "
                                f"({_local(shown.good_at, now)}): {preview}"
                            )
            elif action in ("pause", "resume"):
                entry = book.set_paused(args.name, action == "pause")
                _say(args, entry, now, f"{action}d schedule {entry.schedule.name}")
            elif action == "remove":
                entry = book.remove(args.name)
                _say(args, entry, now, f"removed schedule {entry.schedule.name} (its jobs stay)")
            elif action == "run-now":
                job_id = scheduler.run_now(args.name)
                if args.json:
                    _out({"schedule": args.name, "job_id": job_id})
                else:
                    print(f"submitted {job_id} for schedule {args.name}")
        finally:
            scheduler.close()
    return EXIT_OK


def _say(args: argparse.Namespace, entry: Entry, now: float, text: str) -> None:
    from desktop_queue.cli import _out

    if args.json:
        _out(entry_json(entry, now))
        return
    nxt = entry.next_run(now)
    when = f"; next run {_local(nxt, now)} ({time.strftime('%Z')})" if nxt is not None else ""
    print(text + when)
