"""The command line: ``desktop-queue [--data-dir DIR] COMMAND ...`` (shared/DESIGN.md section 5).

A thin layer over :mod:`desktop_queue.core`. Exit codes: 0 done, 1 failed,
2 usage error (bad arguments or input), 3 no such job, 4 not allowed in the job's state.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import itertools
import logging
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from desktop_queue import __version__, cli_alerts, cli_migrate, cli_pause, cli_schedule, cli_serve
from desktop_queue.core.errors import InputTooLarge, InvalidInput, NotAllowed, QueueError, StoreError, UnknownKind
from desktop_queue.core.model import Job, State, iso
from desktop_queue.core.paths import data_dir as resolve_data_dir
from desktop_queue.core.wording import counted, were

# The engine (queue, store, archive, flow control) is imported by the commands that open
# a queue, not here: `--help`, a refused flag and the light commands start without it.
if TYPE_CHECKING:
    from desktop_queue.core.queue import Queue
    from desktop_queue.core.result_view import ResultContent

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_JOB, EXIT_NOT_ALLOWED = 0, 1, 2, 3, 4
PROG = "desktop-queue"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


#: the help of every command's job id argument
ID_HELP = "the job's id (or its first 4 or more characters, if no other job's start with them)"
#: the help of --priority (submit, schedule add/edit)
PRIORITY_HELP = "interactive jobs are leased before background ones (default: background)"
#: the help of --max-attempts (submit, schedule add/edit)
MAX_ATTEMPTS_HELP = "attempts before the job is dead-lettered (default: 5)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Run AI generation jobs on this machine, and never lose one.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--data-dir",
        type=_data_dir_arg,
        help="data directory (default: $DESKTOP_QUEUE_DATA_DIR, then the user data dir)",
    )
    parser.add_argument(
        "--store",
        type=_store_arg,
        metavar="URI",
        help="keep the jobs in PostgreSQL (postgresql://...) instead of the data dir (default: $DESKTOP_QUEUE_STORE)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the engine does to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    sub.add_parser("gui", help="open the window (the default)")

    p = sub.add_parser("submit", help="submit a job; prints it (with duplicate: true when it already existed)")
    p.add_argument("kind", help="job kind, e.g. demo")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--input", dest="input_json", metavar="JSON", help="the job's input as JSON")
    src.add_argument("--input-file", metavar="PATH", help="read the input JSON from a file")
    src.add_argument("stdin", nargs="?", choices=["-"], help="read the input JSON from standard input")
    p.add_argument(
        "--batch",
        metavar="FILE",
        help="one job a line, in one commit (all or none): JSON Lines (one input object a line), "
        "plain text (one prompt a line), or CSV (.csv: a header row of field names); - for standard input. "
        "With --input, the template of the other fields (text and CSV)",
    )
    p.add_argument("--key", help="idempotency key (default: a fingerprint of kind and input)")
    p.add_argument("--title", help="a title for people")
    p.add_argument("--priority", choices=["interactive", "background"], default="background", help=PRIORITY_HELP)
    p.add_argument("--max-attempts", type=int, default=None, metavar="N", help=MAX_ATTEMPTS_HELP)
    when = p.add_mutually_exclusive_group()
    when.add_argument(
        "--at",
        type=_at_arg,
        metavar="TIME",
        help="start no earlier than this ISO 8601 time (local unless it has a zone)",
    )
    when.add_argument(
        "--delay", type=_delay_arg, metavar="DURATION", help="start after this long: 90s, 15m, 1h, 2d, 1h30m"
    )
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("list", help="jobs, newest first")
    p.add_argument("--state", choices=[s.value for s in State], help="only jobs in this state")
    count = p.add_mutually_exclusive_group()
    count.add_argument(
        "--limit",
        type=_at_least_one,
        default=None,
        metavar="N",
        help=f"at most N jobs, the newest (default: {LIST_DEFAULT_LIMIT:,})",
    )
    count.add_argument("--all", action="store_true", help="every job, however many (a long history takes long)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("show", help="one job with its full event timeline (and its text result)")
    p.add_argument("id", help=ID_HELP)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "result",
        help="a job's result: its text on standard output, or its artifact (image, audio) to a file",
        description="Writes a succeeded job's result: text (or JSON) to standard output or FILE; an "
        "artifact (an image, an audio file) only to FILE (without --output its path is printed). "
        "Exit codes: 3 no such job, 4 no result in the job's state, 1 the result is missing or damaged.",
    )
    p.add_argument("id", help=ID_HELP)
    p.add_argument("-o", "--output", metavar="FILE", help="write the result to FILE ('-': standard output)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--json", action="store_true", help="print the whole result document as JSON")

    for name, text in (("cancel", "cancel a queued or running job"), ("retry", "retry a dead or cancelled job")):
        p = sub.add_parser(name, help=text)
        p.add_argument("id", help=ID_HELP)
        p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("replay", help="a new job from a finished one, with the same or edited input")
    p.add_argument("id", help=ID_HELP)
    p.add_argument("--input", dest="input_json", metavar="JSON", help="edited input (default: the original's)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="say what the replay would do (how the original ended, what would make it fail again "
        "or wait); queue nothing",
    )
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "resolve",
        help="close a dead letter without retrying it",
        description="Marks a dead job resolved: it stays dead, leaves the dead letters and their count, "
        "and is purged like any finished job. A retry later opens it again.",
    )
    p.add_argument("id", help=ID_HELP)
    p.add_argument("--note", metavar="TEXT", help="why (kept in the job's timeline, at most 300 characters)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "export",
        help="write jobs with their timelines to CSV or JSON Lines",
        description="Writes the jobs matching the filters, newest first, with their events. "
        "Inputs (prompts) are left out unless --with-inputs.",
    )
    p.add_argument("--state", choices=[*(s.value for s in State), "resolved"], help="only jobs in this state")
    p.add_argument("--kind", help="only jobs of this kind")
    p.add_argument("--search", metavar="TEXT", help="only jobs whose title, id, error or prompt contains TEXT")
    p.add_argument("--format", choices=["csv", "jsonl"], default="jsonl", help="file format (default: jsonl)")
    p.add_argument("--with-inputs", action="store_true", help="include each job's input (its prompt)")
    p.add_argument(
        "--with-results",
        action="store_true",
        help="include each succeeded job's result (its text or JSON; an image's or audio's bytes too), "
        "which import stores with the job",
    )
    p.add_argument("--output", "-o", metavar="FILE", help="write here (default: standard output)")

    p = sub.add_parser("import", help="add jobs from an export (CSV or JSON Lines) to this data dir")
    p.add_argument("file", help="the export file (- for standard input)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("work", help="run a headless worker on the same lease engine")
    p.add_argument(
        "--concurrency",
        type=_at_least_one,
        default=4,
        metavar="N",
        help="attempts this worker runs at once (default: 4)",
    )
    p.add_argument("--until-idle", action="store_true", help="exit when nothing is queued or running")
    p.add_argument(
        "--rpm",
        type=_positive,
        default=None,
        metavar="N",
        help="requests per minute to the OpenAI-compatible endpoint (default: unlimited)",
    )
    p.add_argument(
        "--tpm",
        type=_positive,
        default=None,
        metavar="N",
        help="tokens per minute to the OpenAI-compatible endpoint (default: unlimited)",
    )
    p.add_argument(
        "--provider-concurrency",
        type=_at_least_one,
        default=None,
        metavar="N",
        help="attempts at once against the OpenAI-compatible endpoint (default: --concurrency)",
    )
    p.add_argument("--model", default=None, help="default model of openai.chat / openai.responses jobs")
    for unit, kind, text in (("usd", _positive, "dollars"), ("tokens", _at_least_one, "tokens (in and out)")):
        for period in ("day", "month"):
            p.add_argument(
                f"--budget-{unit}-per-{period}",
                type=kind,
                default=None,
                metavar="N",
                help=f"{text} the profile may spend a {period}, shared by every process on the "
                "data dir (jobs wait when the next would pass it; default: no budget)",
            )
    p.add_argument(
        "--lease-s",
        type=_positive,
        default=None,
        metavar="S",
        help="lease length (default: each kind's own, 30 s); the worker renews its leases "
        "every third of it for as long as it runs",
    )
    p.add_argument(
        "--attempt-timeout",
        type=_positive,
        default=None,
        metavar="S",
        help="give up on an attempt that has not answered after S seconds, as a retryable "
        "timeout (default: each kind's own; a job's input may set its own timeout_s)",
    )
    p.add_argument("--max-seconds", type=_positive, default=None, metavar="S", help="exit after S seconds")
    p.add_argument("--json", action="store_true", help="print a JSON summary")

    p = sub.add_parser("stats", help="counts per state, wait and run time percentiles, retries, dead letters")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--window",
        choices=["1h", "24h", "7d"],
        default=None,
        help="the figures of the Metrics pane over the last hour, day or week (default: all-time counts)",
    )

    p = sub.add_parser(
        "purge",
        help="remove finished jobs (with their results and artifacts) finished before a date",
        description="Removes finished jobs for good: their timelines, results and artifact files. "
        "With --by-retention, applies the data directory's retention policy (see `retention`).",
    )
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--finished-before",
        type=_time_arg,
        metavar="WHEN",
        help="a local date (YYYY-MM-DD), an ISO 8601 time, an age such as 90d, 12h, or now",
    )
    when.add_argument("--by-retention", action="store_true", help="apply the saved retention policy")
    p.add_argument(
        "--state", action="append", choices=["succeeded", "dead", "cancelled"], help="only these (repeatable)"
    )
    p.add_argument("--dry-run", action="store_true", help="say how many would go; remove nothing")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("retention", help="show or set how long finished jobs and damaged files are kept")
    # (absent unless given: "never" is a value, None)
    p.add_argument(
        "--finished-days",
        type=_days_arg,
        default=argparse.SUPPRESS,
        metavar="N|never",
        help="keep finished jobs N days",
    )
    keep = p.add_mutually_exclusive_group()
    keep.add_argument("--keep-succeeded", action="store_true", default=None, help="never purge succeeded jobs")
    keep.add_argument(
        "--no-keep-succeeded",
        dest="keep_succeeded",
        action="store_false",
        help="purge succeeded jobs like every finished job (the default)",
    )
    p.add_argument(
        "--quarantine-days",
        type=_days_arg,
        default=argparse.SUPPRESS,
        metavar="N|never",
        help="keep *.corrupt-* files N days",
    )
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "profile",
        help="provider profiles (endpoint, model, limits, budgets; keys in the OS keyring)",
        description="The provider profiles the window's Preferences edit, in profiles.json in the user "
        "config dir ($DESKTOP_QUEUE_CONFIG_DIR overrides it). Keys go to the OS keyring only.",
    )
    psub = p.add_subparsers(dest="profile_command", metavar="ACTION", parser_class=_Parser, required=True)
    q = psub.add_parser("add", help="add a profile (the key is read from a hidden prompt or --key-stdin)")
    q.add_argument("name", help="profile name: letters, digits, - and _ (jobs name it in their input)")
    q.add_argument("--base-url", required=True, metavar="URL", help="e.g. http://localhost:11434/v1")
    q.add_argument("--model", default=None, help="the default model of its jobs")
    q.add_argument("--models", default=None, metavar="A,B,…", help="the models offered in forms")
    q.add_argument("--rpm", type=_positive, default=None, metavar="N", help="requests per minute")
    q.add_argument("--tpm", type=_positive, default=None, metavar="N", help="tokens per minute")
    q.add_argument("--concurrency", type=_at_least_one, default=None, metavar="N", help="attempts at once")
    for unit, kind, text in (("usd", _positive, "dollars"), ("tokens", _at_least_one, "tokens")):
        for period in ("day", "month"):
            q.add_argument(
                f"--budget-{unit}-per-{period}", type=kind, default=None, metavar="N", help=f"{text} a {period}"
            )
    keyed = q.add_mutually_exclusive_group()
    keyed.add_argument("--key-stdin", action="store_true", help="read the API key from standard input")
    keyed.add_argument("--no-key", action="store_true", help="the server needs no key (default for local servers)")
    q.add_argument("--default", action="store_true", help="make it the default profile")
    q.add_argument("--replace", action="store_true", help="replace a profile of that name")
    q.add_argument("--json", action="store_true", help="print JSON")
    q = psub.add_parser("list", help="the profiles (never a key: only whether one is set)")
    q.add_argument("--json", action="store_true", help="print JSON")
    q = psub.add_parser("test", help="list the server's models; names the exact failure")
    q.add_argument("name", help="the profile's name")
    q.add_argument("--json", action="store_true", help="print JSON")
    q = psub.add_parser("remove", help="remove a profile and its keyring entry")
    q.add_argument("name", help="the profile's name")
    q.add_argument("--json", action="store_true", help="print JSON")
    cli_serve.add_profile_parser(psub)

    cli_schedule.add_parser(sub)

    p = sub.add_parser("spend", help="what the providers' calls used and cost, from the spend ledger")
    p.add_argument("--by", choices=["day", "model", "profile"], default="day", help="group by (default: day)")
    p.add_argument("--since", type=_day_arg, default=None, metavar="YYYY-MM-DD", help="from this local day on")
    p.add_argument("--json", action="store_true", help="print JSON")
    cli_serve.add_parser(sub)
    cli_pause.add_parsers(sub)
    cli_alerts.add_parser(sub)
    cli_migrate.add_parser(sub)
    return parser


#: how many jobs `list` prints unless told: a year of history is a million jobs
LIST_DEFAULT_LIMIT = 1000

# Numbers are checked where they are parsed: a negative --limit would slice off the
# oldest job, a negative --max-seconds would still lease (the first check runs after
# the driver starts), and float() takes "nan" and "inf", which no comparison refuses.


def _time_arg(text: str) -> float:
    """A wall time from a local date, an ISO 8601 time, an age (``90d``, ``12h``, ``30m``) back from now, or ``now``."""
    text = text.strip()
    if text.lower() == "now":
        return time.time()
    units = {"d": 86_400.0, "h": 3_600.0, "m": 60.0, "s": 1.0}
    if text[-1:] in units and text[:-1].isdigit():
        return time.time() - int(text[:-1]) * units[text[-1]]
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date, time or age: {text!r} (e.g. 2026-01-31, 90d, now)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a local date or time, as people mean it
    return moment.timestamp()


def _at_arg(text: str) -> float:
    from desktop_queue.core.durations import parse_time

    try:
        return parse_time(text, time.time())
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _delay_arg(text: str) -> float:
    from desktop_queue.core.durations import parse_duration

    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"a delay cannot be negative: {text!r} (to start now, leave --delay out)")
    try:
        return time.time() + parse_duration(text)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: options whose value may look like an option ("-5s"): argparse takes only "-5" for a value
_SIGNED_VALUE_OPTIONS = ("--delay",)


def _attach_signed_values(argv: Sequence[str]) -> list[str]:
    """``--delay -5s`` as ``--delay=-5s``, so that the value gets its own error, not "expected one argument"."""
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _SIGNED_VALUE_OPTIONS and i + 1 < len(args) and re.match(r"-\d", args[i + 1]):
            out.append(f"{arg}={args[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def _days_arg(text: str) -> int | None:
    if text.strip().lower() in ("never", "forever", "none"):
        return None
    return _at_least_one(text)


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return value


def _data_dir_arg(text: str) -> str:
    # an empty value would quietly fall back to $DESKTOP_QUEUE_DATA_DIR or the user's own data
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory, not an empty string")
    return text


def _store_arg(text: str) -> str:
    if not text.strip().startswith(("postgresql://", "postgres://")):
        raise argparse.ArgumentTypeError(f"must be a postgresql://... URI, not {text!r}")
    return text


def _day_arg(text: str) -> str:
    from datetime import date

    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a day (YYYY-MM-DD): {text!r}") from None


# ---------------------------------------------------------------------- output


def _out(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")


def _out_array(items: Iterable[Any]) -> None:
    """Writes a JSON array as :func:`_out` writes a list, an item at a time (so that
    ``list --all --json`` of a million jobs never holds them all)."""
    write = sys.stdout.write
    opened = False
    for item in items:
        body = orjson.dumps(item, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
        write((",\n  " if opened else "[\n  ") + body.replace("\n", "\n  "))
        opened = True
    write("\n]\n" if opened else "[]\n")


def _err(message: str) -> None:
    sys.stderr.write(f"{PROG}: {message}\n")


def _ago(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = now - ts
    future = delta < 0
    delta = abs(delta)
    if delta < 1:
        text = "now"
        return text
    if delta < 60:
        text = f"{delta:.0f}s"
    elif delta < 3600:
        text = f"{delta / 60:.0f}m"
    elif delta < 86400:
        text = f"{delta / 3600:.1f}h"
    else:
        text = f"{delta / 86400:.1f}d"
    return f"in {text}" if future else f"{text} ago"


def describe_state(job: Job, now: float, hold: Hold | None = None) -> str:
    """The state as people read it, in the window's words (:mod:`desktop_queue.core.present`):
    ``retrying in 12 s (backoff)`` for a queued job that waits, ``waiting: rate limit
    (~12 s)`` for a due one ``hold`` holds (:func:`_holds`), ``running 63 s, lease 33 s
    overdue`` for one whose holder stopped renewing it, ``dead (fatal)`` for a dead letter."""
    late = job.state == State.RUNNING and job.lease_expires_at is not None and job.lease_expires_at < now
    if (job.state == State.QUEUED and job.run_after > now + 0.5) or late:
        from desktop_queue.core import present

        doc = job.to_json(with_events=False, with_input=False)
        if not late or present.lease_overdue(doc, now) is not None:
            return present.describe_state(doc, now)
    if job.state == State.QUEUED and hold is not None:
        reason = hold(job.to_json(with_events=False))
        if reason:
            return reason
    if job.state == State.DEAD and job.last_error:
        return f"dead ({job.last_error.get('class')})"
    return job.state


#: (job dict) -> why a queued, due job waits now (``waiting: rate limit (~12 s)``), or None
Hold = Callable[[dict[str, Any]], str | None]


def _any_waiting(jobs: Sequence[Job], now: float) -> bool:
    """Whether a queued job among ``jobs`` is due, and may be held by a switch or flow control."""
    return any(j.state == State.QUEUED and j.run_after <= now + 0.5 for j in jobs)


@contextlib.contextmanager
def _holds(queue: Queue, jobs: Sequence[Job], now: float) -> Iterator[Hold | None]:
    """Why queued, due jobs wait, as the window says it (:func:`~desktop_queue.core.present.shared_hold_reason`):
    the background switch and flow control, which every process on ``queue``'s data dir
    shares. None when no such job is listed, or when they cannot be read (a display never
    fails on them)."""
    flow = None
    if _any_waiting(jobs, now):
        from desktop_queue.core.pause import BackgroundSwitch
        from desktop_queue.providers.setup import build

        try:
            paused = BackgroundSwitch(queue.data_dir).state()
            # (the queue's own backend: on PostgreSQL, flow control's state lives beside the jobs)
            _providers, flow = build(_load_profiles(), data_dir=queue.data_dir, backend=queue.store)
        except Exception:  # (a damaged profiles file, an unreadable flow state: the state shows without its reason)
            flow = None
    if flow is None:
        yield None
        return
    from desktop_queue.core.present import shared_hold_reason

    def hold(job: dict[str, Any]) -> str | None:
        try:
            return shared_hold_reason(job, paused, flow)
        except Exception:
            return None

    try:
        yield hold
    finally:
        flow.close()


def _print_job_line(job: Job, now: float, state: str, width: int = 26, kind_width: int = 12) -> None:
    title = job.title if len(job.title) <= 40 else job.title[:39] + "…"
    print(
        f"{job.id}  {state:<{width}} {job.kind:<{kind_width}} {job.attempts}/{job.max_attempts}  "
        f"{_ago(job.created_at, now):>9}  {title}"
    )


def _print_job(
    job: Job,
    now: float,
    timeline: bool = True,
    artifact: Path | None = None,
    result_problem: str | None = None,
    hold: Hold | None = None,
) -> None:
    print(f"job       {job.id}  {job.title}")
    print(f"state     {describe_state(job, now, hold)}")
    print(f"kind      {job.kind}  priority {job.priority}")
    print(f"attempts  {job.attempts}/{job.max_attempts} this run (run {job.run}), {job.total_attempts} in all")
    print(f"key       {job.idempotency_key} ({job.key_source})")
    from desktop_queue.core import present

    if ran_on := present.ran_on_text(job.events):
        print(f"ran on    {ran_on}")
    print(f"created   {iso(job.created_at)}")
    if job.last_error:
        status = f" HTTP {job.last_error['status']}" if job.last_error.get("status") else ""
        print(f"error     {job.last_error.get('class')}{status}: {job.last_error.get('message')}")
    if job.result_ref:
        print(f"result    {result_problem}" if result_problem else f"result    {job.result_ref}")
    if artifact is not None:
        print(f"artifact  {artifact}")
    if job.provider_job_id:
        print(f"provider  {job.provider_job_id}")
    if job.replay_of:
        print(f"replay of {job.replay_of}")
    if job.replayed_as:
        print(f"replayed  as {', '.join(job.replayed_as)}")
    if job.resolved_at is not None:
        print(f"resolved  {iso(job.resolved_at)} (closed by a person without a retry)")
    if not timeline:
        return
    print("timeline")
    for ev in job.events:
        # "leased by render-box (pid 4123) · lease: 30 s", as the window's timeline says it
        detail = present.event_detail(ev, hidden=("host",))
        print(f"  {iso(ev.at)}  {ev.type:<16} attempt {ev.attempt} epoch {ev.epoch:<4} {detail}".rstrip())


def _job_json(job: Job, **extra: Any) -> dict[str, Any]:
    return {**job.to_json(), **extra}


# ---------------------------------------------------------------------- input


def _parse_json(text: str | bytes, where: str) -> Any:
    from desktop_queue.core.queue import MAX_INPUT_BYTES

    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_INPUT_BYTES:
        raise InputTooLarge(f"input is {size:,} bytes; the limit is {MAX_INPUT_BYTES:,} bytes (1 MiB)")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{where} is not valid JSON: {exc}") from None


def _read_limited(stream: Any, where: str) -> bytes:
    from desktop_queue.core.queue import MAX_INPUT_BYTES

    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise InputTooLarge(f"{where} is over the limit of {MAX_INPUT_BYTES:,} bytes (1 MiB)")
    return data if isinstance(data, bytes) else data.encode()


def _submit_input(args: argparse.Namespace) -> Any:
    if args.input_json is not None:
        return _parse_json(args.input_json, "--input")
    if args.input_file is not None:
        try:
            with open(args.input_file, "rb") as fh:
                return _parse_json(_read_limited(fh, args.input_file), args.input_file)
        except OSError as exc:
            raise InvalidInput(f"cannot read {args.input_file}: {exc.strerror or exc}") from None
    if args.stdin == "-":
        return _parse_json(_read_limited(sys.stdin.buffer, "standard input"), "standard input")
    raise InvalidInput("give the input with --input JSON, --input-file PATH or - (standard input)")


# ---------------------------------------------------------------------- commands


def _store(args: argparse.Namespace) -> dict[str, Any]:
    """The backend ``--store`` / ``DESKTOP_QUEUE_STORE`` names, as :meth:`Queue.open` arguments."""
    from desktop_queue.core.backend import STORE_ENV, store_options

    try:
        return store_options(getattr(args, "store", None))
    except ValueError as exc:
        raise InvalidInput(f"{STORE_ENV}: {exc}") from None


def _open(
    args: argparse.Namespace, providers: dict[str, Any] | None = None, store: dict[str, Any] | None = None
) -> Queue:
    if providers is None:
        from desktop_queue.providers import discover
        from desktop_queue.providers.setup import profile_providers

        providers = dict(discover())
        # the openai.* kinds of the configured profiles, so that a job naming one is accepted
        providers.update(profile_providers(_load_profiles(), None))
    if store is None:
        store = _store(args)
    from desktop_queue.core.queue import Queue

    queue = Queue.open(resolve_data_dir(args.data_dir), providers, **store)
    for notice in queue.report.notices:
        _err(f"note: {notice}")
    for item in queue.reconciled:
        _err(f"note: interrupted job {item.job_id} ({item.title}): {item.decision}, {item.reason}")
    return queue


def _read_batch_file(name: str) -> str:
    from desktop_queue.core.queue import MAX_BATCH_BYTES

    limit = MAX_BATCH_BYTES
    try:
        if name == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(name, "rb") as fh:
                data = fh.read(limit + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {name}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputTooLarge(f"{'standard input' if name == '-' else name} is over the batch limit of 64 MiB")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{name} is not UTF-8 text (byte {exc.start})") from None


def cmd_submit_batch(args: argparse.Namespace) -> int:
    """``submit KIND --batch FILE``: every line checked first, then one commit."""
    from desktop_queue.core.batchinput import BatchFormat, detect_format, read_batch
    from desktop_queue.core.inputspec import spec_for

    if args.input_file is not None or args.stdin == "-":
        raise InvalidInput("--batch reads the jobs' inputs; give --input-file or - only without it")
    if args.key is not None or args.title is not None:
        raise InvalidInput("--key and --title name one job; a batch's jobs are keyed and titled by their input")
    where = "standard input" if args.batch == "-" else args.batch
    text = _read_batch_file(args.batch)
    with _open(args) as queue:
        provider = queue.providers.get(args.kind)
        if provider is None:
            raise UnknownKind(f"unknown job kind {args.kind!r}")
        spec = spec_for(provider, _load_profiles())  # a template or a CSV column may name any profile
        fmt = detect_format(None if args.batch == "-" else args.batch, text)
        template = None
        if args.input_json is not None:
            if fmt is BatchFormat.JSONL:
                raise InvalidInput("a JSON Lines batch has whole inputs: --input is not used with it")
            base = _parse_json(args.input_json, "--input")
            if spec is None:
                template = base if isinstance(base, dict) else None
            else:
                try:
                    template = spec.parse(base)
                except ValueError as exc:
                    raise InvalidInput(f"--input cannot be the batch's template: {exc}") from None
            if template is None:
                raise InvalidInput("--input must be a JSON object to be the batch's template")
        read = read_batch(text, fmt, spec, template=template, validate=getattr(provider, "validate", None))
        if read.problems:
            for problem in read.problems[:10]:
                _err(f"{where}: {problem}")
            more = len(read.problems) - 10
            tail = f" (and {more:,} more)" if more > 0 else ""
            raise InvalidInput(f"{where}: {counted(len(read.problems), 'bad line')}{tail}; nothing was submitted")
        if not read.items:
            raise InvalidInput(f"{where} has no jobs (every line is blank)")
        results = queue.submit_many(
            args.kind,
            [item.payload for item in read.items],
            titles=[item.title for item in read.items],
            priority=args.priority,
            max_attempts=args.max_attempts,
            actor="cli",
        )
        if args.json:
            _out([_job_json(r.job, duplicate=r.duplicate) for r in results])
            return EXIT_OK
        for result in results:
            if result.duplicate:
                print(f"duplicate {result.job.id}  {result.job.title}  ({result.job.state}; nothing new was queued)")
            else:
                print(f"submitted {result.job.id}  {result.job.title}  ({result.job.priority})")
        created = sum(1 for r in results if not r.duplicate)
        print(
            f"{counted(created, 'job')} submitted"
            + (f", {len(results) - created:,} already existed" if created < len(results) else "")
        )
    return EXIT_OK


def cmd_submit(args: argparse.Namespace) -> int:
    run_after = args.at if args.at is not None else args.delay
    if args.batch is not None:
        if run_after is not None:
            _err("--at and --delay apply to one job, not to --batch")
            return EXIT_USAGE
        return cmd_submit_batch(args)
    from desktop_queue.core.inputspec import spec_of, title_for

    payload = _submit_input(args)
    with _open(args) as queue:
        # no --title: the start of the prompt, as the window and batches name jobs
        title = args.title if args.title is not None else title_for(spec_of(queue.providers.get(args.kind)), payload)
        result = queue.submit(
            args.kind,
            payload,
            key=args.key,
            title=title,
            priority=args.priority,
            max_attempts=args.max_attempts,
            actor="cli",
            run_after=run_after,
        )
        if args.json:
            extra: dict[str, Any] = {"duplicate": result.duplicate}
            if result.result is not None:
                extra["result"] = result.result.get("result")
            _out(_job_json(result.job, **extra))
        elif result.duplicate:
            print(f"duplicate: job {result.job.id} already has this input ({result.job.state}); nothing new was queued")
        else:
            when = ""
            if result.job.run_after > time.time() + 0.5:
                from desktop_queue.core import present

                when = f", {present.describe_state(result.job.to_json(with_events=False), time.time())}"
            print(f"submitted {result.job.id}  {result.job.title}  ({result.job.priority}{when})")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    """Prints the jobs a page at a time (:meth:`Queue.list_pages`): ``--all`` of a
    million stored jobs holds one page of them, not all."""
    limit = None if args.all else args.limit or LIST_DEFAULT_LIMIT
    with _open(args) as queue:
        pages = queue.list_pages(args.state, limit=limit)
        first = next(pages)
        if args.limit is None and not args.all and len(first) == limit:
            counts = queue.counts()
            total = counts.get(args.state, 0) if args.state else sum(counts.values())
            if total > limit:
                _err(f"note: the newest {limit:,} of {total:,} jobs; --limit N or --all for more")
        if args.json:
            _out_array(
                j.to_json(with_events=False, with_input=False) for page in itertools.chain([first], pages) for j in page
            )
            return EXIT_OK
        now = time.time()
        if not first:
            print("no jobs" + (f" in state {args.state}" if args.state else ""))
            return EXIT_OK
        with contextlib.ExitStack() as stack:
            hold: Hold | None = None
            looked = False
            width = kind_width = 0
            for jobs in itertools.chain([first], pages):
                if not looked and _any_waiting(jobs, now):  # (read once, for the first page that needs it)
                    hold = stack.enter_context(_holds(queue, jobs, now))
                    looked = True
                states = [describe_state(job, now, hold) for job in jobs]
                if not width:
                    # the columns after it line up: as wide as the longest reason the first
                    # page shows, within reason (later pages are printed as they are read)
                    width = min(max([26, *map(len, states)]), 60)
                    kind_width = min(max([12, *(len(job.kind) for job in jobs)]), 32)  # (openai.speech is 13)
                for job, state in zip(jobs, states, strict=True):
                    _print_job_line(job, now, state, width, kind_width)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    """Prints one job; says so (on stderr too) when its result file is missing or was damaged.

    That still exits 0: the job was shown, and what is wrong is in the output
    (``result_problem`` with ``--json``), where a script looks for the result anyway.
    """
    with _open(args) as queue:
        job = queue.get(args.id)
        problem = None
        unwritten = None
        if job.result_ref:
            # the ref names a file: write it now if only the journal holds the result yet
            try:
                queue.results.materialize(job.idempotency_key)
            except StoreError as exc:  # a full disk: the journal still has the result to show
                unwritten = (
                    f"job {job.id}: its result file cannot be written yet ({exc}); the result shown is the journal's"
                )
            problem = queue.results.problem(job.idempotency_key)
        if args.json:
            data = _job_json(job)
            if job.result_ref:
                stored = queue.results.get(job.idempotency_key)
                data["result"] = stored.get("result") if stored else None
                data["result_problem"] = problem.to_json() if problem is not None else None
                artifact = queue.results.artifact_path(job.idempotency_key)
                if artifact is not None:
                    data["artifact_path"] = str(artifact)
            _out(data)
        else:
            artifact = queue.results.artifact_path(job.idempotency_key) if job.result_ref else None
            now = time.time()
            with _holds(queue, [job], now) as hold:
                _print_job(job, now, artifact=artifact, result_problem=problem.message if problem else None, hold=hold)
            if job.result_ref and problem is None:
                from desktop_queue.core.result_view import read_result

                _print_text_result(job, read_result(queue.results, job))
        if problem is not None:
            _err(f"job {job.id}: {problem.message}")
        elif unwritten is not None:
            _err(unwritten)
    return EXIT_OK


def cmd_replay_dry_run(args: argparse.Namespace) -> int:
    """``replay ID --dry-run``: the preview of the Replay dialog; nothing is queued.

    The providers and flow control are those of the profiles file (as ``work`` and the
    window run them), so a dead job of profile ``lab`` is previewed against ``lab``:
    its key, its limits, its breaker and budget.
    """
    from desktop_queue.core.preview import preview_replay
    from desktop_queue.providers.setup import build

    payload = _parse_json(args.input_json, "--input") if args.input_json is not None else None
    data_dir = resolve_data_dir(args.data_dir)
    store = _store(args)
    providers, flow = build(_load_profiles(), data_dir=data_dir, backend=store.get("backend"))
    try:
        with _open(args, dict(providers), store) as queue:
            job = queue.get(args.id)
            if not job.is_finished:
                raise NotAllowed(f"job {job.id} is {job.state}; only finished jobs can be replayed")
            kwargs = {} if payload is None else {"new_input": payload}
            preview = preview_replay(job, queue.providers, flow=flow, **kwargs)
    finally:
        flow.close()
    if args.json:
        _out(preview.to_json())
    else:
        for line in preview.lines():
            print(line)
        print("nothing was queued (--dry-run)")
    return EXIT_OK


def cmd_resolve(args: argparse.Namespace) -> int:
    with _open(args) as queue:
        job = queue.resolve(args.id, args.note, "cli")
    if args.json:
        _out(_job_json(job))
    else:
        print(f"resolved {job.id}: it stays dead, and no longer counts among the dead letters")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from desktop_queue.core.export import exported_result, write_export
    from desktop_queue.core.search import SearchQuery

    resolved = True if args.state == "resolved" else (False if args.state == "dead" else None)
    state = "dead" if args.state == "resolved" else args.state
    query = SearchQuery(text=args.search or None, kind=args.kind, state=state)
    with _open(args) as queue:
        jobs = queue.find_jobs(query, resolved=resolved)
        results = queue.results
        result_of = (lambda job: exported_result(results, job)) if args.with_results else None
        if args.output:
            target = Path(args.output)
            partial = target.with_name(f".{target.name}.partial")
            try:
                with open(partial, "wb") as out:
                    count = write_export(jobs, out, args.format, with_input=args.with_inputs, result_of=result_of)
                os.replace(partial, target)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    partial.unlink()
                raise StoreError(f"cannot write {target}: {exc.strerror or exc}") from exc
            left_out = [
                what for what, kept in (("inputs", args.with_inputs), ("results", args.with_results)) if not kept
            ]
            _err(
                f"exported {counted(count, 'job')} to {target}"
                + (f" (without their {' or '.join(left_out)})" if left_out else "")
            )
        else:
            count = write_export(jobs, sys.stdout.buffer, args.format, with_input=args.with_inputs, result_of=result_of)
            sys.stdout.buffer.flush()
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from desktop_queue.core.export import read_export

    if args.file == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            data = Path(args.file).read_bytes()
        except OSError as exc:
            raise InvalidInput(f"cannot read {args.file}: {exc.strerror or exc}") from None
    docs = list(read_export(data))
    with _open(args) as queue:
        result = queue.import_jobs(docs, "cli")
    if args.json:
        _out(
            {
                "added": result.added,
                "skipped": result.skipped,
                "results": result.results,
                "without_result": result.without_result,
            }
        )
    else:
        print(
            f"imported {counted(len(result.added), 'job')}"
            + (f" ({counted(result.results, 'result')} with them)" if result.results else "")
            + (f", skipped {len(result.skipped):,}" if result.skipped else "")
        )
        for job_id, why in list(result.skipped.items())[:20]:
            print(f"  skipped {job_id}: {why}")
        if result.without_result:
            n = len(result.without_result)
            _err(
                f"note: {counted(n, 'succeeded job')} came without {'its result' if n == 1 else 'their results'} "
                "(the export did not carry them: 'export --with-results' does)"
            )
    return EXIT_OK


def _print_text_result(job: Job, content: ResultContent) -> None:
    """The text (or JSON) result under ``show``'s timeline, cut with a note when long."""
    if content.text is None:
        return
    from desktop_queue.core.result_view import show_text

    shown, cut = show_text(content.text)
    print(f"result ({content.message})")
    for line in shown.splitlines() or [""]:
        print(f"  {line}")
    if cut:
        print(
            f"  … ({len(content.text) - len(shown):,} more characters: "
            f"desktop-queue result {job.id} prints all of it, --output FILE writes it)"
        )


def cmd_result(args: argparse.Namespace) -> int:
    """Writes a job's result: text to stdout (or ``--output``), an artifact only to ``--output``."""
    from desktop_queue.core.result_view import no_result_reason, read_result

    with _open(args) as queue:
        job = queue.get(args.id)
        if job.state != State.SUCCEEDED or not job.result_ref:
            _err(f"job {job.id} has no result: {no_result_reason(job)}")
            return EXIT_NOT_ALLOWED
        content = read_result(queue.results, job)
        if args.json:
            doc = queue.results.get(job.idempotency_key)
            if doc is None:
                _err(f"job {job.id}: {content.message}")
                return EXIT_FAILED
            out = dict(doc)
            if content.path is not None:
                out["artifact_path"] = str(content.path)
            _out(out)
            return EXIT_OK
    if not content.has_result:
        _err(f"job {job.id}: {content.message}")
        return EXIT_FAILED
    if content.is_artifact:
        assert content.path is not None
        if not args.output:
            print(content.path)
            _err(
                f"note: job {job.id}'s result is {content.message}; "
                f"the path above is its file: use --output FILE to write a copy"
            )
            return EXIT_OK
        return _write_output(args.output, content.path.read_bytes(), force=args.force)
    assert content.text is not None
    data = content.text.encode() + (b"" if content.text.endswith("\n") else b"\n")
    if not args.output or args.output == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return EXIT_OK
    return _write_output(args.output, data, force=args.force)


def _write_output(target: str, data: bytes, *, force: bool) -> int:
    """Writes ``data`` to ``target`` atomically; never replaces a file unless ``force``."""
    if target == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return EXIT_OK
    path = Path(target)
    if path.is_dir():
        _err(f"{target} is a directory; give a file name")
        return EXIT_USAGE
    from desktop_queue.core.store.fileio import atomic_write

    try:
        if not atomic_write(path, data, overwrite=force):
            _err(f"{target} exists; nothing was written (--force replaces it)")
            return EXIT_FAILED
    except OSError as exc:
        _err(f"cannot write {target}: {exc.strerror or exc}")
        return EXIT_FAILED
    _err(f"wrote {len(data):,} bytes to {target}")
    return EXIT_OK


def cmd_verb(args: argparse.Namespace) -> int:
    if args.command == "replay" and args.dry_run:
        return cmd_replay_dry_run(args)
    with _open(args) as queue:
        if args.command == "cancel":
            job = queue.cancel(args.id, "cli")
            text = f"cancelled {job.id}"
        elif args.command == "retry":
            job = queue.retry(args.id, "cli")
            text = f"queued {job.id} again (run {job.run}, fresh budget of {job.max_attempts} attempts)"
        else:
            payload = _parse_json(args.input_json, "--input") if args.input_json is not None else None
            job = queue.replay(args.id, payload, "cli")
            text = f"replayed {job.replay_of} as new job {job.id}"
        if args.json:
            _out(_job_json(job))
        else:
            print(text)
    return EXIT_OK


def _stat_seconds(value: float | None) -> str:
    """A percentile for ``stats``: ``0.05 s`` (two decimals under 10 s), then as the window says it (``15 s``, ``3 min``)."""
    from desktop_queue.core.present import seconds

    if value is None:
        return "-"
    return f"{value:.2f} s" if value < 10 else seconds(value)


def cmd_stats(args: argparse.Namespace) -> int:
    if args.window is not None:
        return _stats_window(args)
    with _open(args) as queue:
        stats = queue.stats()
    if args.json:
        _out(stats.to_json())
        return EXIT_OK

    print("jobs      " + "  ".join(f"{k} {v:,}" for k, v in stats.counts.items()) + f"  (total {stats.jobs:,})")
    print(f"wait      p50 {_stat_seconds(stats.wait_p50_s)}  p95 {_stat_seconds(stats.wait_p95_s)}")
    print(f"run       p50 {_stat_seconds(stats.run_p50_s)}  p95 {_stat_seconds(stats.run_p95_s)}")
    print(
        f"attempts  {stats.attempts:,}  retries {stats.retries:,}  throttled {stats.throttled:,}  "
        f"lease expiries {stats.lease_expiries:,}  reconciled {stats.reconciled:,}  dead letters {stats.dead_letters:,}"
    )
    return EXIT_OK


def _stats_window(args: argparse.Namespace) -> int:
    """``stats --window``: the Metrics pane's figures (core/windowed.py), with each profile's
    limit and breaker from the flow state every process on the data dir shares."""
    from desktop_queue.core.windowed import WindowedMetrics
    from desktop_queue.providers.setup import build

    store = _store(args)
    providers, flow = build(_load_profiles(), data_dir=resolve_data_dir(args.data_dir), backend=store.get("backend"))
    try:
        with _open(args, dict(providers), store) as queue:
            figures = WindowedMetrics(queue, flow=flow).figures(args.window)
    finally:
        flow.close()
    if args.json:
        _out(figures.to_json())
        return EXIT_OK
    t = figures.totals

    rate = "-" if t["success_rate"] is None else f"{100 * t['success_rate']:.1f}%"
    print(f"window    last {figures.window} ({counted(figures.events, 'event')})")
    print("now       " + "  ".join(f"{k} {v:,}" for k, v in t["depth_now"].items()))
    print(
        "finished  "
        + "  ".join(f"{k} {v:,}" for k, v in t["finished"].items())
        + f"  ({t['finished_per_min']:,.2f}/min, success {rate})"
    )
    print(f"wait      p50 {_stat_seconds(t['wait_p50_s'])}  p95 {_stat_seconds(t['wait_p95_s'])}")
    print(f"run       p50 {_stat_seconds(t['run_p50_s'])}  p95 {_stat_seconds(t['run_p95_s'])}")
    print(
        f"per hour  retries {t['retries_per_hour']:.2f}  throttled {t['throttled_per_hour']:.2f}  "
        f"lease expiries {t['lease_expiries_per_hour']:.2f}"
    )
    classes = "  ".join(f"{k} {v:,}" for k, v in sorted(figures.dead_letters_by_class.items())) or "none"
    print(f"dead      {classes}")
    for prof in figures.profiles:
        peak = max(prof.requests_per_min, default=0.0)
        limit = "no limit" if prof.limit_rpm is None else f"limit {prof.limit_rpm:g}/min"
        print(f"profile   {prof.profile}: peak {peak:.2f} requests/min, {limit}, breaker {prof.breaker or '-'}")
    return EXIT_OK


def _spend_store(args: argparse.Namespace) -> Any:
    """The spend entries of a queue on PostgreSQL (its database keeps them); None: the data dir's ledger."""
    backend = _store(args).get("backend")
    if backend is None:
        return None
    from desktop_queue.core.pg.flowstate import flow_storage

    found = flow_storage(backend)
    return found[1] if found is not None else None


def cmd_spend(args: argparse.Namespace) -> int:
    from desktop_queue.core.ledger import PriceTable, SpendLedger, format_usd
    from desktop_queue.core.spend import report_total

    # only reads: stored entries carry their cost, so prices.json is not even opened
    ledger = SpendLedger(resolve_data_dir(args.data_dir), prices=PriceTable(), store=_spend_store(args))
    rows = ledger.report(args.by, since=args.since)
    total = report_total(rows)
    damaged = ledger.damaged_lines()
    if damaged:
        _err(f"note: {counted(damaged, 'damaged or torn ledger line')} {were(damaged)} skipped")
    if args.json:
        _out({"by": args.by, "since": args.since, "rows": rows, "total": total})
        return EXIT_OK
    if not rows:
        print("nothing spent" + (f" since {args.since}" if args.since else ""))
        return EXIT_OK

    def cost(row: dict[str, Any]) -> str:
        return format_usd(row["usd"]) + ("+" if row["unknown_cost"] else "")

    width = max(len(args.by), 5, *(len(str(r[args.by])) for r in rows))
    print(
        f"{args.by:<{width}}  {'calls':>6}  {'tokens in':>12}  {'tokens out':>12}  {'images':>6}  "
        f"{'speech chars':>12}  {'cost':>10}"
    )
    for row in [*rows, {args.by: "total", **total}]:
        print(
            f"{row[args.by]:<{width}}  {row['entries']:>6,}  {row['tokens_in']:>12,}  {row['tokens_out']:>12,}  "
            f"{row['images']:>6,}  {row['speech_chars']:>12,}  {cost(row):>10}"
        )
    if total["unknown_cost"]:
        print("+ some calls used a model with no known price: their cost is not included (set one in Preferences)")
    print("costs are estimates unless you set your own prices")
    return EXIT_OK


def cmd_work(args: argparse.Namespace) -> int:
    # every number was checked by the parser (_at_least_one, _positive)
    budgets = {
        name: getattr(args, name)
        for name in ("budget_usd_per_day", "budget_usd_per_month", "budget_tokens_per_day", "budget_tokens_per_month")
    }
    from desktop_queue.core.schedules import Scheduler
    from desktop_queue.providers.setup import ProfileConfig, build

    # the flags override the default profile's own settings (the file is not changed)
    overrides: dict[str, Any] = {
        "rpm": args.rpm,
        "tpm": args.tpm,
        "concurrency": args.provider_concurrency,
        "model": args.model,
        **budgets,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}

    def with_flags(found: Any) -> Any:
        default = found.default_profile() or ProfileConfig()
        if not overrides:
            return found
        changed = found.with_profile(dataclasses.replace(default, **overrides))
        return dataclasses.replace(changed, default=default.name)

    loaded = _load_profiles()
    for notice in loaded.notices:
        _err(f"note: {notice}")
    profiles = with_flags(loaded)
    # a queue on PostgreSQL keeps the limits, breakers and budgets in its database: every
    # machine's workers share them (the data dir's flow state is only this machine's)
    store = _store(args)
    providers, flow = build(profiles, data_dir=resolve_data_dir(args.data_dir), backend=store.get("backend"))
    from PySide6.QtCore import QCoreApplication, QTimer

    from desktop_queue import qtload  # noqa: F401  (before the runtime: PySide6 then reads none of its modules)
    from desktop_queue.runtime import LeaseDriver, heap

    # after everything that can refuse the arguments: a process has one application object
    app = QCoreApplication.instance() or QCoreApplication([PROG])
    heap.start_giving_back(app)  # (a worker runs for days: what it frees goes back)
    queue = _open(args, dict(providers), store)
    try:
        purged, files = queue.apply_retention()  # a no-op unless a policy was set (see `retention`)
        if purged or files:
            _err(f"note: retention removed {counted(purged, 'finished job')} and {counted(files, 'damaged file')}")
    except QueueError as exc:
        _err(f"note: retention not applied: {exc}")
    driver = LeaseDriver(
        queue,
        queue.providers,
        concurrency=args.concurrency,
        flow=flow,
        lease_s=args.lease_s,
        attempt_timeout_s=args.attempt_timeout,
    )
    driver.scheduler = Scheduler(queue)  # every worker evaluates the schedules; keys make it once
    # what this worker's attempts ended in: a job queued again (retry, throttle, given
    # back) is not finished, and is counted apart
    finished: dict[str, int] = {}
    requeued = {"n": 0}

    def count(_id: str, state: str) -> None:
        if state in ("succeeded", "dead", "cancelled"):
            finished[state] = finished.get(state, 0) + 1
        elif state:
            requeued["n"] += 1

    driver.job_finished.connect(count)
    stop = {"why": ""}
    started = time.monotonic()

    def on_error(message: str) -> None:
        _err(message)
        if queue.store.poisoned:
            # the store takes no more changes until reopened: stop, so that a restart
            # (which checks what is on disk) can take over, instead of failing every tick
            request_stop("the store hit a disk error")

    def request_stop(why: str) -> None:
        if not stop["why"]:
            stop["why"] = why
            app.quit()

    def check() -> None:
        if args.max_seconds is not None and time.monotonic() - started >= args.max_seconds:
            request_stop("time limit reached")
        elif args.until_idle and driver.running == 0 and queue.is_idle():
            request_stop("idle")

    driver.error.connect(on_error)
    # `desktop-queue profile add` or the window's Preferences change the profiles while this
    # worker runs: it follows them (the flags still override the default profile)
    running = {"profiles": profiles}
    # the repair scan, the notification outbox and the alerts, at a low rate from the driver's tick
    driver.upkeep = cli_alerts.work_upkeep(
        queue, driver, flow=flow, budgets=lambda: cli_alerts.budgets_of(running["profiles"])
    )

    def reload_profiles() -> None:
        from desktop_queue.providers.profiles import ProfileFileError, load_profiles
        from desktop_queue.providers.setup import reconfigure

        try:
            found = load_profiles(loaded.path.parent) if loaded.path is not None else None
        except ProfileFileError as exc:
            _err(f"note: {exc}")
            return
        if found is None:
            return
        for notice in found.notices:
            _err(f"note: {notice}")
        found = with_flags(found)
        if found != running["profiles"]:
            running["profiles"] = found
            reconfigure([queue.providers, driver.providers], flow, found)  # type: ignore[list-item]
            _err("note: the provider profiles changed; they apply from the next attempt on")

    settle = QTimer()
    settle.setSingleShot(True)
    settle.setInterval(150)
    settle.timeout.connect(reload_profiles)
    watcher = None
    if loaded.path is not None and loaded.path.parent.is_dir():
        from PySide6.QtCore import QFileSystemWatcher

        watcher = QFileSystemWatcher([str(loaded.path.parent)])
        watcher.directoryChanged.connect(lambda _d: settle.start())
    # --until-idle stops the moment the driver says it is idle, not at the next look
    driver.idle.connect(check)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: request_stop("interrupted"))
    watch = QTimer()
    watch.setInterval(100)
    watch.timeout.connect(check)
    watch.start()
    if not args.json:
        _err(
            f"working on {resolve_data_dir(args.data_dir)} with {counted(args.concurrency, 'slot')} as {driver.worker_id}"
        )
    cli_pause.note_if_paused(driver.background, _err)
    driver.start()
    app.exec()
    watch.stop()
    clean = driver.shutdown(timeout_ms=10_000)
    queue.prepare_close()  # (the store's last fold runs in a child while the worker announces)
    driver.upkeep.flush()  # what this worker finished is announced (logged) before it exits
    counts = queue.counts()
    flow.close()
    try:
        queue.close()
    except QueueError as exc:  # the last sync failed: say so, the exit code tells scripts
        _err(str(exc))
        stop["why"] = stop["why"] or "the store hit a disk error"
    summary = {
        "stopped": stop["why"],
        "finished": finished,
        "requeued": requeued["n"],
        "counts": counts,
        "clean_shutdown": clean,
    }
    if args.json:
        _out(summary)
    else:
        done = ", ".join(f"{v:,} {k}" for k, v in sorted(finished.items())) or "nothing finished"
        again = f" ({counted(requeued['n'], 'attempt')} queued again)" if requeued["n"] else ""
        left = ", ".join(f"{v:,} {k}" for k, v in counts.items() if v) or "empty"
        _err(f"stopped ({stop['why']}): {done}{again}; queue now {left}")
    if stop["why"] == "the store hit a disk error":
        return EXIT_FAILED
    return EXIT_OK if stop["why"] != "interrupted" else 130


def _load_profiles() -> Any:
    """The profiles file (or the environment fallback); a newer file's error exits 1."""
    from desktop_queue.providers.profiles import load_profiles

    return load_profiles()


def _key_source(config: Any, *, as_text: bool = False) -> str:
    """Where the profile's key comes from (one keyring read): ``keyring``, ``environment`` (as
    text, ``$VARIABLE``, which ``profile list`` prints), ``none`` or ``not needed``."""
    from desktop_queue.providers.openai_compat import resolve_api_key

    found = resolve_api_key(config.name, env=config.openai_profile().env_key)
    if not config.require_key and not found.key:
        return "not needed"
    return f"${found.variable}" if as_text and found.variable else found.source


def _profile_json(config: Any, default: str | None) -> dict[str, Any]:
    from desktop_queue.providers.profiles import profile_to_json

    return {
        "name": config.name,
        "default": config.name == default,
        **profile_to_json(config),
        "require_key": config.require_key,
        "key": _key_source(config),
    }


def _read_key(args: argparse.Namespace, name: str) -> str | None:
    """The API key from standard input (--key-stdin) or a hidden prompt on a terminal; never an argument."""
    if args.key_stdin:
        line = sys.stdin.readline()
        return line.strip() or None
    if args.no_key or not sys.stdin.isatty():
        return None
    import getpass

    try:
        return getpass.getpass(f"API key for {name} (empty: none): ").strip() or None
    except EOFError:  # the terminal closed its input: no key, as if left empty
        return None


def cmd_profile(args: argparse.Namespace) -> int:
    from desktop_queue.core.ledger import is_local_url
    from desktop_queue.providers.openai_compat import (
        KeyringUnavailable,
        delete_api_key,
        profile_key_variable,
        store_api_key,
    )
    from desktop_queue.providers.profiles import check_base_url, check_name, save_profiles
    from desktop_queue.providers.setup import ProfileConfig

    if args.profile_command == "webhook-secret":
        return cli_serve.cmd_webhook_secret(args)
    profiles = _load_profiles()
    for notice in profiles.notices:
        _err(f"note: {notice}")
    # the environment's profile is kept when another is added (it would silently vanish otherwise)
    keep = profiles.source in ("file", "environment")
    file_profiles = profiles if keep else dataclasses.replace(profiles, profiles=(), default=None)
    action = args.profile_command
    if action == "list":
        default = profiles.default_name() if profiles.configured else None
        shown = [] if not profiles.configured else list(profiles.profiles)
        if args.json:
            _out(
                {
                    "path": str(profiles.path),
                    "source": profiles.source,
                    "profiles": [_profile_json(c, default) for c in shown],
                }
            )
            return EXIT_OK
        if not shown:
            print("no profiles: add one with `desktop-queue profile add NAME --base-url URL`")
            return EXIT_OK
        where = " (from OPENAI_BASE_URL / OPENAI_API_KEY)" if profiles.source == "environment" else ""
        for config in shown:
            mark = "*" if config.name == default else " "
            print(
                f"{mark} {config.name:<16} {config.base_url or 'https://api.openai.com/v1 ($OPENAI_BASE_URL)'}  "
                f"model {config.model}  key: {_key_source(config, as_text=True)}{where}"
            )
        return EXIT_OK
    if action == "add":
        try:
            name = check_name(args.name)
            base_url = check_base_url(args.base_url)
        except InvalidInput as exc:
            _err(str(exc))
            return EXIT_USAGE
        if file_profiles.get(name) is not None and not args.replace:
            _err(f"a profile named {name!r} already exists (--replace to replace it)")
            return EXIT_FAILED
        local = is_local_url(base_url)
        require_key = not (args.no_key or (local and not args.key_stdin))
        models = tuple(m.strip() for m in (args.models or "").split(",") if m.strip())
        config = ProfileConfig(
            name=name,
            base_url=base_url,
            model=args.model or (models[0] if models else ProfileConfig.model),
            models=models,
            rpm=args.rpm,
            tpm=args.tpm,
            concurrency=args.concurrency,
            require_key=require_key,
            budget_usd_per_day=args.budget_usd_per_day,
            budget_usd_per_month=args.budget_usd_per_month,
            budget_tokens_per_day=args.budget_tokens_per_day,
            budget_tokens_per_month=args.budget_tokens_per_month,
        )
        key = _read_key(args, name) if require_key or args.key_stdin else None
        if key:
            try:
                store_api_key(name, key)
            except KeyringUnavailable as exc:
                _err(f"{exc} The profile was not added.")
                return EXIT_FAILED
        if profiles.source == "environment" and file_profiles.get(name) is None:
            _err("note: the openai profile from OPENAI_BASE_URL / OPENAI_API_KEY is kept in the profiles file")
        updated = file_profiles.with_profile(config)
        if args.default:
            updated = updated.with_default(name)
        save_profiles(updated)
        if args.json:
            _out(_profile_json(config, updated.default_name()))
        else:
            variable = profile_key_variable(name)
            note = "" if key or not require_key else f" (no key yet: its jobs wait for one; --key-stdin or ${variable})"
            print(f"added profile {name} at {base_url}{note}")
        return EXIT_OK
    target = file_profiles.get(args.name) or (profiles.get(args.name) if action == "test" else None)
    if target is None:
        known = ", ".join(file_profiles.names()) or "none"
        _err(f"no profile named {args.name!r} (profiles: {known})")
        return EXIT_USAGE
    if action == "remove":
        try:
            had_key = delete_api_key(target.name)
        except KeyringUnavailable as exc:
            _err(f"note: {exc}")
            had_key = False
        save_profiles(file_profiles.without(target.name))
        if args.json:
            _out({"removed": target.name, "key_removed": had_key})
        else:
            print(f"removed profile {target.name}" + (" and its key" if had_key else ""))
        return EXIT_OK
    # test
    from desktop_queue.providers.openai_compat import make_providers

    provider = make_providers(target.openai_profile())["openai.chat"]
    try:
        listed: list[str] = provider.test_connection()
    except InvalidInput as exc:
        if args.json:
            _out({"profile": target.name, "ok": False, "error": str(exc)})
        _err(f"{target.name}: connection failed: {exc}")
        return EXIT_FAILED
    finally:
        provider.close()
    if args.json:
        _out({"profile": target.name, "ok": True, "models": listed})
    else:
        text = ", ".join(listed[:20]) + (f" … ({len(listed)} in all)" if len(listed) > 20 else "")
        print(f"{target.name}: connected; models: {text or 'none listed'}")
    return EXIT_OK


def cmd_purge(args: argparse.Namespace) -> int:
    from desktop_queue.core.retention import load_policy

    with _open(args) as queue:
        if args.by_retention:
            policy = load_policy(queue.data_dir)
            jobs, files = queue.apply_retention(policy, dry_run=args.dry_run)
            data = {"policy": policy.to_json(), "jobs": jobs, "quarantined_files": files, "dry_run": args.dry_run}
            text = f"{policy.describe()}: {counted(jobs, 'job')} and {counted(files, 'damaged file')}"
        else:
            jobs = queue.purge(args.finished_before, args.state, dry_run=args.dry_run)
            before = datetime.datetime.fromtimestamp(args.finished_before).astimezone().isoformat(timespec="seconds")
            data = {"before": before, "states": args.state or ["succeeded", "dead", "cancelled"], "jobs": jobs}
            data["dry_run"] = args.dry_run
            text = f"{counted(jobs, 'job')} finished before {before}"
    if args.json:
        _out(data)
    else:
        print(("would remove " if args.dry_run else "removed ") + text)
    return EXIT_OK


def cmd_retention(args: argparse.Namespace) -> int:
    from desktop_queue.core.retention import load_policy, save_policy

    data_dir = resolve_data_dir(args.data_dir)
    policy = load_policy(data_dir)
    changes: dict[str, Any] = {}
    for name in ("finished_days", "quarantine_days"):
        if name in vars(args):
            changes[name] = getattr(args, name)
    if args.keep_succeeded is not None:
        changes["keep_succeeded"] = args.keep_succeeded
    if changes:
        policy = dataclasses.replace(policy, **changes)
        save_policy(data_dir, policy)
    if args.json:
        _out(policy.to_json())
    else:
        print(policy.describe())
    return EXIT_OK


def cmd_gui(args: argparse.Namespace) -> int:
    from desktop_queue import qtload  # noqa: F401  (before the window's modules: see there)
    from desktop_queue.app import main as app_main

    return app_main(args.data_dir, getattr(args, "store", None))


COMMANDS = {
    "gui": cmd_gui,
    "submit": cmd_submit,
    "list": cmd_list,
    "show": cmd_show,
    "result": cmd_result,
    "cancel": cmd_verb,
    "retry": cmd_verb,
    "replay": cmd_verb,
    "resolve": cmd_resolve,
    "export": cmd_export,
    "import": cmd_import,
    "work": cmd_work,
    "stats": cmd_stats,
    "spend": cmd_spend,
    "profile": cmd_profile,
    "purge": cmd_purge,
    "retention": cmd_retention,
    "serve": cli_serve.cmd_serve,
    "schedule": lambda args: cli_schedule.run(args),
    **cli_pause.COMMANDS,
    "alerts": cli_alerts.run,
    "migrate": cli_migrate.run,
}


#: the commands that run until stopped: their log lines carry the time and the logger
LOG_KEEPING_COMMANDS = frozenset({"gui", "work", "serve"})


class _OneShotFormatter(logging.Formatter):
    """``desktop-queue: warning: …``: a log line of a one-shot command, in the style of its errors."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"desktop-queue: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns its exit code."""
    parser = build_parser()
    args = parser.parse_args(_attach_signed_values(sys.argv[1:] if argv is None else argv))
    command = args.command or "gui"
    handler = logging.StreamHandler()
    # a long-running process keeps a log (when, and from where); a one-shot command says a
    # warning as it says an error: one line, after its name
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        if command in LOG_KEEPING_COMMANDS
        else _OneShotFormatter()
    )
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    if command == "gui" and not hasattr(args, "json"):
        args.json = False
    try:
        return COMMANDS[command](args)
    except QueueError as exc:
        _err(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
